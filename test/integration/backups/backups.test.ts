import { expect } from 'chai';
import { spawnSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { httpRequest } from '../../../core/http/client.js';
import { randomToken } from '../../../core/ids.js';
import { BackupVerifyFailed } from '../../../plugins/backups/api.js';
import { cleanupAgents, FAST_NODES, joinedNodeId, spawnAgent, waitFor, type AgentProcess } from '../../support/agents.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, createUser, type Credentials } from '../../support/identity.js';
import { requireService } from '../../support/requirements.js';
import { STOPPABLE, STOPPABLE_WORKLOADS_PLUGIN, workloads } from '../../support/fixtures/stoppable-workloads-plugin.js';
import { releaseSharedS3Server, S3_START_TIMEOUT_MS, type S3Server, s3Availability, sharedS3Server, type S3Bucket } from '../../support/s3-server.js';
import { hangarCli } from '../runner/support.js';

// The fixture declares the volumes' users (workloads.users) and a workload kind that can be stopped for a restore (as compute's instances are; it had 2 replicas).
const PLUGINS = ['system', 'iam', 'projects', 'nodes', 'agent-internal', 'volumes', 'backups', 'metrics', 'tags', STOPPABLE_WORKLOADS_PLUGIN];
const SCRAPE_TOKEN = `scrape-token-${randomToken(32)}`;

/** Where restic is on this machine (Debian's package), or null. */
function resticPath(): string | null {
  const found = spawnSync('sh', ['-c', 'command -v restic'], { encoding: 'utf8' }).stdout.trim();
  return found || null;
}

/** Every file under a folder by relative path, with its SHA-256 (what "byte for byte" compares). */
function tree(dir: string, base = dir): Record<string, string> {
  const out: Record<string, string> = {};
  for (const entry of readdirSync(dir)) {
    const full = path.join(dir, entry);
    if (statSync(full).isDirectory()) Object.assign(out, tree(full, base));
    else out[path.relative(base, full)] = createHash('sha256').update(readFileSync(full)).digest('hex');
  }
  return out;
}

/** A TCP port nothing listens on (taken, then released). */
function closedPort(): Promise<number> {
  return new Promise((resolve) => {
    const server = net.createServer().listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

/**
 * Backups through the API against the real S3 server (SeaweedFS on loopback) with real agents on
 * this host: node A has restic on its PATH, node B has none. A local volume on node A is backed up
 * with restic, changed, and restored byte for byte.
 */
describeEachDialect('backups: S3 targets checked with real requests, volume backups and restores with restic through real agents', (dialect) => {
  let t: TestHangar;
  /** The store: the last case restarts the control plane on it. A run stopping workloads holds it for op_lease_seconds unless renewed. */
  let storage: { dataDir: string; schema: string | null };
  const OVERRIDES = { ...FAST_NODES, tasks: { poll_wait_seconds: 5 }, clusters: { op_lease_seconds: 2 }, backups: { schedule_check_seconds: 1, min_schedule_seconds: 120 }, metrics: { scrape_token: SCRAPE_TOKEN } };
  let admin: Credentials;
  let s3: S3Server;
  let bucket: S3Bucket;
  let work: string;
  let nodeA: string;
  let nodeB: string;
  let agentA: AgentProcess;
  let targetId: string;
  let volumeId: string;
  let folder: string;
  const run = randomToken(6);
  const named = (n: string) => `${n}-${run}`;
  const users = workloads.users;
  const stoppers = { calls: workloads.calls, treeAtStart: null as Record<string, string> | null };

  const api = (method: string, p: string, body?: unknown) => t.request(method, p, { body, headers: bearer(admin.token) });
  const targetBody = (over: Record<string, unknown> = {}) => ({
    name: named('t'),
    endpoint: s3.endpoint,
    bucket: bucket.name,
    prefix: 'hangar/backups',
    access_key_id: s3.credentials.accessKeyId,
    secret_access_key: s3.credentials.secretAccessKey,
    ...over,
  });
  const joinAgent = async (binDir: string) => {
    const token = await api('POST', '/v1/nodes/token', {});
    const agent = spawnAgent({ join: { token: token.json.data.token, api: t.url }, path: binDir });
    const id = await joinedNodeId(agent);
    await waitFor(async () => (await api('GET', `/v1/nodes/${id}`)).json.data?.status === 'ready', { timeoutMs: 30_000, what: `node ${id} to be ready` });
    return { agent, id };
  };
  const localVolume = async (name: string, nodeId: string, dir: string) => {
    const res = await api('POST', '/v1/volumes', { name: named(name), node_id: nodeId, folder: dir, type: 'local' });
    expect(res.status, res.text).to.equal(202);
    return waitFor(
      async () => {
        const v = (await api('GET', `/v1/volumes/${res.json.data.id}`)).json.data;
        return v?.status === 'ready' ? v : null;
      },
      { timeoutMs: 30_000, intervalMs: 200, what: `volume ${name} to be ready` },
    );
  };
  /** A local volume on node A (a folder of one file) with one backup to the target named `target`: its id and the backup's. */
  const volumeWithBackup = async (name: string, target: string) => {
    const dir = path.join(work, name);
    mkdirSync(dir);
    writeFileSync(path.join(dir, 'f.txt'), `${name}\n`);
    const v = await localVolume(name, nodeA, dir);
    const b = await api('POST', `/v1/volumes/${v.id}/backups`, { target_id: target });
    expect(b.status, b.text).to.equal(202);
    const done = await waitFor(async () => ((await api('GET', `/v1/volumes/${v.id}/backups`)).json.data as Array<Record<string, any>>).find((r) => r.status !== 'running'), { timeoutMs: 60_000, intervalMs: 200, what: `the backup of ${name}` });
    expect(done!.status, done!.error ?? '').to.equal('succeeded');
    return { id: v.id as string, backup: b.json.data.backup.id as string };
  };
  const finished = (kind: 'backups' | 'restores', runId: string) =>
    waitFor(
      async () => {
        const list = (await api('GET', `/v1/volumes/${volumeId}/${kind}`)).json.data as Array<Record<string, any>>;
        const found = list.find((r) => r.id === runId);
        // A restore that stopped workloads records its outcome first and their return right after it.
        return found && found.status !== 'running' && (!found.workloads?.length || found.workloads_started_at) ? found : null;
      },
      { timeoutMs: 120_000, intervalMs: 300, what: `${kind} ${runId} to finish (and its workloads to be back)` },
    );

  /** The CLI's environment: this control plane, the admin's key, its CA. */
  const cliEnv = () => {
    const ca = path.join(work, 'ca.pem');
    writeFileSync(ca, t.caPem);
    return { XDG_CONFIG_HOME: work, HANGAR_API_URL: t.url, HANGAR_ACCESS_KEY: admin.accessKeyId, HANGAR_SECRET_KEY: admin.secretAccessKey, HANGAR_CA_FILE: ca, HANGAR_CLI_POLL_MS: '100' };
  };

  before(async function () {
    this.timeout(S3_START_TIMEOUT_MS);
    const available = s3Availability();
    requireService(this, available.ok, available.why);
    const restic = resticPath();
    requireService(this, !!restic, 'restic on this machine (apt-get install restic; .ci/run installs it)');
    s3 = await sharedS3Server(); // one for both dialects and both backups files; buckets of their own
    bucket = await s3.bucket(`backups-${run}`);
    work = mkdtempSync(path.join(os.tmpdir(), 'hangar-backups-'));
    // Node A's agent finds restic (and nothing else) on its PATH; node B's PATH is empty.
    const withRestic = path.join(work, 'bin-restic');
    mkdirSync(withRestic);
    symlinkSync(restic!, path.join(withRestic, 'restic'));
    const empty = path.join(work, 'bin-empty');
    mkdirSync(empty);
    storage = dialect.freshStorage();
    t = await startHangar(dialect, { plugins: PLUGINS, storage, overrides: OVERRIDES });
    admin = await bootstrapAdmin(t);
    workloads.reset();
    workloads.onStart = () => {
      stoppers.treeAtStart = tree(folder);
    };
    ({ agent: agentA, id: nodeA } = await joinAgent(withRestic));
    ({ id: nodeB } = await joinAgent(empty));
  });

  after(async function () {
    this.timeout(60_000);
    await cleanupAgents();
    await t?.stop();
    if (s3) releaseSharedS3Server();
    if (work) rmSync(work, { recursive: true, force: true });
  });

  it('nodes report whether restic is on their agent’s PATH', async () => {
    expect((await api('GET', `/v1/nodes/${nodeA}`)).json.data.restic).to.deep.equal({ present: true });
    expect((await api('GET', `/v1/nodes/${nodeB}`)).json.data.restic).to.deep.equal({ present: false });
  });

  it('refuses target input that fails its schema (400 Validation failed)', async () => {
    for (const body of [
      targetBody({ endpoint: 'ftp://example' }),
      targetBody({ endpoint: `${s3.endpoint}/some/path` }),
      targetBody({ bucket: 'Not_A_Bucket' }),
      targetBody({ kind: 'object_store' }),
      targetBody({ extra: 1 }),
      { ...targetBody(), secret_access_key: undefined },
      targetBody({ prefix: 'a/../b' }),
      targetBody({ endpoint: 'http://[' }),
    ]) {
      const res = await api('POST', '/v1/backups/targets', body);
      expect(res.status, JSON.stringify(body)).to.equal(400);
      expect(res.json.message).to.match(/^Validation failed:/);
    }
  });

  it('checks a target on create with real S3 requests: refused credentials, a missing bucket and an unreachable endpoint are 400s naming what failed', async function () {
    this.timeout(60_000);
    const wrongSecret = await api('POST', '/v1/backups/targets', targetBody({ secret_access_key: 'not-the-secret-0123456789abcdef' }));
    expect(wrongSecret.status, wrongSecret.text).to.equal(400);
    expect(wrongSecret.json.message).to.match(/^Checking the target failed: credentials refused: .*SignatureDoesNotMatch/);
    expect(wrongSecret.json.details[0].path).to.equal('credentials_refused');

    const unknownKey = await api('POST', '/v1/backups/targets', targetBody({ access_key_id: 'nobody-here' }));
    expect(unknownKey.status, unknownKey.text).to.equal(400);
    expect(unknownKey.json.message).to.match(/credentials refused: .* access key nobody-here/);

    const missing = await api('POST', '/v1/backups/targets', targetBody({ bucket: `no-such-bucket-${run}` }));
    expect(missing.status, missing.text).to.equal(400);
    expect(missing.json.message).to.match(/bucket missing: no-such-bucket-\S+ does not exist/);

    const unreachable = await api('POST', '/v1/backups/targets', targetBody({ endpoint: `http://127.0.0.1:${await closedPort()}` }));
    expect(unreachable.status, unreachable.text).to.equal(400);
    expect(unreachable.json.message).to.match(/endpoint unreachable: http:\/\/127\.0\.0\.1:\d+ \(ECONNREFUSED\)/);

    expect((await api('GET', '/v1/backups/targets')).json.data).to.deep.equal([]);
  });

  it('creates an S3 target: checked (the probe object is gone after), its secret and repository password sealed at rest and never answered', async function () {
    this.timeout(30_000);
    const res = await api('POST', '/v1/backups/targets', targetBody());
    expect(res.status, res.text).to.equal(201);
    targetId = res.json.data.id;
    expect(targetId).to.match(/^bkt-/);
    expect(res.json.data).to.include({ name: named('t'), kind: 's3', bucket: bucket.name, prefix: 'hangar/backups', region: 'us-east-1', access_key_id: s3.credentials.accessKeyId });
    expect(res.json.data.repository).to.equal(`s3:${s3.endpoint}/${bucket.name}/hangar/backups`);
    expect(res.text).not.to.contain(s3.credentials.secretAccessKey);
    expect(Object.keys(res.json.data)).not.to.include.members(['secret_access_key', 'secret_sealed', 'password', 'password_sealed']);
    expect(await bucket.list(), 'the probe object was deleted').to.deep.equal([]);

    const row = await t.hangar.services.db.knex('backup_targets').where({ id: targetId }).first();
    expect(row.secret_sealed).to.match(/^v1:/);
    expect(row.secret_sealed).not.to.contain(s3.credentials.secretAccessKey);
    expect(row.password_sealed).to.match(/^v1:/);

    for (const p of ['/v1/backups/targets', `/v1/backups/targets/${targetId}`, `/v1/backups/targets/${named('t')}`]) {
      const got = await api('GET', p);
      expect(got.status, p).to.equal(200);
      expect(got.text).not.to.contain(s3.credentials.secretAccessKey);
    }
    expect((await api('POST', '/v1/backups/targets', targetBody())).status, 'name unique').to.equal(409);
    expect((await api('GET', '/v1/backups/targets/bkt-0000000000000000')).status).to.equal(404);
    expect((await t.request('GET', '/v1/backups/targets')).status, 'authenticated').to.equal(401);
  });

  it('refuses a backup of an unknown volume or to an unknown target (404), and of a volume whose node has no restic (409 saying how to add it)', async function () {
    this.timeout(60_000);
    const dirB = path.join(work, 'data', 'on-b');
    const onB = await localVolume('on-b', nodeB, dirB);
    expect((await api('POST', '/v1/volumes/vol-0000000000000000/backups', { target_id: targetId })).status).to.equal(404);
    const unknownTarget = await api('POST', `/v1/volumes/${onB.id}/backups`, { target_id: 'bkt-0000000000000000' });
    expect(unknownTarget.status).to.equal(404);
    expect(unknownTarget.json.message).to.equal('No backup target bkt-0000000000000000');
    const noRestic = await api('POST', `/v1/volumes/${onB.id}/backups`, { target_id: targetId });
    expect(noRestic.status, noRestic.text).to.equal(409);
    expect(noRestic.json.message).to.contain(`Node ${nodeB}`).and.to.contain('has no restic').and.to.contain('apt-get install restic');
    expect((await api('POST', `/v1/volumes/${onB.id}/backups`, {})).status).to.equal(400);
    expect((await api('GET', `/v1/volumes/${onB.id}/backups`)).json.data).to.deep.equal([]);
  });

  let original: Record<string, string>;
  let backupId: string;
  let snapshotId: string;

  it('backs a local volume up with restic on its node’s agent (202 with the task); the backup lists its snapshot, size, files and duration', async function () {
    this.timeout(180_000);
    folder = path.join(work, 'data', 'app');
    mkdirSync(path.join(folder, 'conf'), { recursive: true });
    writeFileSync(path.join(folder, 'conf', 'app.yaml'), 'port: 8080\n');
    writeFileSync(path.join(folder, 'blob.bin'), Buffer.alloc(2_000_000, 7));
    writeFileSync(path.join(folder, 'hello.txt'), 'hello\n');
    const volume = await localVolume('app', nodeA, folder);
    volumeId = volume.id;
    original = tree(folder);

    const res = await api('POST', `/v1/volumes/${volumeId}/backups`, { target_id: named('t') });
    expect(res.status, res.text).to.equal(202);
    expect(res.json.data.task_id).to.match(/^task-/);
    expect(res.json.data.backup).to.include({ volume_id: volumeId, target_id: targetId, node_id: nodeA, status: 'running' });
    backupId = res.json.data.backup.id;
    expect(backupId).to.match(/^bak-/);
    const again = await api('POST', `/v1/volumes/${volumeId}/backups`, { target_id: targetId });
    expect(again.status, 'one run per volume at a time').to.equal(409);

    const done = await finished('backups', backupId);
    expect(done.status, done.error ?? '').to.equal('succeeded');
    expect(done.snapshot_id, 'restic’s snapshot id (restic 0.14 reports the short one)').to.match(/^[0-9a-f]{8,64}$/);
    expect(done.files).to.equal(3);
    expect(done.size).to.equal(2_000_000 + 'port: 8080\n'.length + 'hello\n'.length);
    expect(done.duration_seconds).to.be.a('number');
    expect(done.task_id).to.equal(null);
    snapshotId = done.snapshot_id;
    // The repository is in the bucket under the prefix, as restic lays it out.
    const keys = await bucket.list('hangar/backups/');
    expect(keys).to.include('hangar/backups/config');
    expect(keys.filter((k) => k.startsWith('hangar/backups/snapshots/'))).to.have.length(1);
    // The task (whose payload held the keys) is gone once its outcome is recorded.
    expect(await t.hangar.services.db.knex('tasks').where({ id: res.json.data.task_id }).first()).to.equal(undefined);
  });

  it('restores a backup into the same volume byte for byte (changed, added and deleted files undone); 409 while a workload uses it; 404 for an unknown snapshot', async function () {
    this.timeout(180_000);
    writeFileSync(path.join(folder, 'hello.txt'), 'changed\n');
    writeFileSync(path.join(folder, 'new.txt'), 'added after the backup\n');
    rmSync(path.join(folder, 'conf', 'app.yaml'));
    expect(tree(folder)).not.to.deep.equal(original);

    expect((await api('POST', `/v1/volumes/${volumeId}/restore`, { snapshot_id: 'bak-0000000000000000' })).status).to.equal(404);
    expect((await api('POST', `/v1/volumes/${volumeId}/restore`, { snapshot_id: 'deadbeef' })).status).to.equal(404);
    expect((await api('POST', `/v1/volumes/${volumeId}/restore`, { snapshot_id: backupId, extra: true })).status).to.equal(400);

    users.set(volumeId, [{ type: 'instance', id: 'inst-test', name: 'web' }]);
    const inUse = await api('POST', `/v1/volumes/${volumeId}/restore`, { snapshot_id: backupId });
    expect(inUse.status, inUse.text).to.equal(409);
    expect(inUse.json.message).to.contain('in use by instance web').and.to.contain('give stop_workloads: true');
    // This control plane loads no compute plugin: nothing can stop an instance.
    const unstoppable = await api('POST', `/v1/volumes/${volumeId}/restore`, { snapshot_id: backupId, stop_workloads: true });
    expect(unstoppable.status, unstoppable.text).to.equal(409);
    expect(unstoppable.json.message).to.contain('in use by instance web, which hangar cannot stop for a restore');
    users.delete(volumeId);

    // By restic's short snapshot id.
    const res = await api('POST', `/v1/volumes/${volumeId}/restore`, { snapshot_id: snapshotId.slice(0, 8) });
    expect(res.status, res.text).to.equal(202);
    expect(res.json.data.restore).to.include({ source_id: backupId, snapshot_id: snapshotId, status: 'running' });
    const done = await finished('restores', res.json.data.restore.id);
    expect(done.status, done.error ?? '').to.equal('succeeded');
    expect(tree(folder)).to.deep.equal(original);
    // Nothing left beside the folder.
    expect(readdirSync(path.dirname(folder)).filter((e) => e.startsWith('.hangar-'))).to.deep.equal([]);

    // In use, with stop_workloads: the workload is stopped before the restore and brought back to its replicas once
    // the folder holds the snapshot again; the run reports which, when, and the gap.
    writeFileSync(path.join(folder, 'hello.txt'), 'changed again\n');
    users.set(volumeId, [{ type: STOPPABLE, id: 'wl-restore', name: 'worker' }]);
    try {
      const stopping = await api('POST', `/v1/volumes/${volumeId}/restore`, { snapshot_id: backupId, stop_workloads: true });
      expect(stopping.status, stopping.text).to.equal(202);
      expect(stoppers.calls).to.deep.equal(['stop wl-restore']);
      expect(stopping.json.data.restore.workloads).to.deep.equal([{ type: STOPPABLE, id: 'wl-restore', name: 'worker', replicas: 2 }]);
      // A second restore while this one runs: refused, nothing stopped again.
      const second = await api('POST', `/v1/volumes/${volumeId}/restore`, { snapshot_id: backupId, stop_workloads: true });
      expect([second.status, second.json.message], second.text).to.deep.equal([409, `Volume ${named('app')} is being restored (${stopping.json.data.restore.id}): wait for it to finish`]);
      expect(stoppers.calls).to.deep.equal(['stop wl-restore']);
      const back = await finished('restores', stopping.json.data.restore.id);
      expect(back.status, back.error ?? '').to.equal('succeeded');
      expect(stoppers.calls).to.deep.equal(['stop wl-restore', 'start wl-restore 2']);
      expect(stoppers.treeAtStart, 'brought back once the folder holds the snapshot').to.deep.equal(original);
      expect(back.gap_seconds).to.be.a('number').and.at.least(0);
      expect(Date.parse(back.workloads_started_at)).to.be.at.least(Date.parse(back.workloads_stopped_at));
    } finally {
      users.delete(volumeId);
      stoppers.calls.length = 0;
    }
  });

  it('restore drills: a backup asked to verify is proven restorable (verified, no scratch folder left); one whose pack files were corrupted in the bucket is verified false with restic’s reason, an event and metrics', async function () {
    this.timeout(180_000);
    const heard: string[] = [];
    const unsubscribe = t.hangar.services.events.subscribe(BackupVerifyFailed, (run) => heard.push(run.id));
    try {
      // Volume one is backed up with a drill to a repository of its own; then its data pack files are overwritten
      // in the bucket (the same size, other bytes). Volume two holds the same bytes: restic deduplicates them
      // against its index, so its snapshot refers to the corrupted packs — a backup that "succeeds" and cannot
      // be restored, which only the drill sees.
      expect((await api('POST', '/v1/backups/targets', targetBody({ name: named('drill'), prefix: 'drill' }))).status).to.equal(201);
      const bytes = randomBytes(300_000);
      const [one, two] = [path.join(work, 'data', 'drill-one'), path.join(work, 'data', 'drill-two')];
      for (const dir of [one, two]) {
        mkdirSync(dir, { recursive: true });
        writeFileSync(path.join(dir, 'data.bin'), bytes);
      }
      const first = await localVolume('drill-one', nodeA, one);
      const second = await localVolume('drill-two', nodeA, two);
      // The copy a drill of drill-one left when its agent was killed mid-way: removed by the next drill of that volume.
      const left = path.join(path.dirname(one), '.hangar-verify-drill-one-deadbeef');
      mkdirSync(left);
      writeFileSync(path.join(left, 'data.bin'), bytes);
      // Not one of its drills' names (another volume's folder that merely starts alike): left alone.
      const alike = '.hangar-verify-drill-one-old';
      mkdirSync(path.join(path.dirname(one), alike));
      const backUp = async (volume: string) => {
        const started = await api('POST', `/v1/volumes/${volume}/backups`, { target_id: named('drill'), verify: true });
        expect(started.status, started.text).to.equal(202);
        expect(started.json.data.backup).to.include({ verify: true, verified: null });
        return waitFor(
          async () => {
            const list = (await api('GET', `/v1/volumes/${volume}/backups`)).json.data as Array<Record<string, any>>;
            const found = list.find((r) => r.id === started.json.data.backup.id);
            return found && found.status !== 'running' ? found : null;
          },
          { timeoutMs: 120_000, intervalMs: 300, what: `the backup of ${volume} to finish` },
        );
      };
      const good = await backUp(first.id);
      expect(good, good.error ?? good.verify_error ?? '').to.include({ status: 'succeeded', verify: true, verified: true, verify_error: null });
      expect(Date.parse(good.verified_at)).to.be.at.least(Date.parse(good.time));
      expect(readdirSync(path.dirname(one)).filter((e) => e.startsWith('.hangar-')), 'the scratch folder is removed').to.deep.equal([alike]);
      rmSync(path.join(path.dirname(one), alike), { recursive: true });

      let corrupted = 0;
      for (const key of await bucket.list('drill/data/')) {
        const pack = await bucket.get(key);
        if (pack.length < 200_000) continue; // tree packs are small; the file's data pack is not
        await bucket.put(key, randomBytes(pack.length));
        corrupted++;
      }
      expect(corrupted).to.equal(1);
      const broken = await backUp(second.id);
      expect(broken, broken.error ?? '').to.include({ status: 'succeeded', verify: true, verified: false });
      // restic check reads a random 5% of the packs: it finds the corrupted one, or the restore does.
      expect(broken.verify_error).to.match(/^(restic check failed: .*Pack ID does not match|restoring snapshot \S+ into a scratch folder failed: .*ciphertext verification failed)/);
      expect(broken.verified_at).to.be.a('string');
      expect(heard).to.deep.equal([broken.id]);
      expect(readdirSync(path.dirname(two)).filter((e) => e.startsWith('.hangar-')), 'the scratch folder is removed').to.deep.equal([]);
      const listed = await hangarCli(['volume', 'backups', second.id], { env: cliEnv(), timeoutMs: 60_000 });
      expect(listed.stdout, listed.stderr).to.contain(`no: ${broken.verify_error.split(':')[0]}`);

      // A restore of that backup fails (restic cannot read the pack); the workload stopped for it is brought back all the same.
      users.set(second.id, [{ type: STOPPABLE, id: 'wl-drill', name: 'worker' }]);
      try {
        const restoring = await api('POST', `/v1/volumes/${second.id}/restore`, { snapshot_id: broken.id, stop_workloads: true });
        expect(restoring.status, restoring.text).to.equal(202);
        const failed = await waitFor(
          async () => {
            const list = (await api('GET', `/v1/volumes/${second.id}/restores`)).json.data as Array<Record<string, any>>;
            const found = list.find((r) => r.id === restoring.json.data.restore.id);
            // Its outcome is recorded first, the workloads' return right after it.
            return found && found.status !== 'running' && found.workloads_started_at ? found : null;
          },
          { timeoutMs: 120_000, intervalMs: 300, what: 'the restore of the broken backup to finish and its workloads to be back' },
        );
        expect(failed.status).to.equal('failed');
        expect(failed.error).to.contain('restic restore failed');
        expect(stoppers.calls).to.deep.equal(['stop wl-drill', 'start wl-drill 2']);
        expect(failed.workloads_started_at).to.be.a('string');
        expect(readFileSync(path.join(two, 'data.bin')).equals(bytes), 'the folder as it was').to.equal(true);
      } finally {
        users.delete(second.id);
        stoppers.calls.length = 0;
      }

      const metrics = (await t.request('GET', '/metrics', { headers: bearer(SCRAPE_TOKEN) })).text;
      const value = (name: string, volume: string) => {
        const line = metrics.split('\n').find((l) => l.startsWith(`${name}{volume="${volume}"}`));
        expect(line, `${name} of ${volume}`).to.be.a('string');
        return Number(line!.split(' ')[1]);
      };
      expect(value('hangar_backup_verify_failures_total', second.id)).to.equal(1);
      expect(metrics).not.to.contain(`hangar_backup_verify_failures_total{volume="${first.id}"}`);
      expect(value('hangar_backup_last_verified', first.id)).to.equal(1);
      expect(value('hangar_backup_last_verified', second.id)).to.equal(0);
      expect(metrics, 'never verified').not.to.contain(`hangar_backup_last_verified{volume="${volumeId}"}`);
      expect(value('hangar_backup_last_bytes', first.id)).to.equal(300_000);
      expect(value('hangar_backup_last_duration_seconds', first.id)).to.equal(good.duration_seconds);
      expect((await api('DELETE', `/v1/backups/targets/${named('drill')}?force=true`)).status).to.equal(204);
    } finally {
      unsubscribe();
    }
  });

  it('the CLI: hangar backup target create|list|get|delete, hangar volume backup|backups|restore|restores', async function () {
    this.timeout(180_000);
    const ca = path.join(work, 'ca.pem');
    writeFileSync(ca, t.caPem);
    const env = { XDG_CONFIG_HOME: work, HANGAR_API_URL: t.url, HANGAR_ACCESS_KEY: admin.accessKeyId, HANGAR_SECRET_KEY: admin.secretAccessKey, HANGAR_CA_FILE: ca, HANGAR_CLI_POLL_MS: '100' };
    const cli = async (args: string[], code = 0, input?: string) => {
      const res = await hangarCli(args, { env, input, timeoutMs: 60_000 });
      expect(res.code, `hangar ${args.join(' ')}\n${res.stderr}${res.stdout}`).to.equal(code);
      return res;
    };
    const create = ['backup', 'target', 'create', named('cli'), '--endpoint', s3.endpoint, '--bucket', bucket.name, '--prefix', 'cli', '--access-key-id', s3.credentials.accessKeyId, '--secret-key-file', '-', '--project', 'default'];
    const refused = await cli(create, 1, 'not-the-secret-0123456789abcdef\n');
    expect(refused.stderr).to.contain('credentials refused');
    const created = await cli(create, 0, `${s3.credentials.secretAccessKey}\n`);
    expect(created.stdout).to.match(new RegExp(`^created backup target ${named('cli')} \\(bkt-[0-9a-z]+\\): s3:${s3.endpoint}/${bucket.name}/cli\\n$`));
    expect((await cli(['backup', 'target', 'list'])).stdout).to.contain(named('cli')).and.to.contain(named('t'));
    expect((await api('GET', `/v1/backups/targets/${named('cli')}`)).json.data.project_id).to.equal((await api('GET', '/v1/projects/default')).json.data.id);
    expect((await cli(['backup', 'target', 'list', '--project', 'default'])).stdout).to.contain(named('cli'));
    expect((await cli(['backup', 'target', 'get', named('cli')])).stdout).not.to.contain(s3.credentials.secretAccessKey);

    const started = await cli(['volume', 'backup', named('app'), '--target', named('cli')]);
    expect(started.stdout).to.match(new RegExp(`^backing up volume ${named('app')} to target ${named('cli')} as bak-\\S+ \\(task task-\\S+\\); follow with: hangar volume backups ${named('app')}\\n$`));
    const runId = /as (bak-\S+)/.exec(started.stdout)![1]!;
    expect((await finished('backups', runId)).status).to.equal('succeeded');
    const listed = (await cli(['volume', 'backups', named('app')])).stdout;
    expect(listed).to.contain(backupId).and.to.contain(runId).and.to.contain('succeeded');
    // In use: refused without --stop-workloads; with it, the workload is stopped and brought back.
    users.set(volumeId, [{ type: STOPPABLE, id: 'wl-cli', name: 'cli-worker' }]);
    expect((await cli(['volume', 'restore', named('app'), runId], 1)).stderr).to.contain('give stop_workloads: true');
    const restoring = await cli(['volume', 'restore', named('app'), runId, '--stop-workloads']);
    expect(restoring.stdout).to.match(/^restoring volume \S+ from bak-\S+ as rst-\S+ \(task task-\S+\); follow with: hangar volume restores /);
    const restoreId = /as (rst-\S+)/.exec(restoring.stdout)![1]!;
    expect((await finished('restores', restoreId)).status).to.equal('succeeded');
    expect(stoppers.calls).to.deep.equal(['stop wl-cli', 'start wl-cli 2']);
    users.delete(volumeId);
    stoppers.calls.length = 0;
    expect(tree(folder)).to.deep.equal(original);
    expect((await cli(['volume', 'restores', named('app')])).stdout).to.contain(restoreId);

    expect((await cli(['backup', 'target', 'delete', named('cli')], 1)).stderr).to.contain('holds 1 backup(s)');
    expect((await cli(['backup', 'target', 'delete', named('cli'), '--force'])).stdout).to.equal(`deleted backup target ${named('cli')}\n`);
  });

  it('creates a new volume from a backup (HTTP and CLI): restoring, then ready with the backup’s files byte for byte; a non-empty folder fails it untouched; bad input is a 400 naming the field, a node without restic a 409', async function () {
    this.timeout(240_000);
    const copyDir = path.join(work, 'data', 'copy');
    const create = (over: Record<string, unknown> = {}) => api('POST', '/v1/volumes', { name: named('copy'), node_id: nodeA, folder: copyDir, type: 'local', restore_from: { snapshot_id: backupId }, ...over });
    // The backup's target is the default project's: a volume of another project is not filled from it.
    const other = await api('POST', '/v1/projects', { name: named('other') });
    expect(other.status, other.text).to.equal(201);
    for (const [over, status, field, says] of [
      [{ restore_from: { snapshot_id: 'bak-0000000000000000' } }, 400, 'body.restore_from.snapshot_id', 'no backup bak-0000000000000000'],
      [{ restore_from: { snapshot_id: 'deadbeef' } }, 400, 'body.restore_from.snapshot_id', 'no backup deadbeef'],
      [{ restore_from: { snapshot_id: 'latest' } }, 400, 'body.restore_from.snapshot_id', 'neither a backup’s id'],
      [{ restore_from: { snapshot_id: backupId, target_id: 'nowhere' } }, 400, 'body.restore_from.target_id', 'no backup target nowhere'],
      [{ restore_from: { snapshot_id: backupId, target_id: named('cli') } }, 400, 'body.restore_from.target_id', 'no backup target'],
      [{ restore_from: { target_id: targetId } }, 400, null, 'Validation failed'],
      // Another project's backup is none this request can name, and the answer says nothing of it.
      [{ project_id: named('other') }, 400, 'body.restore_from.snapshot_id', `no backup ${backupId}: give`],
      [{ project_id: named('other'), restore_from: { snapshot_id: backupId, target_id: targetId } }, 400, 'body.restore_from.target_id', `no backup target ${targetId}`],
      [{ restore_from: { snapshot_id: backupId, extra: 1 } }, 400, null, 'Validation failed'],
      [{ node_id: nodeB, folder: path.join(work, 'data', 'copy-on-b') }, 409, 'node.restic', 'has no restic, which volume backups and restores run: install Debian’s restic package'],
    ] as const) {
      const res = await create(over);
      expect(res.status, `${JSON.stringify(over)}: ${res.text}`).to.equal(status);
      expect(res.json.message, JSON.stringify(over)).to.contain(says);
      if (field) expect(res.json.details[0].path, res.text).to.equal(field);
    }
    expect(((await api('GET', '/v1/volumes?limit=100')).json.data as Array<{ name: string }>).map((v) => v.name), 'nothing was recorded').not.to.include(named('copy'));

    // By hangar's backup id, into a folder that does not exist yet: restoring, its run listed, then ready with the backup's files.
    const res = await create();
    expect(res.status, res.text).to.equal(202);
    expect(res.json.data).to.include({ name: named('copy'), node_id: nodeA, status: 'restoring' });
    expect(res.json.data.restore_from).to.deep.equal({ source_id: backupId, target_id: targetId, snapshot_id: snapshotId });
    expect(res.json.data.restore).to.include({ source_id: backupId, snapshot_id: snapshotId, status: 'running', volume_id: res.json.data.id });
    expect(res.json.data.restore.task_id).to.match(/^task-/);
    const copyId = res.json.data.id;
    const ready = await waitFor(
      async () => {
        const v = (await api('GET', `/v1/volumes/${copyId}`)).json.data;
        return v?.status === 'ready' || v?.status === 'failed' ? v : null;
      },
      { timeoutMs: 120_000, intervalMs: 200, what: 'the restored volume to be ready' },
    );
    expect(ready.status, ready.error ?? '').to.equal('ready');
    expect(tree(copyDir)).to.deep.equal(original);
    const restores = (await api('GET', `/v1/volumes/${copyId}/restores`)).json.data as Array<Record<string, any>>;
    expect(restores).to.have.length(1);
    expect(restores[0]).to.include({ id: res.json.data.restore.id, source_id: backupId, status: 'succeeded', error: null, task_id: null });
    expect(readdirSync(path.dirname(copyDir)).filter((e) => e.startsWith('.hangar-'))).to.deep.equal([]);

    // The restored volume is an ordinary one: backed up to another target, then deleted; its backup still makes new volumes (below, with the CLI).
    expect((await api('POST', '/v1/backups/targets', targetBody({ name: named('copies'), prefix: 'copies' }))).status).to.equal(201);
    const copyBackup = await api('POST', `/v1/volumes/${copyId}/backups`, { target_id: named('copies') });
    expect(copyBackup.status, copyBackup.text).to.equal(202);
    const copyDone = await waitFor(
      async () => {
        const found = ((await api('GET', `/v1/volumes/${copyId}/backups`)).json.data as Array<Record<string, any>>).find((r) => r.id === copyBackup.json.data.backup.id);
        return found && found.status !== 'running' ? found : null;
      },
      { timeoutMs: 120_000, intervalMs: 300, what: 'the backup of the restored volume to finish' },
    );
    expect(copyDone.status, copyDone.error ?? '').to.equal('succeeded');
    expect((await api('DELETE', `/v1/volumes/${copyId}`)).status).to.equal(202);
    await waitFor(async () => (await api('GET', `/v1/volumes/${copyId}`)).status === 404, { timeoutMs: 30_000, intervalMs: 200, what: 'the restored volume to be deleted' });

    // A folder that holds files is not replaced: the volume fails saying so, and the files stay.
    const busyDir = path.join(work, 'data', 'busy');
    mkdirSync(busyDir, { recursive: true });
    writeFileSync(path.join(busyDir, 'keep.txt'), 'mine\n');
    const busy = await create({ name: named('busy'), folder: busyDir, restore_from: { snapshot_id: snapshotId, target_id: named('t') } });
    expect(busy.status, busy.text).to.equal(202);
    const failed = await waitFor(
      async () => {
        const v = (await api('GET', `/v1/volumes/${busy.json.data.id}`)).json.data;
        return v?.status === 'failed' || v?.status === 'ready' ? v : null;
      },
      { timeoutMs: 60_000, intervalMs: 200, what: 'the volume over a non-empty folder to fail' },
    );
    expect(failed.status).to.equal('failed');
    expect(failed.error).to.match(/^restoring failed: restore rst-\S+ of backup bak-\S+ failed: .*folder .*busy exists on this machine and is not empty/);
    expect(tree(busyDir)).to.deep.equal({ 'keep.txt': createHash('sha256').update('mine\n').digest('hex') });
    expect(((await api('GET', `/v1/volumes/${busy.json.data.id}/restores`)).json.data as Array<Record<string, any>>)[0]).to.include({ status: 'failed' });
    const backupOfFailed = await api('POST', `/v1/volumes/${busy.json.data.id}/backups`, { target_id: named('t') });
    expect(backupOfFailed.status, 'a failed volume is not used').to.equal(409);
    expect((await api('DELETE', `/v1/volumes/${busy.json.data.id}`)).status).to.equal(202);

    // The CLI: by restic's snapshot id on the target (a backup of a volume since deleted), waiting until it is ready.
    const ca = path.join(work, 'ca.pem');
    writeFileSync(ca, t.caPem);
    const env = { XDG_CONFIG_HOME: work, HANGAR_API_URL: t.url, HANGAR_ACCESS_KEY: admin.accessKeyId, HANGAR_SECRET_KEY: admin.secretAccessKey, HANGAR_CA_FILE: ca, HANGAR_CLI_POLL_MS: '100' };
    const cliDir = path.join(work, 'data', 'cli-copy');
    const args = ['volume', 'create', named('cli-copy'), '--node', nodeA, '--folder', cliDir, '--type', 'local', '--restore-from', copyDone.snapshot_id, '--restore-target', named('copies')];
    const made = await hangarCli([...args, '--wait'], { env, timeoutMs: 120_000 });
    expect(made.code, made.stderr + made.stdout).to.equal(0);
    expect(made.stdout).to.match(new RegExp(`^creating volume ${named('cli-copy')} \\(vol-\\S+\\): restoring\\n`));
    expect(made.stdout).to.contain(`restoring backup ${copyDone.id} (snapshot ${copyDone.snapshot_id}) into it as rst-`);
    expect(made.stdout).to.contain('is ready');
    expect(tree(cliDir)).to.deep.equal(original);
    const noRestic = await hangarCli(['volume', 'create', named('cli-b'), '--node', nodeB, '--folder', path.join(work, 'data', 'cli-b'), '--restore-from', backupId], { env, timeoutMs: 60_000 });
    expect(noRestic.code).to.equal(1);
    expect(noRestic.stderr).to.contain('has no restic').and.to.contain('apt-get install restic');
    const unknown = await hangarCli(['volume', 'create', named('cli-x'), '--node', nodeA, '--folder', path.join(work, 'data', 'cli-x'), '--restore-from', 'bak-0000000000000000'], { env, timeoutMs: 60_000 });
    expect(unknown.code).to.equal(1);
    expect(unknown.stderr).to.contain('body.restore_from.snapshot_id: no backup bak-0000000000000000');
    expect((await api('DELETE', `/v1/backups/targets/${named('copies')}?force=true`)).status).to.equal(204);
  });

  it('a local target (a folder of node A): checked by its agent on create (400 naming the step that failed); backs up, lists, restores and verifies the volumes of node A only (409 for another node’s); HTTP and CLI', async function () {
    this.timeout(240_000);
    const repo = path.join(work, 'repos', 'local');
    const local = (over: Record<string, unknown> = {}) => ({ name: named('local'), kind: 'local', node_id: nodeA, path: repo, ...over });
    const aFile = path.join(work, 'a-file');
    writeFileSync(aFile, 'not a folder\n');
    for (const [body, status, field, message] of [
      [local({ path: undefined }), 400, 'body.path', /^Validation failed: body.path is required for a target of kind local/],
      [local({ node_id: undefined }), 400, 'body.node_id', /^Validation failed: body.node_id is required/],
      [local({ endpoint: s3.endpoint }), 400, 'body.endpoint', /^Validation failed: body.endpoint is not a field of a target of kind local/],
      [{ ...targetBody({ name: named('mixed') }), node_id: nodeA }, 400, 'body.node_id', /is not a field of a target of kind s3/],
      [local({ path: 'relative/repo' }), 400, null, /^Validation failed:/],
      [local({ path: `${work}/../etc` }), 400, 'body.path', /"\.\." segments/],
      [local({ path: '/' }), 400, 'body.path', /not the root/],
      [local({ path: '/etc/hangar-backups' }), 400, 'body.path', /^Validation failed: body.path is in \/etc, a folder of the system/],
      [local({ node_id: 'node-0000000000000000' }), 404, null, /node-0000000000000000/],
      [local({ path: path.join(aFile, 'repo') }), 400, 'body.path', new RegExp(`^Checking the target failed: on node ${nodeA}: making the folder ${aFile}/repo failed: .*ENOTDIR`)],
    ] as const) {
      const res = await api('POST', '/v1/backups/targets', body);
      expect(res.status, `${JSON.stringify(body)}: ${res.text}`).to.equal(status);
      expect(res.json.message).to.match(message);
      if (field) expect(res.json.details[0].path).to.equal(field);
    }
    // Only an installation admin makes a local target: its node's agent writes there as root, on a machine of the installation.
    const maintainer = await createUser(t, admin, { username: named('keeper') });
    expect((await api('PUT', `/v1/projects/default/members/${maintainer.userId}`, { role: 'maintainer' })).status).to.be.oneOf([200, 201]);
    const defaultProject = (await api('GET', '/v1/projects/default')).json.data.id as string;
    const byMaintainer = await t.request('POST', '/v1/backups/targets', { body: local({ project_id: defaultProject }), headers: bearer(maintainer.token) });
    expect(byMaintainer.status, byMaintainer.text).to.equal(403);
    expect(((await api('GET', '/v1/backups/targets')).json.data as Array<{ kind: string }>).filter((x) => x.kind === 'local')).to.deep.equal([]);

    const created = await api('POST', '/v1/backups/targets', local());
    expect(created.status, created.text).to.equal(201);
    expect(created.json.data).to.include({ kind: 'local', node_id: nodeA, path: repo, repository: `local:${repo}` });
    expect(created.json.data).not.to.have.property('password');
    // The agent made the folder and left nothing of its probe.
    expect(readdirSync(repo)).to.deep.equal([]);

    // A volume of node A: backed up into the folder (restic's repository), changed, restored byte for byte, proven by a drill.
    const dir = path.join(work, 'local-app');
    mkdirSync(path.join(dir, 'sub'), { recursive: true });
    writeFileSync(path.join(dir, 'sub', 'data.bin'), randomBytes(300_000));
    writeFileSync(path.join(dir, 'notes.txt'), 'as backed up\n');
    const original = tree(dir);
    const v = await localVolume('local-app', nodeA, dir);
    const backup = await api('POST', `/v1/volumes/${v.id}/backups`, { target_id: named('local'), verify: true });
    expect(backup.status, backup.text).to.equal(202);
    const runs = async (kind: 'backups' | 'restores') => (await api('GET', `/v1/volumes/${v.id}/${kind}`)).json.data as Array<Record<string, any>>;
    const ended = (kind: 'backups' | 'restores', id: string) => waitFor(async () => (await runs(kind)).find((r) => r.id === id && r.status !== 'running' && (kind === 'restores' || r.verified !== null)), { timeoutMs: 120_000, intervalMs: 300, what: `${kind} ${id} to end` });
    const done = await ended('backups', backup.json.data.backup.id);
    expect(done!.status, done!.error).to.equal('succeeded');
    expect(done).to.include({ target_id: created.json.data.id, node_id: nodeA, files: 2, verified: true });
    expect(readdirSync(repo).sort()).to.include.members(['config', 'data', 'index', 'keys', 'snapshots']);
    expect(readdirSync(path.join(repo, 'snapshots'))).to.have.length(1);
    writeFileSync(path.join(dir, 'notes.txt'), 'changed\n');
    writeFileSync(path.join(dir, 'added.txt'), 'added\n');
    const restore = await api('POST', `/v1/volumes/${v.id}/restore`, { snapshot_id: done!.snapshot_id });
    expect(restore.status, restore.text).to.equal(202);
    expect((await ended('restores', restore.json.data.restore.id))!.status).to.equal('succeeded');
    expect(tree(dir)).to.deep.equal(original);

    // A new volume on node A from that backup; on node B, and a volume of node B, a 409 naming why.
    const copy = await api('POST', '/v1/volumes', { name: named('local-copy'), node_id: nodeA, folder: path.join(work, 'local-copy'), type: 'local', restore_from: { snapshot_id: done!.id } });
    expect(copy.status, copy.text).to.equal(202);
    await waitFor(async () => (await api('GET', `/v1/volumes/${copy.json.data.id}`)).json.data.status === 'ready', { timeoutMs: 60_000, intervalMs: 300, what: 'the copy to be ready' });
    expect(tree(path.join(work, 'local-copy'))).to.deep.equal(original);
    const elsewhere = `Backup target ${named('local')} is a folder of node ${nodeA}`;
    const onB = await api('POST', '/v1/volumes', { name: named('local-b'), node_id: nodeB, folder: path.join(work, 'local-b'), type: 'local', restore_from: { snapshot_id: done!.id } });
    expect(onB.status, onB.text).to.equal(409);
    expect(onB.json.message).to.contain(elsewhere).and.to.contain('a local target serves only the volumes of its own node');
    const bDir = path.join(work, 'b-data');
    mkdirSync(bDir);
    const vB = await localVolume('b-data', nodeB, bDir);
    for (const res of [
      await api('POST', `/v1/volumes/${vB.id}/backups`, { target_id: named('local') }),
      await api('POST', '/v1/backups/schedules', { name: named('local-b'), target_id: named('local'), volume_ids: [vB.id], every_seconds: 3600 }),
    ]) {
      expect(res.status, res.text).to.equal(409);
      expect(res.json.message).to.contain(elsewhere).and.to.contain(`volume ${named('b-data')} is on node ${nodeB}`);
    }
    expect(await runs('backups')).to.have.length(1);

    // A schedule of node A's volume: its first backup at once, verified by a drill, its retention applied.
    const schedule = await api('POST', '/v1/backups/schedules', { name: named('local-s'), target_id: named('local'), volume_ids: [v.id], every_seconds: 3600, keep_last: 1, verify: true });
    expect(schedule.status, schedule.text).to.equal(201);
    const scheduled = await waitFor(async () => (await runs('backups')).find((r) => r.schedule_id === schedule.json.data.id && r.status !== 'running' && r.verified !== null), { timeoutMs: 120_000, intervalMs: 300, what: 'the scheduled backup' });
    expect(scheduled).to.include({ status: 'succeeded', verified: true });
    expect(readdirSync(path.join(repo, 'snapshots')), 'keep_last 1: the earlier snapshot forgotten').to.have.length(1);
    // The backups a retention removed are marked forgotten right after the run's end is recorded.
    await waitFor(async () => (await runs('backups')).find((r) => r.id === done!.id)!.status === 'forgotten', { timeoutMs: 10_000, intervalMs: 100, what: 'the earlier backup to be forgotten' });
    expect((await api('DELETE', `/v1/backups/schedules/${schedule.json.data.id}`)).status).to.equal(204);

    // The CLI: a local target created on node A, listed with its node and folder, a backup to it followed to its end.
    const cli = async (args: string[], code = 0) => {
      const res = await hangarCli(args, { env: cliEnv(), timeoutMs: 60_000 });
      expect(res.code, `hangar ${args.join(' ')}\n${res.stderr}${res.stdout}`).to.equal(code);
      return res;
    };
    const cliRepo = path.join(work, 'repos', 'cli');
    const made = await cli(['backup', 'target', 'create', named('local-cli'), '--node', nodeA, '--path', cliRepo]);
    expect(made.stdout).to.match(new RegExp(`^created backup target ${named('local-cli')} \\(bkt-[0-9a-z]+\\): local:${cliRepo} on node ${nodeA}\\n$`));
    expect((await cli(['backup', 'target', 'list'])).stdout).to.contain(`${nodeA}:${cliRepo}`);
    expect((await cli(['backup', 'target', 'create', named('local-bad'), '--node', nodeA, '--path', path.join(aFile, 'x')], 1)).stderr).to.contain('Checking the target failed').and.to.contain('ENOTDIR');
    const followed = await cli(['volume', 'backup', named('local-app'), '--target', named('local-cli'), '--wait']);
    expect(followed.stdout).to.match(/backed up volume .* as bak-\S+: snapshot [0-9a-f]{8}/);
    expect(readdirSync(path.join(cliRepo, 'snapshots'))).to.have.length(1);
    expect((await cli(['backup', 'target', 'delete', named('local-cli')], 1)).stderr).to.contain('holds 1 backup(s)');
    expect((await cli(['backup', 'target', 'delete', named('local-cli'), '--force'])).stdout).to.equal(`deleted backup target ${named('local-cli')}\n`);
    expect(readdirSync(path.join(cliRepo, 'snapshots')), 'the repository stays').to.have.length(1);
    expect((await api('DELETE', `/v1/backups/targets/${named('local')}?force=true`)).status).to.equal(204);
    for (const id of [v.id, copy.json.data.id, vB.id]) expect((await api('DELETE', `/v1/volumes/${id}?force=true`)).status).to.be.oneOf([202, 204]);
  });

  it('a local target’s folder is its own: neither a volume’s, inside one nor around one, nor another local target’s (409 naming it, for targets and volumes alike); not the agent’s or the control plane’s; on a node granted to its project only', async function () {
    this.timeout(120_000);
    const target = (name: string, folder: string, over: Record<string, unknown> = {}) => api('POST', '/v1/backups/targets', { name: named(name), kind: 'local', node_id: nodeA, path: folder, ...over });
    const volume = (name: string, folder: string) => api('POST', '/v1/volumes', { name: named(name), node_id: nodeA, folder, type: 'local' });
    const refused = (res: Awaited<ReturnType<typeof api>>, field: string, message: string) => {
      expect(res.status, res.text).to.equal(409);
      expect(res.json.message).to.contain(message);
      expect(res.json.details[0].path).to.equal(field);
    };
    const localTargets = async () => ((await api('GET', '/v1/backups/targets')).json.data as Array<{ kind: string; name: string }>).filter((x) => x.kind === 'local').map((x) => x.name);

    // A volume's folder: a target there, inside it or around it would be copied by its backups and replaced by its restores.
    const data = path.join(work, 'own', 'data');
    mkdirSync(data, { recursive: true });
    const v = await localVolume('own-data', nodeA, data);
    for (const [folder, how] of [
      [data, 'is'],
      [path.join(data, 'backups'), 'is inside'],
      [path.join(work, 'own'), 'contains'],
    ] as const) {
      refused(await target('in-volume', `${folder}/`), 'body.path', `Folder ${folder} on node ${nodeA} ${how} the folder of volume ${named('own-data')} (${data}): its backups would copy the repository`);
    }
    expect(readdirSync(data), 'refused before the agent made any folder').to.deep.equal([]);

    // Another local target's folder: one repository a folder (each target has its own password).
    const repos = path.join(work, 'own-repos');
    const first = await target('own-first', path.join(repos, 'first'));
    expect(first.status, first.text).to.equal(201);
    for (const [folder, how] of [
      [path.join(repos, 'first'), 'is'],
      [path.join(repos, 'first', 'inner'), 'is inside'],
      [repos, 'contains'],
    ] as const) {
      refused(await target('own-second', folder), 'body.path', `Folder ${folder} on node ${nodeA} ${how} the folder of backup target ${named('own-first')} (${path.join(repos, 'first')}): a folder holds one restic repository`);
    }
    const beside = await target('own-second', path.join(repos, 'second'));
    expect(beside.status, 'a folder beside it is its own').to.equal(201);
    const onB = await target('own-on-b', path.join(repos, 'first'), { node_id: nodeB });
    expect(onB.status, `the same path on another node is another machine’s folder: ${onB.text}`).to.equal(201);

    // A new volume keeps clear of the local targets' folders the same way, naming the target (and a new volume from a backup too).
    for (const [folder, how] of [
      [path.join(repos, 'first'), 'is'],
      [path.join(repos, 'first', 'data'), 'is inside'],
      [repos, 'contains'],
    ] as const) {
      refused(await volume('over-repo', folder), 'body.folder', `Folder ${folder} on node ${nodeA} ${how} the folder of backup target ${named('own-first')} (${path.join(repos, 'first')}): the volume's backups would copy the repository`);
    }
    expect(((await api('GET', '/v1/volumes')).json.data as Array<{ name: string }>).map((x) => x.name)).not.to.include(named('over-repo'));

    // The agent's and the control plane's own folders are the system's.
    for (const folder of ['/var/lib/hangar-agent/backups', '/var/lib/hangar', '/var/lib/hangar/backups']) {
      const res = await target('own-system', folder);
      expect(res.status, res.text).to.equal(400);
      expect(res.json.message).to.match(/^Validation failed: body.path is in \/var\/lib\/hangar(-agent)?, a folder of the system/);
    }

    // A node granted to a project holds that project's local targets only; its grant stays while it holds one.
    expect((await api('POST', '/v1/projects', { name: named('vault') })).status).to.equal(201);
    expect((await api('PUT', `/v1/projects/${named('vault')}/nodes/${nodeA}`, {})).status).to.equal(201);
    const otherProject = await target('own-default', path.join(repos, 'default'));
    expect(otherProject.status, otherProject.text).to.equal(409);
    expect(otherProject.json.message).to.contain(`Node ${nodeA} is granted to other projects than the new target’s`);
    const inProject = await target('own-vault', path.join(repos, 'vault'), { project_id: named('vault') });
    expect(inProject.status, inProject.text).to.equal(201);
    const revoke = () => api('DELETE', `/v1/projects/${named('vault')}/nodes/${nodeA}`);
    const held = await revoke();
    expect(held.status, held.text).to.equal(409);
    expect(held.json.message).to.contain(`backup target ${named('own-vault')}`);
    expect((await api('DELETE', `/v1/backups/targets/${named('own-vault')}`)).status).to.equal(204);
    expect((await revoke()).status).to.equal(200);

    // A target made before hangar refused it, in a volume's folder (its folder moved there by hand here): the volume's backups, schedules and restores are refused, naming why.
    const backup = await api('POST', `/v1/volumes/${v.id}/backups`, { target_id: named('own-first') });
    expect(backup.status, backup.text).to.equal(202);
    const done = await waitFor(async () => ((await api('GET', `/v1/volumes/${v.id}/backups`)).json.data as Array<Record<string, any>>).find((r) => r.status !== 'running'), { timeoutMs: 60_000, intervalMs: 200, what: 'the backup' });
    expect(done!.status, done!.error ?? '').to.equal('succeeded');
    const inside = path.join(data, 'repo');
    const moveTarget = (folder: string) => t.hangar.services.db.knex('backup_targets').where({ name: named('own-first') }).update({ path: folder });
    await moveTarget(inside);
    for (const res of [
      await api('POST', `/v1/volumes/${v.id}/restore`, { snapshot_id: done!.id }),
      await api('POST', `/v1/volumes/${v.id}/backups`, { target_id: named('own-first') }),
      await api('POST', '/v1/backups/schedules', { name: named('own-s'), target_id: named('own-first'), volume_ids: [v.id], every_seconds: 3600 }),
    ]) {
      expect(res.status, res.text).to.equal(409);
      expect(res.json.message).to.contain(`Backup target ${named('own-first')}: Folder ${inside} on node ${nodeA} is inside the folder of volume ${named('own-data')} (${data}): its backups would copy the repository half-written`);
    }
    expect(((await api('GET', `/v1/volumes/${v.id}/backups`)).json.data as unknown[]).length, 'no backup was started').to.equal(1);
    expect((await api('GET', `/v1/volumes/${v.id}/restores`)).json.data).to.deep.equal([]);
    await moveTarget(path.join(repos, 'first'));

    const listed = await localTargets();
    expect(listed).to.include.members([named('own-first'), named('own-second'), named('own-on-b')]);
    expect(listed.filter((name) => ['in-volume', 'own-system', 'own-default'].map(named).includes(name)), 'nothing refused was recorded').to.deep.equal([]);
    for (const name of ['own-first', 'own-second', 'own-on-b']) expect((await api('DELETE', `/v1/backups/targets/${named(name)}?force=true`)).status).to.equal(204);
    expect((await api('DELETE', `/v1/volumes/${v.id}?force=true`)).status).to.be.oneOf([202, 204]);
  });

  it('deleting a target that holds backups is a 409 unless forced; the S3 secret never reached a log line (control plane or agent)', async function () {
    this.timeout(30_000);
    const refused = await api('DELETE', `/v1/backups/targets/${targetId}`);
    expect(refused.status, refused.text).to.equal(409);
    expect(refused.json.message).to.contain('holds 1 backup(s)').and.to.contain('force=true');
    expect((await api('DELETE', `/v1/backups/targets/${targetId}?force=true`)).status).to.equal(204);
    expect((await api('GET', `/v1/backups/targets/${targetId}`)).status).to.equal(404);
    expect((await api('GET', `/v1/volumes/${volumeId}/backups`)).json.data).to.deep.equal([]);
    expect((await api('DELETE', `/v1/backups/targets/${targetId}`)).status).to.equal(404);
    const logs = t.logs.join('') + agentA.output();
    expect(logs).not.to.contain(s3.credentials.secretAccessKey);
  });

  it('schedules: refused input names the field; a schedule of the volumes carrying a tag backs them up at once and applies its retention with restic forget --prune; a cron schedule is due at its next minute; the last success is a metric', async function () {
    this.timeout(240_000);
    const created = await api('POST', '/v1/backups/targets', targetBody({ name: named('sched'), prefix: 'sched' }));
    expect(created.status, created.text).to.equal(201);
    const schedule = (over: Record<string, unknown> = {}) => ({ name: named('nightly'), target_id: named('sched'), volume_ids: [volumeId], every_seconds: 3600, keep_last: 1, ...over });
    for (const [body, field] of [
      [schedule({ every_seconds: 30 }), 'body.every_seconds'],
      [schedule({ keep_last: 0 }), 'body.keep_last'],
      [schedule({ every_seconds: undefined }), 'body.every_seconds'],
      [schedule({ cron: '0 3 * * *' }), 'body.every_seconds'],
      [schedule({ volume_ids: undefined }), 'body.volume_ids'],
      [schedule({ every_seconds: undefined, cron: '61 3 * * *' }), 'body.cron'],
      [schedule({ every_seconds: undefined, cron: '@reboot' }), 'body.cron'],
      [schedule({ every_seconds: undefined, cron: '0 0 30 feb *' }), 'body.cron'],
      [schedule({ volume_tags: {} }), 'body.volume_tags'],
    ] as const) {
      const res = await api('POST', '/v1/backups/schedules', body);
      expect(res.status, res.text).to.equal(400);
      expect(res.json.details[0].path, res.text).to.equal(field);
    }
    // A target or volume that does not exist is a 404, as another project's is (docs/tenancy.md).
    for (const [body, message] of [
      [schedule({ target_id: 'nowhere' }), 'No backup target nowhere'],
      [schedule({ volume_ids: [volumeId, 'vol-nowhere'] }), 'No volume vol-nowhere'],
    ] as const) {
      const res = await api('POST', '/v1/backups/schedules', body);
      expect([res.status, res.json?.message], res.text).to.deep.equal([404, message]);
    }
    const tooOften = await api('POST', '/v1/backups/schedules', schedule({ every_seconds: undefined, cron: '0,1 * * * *' }));
    expect(tooOften.json.message).to.equal('Validation failed: body.cron "0,1 * * * *" runs 60 s apart at its busiest; a schedule runs at most every 120 s (backups.min_schedule_seconds)');
    // One backup by hand first: the schedule's retention (keep_last 1) removes it after its own.
    const manual = await api('POST', `/v1/volumes/${volumeId}/backups`, { target_id: named('sched') });
    expect(manual.status, manual.text).to.equal(202);
    expect((await finished('backups', manual.json.data.backup.id)).status).to.equal('succeeded');
    const snapshots = async () => (await bucket.list('sched/snapshots/')).length;
    expect(await snapshots()).to.equal(1);

    // The schedule names no volume: it backs up those carrying its tag when it runs.
    expect((await api('PUT', '/v1/tags', { resource_type: 'volume', resource_id: volumeId, key: 'backup', value: named('nightly') })).status).to.equal(200);
    const res = await api('POST', '/v1/backups/schedules', schedule({ volume_ids: undefined, volume_tags: { backup: named('nightly') }, verify: true }));
    expect(res.status, res.text).to.equal(201);
    expect(res.json.data).to.include({ name: named('nightly'), every_seconds: 3600, cron: null, last_run_at: null, verify: true });
    expect(res.json.data.volume_ids).to.deep.equal([]);
    expect(res.json.data.volume_tags).to.deep.equal({ backup: named('nightly') });
    expect(res.json.data.retention).to.deep.equal({ keep_last: 1 });
    const scheduleId = res.json.data.id;
    const scheduled = await waitFor(
      async () => {
        const list = (await api('GET', `/v1/volumes/${volumeId}/backups`)).json.data as Array<Record<string, any>>;
        return list.find((r) => r.schedule_id === scheduleId && r.status !== 'running') ?? null;
      },
      { timeoutMs: 120_000, intervalMs: 500, what: 'the scheduled backup to finish' },
    );
    expect(scheduled.status, scheduled.error ?? '').to.equal('succeeded');
    expect(scheduled.error).to.equal(null);
    // Its backups are verified by a drill (after the retention): proven restorable.
    expect(scheduled, scheduled.verify_error ?? '').to.include({ verify: true, verified: true });
    // Only the scheduled snapshot is left in the repository; the manual backup is recorded as forgotten.
    expect(await snapshots()).to.equal(1);
    const manualNow = ((await api('GET', `/v1/volumes/${volumeId}/backups`)).json.data as Array<Record<string, any>>).find((r) => r.id === manual.json.data.backup.id);
    expect(manualNow!.status).to.equal('forgotten');
    const restoreForgotten = await api('POST', `/v1/volumes/${volumeId}/restore`, { snapshot_id: manual.json.data.backup.id });
    expect(restoreForgotten.status).to.equal(404);
    const newFromForgotten = await api('POST', '/v1/volumes', { name: named('from-forgotten'), node_id: nodeA, folder: path.join(work, 'data', 'from-forgotten'), type: 'local', restore_from: { snapshot_id: manual.json.data.backup.id } });
    expect(newFromForgotten.status, newFromForgotten.text).to.equal(400);
    expect(newFromForgotten.json.details[0].path).to.equal('body.restore_from.snapshot_id');
    expect(newFromForgotten.json.message).to.contain('was forgotten');
    // Claimed once: the next run is an interval later, and no second run started meanwhile.
    const after = (await api('GET', `/v1/backups/schedules/${named('nightly')}`)).json.data;
    expect(Date.parse(after.next_run_at) - Date.parse(after.last_run_at)).to.equal(3600_000);
    expect(((await api('GET', `/v1/volumes/${volumeId}/backups`)).json.data as Array<Record<string, any>>).filter((r) => r.schedule_id === scheduleId)).to.have.length(1);

    const metrics = await t.request('GET', '/metrics', { headers: bearer(SCRAPE_TOKEN) });
    expect(metrics.status).to.equal(200);
    const line = metrics.text.split('\n').find((l) => l.startsWith(`hangar_backup_last_success_timestamp_seconds{volume="${volumeId}"}`));
    expect(line, metrics.text.slice(0, 2000)).to.be.a('string');
    expect(Number(line!.split(' ')[1])).to.equal(Math.floor(Date.parse(scheduled.finished_at) / 1000));

    // A cron schedule (UTC) is first due at its expression's next minute, and says so.
    const daily = await api('POST', '/v1/backups/schedules', schedule({ name: named('daily'), every_seconds: undefined, cron: ' 30  3 * * * ' }));
    expect(daily.status, daily.text).to.equal(201);
    expect(daily.json.data).to.include({ every_seconds: null, cron: '30 3 * * *', last_run_at: null });
    const due = new Date(Date.parse(daily.json.data.created_at));
    due.setUTCHours(3, 30, 0, 0);
    if (due.getTime() <= Date.parse(daily.json.data.created_at)) due.setUTCDate(due.getUTCDate() + 1);
    expect(daily.json.data.next_run_at).to.equal(due.toISOString());
    expect((await api('DELETE', `/v1/backups/schedules/${named('daily')}`)).status).to.equal(204);

    // A target a schedule uses is not deleted; the schedule is.
    expect((await api('DELETE', `/v1/backups/targets/${named('sched')}`)).status).to.equal(409);
    // The CLI lists and deletes schedules.
    const ca = path.join(work, 'ca.pem');
    writeFileSync(ca, t.caPem);
    const env = { XDG_CONFIG_HOME: work, HANGAR_API_URL: t.url, HANGAR_ACCESS_KEY: admin.accessKeyId, HANGAR_SECRET_KEY: admin.secretAccessKey, HANGAR_CA_FILE: ca };
    const listed = await hangarCli(['backup', 'schedule', 'list'], { env, timeoutMs: 60_000 });
    expect(listed.code, listed.stderr).to.equal(0);
    expect(listed.stdout).to.contain(named('nightly')).and.to.contain(scheduleId);
    // A cron schedule of tagged volumes, made with the CLI.
    const weekly = await hangarCli(['backup', 'schedule', 'create', named('weekly'), '--target', named('sched'), '--volume-tag', `backup=${named('nightly')}`, '--cron', '0 4 * * sun', '--verify', '--json'], {
      env,
      timeoutMs: 60_000,
    });
    expect(weekly.code, weekly.stderr).to.equal(0);
    expect(JSON.parse(weekly.stdout)).to.deep.include({ cron: '0 4 * * sun', every_seconds: null, volume_ids: [], volume_tags: { backup: named('nightly') }, verify: true });
    expect(new Date(JSON.parse(weekly.stdout).next_run_at).getUTCDay(), 'a Sunday').to.equal(0);
    const noWhen = await hangarCli(['backup', 'schedule', 'create', named('never'), '--target', named('sched'), '--volume', volumeId], { env, timeoutMs: 60_000 });
    expect(noWhen.code).to.equal(1);
    expect(noWhen.stderr).to.contain('give every_seconds (an interval) or cron (a cron expression), one of them');
    expect((await hangarCli(['backup', 'schedule', 'delete', named('weekly')], { env, timeoutMs: 60_000 })).code).to.equal(0);
    const removed = await hangarCli(['backup', 'schedule', 'delete', named('nightly')], { env, timeoutMs: 60_000 });
    expect(removed.code, removed.stderr).to.equal(0);
    expect(removed.stdout).to.equal(`deleted backup schedule ${named('nightly')}\n`);
    expect((await api('GET', `/v1/backups/schedules/${scheduleId}`)).status).to.equal(404);
    expect((await api('DELETE', `/v1/backups/targets/${named('sched')}?force=true`)).status).to.equal(204);
  });

  // Last: it stops the control plane and starts another on the same store.
  it('a run taken over while stopping workloads stops no more and brings back those it stopped; a control plane failing between queueing the task and recording it leaves no task; two runs of a volume at the same instant: one, the others 409; a run whose task was never queued does not hold its volume', async function () {
    this.timeout(120_000);
    const knex = () => t.hangar.services.db.knex;
    const target = await api('POST', '/v1/backups/targets', targetBody({ name: named('taken'), prefix: 'taken' }));
    expect(target.status, target.text).to.equal(201);
    const volume = await volumeWithBackup('taken', named('taken'));
    workloads.onStart = null;
    const tasksOfVolume = async () => (await knex()('tasks').where({ subject: volume.id }).select('kind', 'status')) as unknown[];
    const restoresOf = async () => (await api('GET', `/v1/volumes/${volume.id}/restores`)).json.data as Array<Record<string, any>>;
    expect(await tasksOfVolume()).to.deep.equal([]);
    stoppers.calls.length = 0;

    // Lost lease: another control plane takes the run over (failed, as backups:settle writes once its lease ran out, and its
    // workloads brought back) while this one stops the second of three workloads.
    const ids = ['wl-lost-1', 'wl-lost-2', 'wl-lost-3'];
    users.set(volume.id, ids.map((id) => ({ type: STOPPABLE, id, name: id })));
    for (const id of ids) workloads.replicas.set(id, 2);
    let release!: () => void;
    workloads.stopGates.set('wl-lost-2', new Promise<void>((resolve) => (release = resolve)));
    const lostRequest = api('POST', `/v1/volumes/${volume.id}/restore`, { snapshot_id: volume.backup, stop_workloads: true });
    await waitFor(async () => stoppers.calls.includes('stop wl-lost-2'), { timeoutMs: 30_000, intervalMs: 50, what: 'the second workload to be stopping' });
    const at = new Date().toISOString();
    const taken = await knex()('backup_runs').where({ volume_id: volume.id, status: 'stopping' }).update({ status: 'failed', lease_until: null, finished_at: at, workloads_started_at: at, error: 'taken over by another control plane (the test)' });
    expect(taken).to.equal(1);
    release();
    const lost = await lostRequest;
    expect([lost.status, lost.json.message]).to.deep.equal([409, `The restore ${(await restoresOf()).at(-1)!.id} was taken over by another control plane while its workloads were being stopped: nothing was restored, and those stopped are back`]);
    // The third never stopped; the two it stopped brought back by it (the taker had started them before wl-lost-2's stop ended).
    expect(stoppers.calls).to.deep.equal(['stop wl-lost-1', 'stop wl-lost-2', 'start wl-lost-1 2', 'start wl-lost-2 2']);
    expect(ids.map((id) => workloads.replicas.get(id))).to.deep.equal([2, 2, 2]);
    expect(await tasksOfVolume()).to.deep.equal([]);
    stoppers.calls.length = 0;

    // A failure between queueing the restore task and moving the run to running (as a control plane dying there): a trigger
    // refuses that move. No task is left queued for the run, failed with its workload brought back.
    users.set(volume.id, [{ type: STOPPABLE, id: 'wl-queued', name: 'queued' }]);
    const FORCED = 'the control plane died here (test trigger)';
    if (dialect.name === 'postgres') {
      await knex().raw(`create function fail_running() returns trigger language plpgsql as $$ begin if old.status = 'stopping' and new.status = 'running' then raise exception '${FORCED}'; end if; return new; end $$`);
      await knex().raw('create trigger fail_running before update on backup_runs for each row execute function fail_running()');
    } else {
      await knex().raw(`create trigger fail_running before update on backup_runs when old.status = 'stopping' and new.status = 'running' begin select raise(abort, '${FORCED}'); end`);
    }
    let died;
    try {
      died = await api('POST', `/v1/volumes/${volume.id}/restore`, { snapshot_id: volume.backup, stop_workloads: true });
    } finally {
      await knex().raw(dialect.name === 'postgres' ? 'drop trigger fail_running on backup_runs' : 'drop trigger fail_running');
      if (dialect.name === 'postgres') await knex().raw('drop function fail_running()');
    }
    expect(died.status, died.text).to.not.equal(202);
    expect(await tasksOfVolume(), 'no restore task of a failed run').to.deep.equal([]);
    const failed = (await restoresOf()).at(-1)!;
    expect(failed.status).to.equal('failed');
    expect(failed.error).to.contain(`not started: `).and.contain(FORCED);
    expect(failed.workloads_started_at).to.be.a('string');
    expect(stoppers.calls).to.deep.equal(['stop wl-queued', 'start wl-queued 2']);
    users.clear();

    // Two backups of the volume (consistency stop) both past the busy check (held where they ask the workload's replicas, before
    // their run is inserted): the store's index lets one run, the other is a 409 and stops nothing.
    users.set(volume.id, [{ type: STOPPABLE, id: 'wl-twice', name: 'twice' }]);
    stoppers.calls.length = 0;
    let go!: () => void;
    workloads.replicasGate = new Promise<void>((resolve) => (go = resolve));
    const asking = [1, 2].map(() => api('POST', `/v1/volumes/${volume.id}/backups`, { target_id: named('taken'), consistency: 'stop' }));
    await waitFor(async () => workloads.replicasWaiting === 2, { timeoutMs: 30_000, intervalMs: 50, what: 'both backups to be past the busy check' });
    workloads.replicasGate = null;
    go();
    const asked = await Promise.all(asking);
    expect(asked.map((r) => r.status).sort(), asked.map((r) => r.text).join('\n')).to.deep.equal([202, 409]);
    expect(asked.find((r) => r.status === 409)!.json.message).to.match(new RegExp(`^A backup of volume ${volume.id} is in progress \\(bak-`));
    const one = asked.find((r) => r.status === 202)!.json.data.backup.id as string;
    const done = await waitFor(
      async () => ((await api('GET', `/v1/volumes/${volume.id}/backups`)).json.data as Array<Record<string, any>>).find((r) => r.id === one && r.status !== 'running' && r.workloads_started_at),
      { timeoutMs: 60_000, intervalMs: 200, what: 'the one backup to finish and its workload to be back' },
    );
    expect([done!.status, done!.error]).to.deep.equal(['succeeded', null]);
    expect(stoppers.calls).to.deep.equal(['stop wl-twice', 'start wl-twice 2']);
    users.clear();

    // A run recorded by a control plane that stopped before queueing its task (a row as it leaves it, older than a lease)
    // does not hold the volume for ever: the next backup fails it and runs.
    const long = new Date(Date.now() - 3600_000).toISOString();
    const node = (await api('GET', `/v1/volumes/${volume.id}`)).json.data.node_id as string;
    await knex()('backup_runs').insert({ id: 'bak-neverqueued', operation: 'backup', volume_id: volume.id, target_id: target.json.data.id, node_id: node, status: 'running', started_at: long, created_at: long, updated_at: long });
    const next = await api('POST', `/v1/volumes/${volume.id}/backups`, { target_id: named('taken') });
    expect(next.status, next.text).to.equal(202);
    const never = ((await api('GET', `/v1/volumes/${volume.id}/backups`)).json.data as Array<Record<string, any>>).find((r) => r.id === 'bak-neverqueued');
    expect([never?.status, never?.error]).to.deep.equal(['failed', 'its control plane stopped before queueing its task: nothing was run']);
    const nextDone = await waitFor(async () => ((await api('GET', `/v1/volumes/${volume.id}/backups`)).json.data as Array<Record<string, any>>).find((r) => r.id === next.json.data.backup.id && r.status !== 'running'), {
      timeoutMs: 60_000,
      intervalMs: 200,
      what: 'the next backup to finish',
    });
    expect([nextDone!.status, nextDone!.error]).to.deep.equal(['succeeded', null]);
  });

  it('stopping workloads never leaves them at zero: a busy one is tried again; a backup with consistency stop brings its workload back after the snapshot; a control plane that dies after a restore or while stopping them is followed by one that brings them back', async function () {
    this.timeout(180_000);
    const target = await api('POST', '/v1/backups/targets', targetBody({ name: named('crash'), prefix: 'crash' }));
    expect(target.status, target.text).to.equal(201);
    // Two volumes with a backup each (made side by side).
    const vols = await Promise.all(['crash-a', 'crash-b'].map((name) => volumeWithBackup(name, named('crash'))));
    const [a, b] = vols as [(typeof vols)[0], (typeof vols)[0]];
    workloads.onStart = null;
    stoppers.calls.length = 0;

    // Busy (409: another operation holds it) twice when brought back: tried again, and back.
    users.set(a.id, [{ type: STOPPABLE, id: 'wl-busy', name: 'busy' }]);
    workloads.busyStarts.set('wl-busy', 2);
    const busy = await api('POST', `/v1/volumes/${a.id}/restore`, { snapshot_id: a.backup, stop_workloads: true });
    expect(busy.status, busy.text).to.equal(202);
    volumeId = a.id;
    const busyDone = await finished('restores', busy.json.data.restore.id);
    expect([busyDone.status, busyDone.error]).to.deep.equal(['succeeded', null]);
    expect(stoppers.calls).to.deep.equal(['stop wl-busy', 'start wl-busy 2', 'start wl-busy 2', 'start wl-busy 2']);
    expect(workloads.replicas.get('wl-busy')).to.equal(2);
    users.delete(a.id);
    stoppers.calls.length = 0;

    // A backup with consistency stop: the workload is stopped before its snapshot (before the 202) and brought back after it, the gap reported.
    users.set(a.id, [{ type: STOPPABLE, id: 'wl-consistent', name: 'consistent' }]);
    const stopped = await api('POST', `/v1/volumes/${a.id}/backups`, { target_id: named('crash'), consistency: 'stop' });
    expect(stopped.status, stopped.text).to.equal(202);
    expect(stoppers.calls).to.deep.equal(['stop wl-consistent']);
    expect(stopped.json.data.backup).to.include({ consistency: 'stop', status: 'running' });
    const consistent = await waitFor(
      async () => {
        const found = ((await api('GET', `/v1/volumes/${a.id}/backups`)).json.data as Array<Record<string, any>>).find((r) => r.id === stopped.json.data.backup.id);
        return found?.status !== 'running' && found?.workloads_started_at ? found : null;
      },
      { timeoutMs: 60_000, intervalMs: 200, what: 'the backup with consistency stop to finish and its workload to be back' },
    );
    expect([consistent.status, consistent.error]).to.deep.equal(['succeeded', null]);
    expect(consistent.workloads).to.deep.equal([{ type: STOPPABLE, id: 'wl-consistent', name: 'consistent', replicas: 2 }]);
    expect(consistent.gap_seconds).to.be.a('number').and.at.least(0);
    expect(stoppers.calls).to.deep.equal(['stop wl-consistent', 'start wl-consistent 2']);
    // Used by a kind hangar cannot stop: refused before anything is stopped.
    users.set(a.id, [{ type: 'instance', id: 'inst-x', name: 'web' }]);
    const refused = await api('POST', `/v1/volumes/${a.id}/backups`, { target_id: named('crash'), consistency: 'stop' });
    expect([refused.status, refused.json.message]).to.deep.equal([409, `Volume ${named('crash-a')} is in use by instance web, which hangar cannot stop for a backup with consistency stop: stop or remove them first, or back it up live`]);
    expect((await api('POST', `/v1/volumes/${a.id}/backups`, { target_id: named('crash'), consistency: 'paused' })).status).to.equal(400);
    users.delete(a.id);
    stoppers.calls.length = 0;

    workloads.replicas.set('wl-after', 2);
    workloads.replicas.set('wl-during', 2);
    // Volume a: restored, and the control plane dies while bringing its workload back.
    users.set(a.id, [{ type: STOPPABLE, id: 'wl-after', name: 'after' }]);
    workloads.hangOnStart.add('wl-after');
    const after = await api('POST', `/v1/volumes/${a.id}/restore`, { snapshot_id: a.backup, stop_workloads: true });
    expect(after.status, after.text).to.equal(202);
    await waitFor(async () => stoppers.calls.includes('start wl-after 2'), { timeoutMs: 60_000, intervalMs: 200, what: 'the restore to end and its workload to be started' });
    // Volume b: the control plane dies while stopping its workload (the request never answers).
    users.set(b.id, [{ type: STOPPABLE, id: 'wl-during', name: 'during' }]);
    workloads.hangOnStop.add('wl-during');
    const unanswered = httpRequest(`${t.url}/v1/volumes/${b.id}/restore`, { method: 'POST', ca: t.caPem, body: { snapshot_id: b.backup, stop_workloads: true }, headers: bearer(admin.token) }).catch(() => null);
    await waitFor(async () => stoppers.calls.includes('stop wl-during'), { timeoutMs: 30_000, intervalMs: 100, what: 'the workload of volume b to be stopping' });
    // Recorded before anything was stopped: the workload and the replicas it had.
    const stopping = ((await api('GET', `/v1/volumes/${b.id}/restores`)).json.data as Array<Record<string, any>>).find((r) => r.status === 'stopping');
    expect(stopping?.workloads).to.deep.equal([{ type: STOPPABLE, id: 'wl-during', name: 'during', replicas: 2 }]);
    expect(workloads.replicas.get('wl-after'), 'still at zero when the control plane dies').to.equal(0);
    expect(workloads.replicas.get('wl-during')).to.equal(2);

    await t.stop();
    await unanswered;
    workloads.hangOnStart.clear();
    workloads.hangOnStop.clear();
    stoppers.calls.length = 0;
    workloads.replicas.set('wl-during', 0); // as if its stop had ended just as the control plane died
    t = await startHangar(dialect, { plugins: PLUGINS, storage, overrides: OVERRIDES });

    const runOf = async (volume: string, id: string) => ((await api('GET', `/v1/volumes/${volume}/restores`)).json.data as Array<Record<string, any>>).find((r) => r.id === id);
    const afterDone = await waitFor(async () => ((await runOf(a.id, after.json.data.restore.id))?.workloads_started_at ? runOf(a.id, after.json.data.restore.id) : null), {
      timeoutMs: 60_000,
      intervalMs: 300,
      what: 'the workload of volume a to be brought back by the next control plane',
    });
    expect([afterDone!.status, afterDone!.error]).to.deep.equal(['succeeded', null]);
    const duringDone = await waitFor(async () => ((await runOf(b.id, stopping!.id))?.workloads_started_at ? runOf(b.id, stopping!.id) : null), {
      timeoutMs: 60_000,
      intervalMs: 300,
      what: 'the workload of volume b to be brought back by the next control plane',
    });
    expect(duringDone!.status).to.equal('failed');
    expect(duringDone!.error).to.contain('stopped before it was run: nothing was restored');
    expect(stoppers.calls.sort()).to.deep.equal(['start wl-after 2', 'start wl-during 2']);
    expect([workloads.replicas.get('wl-after'), workloads.replicas.get('wl-during')]).to.deep.equal([2, 2]);
    users.clear();
  });
});
