import { expect } from 'chai';
import { Hangar } from '../../../core/app.js';
import { ConfigError } from '../../../core/errors.js';
import { builtinCatalogue } from '../../../cli/catalogue.js';
import { ToyJournal } from '../../support/fixtures/toy-orchestrator/calls.js';
import { cleanupAgents, joinedNodeId, spawnAgent, waitFor, waitForExit } from '../../support/agents.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, type Credentials } from '../../support/identity.js';
import { requireService } from '../../support/requirements.js';
import { releaseSharedS3Server, S3_START_TIMEOUT_MS, s3Availability, sharedS3Server, type S3Server } from '../../support/s3-server.js';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const FIXTURE = 'test/support/fixtures/toy-orchestrator';
const b64 = (value: unknown) => Buffer.from(typeof value === 'string' ? value : JSON.stringify(value)).toString('base64');

/**
 * A third party's orchestrator backend added by configuration alone: the toy backend (a TEST
 * STAND-IN whose runtime is simulated in the agent's memory, test/support/fixtures/toy-orchestrator)
 * has its control-plane half loaded with `drivers:`, its cluster API with `plugins:` and its agent
 * half with `hangar agent --driver`; nothing else names it. Through HTTP only: its clusters form,
 * and instances, a secret, a service of its bundle format and a load balancer run on them the way
 * they run on a swarm, each plugin asking the backend what it needs to know.
 */
describeEachDialect('a backend added by configuration: the toy backend, through HTTP', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  let manager: string;
  let worker: string;
  let clusterId: string;
  let s3: S3Server | undefined;
  let work: string | undefined;
  const api = (method: string, path: string, body?: unknown) => t.request(method, path, { body, headers: bearer(admin.token) });
  const ok = async (method: string, path: string, body?: unknown, status = 200) => {
    const res = await api(method, path, body);
    expect(res.status, `${method} ${path}: ${res.text}`).to.equal(status);
    return res.json.data;
  };
  const until = (what: string, path: string, done: (data: any) => boolean) =>
    waitFor(async () => {
      const res = await api('GET', path);
      return res.status === 200 && done(res.json.data) ? res.json.data : null;
    }, { timeoutMs: 30_000, what });
  const journal = async () => (await t.hangar.services.clusters.callOn((await t.hangar.services.clusters.clusters.get(clusterId))!, ToyJournal, {})).calls;

  before(async function () {
    this.timeout(90_000);
    t = await startHangar(dialect, {
      plugins: ['system', 'iam', 'nodes', 'agent-internal', 'secrets', 'compute', 'services', 'gateway', 'cleanup', 'volumes', 'backups', `${FIXTURE}/plugin.ts`],
      overrides: { drivers: ['swarm', 'k8s', `${FIXTURE}/backend.ts`], nodes: { heartbeat_interval_seconds: 1 } },
    });
    admin = await bootstrapAdmin(t);
    const join = async () => {
      const token = await ok('POST', '/v1/nodes/token', {}, 201);
      const nodeId = await joinedNodeId(spawnAgent({ join: { token: token.token, api: t.url }, extraArgs: ['--driver', `${FIXTURE}/driver.ts`] }), 30_000);
      await until(`node ${nodeId} to be ready`, `/v1/nodes/${nodeId}`, (n) => n.status === 'ready');
      return nodeId;
    };
    [manager, worker] = await Promise.all([join(), join()]);
  });

  after(async function () {
    this.timeout(30_000);
    await cleanupAgents();
    await t?.stop();
    if (s3) releaseSharedS3Server();
    if (work) rmSync(work, { recursive: true, force: true });
  });

  it('is a backend like the built-in ones: its cluster API, its bundle field and its nodes’ fact are in the API', async () => {
    expect(t.hangar.services.clusters.backendNames()).to.deep.equal(['swarm', 'k8s', 'toy']);
    const doc = (await api('GET', '/v1/openapi.json')).json;
    expect(Object.keys(doc.paths)).to.include.members(['/v1/toy/clusters', '/v1/toy/clusters/{id}', '/v1/toy/clusters/{id}/members', '/v1/toy/clusters/{id}/members/{nodeId}', '/v1/toy/clusters/{id}/lb']);
    expect(doc.paths['/v1/services'].post.requestBody.content['application/json'].schema.properties).to.include.keys('swarm_id', 'compose_file', 'cluster_id', 'manifest', 'toy_bundle');
    expect((await ok('GET', `/v1/nodes/${manager}`)).toy).to.deep.equal({ present: true, runtime: 'simulated' });
  });

  it('forms a cluster: the first member makes it and manages it, the next one is admitted; members as its manager reports them', async function () {
    this.timeout(60_000);
    const created = await ok('POST', '/v1/toy/clusters', { name: 'toybox' }, 201);
    clusterId = created.id;
    expect(created).to.include({ name: 'toybox', status: 'empty' });
    expect(clusterId).to.match(/^cluster-/);
    // No manager yet: work on it is refused, naming how to get one.
    const early = await api('POST', '/v1/compute/instances', { name: 'early', cluster_id: 'toybox', image: 'toy/web:1' });
    expect(early.status).to.equal(409);
    expect(early.json.message).to.equal(`Toy cluster toybox has no manager yet: join a node to it first (POST /v1/toy/clusters/${clusterId}/members)`);
    await ok('POST', `/v1/toy/clusters/${clusterId}/members`, { node_id: manager }, 202);
    await until('the toy cluster to be active', `/v1/toy/clusters/${clusterId}`, (c) => c.status === 'active');
    await ok('POST', `/v1/toy/clusters/${clusterId}/members`, { node_id: worker }, 202);
    await until('the worker to be active', `/v1/toy/clusters/${clusterId}`, (c) => c.members.length === 2 && c.members.every((m: { status: string }) => m.status === 'active'));
    const members = await api('GET', `/v1/toy/clusters/${clusterId}/members`);
    expect(members.json.data.map((m: { node_id: string; role: string; runtime_node_id: string; state: string }) => [m.node_id, m.role, m.runtime_node_id, m.state])).to.deep.equal([
      [manager, 'manager', 'toy-node-1', 'ready'],
      [worker, 'worker', `toy-${worker}`, 'ready'],
    ]);
    expect((await api('POST', `/v1/toy/clusters/${clusterId}/members`, { node_id: worker })).json.message).to.equal(`Node ${worker} is already a member of toy cluster toybox`);
    // A node that is a member cannot be deleted without force, and the 409 names how to take it out.
    const busy = await api('DELETE', `/v1/nodes/${worker}`);
    expect(busy.status).to.equal(409);
    expect(busy.json.message).to.contain(`is a member of toy cluster toybox (${clusterId}): remove it from the toy cluster first (DELETE /v1/toy/clusters/${clusterId}/members/${worker})`);
    expect(busy.json.details).to.deep.equal([{ cluster_id: clusterId, role: 'worker' }]);
  });

  it('runs an instance on it, named by cluster_id, with the backend’s policies and the members’ runtime ids', async function () {
    this.timeout(30_000);
    const created = await ok('POST', '/v1/compute/instances', { name: 'hello', cluster_id: 'toybox', image: 'toy/web:1', replicas: 2, ports: ['8080:80'] }, 202);
    expect(created).to.include({ cluster_id: clusterId }).and.not.to.have.property('swarm_id');
    const running = await until('the instance to run', `/v1/compute/instances/${created.id}`, (i) => i.status === 'running');
    expect(running.running).to.equal(2);
    const deploy = (await journal()).find((c) => c.method === 'deployWorkload' && c.name === 'inst-hello')!;
    expect(deploy.spec).to.include({ image: 'toy/web:1', replicas: 2, resource_id: created.id });
    expect(deploy.context).to.deep.equal({ cluster_nodes: { [manager]: 'toy-node-1', [worker]: `toy-${worker}` }, settings: { toy_policy: 'simulated' } });
    const listed = await ok('GET', `/v1/compute/instances?cluster_id=toybox`);
    expect(listed.map((i: { id: string }) => i.id)).to.deep.equal([created.id]);
  });

  it('keeps a secret as the backend says (versioned, by cluster_id), and deploys a service of its bundle format that uses it; a rotation redeploys it', async function () {
    this.timeout(30_000);
    const secret = await ok('POST', '/v1/secrets', { name: 'db', cluster_id: 'toybox', data: b64('s3cret') }, 201);
    expect(secret).to.include({ cluster_id: clusterId, swarm_id: null, namespace: null, version: 1, runtime_name: 'db-v1' });
    const namespaced = await api('POST', '/v1/secrets', { name: 'other', cluster_id: 'toybox', namespace: 'default', data: b64('x') });
    expect([namespaced.status, namespaced.json.message]).to.deep.equal([400, 'Validation failed: body.namespace applies to Kubernetes clusters only (those that keep secrets and configs in place)']);

    const bundle = { parts: { web: { image: 'toy/web:2', replicas: 3, route: { port: 80 }, secrets: ['db'] }, worker: { image: 'toy/worker:1' } } };
    const wrong = await api('POST', '/v1/services', { name: 'shop', cluster_id: 'toybox', manifest: b64('apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n') });
    expect([wrong.status, wrong.json.message]).to.deep.equal([400, 'Validation failed: body.manifest does not fit toy cluster toybox: its services are toy_bundle']);
    const missing = await api('POST', '/v1/services', { name: 'shop', cluster_id: 'toybox' });
    expect([missing.status, missing.json.message]).to.deep.equal([400, 'Validation failed: body.toy_bundle is required']);
    const broken = await api('POST', '/v1/services', { name: 'shop', cluster_id: 'toybox', toy_bundle: b64('{"parts": {}}') });
    expect([broken.status, broken.json.message]).to.deep.equal([400, 'Validation failed: toy_bundle needs a non-empty parts map']);

    const service = await ok('POST', '/v1/services', { name: 'shop', cluster_id: 'toybox', toy_bundle: b64(bundle) }, 202);
    expect(service).to.include({ backend: 'toy', cluster_id: clusterId, toy_bundle: JSON.stringify(bundle) });
    const running = await until('the service to run', `/v1/services/${service.id}`, (s) => s.status === 'running');
    expect(running.replicas).to.deep.equal({ web: { desired: 3, running: 3 }, worker: { desired: 1, running: 1 } });
    expect(running.routes).to.deep.equal([{ service: 'web', domain: `web.shop.toybox.${t.hangar.services.clusters.settings.localDomain}`, port: 80 }]);
    expect(running.secret_refs).to.deep.equal([secret.id]);
    expect((await ok('GET', '/v1/secrets/db')).services).to.deep.equal(['shop']);

    const rotated = await ok('PUT', '/v1/secrets/db', { data: b64('n3w') });
    expect(rotated).to.include({ version: 2, runtime_name: 'db-v2' });
    expect(rotated.redeployed).to.deep.equal(['shop']);
    const deploys = (await journal()).filter((c) => c.method === 'deployBundle' && c.name === 'hangar-shop');
    expect(deploys.map((c) => c.objects)).to.deep.equal([[{ kind: 'secret', key: 'db', name: 'db-v1' }], [{ kind: 'secret', key: 'db', name: 'db-v2' }]]);
    expect((await journal()).filter((c) => c.method.endsWith('Object')).map((c) => `${c.method} ${c.name}`)).to.deep.equal(['createObject secret/db-v1', 'createObject secret/db-v2', 'removeObject secret/db-v1']);
  });

  it('routes the instance’s and the service’s domains through its load balancer, at the backend’s addresses', async function () {
    this.timeout(30_000);
    const lb = await ok('POST', `/v1/toy/clusters/${clusterId}/lb`, undefined, 202);
    expect(lb).to.include({ cluster_id: clusterId, image: 'toy/balancer:1' });
    const served = await until('the balancer to run with both routes', `/v1/loadbalancers/${lb.id}`, (b) => b.status === 'running' && b.routes.length === 2);
    const domain = t.hangar.services.clusters.settings.localDomain;
    expect(served.routes.map((r: { domain: string; service: string; port: number }) => [r.domain, r.service, r.port])).to.deep.equal([
      [`hello.toybox.${domain}`, 'inst-hello', 80],
      [`web.shop.toybox.${domain}`, 'web.hangar-shop.toy', 80],
    ]);
    const gateway = await ok('GET', '/v1/gateway');
    expect(gateway.routes.every((r: { cluster_id?: string; swarm_id?: string }) => r.cluster_id === clusterId && r.swarm_id === undefined)).to.equal(true);
    expect((await api('GET', `/v1/toy/clusters/${clusterId}`)).json.data.load_balancer).to.include({ id: lb.id, status: 'running' });
  });

  it('refuses a backup’s pre command in a workload of a backend whose driver runs no commands in containers (409, as on Kubernetes), recording nothing', async function () {
    this.timeout(S3_START_TIMEOUT_MS);
    const available = s3Availability();
    requireService(this, available.ok, available.why);
    s3 = await sharedS3Server();
    const bucket = await s3.bucket(`toy-${dialect.name.slice(0, 2)}-${Date.now().toString(36)}`);
    const target = await ok('POST', '/v1/backups/targets', { name: 'toy-offsite', endpoint: s3.endpoint, bucket: bucket.name, access_key_id: s3.credentials.accessKeyId, secret_access_key: s3.credentials.secretAccessKey }, 201);
    work = mkdtempSync(path.join(os.tmpdir(), 'hangar-toy-backup-'));
    const volume = await ok('POST', '/v1/volumes', { name: 'toy-data', node_id: manager, folder: work, type: 'local' }, 202);
    await until('the volume to be ready', `/v1/volumes/${volume.id}`, (v) => v.status === 'ready');
    const refused = await api('POST', `/v1/volumes/${volume.id}/backups`, { target_id: target.id, pre: { workload: 'hello', command: ['true'] } });
    expect(refused.status, refused.text).to.equal(409);
    expect(refused.json.message).to.equal('instance hello runs on toy cluster toybox, where hangar does not run commands in containers yet (pre and post commands run on swarms only)');
    expect(await ok('GET', `/v1/volumes/${volume.id}/backups`)).to.deep.equal([]);
  });

  it('refuses to delete the cluster while it runs workloads, naming them; a member leaves; forced, everything goes', async function () {
    this.timeout(60_000);
    const busy = await api('DELETE', `/v1/toy/clusters/${clusterId}`);
    expect(busy.status).to.equal(409);
    expect(busy.json.message).to.match(/^Toy cluster toybox still runs workloads: .*instance hello/);
    await ok('DELETE', `/v1/toy/clusters/${clusterId}/members/${worker}`, undefined, 202);
    await until('the worker to have left', `/v1/toy/clusters/${clusterId}`, (c) => c.members.length === 1);
    expect((await journal()).filter((c) => c.method === 'release').map((c) => c.name)).to.deep.equal([`toy-${worker}`]);
    await ok('DELETE', `/v1/toy/clusters/${clusterId}?force=true`, undefined, 202);
    await waitFor(async () => (await api('GET', `/v1/toy/clusters/${clusterId}`)).status === 404, { timeoutMs: 30_000, what: 'the cluster to be gone' });
    expect((await ok('GET', '/v1/compute/instances')).length).to.equal(0);
    expect((await ok('GET', '/v1/services')).length).to.equal(0);
    expect((await ok('GET', '/v1/secrets')).length).to.equal(0);
  });

  it('force-cleans a cluster of its backend through cleanup (by name), like a swarm', async function () {
    this.timeout(30_000);
    const stuck = await ok('POST', '/v1/toy/clusters', { name: 'stuck' }, 201);
    await ok('POST', `/v1/toy/clusters/${stuck.id}/members`, { node_id: worker }, 202);
    await until('the second cluster to be active', `/v1/toy/clusters/${stuck.id}`, (c) => c.status === 'active');
    expect(await ok('POST', '/v1/cleanup/cluster/stuck')).to.deep.equal({ resource_type: 'cluster', resource_id: 'stuck', removed: true });
    expect((await api('GET', `/v1/toy/clusters/${stuck.id}`)).status).to.equal(404);
    expect((await api('POST', '/v1/cleanup/cluster/stuck')).status).to.equal(404);
  });
});

describe('orchestrator drivers by configuration: what start-up refuses', function () {
  this.timeout(60_000);
  after(cleanupAgents);

  describeEachDialect('the control plane', (dialect) => {
    it('stops when an orchestrator driver’s create() answers no backend, naming the module and what is missing', async () => {
      const start = (drivers: string[]) => Hangar.start({ config: dialect.config(undefined, { plugins: ['system'], drivers }), catalogue: builtinCatalogue }).catch((err: Error) => err);
      const half = await start([`${FIXTURE}/not-a-backend.ts`]);
      expect(half).to.be.instanceOf(ConfigError);
      expect((half as Error).message).to.equal(
        `drivers: ${FIXTURE}/not-a-backend.ts is an orchestrator driver, but its create() did not answer a backend (defineBackend): componentAddress(): a function; settings(): a function`,
      );
    });

    it('stops when a cluster API’s backend is not loaded, naming it', async () => {
      const err = await Hangar.start({ config: dialect.config(undefined, { plugins: ['system', 'iam', 'nodes', 'swarms'], drivers: ['ssh'] }), catalogue: builtinCatalogue }).catch((e: Error) => e);
      expect(err).to.be.instanceOf(ConfigError);
      expect((err as Error).message).to.equal('a loaded plugin serves the clusters of the orchestrator backend swarm, which is not loaded: add swarm to drivers: (loaded: none)');
    });
  });

  it('an agent refuses to start with a driver module it cannot load, or one that does not implement the driver interfaces', async () => {
    const missing = spawnAgent({ extraArgs: ['--driver', `${FIXTURE}/nowhere.ts`] });
    expect((await waitForExit(missing, 30_000)).code, missing.output()).to.equal(2);
    expect(missing.output()).to.include(`hangar agent: cannot load driver module ${FIXTURE}/nowhere.ts:`);
    const partial = spawnAgent({ extraArgs: ['--driver', `${FIXTURE}/incomplete-driver.ts`] });
    expect((await waitForExit(partial, 30_000)).code, partial.output()).to.equal(2);
    expect(partial.output()).to.include(`hangar agent: driver module ${FIXTURE}/incomplete-driver.ts (backend toy) does not implement removeWorkload, scanUnmanaged`);
    const notADriver = spawnAgent({ extraArgs: ['--driver', `${FIXTURE}/backend.ts`] });
    expect((await waitForExit(notADriver, 30_000)).code, notADriver.output()).to.equal(2);
    expect(notADriver.output()).to.include(`hangar agent: driver module ${FIXTURE}/backend.ts is not an agent driver: backend: a lower-case name (a-z, 0-9, -; up to 32); kinds: a list of task kinds (its membership calls)`);
  });
});
