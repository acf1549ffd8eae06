import { expect } from 'chai';
import path from 'node:path';
import { TestDialect } from '../support/dialects.js';
import { startHangar, type TestHangar } from '../support/hangar.js';
import { bearer, bootstrapAdmin, type Credentials } from '../support/identity.js';
import { FailNow, until as waitUntil } from '../support/agents.js';
import { S3_START_TIMEOUT_MS, S3Server, type S3Bucket } from '../support/s3-server.js';
import { Lab, type Machine } from './lab/lab.js';
import { requireLab } from './lab/requirements.js';

/** test/support/agents.ts until(): FailNow or a failed assertion ends the wait at once. */
const until = <T>(what: string, probe: () => Promise<T | null | undefined | false>, timeoutMs = 120_000): Promise<T> => waitUntil(what, probe, timeoutMs, 500);

/**
 * A volume backup round trip on a real machine (issue 28, first slice): a lab machine gets its
 * agent over SSH, a local volume's files are backed up by hangar with restic (Debian's package on
 * the machine) to the real S3 server (SeaweedFS on the lab's gateway address), changed, and
 * restored byte for byte. The integration suite (test/integration/backups) covers both dialects
 * and bad input; this one runs on SQLite.
 */
describe('volume backups in the machine lab: restic on a real machine, to the real S3 server and back', function () {
  const dialect = new TestDialect('sqlite');
  let lab: Lab;
  let t: TestHangar;
  let admin: Credentials;
  let m: Machine;
  let s3: S3Server;
  let bucket: S3Bucket;
  let nodeId: string;
  let volumeId: string;
  let targetId: string;
  let backupId: string;
  const folder = '/srv/hangar-data/app';
  /** sha256 and path of every file under the volume's folder, sorted; symlinks by their target. */
  const listing = () => m.sh(`cd ${folder} && { find . -type f -exec sha256sum {} + ; find . -type l -printf '%p -> %l\\n'; } | sort`);

  before(async function () {
    this.timeout(Math.max(S3_START_TIMEOUT_MS, 600_000));
    await requireLab(this, { agents: true, s3: true });
    lab = new Lab({ name: 'backups', subnet: '172.31.83.0/24', log: () => undefined });
    [m] = await lab.start({ machines: 1 });
    s3 = await S3Server.start({ host: lab.gateway });
    bucket = await s3.bucket('lab-backups');
    t = await startHangar(dialect, {
      plugins: ['system', 'iam', 'nodes', 'agent-internal', 'ssh-profiles', 'provisioning', 'volumes', 'backups'],
      overrides: {
        drivers: ['ssh'],
        api: { host: '0.0.0.0' },
        nodes: { heartbeat_interval_seconds: 2, offline_after_seconds: 10 },
        tasks: { poll_wait_seconds: 10 },
      },
    });
    admin = await bootstrapAdmin(t);
  });
  after(async function () {
    this.timeout(120_000);
    await t?.stop();
    await lab?.teardown();
    await s3?.stop();
    await dialect.cleanup();
  });

  afterEach(function () {
    if (this.currentTest?.state !== 'failed' || !t) return;
    for (const line of t.logs.filter((l) => /"level":"(warn|error|fatal)"/.test(l)).slice(-20)) console.log(`    control plane: ${line.trim().slice(0, 1500)}`);
  });

  const api = (method: string, p: string, body?: unknown) => t.request(method, p, { headers: bearer(admin.token), body });
  const finished = (kind: 'backups' | 'restores', runId: string) =>
    until(`${kind} ${runId} to finish`, async () => {
      const list = (await api('GET', `/v1/volumes/${volumeId}/${kind}`)).json.data as Array<Record<string, any>>;
      const found = list.find((r) => r.id === runId);
      return found && found.status !== 'running' ? found : null;
    }, 300_000);

  it('deploys the machine’s agent over SSH, installing Debian’s restic where it is missing; it reports restic', async function () {
    this.timeout(300_000);
    // The lab image has restic and no route to a Debian mirror: restic is put aside, and an apt-get ahead of the real one on
    // root's PATH records how it is called and puts restic back when asked to install the package (what Debian's would do).
    await m.sh([
      'mv "$(command -v restic)" /root/restic.debian',
      `printf '%s\\n' '#!/bin/sh' 'echo "$*" >>/root/apt-get.calls' 'case " $* " in *" install "*" restic "*) install -m 0755 /root/restic.debian /usr/bin/restic;; esac' >/usr/local/sbin/apt-get`,
      'chmod 0755 /usr/local/sbin/apt-get',
    ].join(' && '));
    expect(await m.sh('command -v restic || echo missing')).to.contain('missing');
    const res = await api('POST', '/v1/nodes/deploy', { ip_address: m.ip, ssh_user: 'root', ssh_key: m.ssh.root.privateKey });
    expect(res.status, res.text).to.equal(202);
    nodeId = res.json.data.node_id;
    const ready = await until(`${m.name} to be ready`, async () => {
      const n = (await api('GET', `/v1/nodes/${nodeId}`)).json.data;
      if (n.status === 'ready' && n.restic) return n;
      const failed = ((await api('GET', `/v1/nodes/events?node_id=${nodeId}`)).json.data as Array<{ kind: string; message: string }>).find((e) => e.kind === 'deploy_failed');
      if (failed) throw new FailNow(`deploy failed: ${failed.message}`);
      return null;
    }, 240_000);
    expect(ready.restic).to.deep.equal({ present: true });
    const prerequisites = ((await api('GET', `/v1/nodes/events?node_id=${nodeId}`)).json.data as Array<{ kind: string; message: string }>).find((e) => e.kind === 'deploy_prerequisites');
    expect(prerequisites?.message).to.equal('installed restic');
    expect((await m.sh('cat /root/apt-get.calls')).trim().split('\n')).to.deep.equal(['update -q', 'install -y -q restic']);
    await m.sh('rm /usr/local/sbin/apt-get');
  });

  it('backs a local volume on the machine up to the S3 server on the lab’s gateway, changes it, and restores it byte for byte', async function () {
    this.timeout(600_000);
    const target = await api('POST', '/v1/backups/targets', { name: 'lab', endpoint: s3.endpoint, bucket: bucket.name, prefix: 'fleet', access_key_id: s3.credentials.accessKeyId, secret_access_key: s3.credentials.secretAccessKey });
    expect(target.status, target.text).to.equal(201);
    targetId = target.json.data.id;

    const created = await api('POST', '/v1/volumes', { name: 'app', node_id: nodeId, folder, type: 'local' });
    expect(created.status, created.text).to.equal(202);
    volumeId = created.json.data.id;
    await until('the volume to be ready', async () => (await api('GET', `/v1/volumes/${volumeId}`)).json.data.status === 'ready');
    await m.sh(
      `mkdir -p ${folder}/conf ${folder}/data && echo "port: 8080" >${folder}/conf/app.yaml && head -c 5000000 /dev/urandom >${folder}/data/blob.bin && ` +
        `echo hello >${folder}/data/hello.txt && ln -s ../conf/app.yaml ${folder}/data/link`,
    );
    const before = await listing();

    const backup = await api('POST', `/v1/volumes/${volumeId}/backups`, { target_id: targetId });
    expect(backup.status, backup.text).to.equal(202);
    backupId = backup.json.data.backup.id;
    const done = await finished('backups', backupId);
    expect(done.status, done.error ?? '').to.equal('succeeded');
    expect(done).to.include({ node_id: nodeId, files: 3 });
    expect(done.size).to.be.greaterThan(5_000_000);
    expect((await bucket.list('fleet/snapshots/')).length, 'the snapshot is an object of the bucket').to.equal(1);

    await m.sh(`echo changed >${folder}/data/hello.txt && rm ${folder}/conf/app.yaml && echo new >${folder}/new.txt && head -c 1000 /dev/urandom >${folder}/data/blob.bin`);
    expect(await listing()).not.to.equal(before);

    const restore = await api('POST', `/v1/volumes/${volumeId}/restore`, { snapshot_id: backupId });
    expect(restore.status, restore.text).to.equal(202);
    const restored = await finished('restores', restore.json.data.restore.id);
    expect(restored.status, restored.error ?? '').to.equal('succeeded');
    expect(await listing()).to.equal(before);
    expect(await m.sh(`readlink ${folder}/data/link`)).to.equal('../conf/app.yaml');
    expect(await m.sh(`ls -A ${path.posix.dirname(folder)}`)).to.equal('app');
  });

  it('makes a new volume on the machine from that backup (POST /v1/volumes {restore_from}): restoring, then ready with the same files and symlink', async function () {
    this.timeout(600_000);
    const copy = '/srv/hangar-data/app-copy';
    const created = await api('POST', '/v1/volumes', { name: 'app-copy', node_id: nodeId, folder: copy, type: 'local', restore_from: { snapshot_id: backupId } });
    expect(created.status, created.text).to.equal(202);
    expect(created.json.data.status).to.equal('restoring');
    const ready = await until('the restored volume to be ready', async () => {
      const v = (await api('GET', `/v1/volumes/${created.json.data.id}`)).json.data;
      if (v.status === 'failed') throw new FailNow(`the restored volume failed: ${v.error}`);
      return v.status === 'ready' ? v : null;
    });
    expect(ready.restore_from).to.include({ source_id: backupId });
    const original = await listing();
    expect(await m.sh(`cd ${copy} && { find . -type f -exec sha256sum {} + ; find . -type l -printf '%p -> %l\\n'; } | sort`)).to.equal(original);
    expect(await m.sh(`ls -A ${path.posix.dirname(folder)}`)).to.equal('app\napp-copy');
  });
});
