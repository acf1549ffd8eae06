import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import { createPrivateKey, X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import tls from 'node:tls';
import { describeEachDialect } from '../support/dialects.js';
import { startHangar, type TestHangar } from '../support/hangar.js';

/** The certificate a listener serves, as its SHA-256 fingerprint. */
function servedFingerprint(t: TestHangar): Promise<string> {
  const url = new URL(t.url);
  return new Promise((resolve, reject) => {
    const socket = tls.connect({ host: url.hostname, port: Number(url.port), ca: t.caPem, ALPNProtocols: ['http/1.1'] }, () => {
      resolve(socket.getPeerCertificate().fingerprint256);
      socket.end();
    });
    socket.on('error', reject);
  });
}

const fingerprintOf = (pem: string) => new X509Certificate(pem).fingerprint256;

/**
 * Issue 26, finding 10: at start-up the server certificate was reissued before the pair in use was
 * known, so a rename that failed left a new key beside the old certificate and the start ended with
 * a stack trace. Now a new pair is written both or neither at start-up too, and a start that cannot
 * write one serves the old pair and says why.
 */
describeEachDialect('the server certificate written at start-up: both files or neither, and the old pair served when writing fails', (dialect) => {
  it('keeps the old pair (files that belong together, served) and warns when the certificate cannot be renamed into place', async function () {
    this.timeout(120_000);
    const storage = dialect.freshStorage();
    const pki = path.join(storage.dataDir, 'pki');
    const first = await startHangar(dialect, { storage, plugins: ['system'] });
    const oldCert = readFileSync(path.join(pki, 'server.crt'), 'utf8');
    const oldKey = readFileSync(path.join(pki, 'server.key'), 'utf8');
    expect(await servedFingerprint(first)).to.equal(fingerprintOf(oldCert));
    await first.stop();

    // The certificate's file is a mount point: renaming the new one onto it fails (EBUSY), after the key's rename went through.
    const certFile = path.join(pki, 'server.crt');
    execFileSync('mount', ['--bind', certFile, certFile]);
    let second: TestHangar | undefined;
    try {
      // A name the certificate lacks: the start reissues it.
      second = await startHangar(dialect, { storage, plugins: ['system'], overrides: { api: { server_names: ['renamed.example.test'] } } });
      const cert = readFileSync(certFile, 'utf8');
      const key = readFileSync(path.join(pki, 'server.key'), 'utf8');
      expect(new X509Certificate(cert).checkPrivateKey(createPrivateKey(key)), 'the key on disk belongs to the certificate on disk').to.equal(true);
      expect(key).to.equal(oldKey);
      expect(cert).to.equal(oldCert);
      expect(await servedFingerprint(second)).to.equal(fingerprintOf(oldCert));
      const warning = second.logs.map((l) => JSON.parse(l)).find((l) => l.msg?.startsWith('server certificate not renewed'));
      expect(warning, 'a warning that says why').to.include({ level: 'warn' });
      expect(warning.reason).to.match(/EBUSY/);
      expect(warning.missing_names).to.include('renamed.example.test');
      expect(second.logs.join('\n')).not.to.contain('    at ');
      console.log('      certificate: the new certificate could not be renamed into place at start-up; the old key was put back, the old pair served, one warning with the reason');
    } finally {
      await second?.stop();
      execFileSync('umount', [certFile]);
    }

    // With the file writable again the next start writes the new pair.
    const third = await startHangar(dialect, { storage, plugins: ['system'], overrides: { api: { server_names: ['renamed.example.test'] } } });
    try {
      const cert = readFileSync(certFile, 'utf8');
      expect(new X509Certificate(cert).subjectAltName).to.contain('DNS:renamed.example.test');
      expect(new X509Certificate(cert).checkPrivateKey(createPrivateKey(readFileSync(path.join(pki, 'server.key'), 'utf8')))).to.equal(true);
      expect(await servedFingerprint(third)).to.equal(fingerprintOf(cert));
    } finally {
      await third.stop();
    }
  });
});
