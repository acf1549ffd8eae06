import { expect } from 'chai';
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { docker, dockerOk } from '../../../lab/docker.js';
import { cleanupAgents, waitFor } from '../../support/agents.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { dockerOnlyPath, hostSwarm, TEST_IMAGE } from '../../support/host-swarm.js';
import { bearer, bootstrapAdmin, type Credentials } from '../../support/identity.js';
import { OUTSIDE } from '../../support/nfs-exports.js';
import { freePort } from '../../support/ports.js';
import { requireService } from '../../support/requirements.js';
import { releaseSharedS3Server, S3_START_TIMEOUT_MS, s3Availability, sharedS3Server, type S3Bucket, type S3Server } from '../../support/s3-server.js';
import { STANDIN_IMAGE, standinImage, withStoreS3 } from '../../support/minio-standin.js';
import { stays } from '../../support/stays.js';
import { hostSwarmMember, SWARM_TEST_OVERRIDES, type SwarmMember } from '../../support/swarm-member.js';

const PLUGINS = ['system', 'iam', 'projects', 'nodes', 'agent-internal', 'swarms', 'volumes', 'compute', 'services', 's3', 'backups'];
const b64 = (text: string) => Buffer.from(text, 'utf8').toString('base64');

/**
 * A restore in place (and a backup with consistency stop) of a volume a compose stack mounts: the
 * stack's parts that mount it are scaled to zero on the host engine's swarm (a real agent), the
 * volume restored with restic from the real S3 server, and the parts brought back; the others keep
 * running untouched. A control plane stopped while a part is being stopped leaves the run
 * `stopping`; the next one started on the same store brings the part back. The same for an object
 * store (the lab's MinIO stand-in, real S3) whose volume is restored: its objects as they were.
 */
describeEachDialect('backups: a restore with stop_workloads stops and brings back the compose services that mount the volume (host swarm)', (dialect) => {
  const storage = dialect.freshStorage();
  const run = randomBytes(3).toString('hex');
  const named = (n: string) => `${n}-${dialect.name.slice(0, 2)}-${run}`;
  const serviceName = `rw${dialect.name[0]}${run}`;
  const stack = `hangar-${serviceName}`;
  let port: number;
  let t: TestHangar;
  let admin: Credentials;
  let member: SwarmMember;
  // The real S3 server and this suite's bucket on it (the backup target's).
  let [s3, bucket] = [undefined as unknown as S3Server, undefined as unknown as S3Bucket];
  /** The test's folder (the volume's folder, the agent's PATH, the export entries). */
  let work: string;
  let folder: string;
  let [volumeId, targetId, serviceId, snapshotId] = ['', '', '', ''];
  const previousExportsDir = process.env.HANGAR_EXPORTS_DIR;
  const storeName = `rs${dialect.name[0]}${run}`;
  const storeRuntime = `s3-${storeName}`;

  // Restarted on the same store and port in the last case: the agent finds the next control plane where it left the first.
  const start = async () =>
    (t = await startHangar(dialect, { plugins: PLUGINS, storage, overrides: { ...SWARM_TEST_OVERRIDES, api: { port }, s3: { image: STANDIN_IMAGE }, clusters: { op_lease_seconds: 2 }, tasks: { poll_wait_seconds: 5 }, volumes: { nfs_export_clients: [OUTSIDE] } } }));
  const api = (method: string, p: string, body?: unknown) => t.request(method, p, { body, headers: bearer(admin.token) });
  /** A volume on the swarm member's folder, made through the API and waited for until ready: its id. */
  const readyVolume = async (name: string, at: string, type: 'nfs' | 'local') => {
    const volume = await api('POST', '/v1/volumes', { name, node_id: member.nodeId, folder: at, type });
    expect(volume.status, volume.text).to.equal(202);
    const id = volume.json.data.id as string;
    await waitFor(async () => (await api('GET', `/v1/volumes/${id}`)).json.data.status === 'ready', { timeoutMs: 30_000, what: `volume ${name} to be ready` });
    return id;
  };
  const restores = async () => (await api('GET', `/v1/volumes/${volumeId}/restores`)).json.data as Array<Record<string, any>>;
  const backups = async () => (await api('GET', `/v1/volumes/${volumeId}/backups`)).json.data as Array<Record<string, any>>;
  /** A run once its outcome is recorded and its workloads are back. */
  const settled = (list: () => Promise<Array<Record<string, any>>>, id: string) =>
    waitFor(async () => (await list()).find((r) => r.id === id && r.status !== 'running' && r.status !== 'stopping' && r.workloads_started_at) ?? null, {
      timeoutMs: 120_000,
      intervalMs: 300,
      what: `run ${id} to end with its workloads back`,
    });
  /** The running containers of a swarm service. */
  const containersOf = async (runtime: string) => (await dockerOk(['ps', '-q', '--filter', `label=com.docker.swarm.service.name=${runtime}`])).split('\n').filter(Boolean);
  /** The running containers of a part of the stack. */
  const containers = (part: string) => containersOf(`${stack}_${part}`);
  const replicasAsked = async (part: string) => JSON.parse(await dockerOk(['service', 'inspect', `${stack}_${part}`, '--format', '{{json .Spec.Mode}}'])).Replicated.Replicas as number;
  /** The one container of the db part once it runs, and what it reads from the volume. */
  const dbReads = () =>
    waitFor(
      async () => {
        const ids = await containers('db');
        if (ids.length !== 1) return null;
        const res = await docker(['exec', ids[0]!, 'cat', '/data/app.conf']);
        return res.code === 0 ? { id: ids[0]!, content: res.stdout } : null;
      },
      { timeoutMs: 60_000, intervalMs: 300, what: 'the db part to run one container reading the volume' },
    );

  before(async function () {
    this.timeout(Math.max(S3_START_TIMEOUT_MS, 180_000));
    const s3ok = s3Availability();
    requireService(this, s3ok.ok, s3ok.why);
    const restic = spawnSync('sh', ['-c', 'command -v restic'], { encoding: 'utf8' }).stdout.trim();
    requireService(this, !!restic, 'restic on this machine (apt-get install restic; .ci/run installs it)');
    const missing = await hostSwarm();
    requireService(this, missing === null, missing ?? '');
    const imageMissing = await standinImage();
    requireService(this, imageMissing === null, imageMissing ?? '');
    s3 = await sharedS3Server();
    bucket = await s3.bucket(`restore-wl-${dialect.name.slice(0, 2)}-${run}`);
    work = mkdtempSync(path.join(os.tmpdir(), 'hangar-restore-workloads-'));
    // The agent writes NFS export entries here instead of /etc/exports.d.
    process.env.HANGAR_EXPORTS_DIR = path.join(work, 'exports');
    mkdirSync(process.env.HANGAR_EXPORTS_DIR);
    const bin = path.join(work, 'bin');
    mkdirSync(bin);
    symlinkSync(restic, path.join(bin, 'restic'));
    port = await freePort();
    await start();
    admin = await bootstrapAdmin(t);
    member = await hostSwarmMember(t, admin, named('rw'), { path: `${bin}:${dockerOnlyPath()}` });
    await waitFor(async () => (await api('GET', `/v1/nodes/${member.nodeId}`)).json.data.restic?.present === true, { timeoutMs: 30_000, what: 'the node to report restic' });

    // An NFS volume: the swarm's engines define it as hangar-vol-<name> (a bind of the folder on its own node), which compose files mount.
    folder = path.join(work, 'data');
    volumeId = await readyVolume(named('db'), folder, 'nfs');
    writeFileSync(path.join(folder, 'app.conf'), 'version 1\n');
    const target = await api('POST', '/v1/backups/targets', { name: named('t'), endpoint: s3.endpoint, bucket: bucket.name, prefix: 'wl', access_key_id: s3.credentials.accessKeyId, secret_access_key: s3.credentials.secretAccessKey });
    expect(target.status, target.text).to.equal(201);
    targetId = target.json.data.id;

    // db mounts the volume (and, as a shell as PID 1 that ignores SIGTERM, takes its 3 s grace period to stop); web mounts none.
    const compose = `services:
  db:
    image: ${TEST_IMAGE}
    command: ["sh", "-c", "sleep 3600"]
    stop_grace_period: 3s
    volumes: ["data:/data"]
  web:
    image: ${TEST_IMAGE}
    command: ${JSON.stringify(stays())}
    stop_grace_period: 1s
volumes:
  data:
    external: true
    name: hangar-vol-${named('db')}
`;
    const created = await api('POST', '/v1/services', { name: serviceName, swarm_id: member.swarmId, compose_file: b64(compose) });
    expect(created.status, created.text).to.equal(202);
    serviceId = created.json.data.id;
    await waitFor(async () => ((await containers('db')).length === 1 && (await containers('web')).length === 1) || null, { timeoutMs: 90_000, intervalMs: 300, what: 'both parts to run' });
    expect((await dbReads()).content).to.equal('version 1\n');

    const backup = await api('POST', `/v1/volumes/${volumeId}/backups`, { target_id: targetId });
    expect(backup.status, backup.text).to.equal(202);
    const done = await waitFor(async () => (await backups()).find((r) => r.id === backup.json.data.backup.id && r.status !== 'running') ?? null, { timeoutMs: 120_000, intervalMs: 300, what: 'the backup to end' });
    expect(done.status, done.error).to.equal('succeeded');
    snapshotId = done.id;
  });

  after(async function () {
    this.timeout(60_000);
    await docker(['stack', 'rm', stack]);
    await docker(['service', 'rm', storeRuntime, `inst-${named('slow')}`]);
    await cleanupAgents();
    await t?.stop();
    if (s3) releaseSharedS3Server();
    if (previousExportsDir === undefined) delete process.env.HANGAR_EXPORTS_DIR;
    else process.env.HANGAR_EXPORTS_DIR = previousExportsDir;
    if (work) rmSync(work, { recursive: true, force: true });
  });

  it('counts the service among the volume’s users: a delete and a restore without stop_workloads are 409s naming it', async () => {
    const deleted = await api('DELETE', `/v1/volumes/${volumeId}`);
    expect(deleted.status, deleted.text).to.equal(409);
    expect(deleted.json.message).to.contain(serviceName);
    const refused = await api('POST', `/v1/volumes/${volumeId}/restore`, { snapshot_id: snapshotId });
    expect(refused.status, refused.text).to.equal(409);
    expect(refused.json.message).to.contain(`in use by service ${serviceName}`).and.to.contain('stop_workloads');
  });

  it('with stop_workloads: scales the part mounting the volume to zero, restores, and brings it back; a new container reads the restored file, the other part untouched', async function () {
    this.timeout(180_000);
    writeFileSync(path.join(folder, 'app.conf'), 'version 2, damaged\n');
    const before = await dbReads();
    expect(before.content).to.equal('version 2, damaged\n');
    const [web] = await containers('web');
    const res = await api('POST', `/v1/volumes/${volumeId}/restore`, { snapshot_id: snapshotId, stop_workloads: true });
    expect(res.status, res.text).to.equal(202);
    // Answered once the part was scaled to zero and ran no task.
    expect(res.json.data.restore.workloads).to.deep.equal([{ type: 'service', id: serviceId, name: serviceName, replicas: 1 }]);
    const done = await settled(restores, res.json.data.restore.id);
    expect([done.status, done.error]).to.deep.equal(['succeeded', null]);
    expect(done.gap_seconds).to.be.a('number');
    expect(readFileSync(path.join(folder, 'app.conf'), 'utf8')).to.equal('version 1\n');
    const after = await dbReads();
    expect(after.content).to.equal('version 1\n');
    expect(after.id, 'a new container: the old one was stopped for the restore').to.not.equal(before.id);
    expect(await replicasAsked('db')).to.equal(1);
    expect(await containers('web'), 'the part that does not mount the volume kept its container').to.deep.equal([web]);
    const service = (await api('GET', `/v1/services/${serviceId}`)).json.data;
    expect(service).to.include({ status: 'running', error: null });
    await waitFor(async () => ((await api('GET', `/v1/services/${serviceId}`)).json.data.replicas.db.running === 1 ? true : null), { timeoutMs: 30_000, intervalMs: 300, what: 'the service to report db running' });
  });

  it('a backup with consistency stop stops the part for the snapshot and brings it back', async function () {
    this.timeout(180_000);
    const before = await dbReads();
    const res = await api('POST', `/v1/volumes/${volumeId}/backups`, { target_id: targetId, consistency: 'stop' });
    expect(res.status, res.text).to.equal(202);
    expect(res.json.data.backup.workloads).to.deep.equal([{ type: 'service', id: serviceId, name: serviceName, replicas: 1 }]);
    const done = await settled(backups, res.json.data.backup.id);
    expect([done.status, done.error]).to.deep.equal(['succeeded', null]);
    const after = await dbReads();
    expect(after.id).to.not.equal(before.id);
    expect(await replicasAsked('db')).to.equal(1);
  });

  it('a control plane stopped while the part is being stopped: the next one on the same store fails the run (nothing restored) and brings the part back', async function () {
    this.timeout(180_000);
    writeFileSync(path.join(folder, 'app.conf'), 'version 3, damaged\n');
    await dbReads();
    const unanswered = api('POST', `/v1/volumes/${volumeId}/restore`, { snapshot_id: snapshotId, stop_workloads: true }).catch(() => null);
    // Scaled to zero, its container within its grace period: the run is `stopping`.
    await waitFor(async () => ((await replicasAsked('db')) === 0 ? true : null), { timeoutMs: 30_000, intervalMs: 100, what: 'the db part to be scaled to zero' });
    const stopping = (await restores()).find((r) => r.status === 'stopping');
    expect(stopping?.workloads).to.deep.equal([{ type: 'service', id: serviceId, name: serviceName, replicas: 1 }]);
    await t.stop();
    await unanswered;

    await start();
    const done = await settled(restores, stopping!.id);
    expect(done.status).to.equal('failed');
    expect(done.error).to.contain('stopped before it was run: nothing was restored');
    expect((await dbReads()).content, 'nothing restored').to.equal('version 3, damaged\n');
    expect(await replicasAsked('db')).to.equal(1);
  });

  it('an object store on the volume: stopped for a backup with consistency stop and for a restore, brought back serving the objects of the snapshot', async function () {
    this.timeout(300_000);
    const storeFolder = path.join(work, 'store');
    const storeVolume = await readyVolume(named('st'), storeFolder, 'local');
    const created = await api('POST', '/v1/s3/instances', { name: storeName, swarm_id: member.swarmId, volume_id: storeVolume });
    expect(created.status, created.text).to.equal(202);
    const storeId = created.json.data.id as string;
    const password = created.json.data.password as string;
    const store = async () => (await api('GET', `/v1/s3/instances/${storeId}`)).json.data;
    await waitFor(async () => ((await store()).status === 'running' ? true : null), { timeoutMs: 90_000, intervalMs: 500, what: 'the store to run' });
    const endpoint = `http://${created.json.data.domain}`;
    await withStoreS3(storeRuntime, endpoint, password, async (client) => {
      await client.createBucket('kept');
      await client.putObject('kept', 'a.txt', 'as backed up');
    });
    const runsOf = async (kind: 'backups' | 'restores') => (await api('GET', `/v1/volumes/${storeVolume}/${kind}`)).json.data as Array<Record<string, any>>;
    const stoppedAs = [{ type: 's3', id: storeId, name: storeName, replicas: 1 }];

    const backup = await api('POST', `/v1/volumes/${storeVolume}/backups`, { target_id: targetId, consistency: 'stop' });
    expect(backup.status, backup.text).to.equal(202);
    expect(backup.json.data.backup.workloads).to.deep.equal(stoppedAs);
    const backedUp = await settled(() => runsOf('backups'), backup.json.data.backup.id);
    expect([backedUp.status, backedUp.error]).to.deep.equal(['succeeded', null]);
    await waitFor(async () => ((await store()).status === 'running' ? true : null), { timeoutMs: 90_000, intervalMs: 500, what: 'the store to run again' });

    await withStoreS3(storeRuntime, endpoint, password, async (client) => {
      await client.putObject('kept', 'a.txt', 'changed after');
      await client.putObject('kept', 'late.txt', 'written after');
    });
    const refused = await api('POST', `/v1/volumes/${storeVolume}/restore`, { snapshot_id: backedUp.id });
    expect(refused.status, refused.text).to.equal(409);
    expect(refused.json.message).to.contain(`in use by s3 ${storeName}`);
    const res = await api('POST', `/v1/volumes/${storeVolume}/restore`, { snapshot_id: backedUp.id, stop_workloads: true });
    expect(res.status, res.text).to.equal(202);
    expect(res.json.data.restore.workloads).to.deep.equal(stoppedAs);
    // Stopped before the 202: its container gone, the store `stopped`.
    expect((await containersOf(storeRuntime)).length).to.equal(0);
    const restored = await settled(() => runsOf('restores'), res.json.data.restore.id);
    expect([restored.status, restored.error]).to.deep.equal(['succeeded', null]);
    await waitFor(async () => ((await store()).status === 'running' ? true : null), { timeoutMs: 90_000, intervalMs: 500, what: 'the store to run after the restore' });
    await withStoreS3(storeRuntime, endpoint, password, async (client) => {
      expect((await client.getObject('kept', 'a.txt')).toString()).to.equal('as backed up');
      expect(await client.listObjects('kept')).to.deep.equal(['a.txt']);
    });
  });

  it('a compute instance whose container takes its grace period to stop: the restore waits until it is gone, and a new container reads the restored file', async function () {
    this.timeout(240_000);
    const instFolder = path.join(work, 'inst');
    const instVolume = await readyVolume(named('inst'), instFolder, 'local');
    writeFileSync(path.join(instFolder, 'app.conf'), 'instance 1\n');
    const runsOf = async (kind: 'backups' | 'restores') => (await api('GET', `/v1/volumes/${instVolume}/${kind}`)).json.data as Array<Record<string, any>>;
    const backup = await api('POST', `/v1/volumes/${instVolume}/backups`, { target_id: targetId });
    expect(backup.status, backup.text).to.equal(202);
    const backedUp = await waitFor(async () => (await runsOf('backups')).find((r) => r.id === backup.json.data.backup.id && r.status !== 'running') ?? null, { timeoutMs: 120_000, intervalMs: 300, what: 'the backup to end' });
    expect(backedUp.status, backedUp.error).to.equal('succeeded');
    // A shell as PID 1 ignores SIGTERM: the engine kills it after its grace period (10 s).
    const runtime = `inst-${named('slow')}`;
    const created = await api('POST', '/v1/compute/instances', { name: named('slow'), swarm_id: member.swarmId, image: TEST_IMAGE, type: 'nano', replicas: 1, volumes: [`${instVolume}:/data`], command: ['sh', '-c', 'sleep 3600'] });
    expect(created.status, created.text).to.equal(202);
    const instanceId = created.json.data.id as string;
    const reads = () =>
      waitFor(
        async () => {
          const ids = await containersOf(runtime);
          if (ids.length !== 1) return null;
          const res = await docker(['exec', ids[0]!, 'cat', '/data/app.conf']);
          return res.code === 0 ? { id: ids[0]!, content: res.stdout } : null;
        },
        { timeoutMs: 60_000, intervalMs: 300, what: 'the instance to run one container reading the volume' },
      );
    writeFileSync(path.join(instFolder, 'app.conf'), 'instance 2, damaged\n');
    const before = await reads();
    expect(before.content).to.equal('instance 2, damaged\n');
    const res = await api('POST', `/v1/volumes/${instVolume}/restore`, { snapshot_id: backedUp.id, stop_workloads: true });
    expect(res.status, res.text).to.equal(202);
    expect(res.json.data.restore.workloads).to.deep.equal([{ type: 'instance', id: instanceId, name: named('slow'), replicas: 1 }]);
    // Answered once its container was gone.
    expect(await containersOf(runtime)).to.deep.equal([]);
    const restored = await settled(() => runsOf('restores'), res.json.data.restore.id);
    expect([restored.status, restored.error]).to.deep.equal(['succeeded', null]);
    const after = await reads();
    expect(after.content).to.equal('instance 1\n');
    expect(after.id, 'a new container: the old one was stopped for the restore, not asked back').to.not.equal(before.id);
  });
});
