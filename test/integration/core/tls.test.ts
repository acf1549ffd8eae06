import { expect } from 'chai';
import { createPrivateKey, X509Certificate } from 'node:crypto';
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import tls from 'node:tls';
import { AgentConnection } from '../../../agent/connection.js';
import { httpRequest } from '../../../core/http/client.js';
import { Pki } from '../../../core/pki/pki.js';
import { systemClock } from '../../../core/clock.js';
import { openStore } from '../../../core/db/store.js';
import { runMigrations } from '../../../core/db/migrations.js';
import { coreMigrations } from '../../../core/db/core-migrations.js';
import { describeEachDialect } from '../../support/dialects.js';
import { FIXTURE_PLUGIN, startHangar, type TestHangar } from '../../support/hangar.js';
import { requireService } from '../../support/requirements.js';

/** The certificate a fresh TLS connection is shown. */
/** What hangar's agents offer: HTTP/2 and their id (core/http/client-hello.ts). */
const AGENT_HTTP2 = ['h2', 'hangar-agent'];

/** The certificate the server presents (to a client offering these ALPN protocols: an agent's HTTP/2 ones go elsewhere). */
function presentedCertificate(port: number, ALPNProtocols?: string[]): Promise<tls.PeerCertificate> {
  return new Promise((resolve, reject) => {
    const socket = tls.connect({ host: '127.0.0.1', port, rejectUnauthorized: false, ALPNProtocols }, () => {
      resolve(socket.getPeerCertificate());
      socket.end();
    });
    socket.on('error', reject);
  });
}

interface Frame {
  type: number;
  flags: number;
  stream: number;
  length: number;
}
const DATA = 0x0;
const HEADERS = 0x1;
const SETTINGS = 0x4;
const END_STREAM = 0x1;

/**
 * The HTTP/2 frames of one GET over a connection of its own, read off the wire (a client that
 * speaks the protocol by hand: Node's hides its frames). Ends with the frame that ends stream 1.
 */
function framesOfOneRequest(port: number, path: string, credentials: tls.ConnectionOptions): Promise<Frame[]> {
  const frame = (type: number, flags: number, stream: number, payload = Buffer.alloc(0)) => {
    const head = Buffer.alloc(9);
    head.writeUIntBE(payload.length, 0, 3);
    head.writeUInt8(type, 3);
    head.writeUInt8(flags, 4);
    head.writeUInt32BE(stream, 5);
    return Buffer.concat([head, payload]);
  };
  // HPACK: :method GET and :scheme https from the static table, :authority and :path as literals.
  const literal = (nameIndex: number, value: string) => Buffer.concat([Buffer.from([nameIndex, value.length]), Buffer.from(value)]);
  const block = Buffer.concat([Buffer.from([0x82, 0x87]), literal(0x01, 'localhost'), literal(0x04, path)]);
  return new Promise((resolve, reject) => {
    const frames: Frame[] = [];
    let pending = Buffer.alloc(0);
    const socket = tls.connect({ host: '127.0.0.1', port, servername: 'localhost', ALPNProtocols: AGENT_HTTP2, ...credentials }, () => {
      socket.write(Buffer.concat([Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'), frame(SETTINGS, 0, 0), frame(HEADERS, END_STREAM | 0x4, 1, block)]));
    });
    socket.on('data', (chunk: Buffer) => {
      pending = Buffer.concat([pending, chunk]);
      while (pending.length >= 9 && pending.length >= 9 + pending.readUIntBE(0, 3)) {
        const f = { length: pending.readUIntBE(0, 3), type: pending[3]!, flags: pending[4]!, stream: pending.readUInt32BE(5) & 0x7fffffff };
        pending = pending.subarray(9 + f.length);
        if (f.type === SETTINGS && !(f.flags & 0x1)) socket.write(frame(SETTINGS, 0x1, 0));
        if (f.stream !== 1) continue;
        frames.push(f);
        if ((f.type === DATA || f.type === HEADERS) && f.flags & END_STREAM) {
          socket.destroy();
          resolve(frames);
        }
      }
    });
    socket.on('error', reject);
    socket.on('close', () => reject(new Error(`the connection closed before the answer ended: ${JSON.stringify(frames)}`)));
  });
}

describeEachDialect('TLS, mutual TLS and the CA', (dialect) => {
  let t: TestHangar;
  before(async () => {
    t = await startHangar(dialect, { plugins: ['system', FIXTURE_PLUGIN] });
  });
  after(() => t?.stop());

  /** Whether a handshake with these client settings succeeds; the negotiated suite when it does. */
  const handshake = (options: tls.ConnectionOptions): Promise<string | null> =>
    new Promise((resolve) => {
      const socket = tls.connect({ host: '127.0.0.1', port: t.hangar.listeners.get('control')!.port, ca: t.caPem, servername: 'localhost', ...options }, () => {
        const suite = socket.getCipher().standardName;
        socket.end();
        resolve(suite);
      });
      socket.on('error', () => resolve(null));
    });

  it('speaks TLS 1.3, and TLS 1.2 only with forward-secret AEAD suites (no CBC, no SHA-1)', async () => {
    expect(await handshake({ minVersion: 'TLSv1.3' })).to.match(/^TLS_/);
    expect(await handshake({ maxVersion: 'TLSv1.2', ciphers: 'ECDHE-ECDSA-AES128-GCM-SHA256' })).to.equal('TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256');
    for (const weak of ['ECDHE-ECDSA-AES128-SHA', 'ECDHE-ECDSA-AES256-SHA', 'ECDHE-ECDSA-AES128-SHA256']) {
      expect(await handshake({ maxVersion: 'TLSv1.2', ciphers: weak }), weak).to.equal(null);
    }
    expect(await handshake({ maxVersion: 'TLSv1.1', minVersion: 'TLSv1', ciphers: 'DEFAULT@SECLEVEL=0' }), 'TLS 1.1').to.equal(null);
  });

  it('sends HSTS, nosniff and no-store on answers, errors included', async () => {
    for (const path of ['/v1/version', '/v1/no-such-route']) {
      const res = await t.request('GET', path);
      expect(res.headers['strict-transport-security'], path).to.equal('max-age=31536000');
      expect(res.headers['x-content-type-options'], path).to.equal('nosniff');
      expect(res.headers['cache-control'], path).to.equal('no-store');
    }
  });

  it('serves the CA as PEM, and that CA verifies the server certificate', async () => {
    const ca = await httpRequest(`${t.url}/v1/ca`, { ca: false });
    expect(ca.status).to.equal(200);
    expect(ca.text).to.match(/^-----BEGIN CERTIFICATE-----/);
    const verified = await httpRequest(`${t.url}/healthz`, { ca: ca.text });
    expect(verified.status).to.equal(200);
    const server = new X509Certificate(t.hangar.services.ca.serverCredentials.cert);
    expect(server.verify(new X509Certificate(ca.text).publicKey)).to.equal(true);
    expect(server.subjectAltName).to.contain('IP Address:127.0.0.1');
  });

  it('issues certificates OpenSSL verifies for their purpose: the server’s with its names (IPv4, IPv6, DNS), a client’s for its node; each names the CA’s key', async function () {
    requireService(this, spawnSync('openssl', ['version']).status === 0, 'openssl (apt-get install openssl)');
    const dir = mkdtempSync(path.join(os.tmpdir(), 'hangar-leaf-'));
    try {
      const files = { ca: path.join(dir, 'ca.pem'), server: path.join(dir, 'server.pem'), client: path.join(dir, 'client.pem') };
      writeFileSync(files.ca, t.caPem);
      writeFileSync(files.server, t.hangar.services.ca.serverCredentials.cert);
      writeFileSync(files.client, (await t.hangar.services.ca.issueClientCertificate('node-openssl')).cert_pem);
      const openssl = (...args: string[]) => spawnSync('openssl', args, { encoding: 'utf8' });
      const asServer = openssl('verify', '-CAfile', files.ca, '-purpose', 'sslserver', files.server);
      expect(asServer.stdout + asServer.stderr).to.contain(': OK');
      const asClient = openssl('verify', '-CAfile', files.ca, '-purpose', 'sslclient', files.client);
      expect(asClient.stdout + asClient.stderr).to.contain(': OK');
      expect(openssl('verify', '-CAfile', files.ca, '-purpose', 'sslserver', files.client).status, 'a client certificate is no server’s').to.not.equal(0);

      const server = new X509Certificate(t.hangar.services.ca.serverCredentials.cert);
      expect(server.subjectAltName).to.contain('IP Address:127.0.0.1').and.contain('DNS:localhost');
      const loopback6 = Object.values(os.networkInterfaces()).flat().some((a) => a?.address === '::1');
      if (loopback6) expect(server.subjectAltName, 'IPv6 written as 16 bytes').to.contain('IP Address:0:0:0:0:0:0:0:1');
      expect(server.checkIP('127.0.0.1')).to.equal('127.0.0.1');
      const client = new X509Certificate(readFileSync(files.client));
      expect(client.subject).to.equal('CN=node-openssl');
      expect(client.ca).to.equal(false);
      expect(client.keyUsage).to.deep.equal(['1.3.6.1.5.5.7.3.2']);
      const text = openssl('x509', '-in', files.client, '-noout', '-text').stdout;
      const caKeyId = /Subject Key Identifier:\s*\n\s*([0-9A-F:]+)/.exec(openssl('x509', '-in', files.ca, '-noout', '-text').stdout)![1];
      expect(text).to.match(/Authority Key Identifier:\s*\n\s*(keyid:)?([0-9A-F:]+)/);
      expect(/Authority Key Identifier:\s*\n\s*(?:keyid:)?([0-9A-F:]+)/.exec(text)![1]).to.equal(caKeyId);
      expect(text).to.contain('Digital Signature, Key Agreement').and.contain('CA:FALSE').and.contain('ecdsa-with-SHA256');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('accepts an agent with a client certificate issued for its node id', async () => {
    const issued = await t.hangar.services.ca.issueClientCertificate('node-accepted');
    const res = await t.request('GET', '/v1/probe/agent', { cert: issued.cert_pem, key: issued.key_pem });
    expect(res.status).to.equal(200);
    expect(res.json.data).to.deep.equal({ node_id: 'node-accepted' });
    expect(new X509Certificate(issued.cert_pem).subject).to.equal('CN=node-accepted');
  });

  it('issues certificates for a public key the machine keeps to itself', async () => {
    const { generateKeyPairSync } = await import('node:crypto');
    const pair = generateKeyPairSync('ec', { namedCurve: 'P-256' });
    const publicPem = pair.publicKey.export({ type: 'spki', format: 'pem' }).toString();
    const issued = await t.hangar.services.ca.issueClientCertificate('node-own-key', publicPem);
    expect(issued.key_pem).to.equal(undefined);
    const res = await t.request('GET', '/v1/probe/agent', {
      cert: issued.cert_pem,
      key: pair.privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(),
    });
    expect(res.json.data).to.deep.equal({ node_id: 'node-own-key' });
  });

  it('asks agents for a certificate but never a client that offers ALPN (a browser): the decision is made per connection', async () => {
    const issued = await t.hangar.services.ca.issueClientCertificate('node-alpn');
    const port = t.hangar.listeners.get('control')!.port;
    /** What an agent route answers on a connection with this ALPN offer (the certificate is sent only when the server asks). */
    const connect = (ALPNProtocols?: string[]) =>
      new Promise<{ status: number }>((resolve, reject) => {
        const socket = tls.connect({ host: '127.0.0.1', port, ca: t.caPem, servername: 'localhost', ALPNProtocols, cert: issued.cert_pem, key: issued.key_pem }, () => {
          socket.write('GET /v1/probe/agent HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n');
        });
        let text = '';
        socket.on('data', (c: Buffer) => (text += c.toString()));
        socket.on('end', () => resolve({ status: Number(/^HTTP\/1\.1 (\d+)/.exec(text)?.[1] ?? 0) }));
        socket.on('error', reject);
      });
    expect((await connect()).status, 'no ALPN: an agent, asked for its certificate').to.equal(200);
    expect((await connect(['hangar-agent', 'http/1.1'])).status, 'the agent ALPN id: asked').to.equal(200);
    expect((await connect(['h2', 'http/1.1'])).status, 'ALPN like a browser: never asked, so the certificate is not sent').to.equal(401);
    expect((await connect(['http/1.1'])).status).to.equal(401);
    // HTTP/2 is for agents (one session for all they send): a browser offering it gets HTTP/1.1.
    const negotiated = (ALPNProtocols: string[]) =>
      new Promise<string | false | null>((resolve, reject) => {
        const socket = tls.connect({ host: '127.0.0.1', port, ca: t.caPem, servername: 'localhost', ALPNProtocols, cert: issued.cert_pem, key: issued.key_pem }, () => {
          resolve(socket.alpnProtocol);
          socket.end();
        });
        socket.on('error', reject);
      });
    expect(await negotiated(AGENT_HTTP2)).to.equal('h2');
    expect(await negotiated(['h2', 'http/1.1'])).to.equal('http/1.1');
    const overHttp2 = new AgentConnection(t.url, { ca: t.caPem, cert: issued.cert_pem, key: issued.key_pem! });
    try {
      const res = await overHttp2.request('/v1/probe/agent');
      expect(res.status, res.text).to.equal(200);
      expect(overHttp2.protocol).to.equal('h2');
    } finally {
      overHttp2.close();
    }
    // openssl shows the CertificateRequest itself (its CA names) or its absence. (Asynchronously: the server runs in this process.)
    const { execFile } = await import('node:child_process');
    const handshake = (alpn?: string) =>
      new Promise<string>((resolve) => {
        const child = execFile('openssl', ['s_client', '-connect', `127.0.0.1:${port}`, ...(alpn ? ['-alpn', alpn] : [])], { encoding: 'utf8', timeout: 10_000 }, (_err, stdout) => resolve(stdout));
        child.stdin!.end('Q\n');
      });
    expect(await handshake()).to.contain('Acceptable client certificate CA names');
    expect(await handshake('h2,http/1.1')).to.contain('No client certificate CA names sent');
  });

  it('ends an answer to an agent over HTTP/2 with the frame that carries its body (no empty frame after it)', async () => {
    const issued = await t.hangar.services.ca.issueClientCertificate('node-frames');
    const frames = await framesOfOneRequest(t.hangar.listeners.get('control')!.port, '/v1/probe/agent', { ca: t.caPem, cert: issued.cert_pem, key: issued.key_pem! });
    expect(frames.map((f) => f.type)).to.deep.equal([HEADERS, DATA]);
    const [headers, body] = frames as [Frame, Frame];
    expect(headers.flags & END_STREAM, 'the headers do not end the stream: a body follows').to.equal(0);
    expect(body.flags & END_STREAM, 'the body ends the stream').to.equal(END_STREAM);
    expect(body.length, 'the body is in it').to.be.greaterThan(0);
  });

  it('reads an HTTP/2 body that comes without a content-length (HTTP/2 makes the length optional)', async () => {
    const issued = await t.hangar.services.ca.issueClientCertificate('node-no-length');
    const { default: http2 } = await import('node:http2');
    const port = t.hangar.listeners.get('control')!.port;
    const session = http2.connect(`https://localhost:${port}`, {
      createConnection: () => tls.connect({ host: '127.0.0.1', port, servername: 'localhost', ca: t.caPem, cert: issued.cert_pem, key: issued.key_pem!, ALPNProtocols: AGENT_HTTP2 }),
    });
    try {
      const answer = await new Promise<{ status: number; body: any }>((resolve, reject) => {
        const stream = session.request({ ':method': 'POST', ':path': '/v1/probe/echo', 'content-type': 'application/json' });
        let text = '';
        let status = 0;
        stream.on('response', (headers) => (status = Number(headers[':status'])));
        stream.on('data', (chunk: Buffer) => (text += chunk.toString()));
        stream.on('end', () => resolve({ status, body: JSON.parse(text) }));
        stream.on('error', reject);
        // Two DATA frames, the second a moment later: the body is read to its end, not to the first frame.
        stream.write('{"name":"no-');
        setTimeout(() => stream.end('length"}'), 50);
      });
      expect(answer.status, JSON.stringify(answer.body)).to.equal(200);
      expect(answer.body.data.body).to.deep.equal({ name: 'no-length' });
    } finally {
      session.destroy();
    }
  });

  it('answers agents over HTTP/1.1 when api.agent_http2 is off: the agent falls back, says so once, and is served', async () => {
    const off = await startHangar(dialect, { plugins: ['system', FIXTURE_PLUGIN], overrides: { api: { agent_http2: false } } });
    const issued = await off.hangar.services.ca.issueClientCertificate('node-http1');
    const told: string[] = [];
    const agent = new AgentConnection(off.url, { ca: off.caPem, cert: issued.cert_pem, key: issued.key_pem! }, (why) => told.push(why));
    try {
      for (let i = 0; i < 2; i++) {
        const res = await agent.request('/v1/probe/agent');
        expect(res.status, res.text).to.equal(200);
      }
      expect(agent.protocol).to.equal('http/1.1');
      expect(told).to.deep.equal(['the server chose http/1.1 over TLS']);
    } finally {
      agent.close();
      await off.stop();
    }
  });

  it('refuses agent routes without a client certificate', async () => {
    const res = await t.request('GET', '/v1/probe/agent');
    expect(res.status).to.equal(401);
    expect(res.json).to.include({ error: 'Unauthorized', message: 'Authentication required' });
    expect(res.json.details[0].message).to.contain('client certificate');
  });

  it('refuses a client certificate from another CA', async () => {
    const otherDir = t.hangar.services.config.data_dir + '-other-ca';
    const store = await openStore({ ...t.hangar.services.config, database: { url: null, schema: null, sqlite_file: path.join(otherDir, 'x.db'), pool_max: 1 } } as never);
    try {
      await runMigrations(store, [coreMigrations]);
      const other = await Pki.open({ dataDir: otherDir, store, clock: systemClock });
      const foreign = await other.issueClientCertificate('node-foreign');
      const res = await t.request('GET', '/v1/probe/agent', { cert: foreign.cert_pem, key: foreign.key_pem });
      expect(res.status).to.equal(401);
      expect(res.json.message).to.contain('not issued by this control plane');
    } finally {
      await store.close();
      rmSync(otherDir, { recursive: true, force: true });
    }
  });

  it('refuses a revoked certificate at once, on the next request', async () => {
    const issued = await t.hangar.services.ca.issueClientCertificate('node-revoked');
    const before = await t.request('GET', '/v1/probe/agent', { cert: issued.cert_pem, key: issued.key_pem });
    expect(before.status).to.equal(200);
    expect(await t.hangar.services.ca.revokeNode('node-revoked')).to.equal(1);
    const after = await t.request('GET', '/v1/probe/agent', { cert: issued.cert_pem, key: issued.key_pem });
    expect(after.status).to.equal(401);
    expect(after.json.message).to.contain('revoked');
  });

  it('swaps the server certificate without a restart: new connections see the new one', async () => {
    const port = t.hangar.listeners.get('control')!.port;
    const beforeCert = await presentedCertificate(port);
    expect(beforeCert.subjectaltname).not.to.contain('192.0.2.77');
    const { added_sans } = await t.hangar.services.ca.reissueServerCertificate(['192.0.2.77', 'cp.example.test']);
    // Also any address this machine gained since start-up (a shared machine's interfaces come and go).
    expect(added_sans).to.include.members(['192.0.2.77', 'cp.example.test']);
    const local = Object.values(os.networkInterfaces()).flatMap((list) => (list ?? []).map((a) => a.address));
    const others = added_sans.filter((name) => !['192.0.2.77', 'cp.example.test'].includes(name));
    expect(others.filter((name) => !local.includes(name)), 'added names that are neither asked for nor local').to.deep.equal([]);
    const afterCert = await presentedCertificate(port);
    expect(afterCert.serialNumber).not.to.equal(beforeCert.serialNumber);
    expect((await presentedCertificate(port, AGENT_HTTP2)).serialNumber, 'to an agent speaking HTTP/2').to.equal(afterCert.serialNumber);
    expect(afterCert.subjectaltname).to.contain('IP Address:192.0.2.77');
    expect(afterCert.subjectaltname).to.contain('DNS:cp.example.test');
    const stillServing = await t.request('GET', '/healthz');
    expect(stillServing.status).to.equal(200);
  });
});

describeEachDialect('the generated server certificate and key on disk', (dialect) => {
  const storage = dialect.freshStorage();
  const pki = (name: string) => path.join(storage.dataDir, 'pki', name);
  const start = () => startHangar(dialect, { plugins: ['system'], storage });

  it('starts with a key that does not belong to the certificate (a write cut short): a new pair, served', async () => {
    await (await start()).stop();
    const { generateKeyPairSync } = await import('node:crypto');
    const stray = generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
    writeFileSync(pki('server.key'), stray);
    const t = await start();
    try {
      expect(readFileSync(pki('server.key'), 'utf8')).not.to.equal(stray);
      const cert = new X509Certificate(readFileSync(pki('server.crt'), 'utf8'));
      expect(cert.checkPrivateKey(createPrivateKey(readFileSync(pki('server.key'), 'utf8')))).to.equal(true);
      expect((await t.request('GET', '/healthz')).status).to.equal(200);
    } finally {
      await t.stop();
    }
  });

  it('a reissue that fails half way changes neither file, and the next start works', async () => {
    const t = await start();
    try {
      const key = readFileSync(pki('server.key'), 'utf8');
      const cert = readFileSync(pki('server.crt'), 'utf8');
      // The certificate file cannot be replaced: a directory with something in it stands there.
      rmSync(pki('server.crt'));
      mkdirSync(pki('server.crt'));
      writeFileSync(path.join(pki('server.crt'), 'x'), 'x');
      let error: Error | undefined;
      await t.hangar.services.ca.reissueServerCertificate(['192.0.2.88']).catch((e: Error) => (error = e));
      expect(error, 'the reissue failed').to.be.instanceOf(Error);
      expect(readFileSync(pki('server.key'), 'utf8'), 'the key is the one that goes with the certificate').to.equal(key);
      expect(readdirSync(path.join(storage.dataDir, 'pki')).filter((f) => f.endsWith('.new'))).to.deep.equal([]);
      rmSync(pki('server.crt'), { recursive: true });
      writeFileSync(pki('server.crt'), cert);
    } finally {
      await t.stop();
    }
    await (await start()).stop();
  });

  it('lists in added_sans every name the new certificate gained, a new local address too (link-local ones are no names)', async () => {
    const t = await start();
    const original = os.networkInterfaces;
    try {
      os.networkInterfaces = () => ({
        ...original(),
        test0: [{ address: '192.0.2.99', netmask: '255.255.255.0', family: 'IPv4', mac: '00:00:00:00:00:00', internal: false, cidr: '192.0.2.99/24' }],
        // A container's veth: link-local addresses never become names of the certificate.
        veth0: [
          { address: 'fe80::a8c1:abff:fe12:3456', netmask: 'ffff:ffff:ffff:ffff::', family: 'IPv6', mac: 'aa:c1:ab:12:34:56', internal: false, cidr: 'fe80::a8c1:abff:fe12:3456/64', scopeid: 7 },
          { address: '169.254.3.4', netmask: '255.255.0.0', family: 'IPv4', mac: 'aa:c1:ab:12:34:56', internal: false, cidr: '169.254.3.4/16' },
        ],
      });
      const { added_sans } = await t.hangar.services.ca.reissueServerCertificate(['192.0.2.77', '192.0.2.77']);
      expect(added_sans).to.have.members(['192.0.2.77', '192.0.2.99']);
    } finally {
      os.networkInterfaces = original;
      await t.stop();
    }
  });

  it('a start that finds a new local address reissues the certificate with it, keeping the names added before', async () => {
    let t = await start();
    await t.hangar.services.ca.reissueServerCertificate(['203.0.113.50']);
    await t.stop();
    const original = os.networkInterfaces;
    os.networkInterfaces = () => ({
      ...original(),
      test1: [{ address: '192.0.2.123', netmask: '255.255.255.0', family: 'IPv4', mac: '00:00:00:00:00:01', internal: false, cidr: '192.0.2.123/24' }],
    });
    try {
      t = await start();
      const presented = await presentedCertificate(t.hangar.listeners.get('control')!.port);
      expect(presented.subjectaltname, 'the new local address').to.contain('IP Address:192.0.2.123');
      expect(presented.subjectaltname, 'the address added through the API').to.contain('IP Address:203.0.113.50');
    } finally {
      os.networkInterfaces = original;
      await t.stop();
    }
  });
  it('carries the names of now: an address the host no longer has leaves at the next reissue, names asked for stay (also from an older data dir)', async () => {
    let t = await start();
    const original = os.networkInterfaces;
    const withAddress = (address: string) => () => ({
      ...original(),
      test2: [{ address, netmask: '255.255.255.0', family: 'IPv4' as const, mac: '00:00:00:00:00:02', internal: false, cidr: `${address}/24` }],
    });
    const sans = async () => (await presentedCertificate(t.hangar.listeners.get('control')!.port)).subjectaltname;
    try {
      await t.hangar.services.ca.reissueServerCertificate(['203.0.113.60']);
      os.networkInterfaces = withAddress('192.0.2.123');
      expect(await t.hangar.services.ca.coverLocalAddresses()).to.deep.equal(['192.0.2.123']);
      os.networkInterfaces = withAddress('192.0.2.124');
      expect(await t.hangar.services.ca.coverLocalAddresses()).to.deep.equal(['192.0.2.124']);
      expect(await sans()).to.contain('IP Address:192.0.2.124').and.contain('IP Address:203.0.113.60').and.not.contain('192.0.2.123');
      expect(await t.hangar.services.ca.coverLocalAddresses(), 'nothing missing: no reissue').to.deep.equal([]);
      await t.stop();
      // A data dir from before the names were recorded: what the certificate has beyond local and configured names was asked for.
      rmSync(pki('server-names.json'));
      os.networkInterfaces = withAddress('192.0.2.125');
      t = await start();
      expect(await sans()).to.contain('IP Address:192.0.2.125').and.contain('IP Address:203.0.113.60');
      expect(JSON.parse(readFileSync(pki('server-names.json'), 'utf8')).requested).to.include('203.0.113.60');
    } finally {
      os.networkInterfaces = original;
      await t.stop();
    }
  });

  it('a running control plane adds an address the host gains to its certificate within api.watch_addresses_seconds, without a restart', async function () {
    this.timeout(60_000);
    requireService(this, process.getuid?.() === 0 && spawnSync('ip', ['-V']).status === 0, 'root and iproute2 (an address is added to this host)');
    const address = '198.51.100.77'; // TEST-NET-2: an address of this host only, on an interface of the test's own
    const ip = (...args: string[]) => spawnSync('ip', args, { encoding: 'utf8' });
    ip('link', 'del', 'hgaddr0');
    const t = await startHangar(dialect, { plugins: ['system'], storage: dialect.freshStorage(), overrides: { api: { watch_addresses_seconds: 1 } } });
    const port = t.hangar.listeners.get('control')!.port;
    /** A client that reached the control plane as `address` (through loopback) and checks the certificate names it. */
    const verifiesAs = (name: string) =>
      new Promise<boolean>((resolve) => {
        const socket = tls.connect({ host: '127.0.0.1', port, ca: t.caPem, checkServerIdentity: (_host, cert) => tls.checkServerIdentity(name, cert) }, () => {
          socket.end();
          resolve(true);
        });
        socket.on('error', () => resolve(false));
      });
    try {
      expect(await verifiesAs(address)).to.equal(false);
      for (const args of [['link', 'add', 'hgaddr0', 'type', 'veth', 'peer', 'name', 'hgaddr1'], ['address', 'add', `${address}/32`, 'dev', 'hgaddr0'], ['link', 'set', 'hgaddr0', 'up'], ['link', 'set', 'hgaddr1', 'up']]) {
        const done = ip(...args);
        expect(done.status, done.stderr).to.equal(0);
      }
      const deadline = Date.now() + 20_000;
      while (!(await verifiesAs(address)) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 250));
      expect(await verifiesAs(address), `the certificate names ${address}`).to.equal(true);
      expect(t.logs.some((l) => l.includes('server certificate reissued: this host has new addresses') && l.includes(address))).to.equal(true);
      expect((await t.request('GET', '/healthz')).status).to.equal(200);
    } finally {
      ip('link', 'del', 'hgaddr0');
      await t.stop();
    }
  });

  it('names api.public_addresses in the certificate from the start', async () => {
    const t = await startHangar(dialect, { plugins: ['system'], storage: dialect.freshStorage(), overrides: { api: { public_addresses: ['203.0.113.9', 'cp.example.test'] } } });
    try {
      const presented = await presentedCertificate(t.hangar.listeners.get('control')!.port);
      expect(presented.subjectaltname).to.contain('IP Address:203.0.113.9');
      expect(presented.subjectaltname).to.contain('DNS:cp.example.test');
    } finally {
      await t.stop();
    }
  });
});

describeEachDialect('operator-provided server certificate', (dialect) => {
  let t: TestHangar;
  let operatorCert: string;
  before(async () => {
    // The operator's certificate comes from a CA hangar does not control: make one elsewhere.
    const storage = dialect.freshStorage();
    const store = await openStore({ database: { url: null, schema: null, sqlite_file: path.join(storage.dataDir, 'op.db'), pool_max: 1 }, data_dir: storage.dataDir } as never);
    await runMigrations(store, [coreMigrations]);
    const operatorPki = await Pki.open({ dataDir: path.join(storage.dataDir, 'operator'), store, clock: systemClock, serverNames: ['ops.example.test'] });
    await store.close();
    operatorCert = operatorPki.serverCredentials.cert;
    writeFileSync(path.join(storage.dataDir, 'op.crt'), operatorCert);
    writeFileSync(path.join(storage.dataDir, 'op.key'), operatorPki.serverCredentials.key);
    t = await startHangar(dialect, {
      plugins: ['system'],
      overrides: { api: { tls_cert: path.join(storage.dataDir, 'op.crt'), tls_key: path.join(storage.dataDir, 'op.key') } },
    });
  });
  after(() => t?.stop());

  it('serves the operator certificate and has no CA to download', async () => {
    const presented = await presentedCertificate(t.hangar.listeners.get('control')!.port);
    expect(presented.subjectaltname).to.contain('DNS:ops.example.test');
    expect(presented.fingerprint256).to.equal(new X509Certificate(operatorCert).fingerprint256);
    const res = await httpRequest(`${t.url}/v1/ca`, { ca: false });
    expect(res.status).to.equal(404);
    expect(res.json.message).to.contain('provided by the operator');
  });

  it('refuses to reissue a certificate it did not make', async () => {
    let error: Error | undefined;
    await t.hangar.services.ca.reissueServerCertificate(['192.0.2.1']).catch((e: Error) => (error = e));
    expect(error?.message).to.contain('provided by the operator');
  });
});
