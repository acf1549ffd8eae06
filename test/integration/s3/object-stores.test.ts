import { expect } from 'chai';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { docker } from '../../../lab/docker.js';
import type { S3Api } from '../../../plugins/s3/api.js';
import { cleanupAgents, waitFor } from '../../support/agents.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { hostSwarm } from '../../support/host-swarm.js';
import { bearer, bootstrapAdmin, type Credentials } from '../../support/identity.js';
import { requireService } from '../../support/requirements.js';
import { S3Client, S3Error } from '../../support/s3-client.js';
import { S3_START_TIMEOUT_MS, s3Availability } from '../../support/s3-server.js';
import { STANDIN_IMAGE, standinImage, withStoreS3 } from '../../support/minio-standin.js';
import { hostSwarmMember, SWARM_TEST_OVERRIDES, type SwarmMember } from '../../support/swarm-member.js';
import { RoutesChanged } from '../../../core/clusters/topics.js';
import { ResourceDeleted } from '../../../core/events.js';

// Object stores deployed through a real agent on this host into the host engine's swarm, with
// their data on a local volume (a folder on this host). No MinIO image can be pulled here: the
// store runs the lab's MinIO STAND-IN (lab-minio-standin-image; NOT MinIO), which starts like
// MinIO, insists on the root credentials, marks its data folder as MinIO does — and serves real S3
// (SeaweedFS's S3 gateway, built by scripts/s3-build.sh) with the root user and password as keys.
const RUN = randomBytes(3).toString('hex');

/** The S3 error an operation ends with (fails the test when it succeeds). */
async function refusal(operation: Promise<unknown>): Promise<S3Error> {
  try {
    await operation;
  } catch (error) {
    if (error instanceof S3Error) return error;
    throw error;
  }
  expect.fail('the request was accepted');
}

describeEachDialect('object stores: MinIO (the lab stand-in, real S3) on a swarm with a local volume, through a real agent (host dockerd)', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  let member: SwarmMember;
  let folder: string;
  let volumeId = '';
  let storeId = '';
  let password = '';
  const name = `ob${dialect.name[0]}${RUN}`;
  const runtime = `s3-${name}`;
  const routeEvents: unknown[] = [];
  const deletedEvents: unknown[] = [];

  const api = (method: string, p: string, body?: unknown) => t.request(method, p, { body, headers: bearer(admin.token) });
  const routesOf = () => (t.hangar.services.provided.get('s3') as S3Api).routes(member.swarmId);

  before(async function () {
    this.timeout(S3_START_TIMEOUT_MS); // may wait for (or run) the S3 build
    const swarmMissing = await hostSwarm();
    requireService(this, swarmMissing === null, swarmMissing ?? '');
    const s3Available = s3Availability();
    requireService(this, s3Available.ok, s3Available.why);
    const imageMissing = await standinImage();
    requireService(this, imageMissing === null, imageMissing ?? '');
    t = await startHangar(dialect, {
      plugins: ['system', 'iam', 'nodes', 'agent-internal', 'swarms', 'volumes', 's3', 'cleanup'],
      overrides: { ...SWARM_TEST_OVERRIDES, s3: { image: STANDIN_IMAGE } },
    });
    admin = await bootstrapAdmin(t);
    t.hangar.services.events.subscribe(RoutesChanged, (payload) => void routeEvents.push(payload));
    t.hangar.services.events.subscribe(ResourceDeleted, (payload) => void deletedEvents.push(payload));
    member = await hostSwarmMember(t, admin, `so${dialect.name[0]}${RUN}`);
    folder = path.join(mkdtempSync(path.join(os.tmpdir(), 'hangar-s3-')), 'data');
    const volume = await api('POST', '/v1/volumes', { name: `${name}-data`, node_id: member.nodeId, folder, type: 'local' });
    expect(volume.status, volume.text).to.equal(202);
    volumeId = volume.json.data.id;
    await waitFor(async () => (await api('GET', `/v1/volumes/${volumeId}`)).json.data.status === 'ready', { timeoutMs: 30_000, what: 'the volume to be ready' });
  });
  after(async function () {
    this.timeout(60_000);
    await docker(['service', 'rm', runtime, `${runtime}-sso`, `${runtime}-again`]);
    await t?.stop();
    await cleanupAgents();
    if (folder) rmSync(path.dirname(folder), { recursive: true, force: true });
  });

  it('creates a store: 202 with a generated password shown once, then running with its data folder marked', async function () {
    this.timeout(120_000);
    const res = await api('POST', '/v1/s3/instances', { name, swarm_id: member.swarmId, volume_id: `${name}-data` });
    expect(res.status, res.text).to.equal(202);
    const created = res.json.data;
    expect(created.id).to.match(/^s3-/);
    storeId = created.id;
    password = created.password;
    expect(password).to.match(/^[A-Za-z0-9]{24}$/);
    const domain = `${name}.s3.${member.swarmName}.hangar.local`;
    expect(created).to.include({ name, swarm_id: member.swarmId, volume_id: volumeId, status: 'deploying', domain, console_domain: `console.${domain}`, root_user: 'hangar', sso: false, cert_id: null, image: STANDIN_IMAGE, runtime_name: runtime });

    const running = await waitFor(
      async () => {
        const s = (await api('GET', `/v1/s3/instances/${storeId}`)).json.data;
        if (s.status === 'failed') throw new Error(`the store failed: ${s.error}`);
        return s.status === 'running' ? s : null;
      },
      { timeoutMs: 90_000, intervalMs: 500, what: 'the store to run' },
    );
    expect(running).to.include({ running: 1, error: null });
    // The password is handed over once: never in reads, lists or the store's rows.
    expect(running).not.to.have.property('password');
    const list = await api('GET', '/v1/s3/instances');
    expect(list.json.data.map((s: { id: string }) => s.id)).to.deep.equal([storeId]);
    expect(list.text).not.to.contain(password);
    const row = await t.hangar.store.knex('s3_instances').where({ id: storeId }).first();
    expect(String(row.password_sealed)).to.match(/^v1:/).and.not.contain(password);
    expect(t.logs.join('\n')).not.to.contain(password);

    // MinIO's data folder on the volume, as the stand-in marks it.
    await waitFor(() => existsSync(path.join(folder, '.minio.sys', 'format.json')), { timeoutMs: 30_000, what: 'the data folder to be marked' });
    expect(readFileSync(path.join(folder, '.minio.sys', 'format.json'), 'utf8')).to.contain('hangar lab MinIO stand-in');
  });

  it('runs MinIO as hangar describes it: role s3, server /data with the console, root credentials, the volume at /data, the edge network', async () => {
    const spec = JSON.parse((await docker(['service', 'inspect', '--format', '{{json .Spec}}', runtime])).stdout);
    const container = spec.TaskTemplate.ContainerSpec;
    expect(spec.Labels).to.include({ 'io.hangar.role': 's3', 'io.hangar.id': storeId });
    expect(container.Args).to.deep.equal(['server', '/data', '--console-address', ':9001']);
    expect(container.Env).to.include.members(['MINIO_ROOT_USER=hangar', 'MINIO_ROOT_PASSWORD_FILE=minio_root_password']);
    expect(JSON.stringify(spec), 'the password is not in the service spec').to.not.contain(password);
    expect(container.Secrets).to.have.length(1);
    expect(container.Secrets[0]).to.deep.include({ SecretName: `${runtime}-root-password` });
    expect(container.Secrets[0].File.Name).to.equal('minio_root_password');
    expect(container.Mounts).to.deep.include({ Type: 'bind', Source: folder, Target: '/data' });
    // Pinned to the node holding the folder (this machine's engine, by its swarm node id).
    const engineNode = (await docker(['info', '--format', '{{.Swarm.NodeID}}'])).stdout.trim();
    expect(spec.TaskTemplate.Placement.Constraints).to.deep.equal([`node.id == ${engineNode}`]);
    const networks = await Promise.all(
      (spec.TaskTemplate.Networks as Array<{ Target: string }>).map(async (n) => (await docker(['network', 'inspect', '--format', '{{.Name}}', n.Target])).stdout.trim()),
    );
    expect(networks).to.deep.equal(['hangar-edge']);
    expect(spec.Mode.Replicated.Replicas).to.equal(1);
  });

  it('serves real S3 with the root user and the password shown once: a bucket, objects put, read and listed; other keys refused', async function () {
    this.timeout(150_000);
    const domain = `${name}.s3.${member.swarmName}.hangar.local`;
    await withStoreS3(runtime, `http://${domain}`, password, async (s3, socketPath) => {
      await s3.createBucket('photos');
      await s3.putObject('photos', '2024/cat.jpg', 'not really a cat');
      await s3.putObject('photos', 'readme.txt', 'photos of the lab');
      expect((await s3.getObject('photos', '2024/cat.jpg')).toString()).to.equal('not really a cat');
      expect(await s3.listObjects('photos')).to.deep.equal(['2024/cat.jpg', 'readme.txt']);
      expect(await s3.listBuckets()).to.deep.equal(['photos']);
      const answer = await s3.request('GET', '/photos/readme.txt');
      expect(answer.headers['x-hangar-standin'], 'answered by the stand-in').to.equal('minio (SeaweedFS)');
      // Only the root credentials open it.
      const wrong = await refusal(new S3Client({ endpoint: `http://${domain}`, socketPath, credentials: { accessKeyId: 'hangar', secretAccessKey: 'not-the-password' } }).listBuckets());
      expect([wrong.status, wrong.code]).to.deep.equal([403, 'SignatureDoesNotMatch']);
      expect((await s3.request('GET', '/photos/readme.txt', { unsigned: true })).status, 'anonymous').to.equal(403);
    });
    // The objects are on the volume, in the stand-in's data folder.
    expect(existsSync(path.join(folder, '.minio.sys', 'seaweedfs')), 'SeaweedFS keeps its data on the volume').to.equal(true);
  });

  it('routes the S3 API (9000) and the console (9001) for the gateway; the volume and the swarm know the store uses them', async () => {
    const domain = `${name}.s3.${member.swarmName}.hangar.local`;
    expect(await routesOf()).to.deep.equal([
      { domain, service: runtime, port: 9000, source: 's3', source_id: storeId },
      { domain: `console.${domain}`, service: runtime, port: 9001, source: 's3', source_id: storeId },
    ]);
    expect(routeEvents).to.deep.include({ clusterId: member.swarmId });
    expect(await t.hangar.services.clusters.workloadsIn(member.swarmId)).to.deep.include({ type: 's3', id: storeId, name });
    const volumeDelete = await api('DELETE', `/v1/volumes/${volumeId}`);
    expect(volumeDelete.status).to.equal(409);
    expect(volumeDelete.json.message).to.contain(`s3 ${name}`);
    const second = await api('POST', '/v1/s3/instances', { name: `${name}b`, swarm_id: member.swarmId, volume_id: volumeId, password: 'another-password' });
    expect(second.status).to.equal(409);
    expect(second.json.message).to.contain('give each store its own volume');
    expect((await api('POST', '/v1/s3/instances', { name, swarm_id: member.swarmId, volume_id: volumeId })).status, 'same name').to.equal(409);
  });

  it('takes the operator’s password and a certificate for console single sign-on (recorded: sso, HANGAR_CERT_ID); cleanup force-removes it', async function () {
    this.timeout(120_000);
    const second = await api('POST', '/v1/volumes', { name: `${name}-sso`, node_id: member.nodeId, folder: `${folder}-sso`, type: 'local' });
    expect(second.status, second.text).to.equal(202);
    await waitFor(async () => (await api('GET', `/v1/volumes/${second.json.data.id}`)).json.data.status === 'ready', { timeoutMs: 30_000, what: 'the second volume' });
    const res = await api('POST', '/v1/s3/instances', { name: `${name}-sso`, swarm_id: member.swarmId, volume_id: second.json.data.id, password: 'operator-chosen-1', cert_id: 'cert-lab1' });
    expect(res.status, res.text).to.equal(202);
    expect(res.json.data).to.include({ password: 'operator-chosen-1', sso: true, cert_id: 'cert-lab1' });
    const id = res.json.data.id as string;
    await waitFor(async () => (await api('GET', `/v1/s3/instances/${id}`)).json.data.status === 'running', { timeoutMs: 90_000, intervalMs: 500, what: 'the second store to run' });
    const env = JSON.parse((await docker(['service', 'inspect', '--format', '{{json .Spec.TaskTemplate.ContainerSpec.Env}}', `s3-${name}-sso`])).stdout);
    expect(env).to.include.members(['MINIO_ROOT_PASSWORD_FILE=minio_root_password', 'HANGAR_CERT_ID=cert-lab1']);
    expect(env.join(' ')).to.not.contain('operator-chosen-1');
    // Force-cleaned rather than deleted: the workload and the record go at once.
    const cleaned = await api('POST', `/v1/cleanup/s3/${id}`);
    expect(cleaned.status, cleaned.text).to.equal(200);
    expect((await api('GET', `/v1/s3/instances/${id}`)).status).to.equal(404);
    expect((await docker(['service', 'inspect', `s3-${name}-sso`])).code).not.to.equal(0);
    expect((await docker(['secret', 'inspect', `s3-${name}-sso-root-password`])).code, 'the password secret goes too').not.to.equal(0);
    expect((await api('DELETE', `/v1/volumes/${second.json.data.id}`)).status).to.equal(202);
  });

  it('DELETE removes the workload, then the record (202); the data stays on the volume', async function () {
    this.timeout(60_000);
    const res = await api('DELETE', `/v1/s3/instances/${storeId}`);
    expect(res.status, res.text).to.equal(202);
    expect(res.json.data.status).to.equal('removing');
    await waitFor(async () => (await api('GET', `/v1/s3/instances/${storeId}`)).status === 404, { timeoutMs: 30_000, what: 'the record to go' });
    expect((await docker(['service', 'inspect', runtime])).code).not.to.equal(0);
    expect((await docker(['secret', 'inspect', `${runtime}-root-password`])).code, 'the password secret goes too').not.to.equal(0);
    expect(await routesOf()).to.deep.equal([]);
    expect(existsSync(path.join(folder, '.minio.sys', 'format.json')), 'the data stays').to.equal(true);
    expect(deletedEvents, 'tags and the like forget it').to.deep.include({ type: 's3', id: storeId });
  });

  it('a new store on the same volume finds the buckets and objects, opened with its own root password', async function () {
    this.timeout(240_000);
    const res = await api('POST', '/v1/s3/instances', { name: `${name}-again`, swarm_id: member.swarmId, volume_id: volumeId, password: 'second-store-pass' });
    expect(res.status, res.text).to.equal(202);
    const id = res.json.data.id as string;
    await waitFor(
      async () => {
        const s = (await api('GET', `/v1/s3/instances/${id}`)).json.data;
        if (s.status === 'failed') throw new Error(`the store failed: ${s.error}`);
        return s.status === 'running';
      },
      { timeoutMs: 90_000, intervalMs: 500, what: 'the second store to run' },
    );
    await withStoreS3(`s3-${name}-again`, `http://${res.json.data.domain}`, 'second-store-pass', async (s3, socketPath) => {
      expect(await s3.listObjects('photos')).to.deep.equal(['2024/cat.jpg', 'readme.txt']);
      expect((await s3.getObject('photos', 'readme.txt')).toString()).to.equal('photos of the lab');
      const old = await refusal(new S3Client({ endpoint: `http://${res.json.data.domain}`, socketPath, credentials: { accessKeyId: 'hangar', secretAccessKey: password } }).listBuckets());
      expect(old.status, 'the first store’s password no longer opens it').to.equal(403);
    });
    expect((await api('DELETE', `/v1/s3/instances/${id}`)).status).to.equal(202);
    await waitFor(async () => (await api('GET', `/v1/s3/instances/${id}`)).status === 404, { timeoutMs: 30_000, what: 'the second store to go' });
    expect((await api('DELETE', `/v1/volumes/${volumeId}`)).status).to.equal(202);
  });
});
