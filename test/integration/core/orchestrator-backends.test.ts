import { expect } from 'chai';
import { Hangar } from '../../../core/app.js';
import { ConfigError } from '../../../core/errors.js';
import { newId } from '../../../core/ids.js';
import { DeployWorkload, RemoveWorkload } from '../../../core/orchestrator.js';
import { builtinCatalogue } from '../../../cli/catalogue.js';
import { ToyInit, ToyJournal } from '../../support/fixtures/toy-orchestrator/calls.js';
import { cleanupAgents, joinedNodeId, spawnAgent, waitFor, waitForExit } from '../../support/agents.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, type Credentials } from '../../support/identity.js';

const FIXTURE = 'test/support/fixtures/toy-orchestrator';

/**
 * A third-party orchestrator backend added by configuration alone: the toy backend (a TEST
 * STAND-IN whose runtime is simulated in the agent's memory, test/support/fixtures/toy-orchestrator)
 * has its control-plane half loaded with `drivers:` and its agent half with `hangar agent --driver`,
 * no plugin or core table edited. Calls on a cluster of that backend go the same way as a swarm's:
 * clusters → typed task → the agent's lane → the driver.
 */
describeEachDialect('an orchestrator backend added by configuration (drivers: and hangar agent --driver)', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  let nodeId: string;

  before(async function () {
    this.timeout(60_000);
    t = await startHangar(dialect, { plugins: ['system', 'iam', 'nodes', 'agent-internal'], overrides: { drivers: ['swarm', 'k8s', `${FIXTURE}/backend.ts`] } });
    admin = await bootstrapAdmin(t);
    const token = await t.request('POST', '/v1/nodes/token', { headers: bearer(admin.token), body: {} });
    expect(token.status, token.text).to.equal(201);
    const agent = spawnAgent({ join: { token: token.json.data.token, api: t.url }, extraArgs: ['--driver', `${FIXTURE}/driver.ts`] });
    nodeId = await joinedNodeId(agent, 30_000);
    await waitFor(async () => (await t.request('GET', `/v1/nodes/${nodeId}`, { headers: bearer(admin.token) })).json.data?.status === 'ready', {
      timeoutMs: 30_000,
      what: `node ${nodeId} to be ready`,
    });
  });

  after(async function () {
    this.timeout(30_000);
    await cleanupAgents();
    await t?.stop();
  });

  it('registers the backend beside the built-in one, and the agent advertises its driver and runs its own calls', async () => {
    const clusters = t.hangar.services.clusters;
    expect(clusters.backendNames()).to.deep.equal(['swarm', 'k8s', 'toy']);
    expect(t.hangar.services.drivers.names()).to.deep.equal(['swarm', 'k8s', 'toy']);
    const capabilities = await t.hangar.services.tasks.capabilities(nodeId);
    expect(capabilities?.backends).to.deep.equal(['swarm', 'k8s', 'toy']);
    expect(capabilities?.kinds).to.include.members(['toy.init', 'toy.journal']);
    // Its membership call, queued by the control plane and run by the agent's toy driver.
    expect(await clusters.call(nodeId, ToyInit, {}, { backend: 'toy' })).to.deep.equal({ cluster_id: 'toy-cluster', runtime_node_id: 'toy-node-1' });
  });

  it('deploys and removes a workload on a cluster of that backend through clusters.callOn, with the backend’s policies and the members’ runtime ids', async () => {
    const clusters = t.hangar.services.clusters;
    const now = new Date().toISOString();
    // What the backend's own API plugin would do once its cluster formed (the k8s plugin does it for Kubernetes).
    const clusterId = newId('cluster');
    await clusters.clusters.insert({ id: clusterId, name: 'toybox', backend: 'toy', status: 'active', manager_node_id: nodeId, runtime_id: 'toy-cluster', error: null, created_at: now, updated_at: now });
    await clusters.members.insert({ id: newId('member'), cluster_id: clusterId, node_id: nodeId, role: 'manager', status: 'active', runtime_node_id: 'toy-node-1', advertise_address: null, error: null, created_at: now, updated_at: now });
    const cluster = await clusters.requireTarget({ cluster_id: 'toybox' });
    expect(await clusters.placement(cluster.id), 'a cluster of another backend than swarm is named by cluster_id').to.deep.equal({ cluster_id: clusterId });

    const spec = { name: 'inst-hello', role: 'instance' as const, resource_id: 'inst-1', image: 'example/hello:1', replicas: 2, placement: { node_ids: [nodeId] } };
    const state = await clusters.callOn(cluster, DeployWorkload, { spec });
    expect(state.running).to.equal(2);
    expect(state.tasks.map((task) => task.runtime_node_id)).to.deep.equal(['toy-node-1', 'toy-node-1']);
    expect(await clusters.callOn(cluster, RemoveWorkload, { name: 'inst-hello' })).to.deep.equal({ removed: true });

    const { calls } = await clusters.callOn(cluster, ToyJournal, {});
    expect(calls.map((c) => `${c.method} ${c.name ?? ''}`.trim())).to.deep.equal(['init', 'deployWorkload inst-hello', 'removeWorkload inst-hello']);
    expect(calls[1]!.spec).to.deep.equal(spec);
    expect(calls[1]!.context).to.deep.equal({ cluster_nodes: { [nodeId]: 'toy-node-1' }, settings: { toy_policy: 'simulated' } });
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
