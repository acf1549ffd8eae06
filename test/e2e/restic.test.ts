import { expect } from 'chai';
import { randomBytes } from 'node:crypto';
import { requireService } from '../support/requirements.js';
import { S3_START_TIMEOUT_MS, S3Server, s3Availability, type S3Bucket } from '../support/s3-server.js';
import { Lab, type Machine } from './lab/lab.js';

/**
 * restic (Debian's package, in the lab image) on a lab machine backing a folder up to a real S3
 * server — SeaweedFS's S3 gateway (test/support/s3-server.ts) on the host, listening on the lab's
 * gateway address, which the machines reach (the lab's seal lets traffic to the host through) —
 * and restoring it: what hangar's backups (issue 28) will run on machines.
 */
describe('restic on a lab machine: backups to the real S3 server and back', function () {
  this.timeout(120_000);
  let lab: Lab;
  let m: Machine;
  let s3: S3Server;
  let bucket: S3Bucket;
  const resticPassword = randomBytes(18).toString('base64url');

  before(async function () {
    this.timeout(S3_START_TIMEOUT_MS);
    const available = await Lab.availability();
    requireService(this, available.docker, 'Docker (dockerd)');
    requireService(this, available.image, available.why ?? 'the lab image');
    const s3Available = s3Availability();
    requireService(this, s3Available.ok, s3Available.why);
    lab = new Lab({ name: 'restic', subnet: '172.31.71.0/24', log: () => undefined });
    [m] = await lab.start({ machines: 1 });
    s3 = await S3Server.start({ host: lab.gateway });
    bucket = await s3.bucket('backups');
    const repository = `s3:${s3.endpoint}/${bucket.name}/m1`;
    const keys = { AWS_ACCESS_KEY_ID: s3.credentials.accessKeyId, AWS_SECRET_ACCESS_KEY: s3.credentials.secretAccessKey };
    await envFile('/root/restic.env', { ...keys, RESTIC_REPOSITORY: repository, RESTIC_PASSWORD: resticPassword, RESTIC_CACHE_DIR: '/var/cache/restic' });
    await envFile('/root/wrong-password.env', { ...keys, RESTIC_REPOSITORY: repository, RESTIC_PASSWORD: 'wrong-password', RESTIC_CACHE_DIR: '/var/cache/restic' });
    await envFile('/root/unknown-key.env', { AWS_ACCESS_KEY_ID: 'nobody', AWS_SECRET_ACCESS_KEY: 'nothing-at-all', RESTIC_REPOSITORY: repository, RESTIC_PASSWORD: resticPassword, RESTIC_CACHE_DIR: '/var/cache/restic' });
  });
  after(async function () {
    this.timeout(120_000);
    await lab?.teardown();
    await s3?.stop();
  });

  /**
   * Writes an environment file of mode 0600 on the machine (S3 keys, repository, password), as a
   * backup job would have them: never on a command line.
   */
  async function envFile(path: string, vars: Record<string, string>): Promise<void> {
    const text = Object.entries(vars).map(([k, v]) => `${k}='${v}'\n`).join('');
    await m.sh(`umask 077 && cat >${path}`, { input: text });
  }
  const restic = (args: string, env = '/root/restic.env'): Promise<string> => m.sh(`set -a && . ${env} && set +a && restic ${args}`, { timeoutMs: 120_000 });

  it('has restic (Debian’s package) on the machine', async () => {
    expect(await m.sh('restic version')).to.match(/^restic 0\.\d+\.\d+ compiled with go/);
  });

  it('initialises a repository in a bucket, backs a folder up, restores it byte for byte', async () => {
    await m.sh(
      'mkdir -p /srv/app/conf /srv/app/data && echo "port: 8080" >/srv/app/conf/app.yaml && ' +
        'head -c 3000000 /dev/urandom >/srv/app/data/blob.bin && echo hello >/srv/app/data/hello.txt && ln -s ../conf/app.yaml /srv/app/data/link',
    );
    expect(await restic('init')).to.contain('created restic repository');
    // The repository is in the bucket, as restic lays it out.
    const keys = await bucket.list('m1/');
    expect(keys).to.include('m1/config');
    expect(keys.some((k) => k.startsWith('m1/keys/'))).to.equal(true);

    const backup = JSON.parse((await restic('backup --json /srv/app')).split('\n').filter(Boolean).pop()!);
    expect(backup).to.include({ message_type: 'summary', files_new: 3 });
    const snapshots = JSON.parse(await restic('snapshots --json'));
    expect(snapshots).to.have.length(1);
    expect(snapshots[0].paths).to.deep.equal(['/srv/app']);
    expect((await bucket.list('m1/snapshots/')).length).to.equal(1);
    expect((await bucket.list('m1/data/')).length, 'the data packs are objects of the bucket').to.be.greaterThan(0);

    await restic('restore latest --target /restore');
    expect(await m.sh('cd /srv/app && find . -type f -exec sha256sum {} + | sort')).to.equal(await m.sh('cd /restore/srv/app && find . -type f -exec sha256sum {} + | sort'));
    expect(await m.sh('readlink /restore/srv/app/data/link')).to.equal('../conf/app.yaml');
    expect(await restic('check')).to.contain('no errors were found');
  });

  it('a second backup stores only what changed; a wrong repository password is refused', async () => {
    await m.sh('echo changed >/srv/app/data/hello.txt');
    const second = JSON.parse((await restic('backup --json /srv/app')).split('\n').filter(Boolean).pop()!);
    expect(second).to.include({ files_new: 0, files_changed: 1, files_unmodified: 2 });
    expect(JSON.parse(await restic('snapshots --json'))).to.have.length(2);
    const wrong = await m.exec('set -a && . /root/wrong-password.env && set +a && restic snapshots');
    expect(wrong.code).to.not.equal(0);
    expect(wrong.stderr).to.match(/wrong password|no key found/);
  });

  it('cannot reach the bucket with keys the S3 server does not know', async () => {
    const refused = await m.exec('set -a && . /root/unknown-key.env && set +a && restic snapshots', { timeoutMs: 60_000 });
    expect(refused.code).to.not.equal(0);
    expect(refused.stderr).to.match(/Access Key Id|InvalidAccessKeyId|Access Denied/i);
  });
});
