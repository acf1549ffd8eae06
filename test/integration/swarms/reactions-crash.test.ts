import { expect } from 'chai';
import path from 'node:path';
import { httpRequest, type HttpResponse } from '../../../core/http/client.js';
import { answerTasks, FakeAgent, waitFor } from '../../support/agents.js';
import { nodeWithAgent, serveControlPlane, type ControlPlane } from '../../support/control-plane.js';
import { describeEachDialect, TEST_MASTER_KEY } from '../../support/dialects.js';
import { bearer, bootstrapAdmin, type Credentials } from '../../support/identity.js';

const ENV = {
  HANGAR_PLUGINS: 'system,iam,nodes,agent-internal,swarms,volumes',
  HANGAR_SWARMS__ADVERTISE: 'address',
  // A control plane that died leaves its operations' leases to run out: 3 s here.
  HANGAR_CLUSTERS__OP_LEASE_SECONDS: '3',
  HANGAR_CLUSTERS__CALL_TIMEOUT_SECONDS: '120',
  HANGAR_CLUSTERS__PICKUP_TIMEOUT_SECONDS: '120',
};

type Api = (method: string, p: string, body?: unknown) => Promise<HttpResponse<any>>;

/**
 * Reactions to membership changes (core/reactions.ts) are kept with the change and run under an
 * operation lease: a control plane killed (SIGKILL) or stopped between the change and the end of
 * its reaction leaves it to the next control plane on the store, which runs it again from its
 * start. Two `hangar serve` processes in turn on one store (the same PostgreSQL schema, or the
 * same SQLite file), the agents test doubles that answer the orchestrator calls as a swarm's
 * engines would (no engine, no NFS server).
 */
describeEachDialect('reactions to membership changes: run by the next control plane when the one that made the change died before they ran', (dialect) => {
  const planes: ControlPlane[] = [];
  const loops: Array<ReturnType<typeof answerTasks>> = [];
  let caPem = '';
  let admin: Credentials;

  async function serve(name: string, storage: { schema: string | null; dataDir: string }, env: Record<string, string> = {}): Promise<{ plane: ControlPlane; api: Api }> {
    const { schema, dataDir } = storage;
    const store: Record<string, string> = schema === null ? { HANGAR_DATABASE__SQLITE_FILE: path.join(dataDir, 'shared.db'), HANGAR_SECRETS__MASTER_KEY: TEST_MASTER_KEY } : {};
    const plane = await serveControlPlane({ name, schema, caPem: () => caPem, env: { ...ENV, ...store, ...env } });
    planes.push(plane);
    if (!caPem) {
      caPem = (await httpRequest(`${plane.url}/v1/ca`, { ca: false })).text;
      admin = await bootstrapAdmin(plane.client);
    }
    return { plane, api: (method, p, body) => plane.client.request(method, p, { body, headers: bearer(admin.token) }) };
  }


  /** The first control plane on a new store, with two nodes whose agents are the test: the manager's to be and a worker's. */
  async function firstPlane(name: string, env: Record<string, string> = {}) {
    const storage = dialect.freshStorage();
    const { plane: a, api: viaA } = await serve(name, storage, env);
    const manager = await nodeWithAgent(viaA, a, 'manager', '192.0.2.71');
    const worker = await nodeWithAgent(viaA, a, 'worker', '192.0.2.72');
    return { storage, a, viaA, manager, worker };
  }

  /** A node's agent talking to another control plane (the same certificate: the CA is the store's). */
  const agentOn = (plane: ControlPlane, node: { id: string; cert: { certificate: string; private_key: string } }) => FakeAgent.withCertificate(plane.client, node.id, node.cert.certificate, node.cert.private_key);

  /** The manager's engine: it forms the swarm, hands out join tokens, shares volumes' folders (an export entry, not served). */
  const managerAnswers = {
    init: () => ({ cluster_id: 'fake-swarm', runtime_node_id: 'rt-manager' }),
    joinTokens: () => ({ worker: 'SWMTKN-worker', manager: 'SWMTKN-manager', managers: ['192.0.2.71:2377'] }),
    members: () => ({ members: [] }),
    inspectWorkloads: () => ({ workloads: [] }),
    'host.volume-share': (input: { volume_id: string }) => ({ folder: '/srv/shared', export: { file: `/etc/exports.d/hangar-${input.volume_id}.exports`, served: false, reason: 'no NFS server in this test' } }),
    stageVolume: (input: { name: string }) => ({ name: input.name }),
  };

  async function swarmOf(api: Api, managerId: string): Promise<string> {
    const swarm = await api('POST', '/v1/swarms', { name: 'crash' });
    expect(swarm.status, swarm.text).to.be.oneOf([201, 202]);
    const id = swarm.json.data.id as string;
    expect((await api('POST', `/v1/swarms/${id}/join`, { node_id: managerId })).status).to.equal(202);
    await waitFor(async () => (await api('GET', `/v1/swarms/${id}`)).json.data?.status === 'active', { timeoutMs: 30_000, intervalMs: 200, what: 'the swarm active' });
    return id;
  }

  const joined = async (api: Api, swarmId: string, nodeId: string) =>
    waitFor(async () => ((await api('GET', `/v1/swarms/${swarmId}`)).json.data?.members as Array<{ node_id: string; status: string }>)?.some((m) => m.node_id === nodeId && m.status === 'active'), {
      timeoutMs: 30_000,
      intervalMs: 200,
      what: `node ${nodeId} active in the swarm`,
    });

  afterEach(async function () {
    this.timeout(30_000);
    for (const loop of loops.splice(0)) await loop.stop().catch(() => undefined);
    for (const plane of planes.splice(0)) plane.child.kill('SIGKILL');
    caPem = '';
  });

  it('killed while staging the swarm’s NFS volume on a node that just joined: the next control plane stages it there and exports the volume to that node', async function () {
    this.timeout(180_000);
    const { storage, a, viaA, manager, worker } = await firstPlane('react-a');
    loops.push(answerTasks(manager.agent, { answers: managerAnswers }));
    const swarmId = await swarmOf(viaA, manager.id);
    const created = await viaA('POST', '/v1/volumes', { name: 'shared', node_id: manager.id, folder: '/srv/shared' });
    expect(created.status, created.text).to.equal(202);
    const volumeId = created.json.data.id as string;
    const ready = await waitFor(
      async () => {
        const volume = (await viaA('GET', `/v1/volumes/${volumeId}`)).json.data;
        return volume?.status === 'ready' ? volume : null;
      },
      { timeoutMs: 30_000, intervalMs: 200, what: 'the volume ready' },
    );
    expect(ready.nfs_export.clients, 'the manager binds the folder: no client yet').to.deep.equal([]);

    // The worker's engine joins, and its agent then takes the next task (staging the volume) without ever answering it.
    const workerLoop: ReturnType<typeof answerTasks> = answerTasks(worker.agent, {
      answers: {
        join: () => {
          void workerLoop.stop();
          return { runtime_node_id: 'rt-worker' };
        },
      },
    });
    loops.push(workerLoop);
    expect((await viaA('POST', `/v1/swarms/${swarmId}/join`, { node_id: worker.id })).status).to.equal(202);
    await joined(viaA, swarmId, worker.id);
    await workerLoop.stop();
    const taken = await waitFor(
      async () => {
        const polled = ((await worker.agent.poll(2)).json?.data ?? []) as Array<{ kind: string; payload: { name?: string } }>;
        return polled.find((task) => task.kind === 'volume.stage') ?? null;
      },
      { timeoutMs: 20_000, what: 'the worker’s agent to take the staging of the volume' },
    );
    expect(taken.payload.name).to.equal('hangar-vol-shared');
    for (const loop of loops.splice(0)) await loop.stop();
    a.child.kill('SIGKILL');
    await new Promise((resolve) => a.child.once('exit', resolve));

    // The next control plane on the store; both agents answer it.
    const { plane: b, api: viaB } = await serve('react-b', storage);
    loops.push(answerTasks(agentOn(b, manager), { answers: managerAnswers }));
    const workerOnB = answerTasks(agentOn(b, worker), { answers: { stageVolume: (input: { name: string }) => ({ name: input.name }) } });
    loops.push(workerOnB);
    const exported = await waitFor(
      async () => {
        const volume = (await viaB('GET', `/v1/volumes/${volumeId}`)).json.data;
        return volume?.nfs_export?.clients?.includes('192.0.2.72') ? volume : null;
      },
      { timeoutMs: 60_000, intervalMs: 300, what: 'the volume exported to the worker by the next control plane' },
    );
    expect(exported.nfs_export.clients).to.deep.equal(['192.0.2.72']);
    expect(workerOnB.calls.filter((c) => c.method === 'stageVolume').map((c) => c.input.name)).to.include('hangar-vol-shared');
  });

  it('stopped before the swarm’s manager took the call to forget a node deleted by force: the next control plane asks the manager', async function () {
    this.timeout(180_000);
    const { storage, a, viaA, manager, worker } = await firstPlane('forget-a');
    const managerLoop = answerTasks(manager.agent, { answers: managerAnswers });
    loops.push(managerLoop, answerTasks(worker.agent, { answers: { join: () => ({ runtime_node_id: 'rt-worker' }) } }));
    const swarmId = await swarmOf(viaA, manager.id);
    expect((await viaA('POST', `/v1/swarms/${swarmId}/join`, { node_id: worker.id })).status).to.equal(202);
    await joined(viaA, swarmId, worker.id);

    // The manager's agent stops taking tasks; the worker is deleted by force, and the control plane stops (SIGTERM) while the call to forget it waits.
    await managerLoop.stop();
    const deleted = await viaA('DELETE', `/v1/nodes/${worker.id}?force=true`);
    expect(deleted.status, deleted.text).to.equal(202);
    expect(((await viaA('GET', `/v1/swarms/${swarmId}`)).json.data.members as Array<{ node_id: string }>).map((m) => m.node_id)).to.deep.equal([manager.id]);
    await new Promise((resolve) => setTimeout(resolve, 1000));
    for (const loop of loops.splice(0)) await loop.stop();
    a.child.kill('SIGTERM');
    await new Promise((resolve) => a.child.once('exit', resolve));
    expect(managerLoop.calls.map((c) => c.method)).not.to.include('removeMember');

    const { plane: b } = await serve('forget-b', storage);
    const managerOnB = answerTasks(agentOn(b, manager), { answers: { ...managerAnswers, removeMember: () => ({ removed: true }) } });
    loops.push(managerOnB);
    const forgot = await waitFor(async () => managerOnB.calls.find((c) => c.method === 'removeMember') ?? null, { timeoutMs: 60_000, intervalMs: 200, what: 'the manager asked to forget the deleted node' });
    expect(forgot.input).to.deep.equal({ runtime_node_id: 'rt-worker', force: true });
  });
  it('killed after answering 202 for a drain its cluster had not finished: the next control plane records the node drained once the swarm says so (its observation, not a reaction)', async function () {
    this.timeout(180_000);
    const fast = { HANGAR_CLUSTERS__AVAILABILITY_WAIT_SECONDS: '1', HANGAR_SWARMS__OBSERVE_INTERVAL_SECONDS: '1' };
    const { storage, a, viaA, manager, worker } = await firstPlane('drain-a', fast);
    // The manager's engine cordons at once and is still draining when the control plane dies (it never answers the drain: not stopped, not in `loops`).
    const draining = new Promise<never>(() => undefined);
    const managerLoop = answerTasks(manager.agent, { answers: { ...managerAnswers, setNodeAvailability: (input: { availability: string }) => (input.availability === 'drained' ? draining : undefined) } });
    const workerLoop = answerTasks(worker.agent, { answers: { join: () => ({ runtime_node_id: 'rt-worker' }) } });
    const swarmId = await swarmOf(viaA, manager.id);
    expect((await viaA('POST', `/v1/swarms/${swarmId}/join`, { node_id: worker.id })).status).to.equal(202);
    await joined(viaA, swarmId, worker.id);
    await workerLoop.stop();

    const drain = await viaA('POST', `/v1/nodes/${worker.id}/drain`);
    expect(drain.status, drain.text).to.equal(202);
    await waitFor(async () => managerLoop.calls.some((c) => c.method === 'setNodeAvailability' && c.input.availability === 'drained'), { timeoutMs: 20_000, what: 'the manager’s engine draining' });
    expect((await viaA('GET', `/v1/nodes/${worker.id}`)).json.data.availability).to.equal('cordoned');
    a.child.kill('SIGKILL');
    await new Promise((resolve) => a.child.once('exit', resolve));

    // The swarm drained the node: the next control plane's observation of its members records it.
    const { plane: b, api: viaB } = await serve('drain-b', storage, fast);
    const member = (runtimeNodeId: string, role: string, availability: string) => ({ runtime_node_id: runtimeNodeId, hostname: runtimeNodeId, address: null, role, state: 'ready', availability, leader: role === 'manager' });
    loops.push(answerTasks(agentOn(b, manager), { answers: { ...managerAnswers, members: () => ({ members: [member('rt-manager', 'manager', 'active'), member('rt-worker', 'worker', 'drain')] }) } }));
    await waitFor(async () => (await viaB('GET', `/v1/nodes/${worker.id}`)).json.data?.availability === 'drained', { timeoutMs: 60_000, intervalMs: 300, what: 'the worker recorded drained' });
    const events = (await viaB('GET', `/v1/nodes/events?node_id=${worker.id}`)).json.data as Array<{ kind: string; message: string }>;
    expect(events.map((e) => e.kind)).to.include('node_drained');
  });
  it('runs a reaction that failed again later: the manager was offline when a node was deleted by force, and is asked once it is back', async function () {
    this.timeout(120_000);
    const { a, viaA, manager, worker } = await firstPlane('retry-a', { HANGAR_CLUSTERS__CALL_TIMEOUT_SECONDS: '5' });
    const managerLoop = answerTasks(manager.agent, { answers: managerAnswers });
    loops.push(managerLoop, answerTasks(worker.agent, { answers: { join: () => ({ runtime_node_id: 'rt-worker' }) } }));
    const swarmId = await swarmOf(viaA, manager.id);
    expect((await viaA('POST', `/v1/swarms/${swarmId}/join`, { node_id: worker.id })).status).to.equal(202);
    await joined(viaA, swarmId, worker.id);

    // The manager's agent is offline when the worker is deleted: the call to forget it is not answered (5 s), the reaction fails.
    for (const loop of loops.splice(0)) await loop.stop();
    expect((await viaA('DELETE', `/v1/nodes/${worker.id}?force=true`)).status).to.equal(202);
    await waitFor(() => a.output().includes('removing a deleted node from the swarm’s list failed; it runs again'), { timeoutMs: 30_000, what: 'the first attempt to fail' });
    expect(managerLoop.calls.map((c) => c.method)).not.to.include('removeMember');

    // Back online: the next attempt (one lease length later) reaches it.
    const back = answerTasks(manager.agent, { answers: { ...managerAnswers, removeMember: () => ({ removed: true }) } });
    loops.push(back);
    const forgot = await waitFor(async () => back.calls.find((c) => c.method === 'removeMember') ?? null, { timeoutMs: 30_000, intervalMs: 200, what: 'the manager asked again to forget the deleted node' });
    expect(forgot.input).to.deep.equal({ runtime_node_id: 'rt-worker', force: true });
  });
});
