import { expect } from 'chai';
import { answerTasks, FakeAgent, waitFor } from '../../support/agents.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, type Credentials } from '../../support/identity.js';

const RUNTIME_NODE = 'fake-runtime-node';

/**
 * Swarm membership rules and what goes with a deleted swarm, against test doubles of agents (no
 * engine): one answers every orchestrator call as a manager would, the other never answers.
 */
describeEachDialect('swarm groups: forming, and what a deleted swarm takes with it', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  let manager: ReturnType<typeof answerTasks>;
  let answering: string;
  let silent: string;
  /** What the answering manager's unmanaged scan finds (services someone made with `docker service create`). */
  let unmanaged: unknown[] = [];

  const api = (method: string, p: string, body?: unknown) => t.request(method, p, { body, headers: bearer(admin.token) });
  const swarmOf = async (id: string) => (await api('GET', `/v1/swarms/${id}`)).json.data;
  let addresses = 10;
  /** A node (with an address members reach it at) whose agent heartbeats once (so it counts as having one) and then, unless scripted, stays quiet. */
  async function nodeWithAgent(name: string): Promise<{ id: string; agent: FakeAgent }> {
    const node = await api('POST', '/v1/nodes', { name, ip_address: `192.0.2.${addresses++}` });
    expect(node.status, node.text).to.equal(201);
    const agent = await FakeAgent.forNode(t, node.json.data.id);
    expect((await agent.heartbeat()).status).to.equal(200);
    return { id: node.json.data.id, agent };
  }

  before(async () => {
    t = await startHangar(dialect, {
      plugins: ['system', 'iam', 'nodes', 'agent-internal', 'swarms', 'secrets', 'tags'],
      overrides: { swarms: { call_timeout_seconds: 5, drain_wait_seconds: 0, observe_interval_seconds: 1 } },
    });
    admin = await bootstrapAdmin(t);
    const a = await nodeWithAgent('answers');
    answering = a.id;
    manager = answerTasks(a.agent, {
      answers: {
        init: () => ({ cluster_id: 'fake-cluster', runtime_node_id: RUNTIME_NODE }),
        members: () => ({ members: [{ runtime_node_id: RUNTIME_NODE, hostname: 'fake-host', address: null, role: 'manager', state: 'ready', availability: 'active', leader: true }] }),
        inspectWorkloads: () => ({ workloads: [] }),
        leave: () => ({ left: true }),
        scanUnmanaged: () => ({ resources: unmanaged }),
      },
    });
    silent = (await nodeWithAgent('silent')).id;
  });
  after(async () => {
    await manager?.stop();
    await t?.stop();
  });

  it('accepts a second join while the first node is still forming the swarm (202, it waits its turn); when the forming join fails (its agent never answers) the waiting one fails saying to join again', async function () {
    this.timeout(30_000);
    const swarm = (await api('POST', '/v1/swarms', { name: 'forming' })).json.data;
    expect((await api('POST', `/v1/swarms/${swarm.id}/join`, { node_id: silent })).status).to.equal(202);
    expect((await swarmOf(swarm.id)).status).to.equal('forming');
    const second = await api('POST', `/v1/swarms/${swarm.id}/join`, { node_id: answering });
    expect(second.status, second.text).to.equal(202);
    expect(second.json.data).to.include({ node_id: answering, role: 'worker', status: 'joining' });
    const failed = await waitFor(
      async () => {
        const s = await swarmOf(swarm.id);
        return s.status === 'failed' ? s : null;
      },
      { timeoutMs: 20_000, intervalMs: 250, what: 'the unanswered init to fail the swarm' },
    );
    expect(failed.error).to.match(/^initialising the swarm on node-[0-9a-z]+ failed: .*no result from the agent/);
    const waiting = await waitFor(
      async () => ((await swarmOf(swarm.id)).members as any[]).find((m) => m.node_id === answering && m.status === 'failed') ?? null,
      { timeoutMs: 10_000, intervalMs: 250, what: 'the waiting join to fail' },
    );
    expect(waiting.error).to.equal('joining failed: swarm forming has no manager to join (its first node did not initialise it); join this node again once the swarm is active');
    expect(manager.calls.map((c) => c.method)).not.to.include('init');
    expect(manager.calls.map((c) => c.method), 'the waiting node was asked nothing').not.to.include('join');
    // Gone with its records: the nodes are free for the next cases.
    expect((await api('DELETE', `/v1/swarms/${swarm.id}?force=true`)).status).to.be.oneOf([200, 202]);
    await waitFor(async () => (await api('GET', `/v1/swarms/${swarm.id}`)).status === 404, { timeoutMs: 20_000, intervalMs: 250, what: 'the failed swarm to go' });
  });

  it('three joins in a row are all accepted (202) and carried out in the order asked: the first forms the swarm, the next two join it', async function () {
    this.timeout(30_000);
    const order: string[] = [];
    const trio = [await nodeWithAgent('trio-1'), await nodeWithAgent('trio-2'), await nodeWithAgent('trio-3')];
    const scripts = trio.map(({ id, agent }, i) =>
      answerTasks(agent, {
        answers: {
          init: () => (order.push(`init ${id}`), { cluster_id: 'fake-trio', runtime_node_id: `rt-trio-${i}` }),
          joinTokens: () => ({ worker: 'SWMTKN-1-worker', manager: 'SWMTKN-1-manager', managers: ['192.0.2.1:2377'] }),
          join: () => (order.push(`join ${id}`), { runtime_node_id: `rt-trio-${i}` }),
          members: () => ({ members: [] }),
          inspectWorkloads: () => ({ workloads: [] }),
        },
      }),
    );
    try {
      const swarm = (await api('POST', '/v1/swarms', { name: 'trio' })).json.data;
      for (const { id } of trio) {
        const join = await api('POST', `/v1/swarms/${swarm.id}/join`, { node_id: id });
        expect(join.status, join.text).to.equal(202);
      }
      const done = await waitFor(
        async () => {
          const s = await swarmOf(swarm.id);
          return s.status === 'active' && s.members.length === 3 && s.members.every((m: any) => m.status === 'active') ? s : null;
        },
        { timeoutMs: 20_000, intervalMs: 250, what: 'all three nodes to be members' },
      );
      expect(done.manager.node_id).to.equal(trio[0]!.id);
      expect(order).to.deep.equal([`init ${trio[0]!.id}`, `join ${trio[1]!.id}`, `join ${trio[2]!.id}`]);
    } finally {
      for (const script of scripts) await script.stop();
    }
  });

  it('cordon, drain and uncordon of a member reach the swarm’s manager before hangar records them: 200 once the engine did it (a swarm’s drain is immediate: cordoned, then drained); a cordon the engine refuses is a 409 with its reason, the availability unchanged', async function () {
    this.timeout(30_000);
    const { id, agent } = await nodeWithAgent('scheduled');
    let refuse: string | undefined;
    const script = answerTasks(agent, {
      answers: {
        init: () => ({ cluster_id: 'fake-scheduled', runtime_node_id: 'rt-scheduled' }),
        members: () => ({ members: [] }),
        inspectWorkloads: () => ({ workloads: [] }),
        setNodeAvailability: (input) => ({ availability: input.availability }),
        leave: () => ({ left: true }),
      },
      refusals: { setNodeAvailability: () => refuse },
    });
    const node = async () => (await api('GET', `/v1/nodes/${id}`)).json.data;
    try {
      const swarm = (await api('POST', '/v1/swarms', { name: 'scheduled' })).json.data;
      expect((await api('POST', `/v1/swarms/${swarm.id}/join`, { node_id: id })).status).to.equal(202);
      await waitFor(async () => (await swarmOf(swarm.id)).status === 'active', { timeoutMs: 20_000, intervalMs: 250, what: 'the swarm formed' });

      const drained = await api('POST', `/v1/nodes/${id}/drain`);
      expect(drained.status, drained.text).to.equal(200);
      expect(drained.json.data).to.include({ availability: 'drained', status: 'drained' });
      const asked = () => script.calls.filter((c) => c.method === 'setNodeAvailability').map((c) => `${c.input.runtime_node_id} ${c.input.availability}`);
      expect(asked(), 'asked before the answer').to.deep.equal(['rt-scheduled cordoned', 'rt-scheduled drained']);
      const back = await api('POST', `/v1/nodes/${id}/uncordon`);
      expect(back.status, back.text).to.equal(200);
      expect(back.json.data.availability).to.equal('active');
      expect(asked().at(-1)).to.equal('rt-scheduled schedulable');

      refuse = 'node rt-scheduled is not found';
      const refused = await api('POST', `/v1/nodes/${id}/cordon`);
      expect(refused.status, refused.text).to.equal(409);
      expect(refused.json.message).to.equal(`cordoning node ${id} in swarm scheduled failed: node rt-scheduled is not found`);
      expect((await node()).availability).to.equal('active');
      const events = (await api('GET', `/v1/nodes/events?node_id=${id}`)).json.data as any[];
      expect(events.map((e) => e.kind)).to.include('node_availability_failed');
      refuse = undefined;
      expect((await api('DELETE', `/v1/swarms/${swarm.id}?force=true`)).status).to.be.oneOf([200, 202]);
      await waitFor(async () => (await api('GET', `/v1/swarms/${swarm.id}`)).status === 404, { timeoutMs: 20_000, intervalMs: 250, what: 'the swarm to go' });
    } finally {
      await script.stop();
    }
  });

  it('the engine’s node availability is the truth: a node hangar drained is drained when it forms a swarm, and a change made with docker (pause, active) is followed in hangar with a node event', async function () {
    this.timeout(90_000);
    const { id, agent } = await nodeWithAgent('observed');
    /** The engine's Availability of the node, as `docker node update --availability` sets it. */
    let held: 'active' | 'pause' | 'drain' = 'active';
    const engine = { schedulable: 'active', cordoned: 'pause', drained: 'drain' } as const;
    const script = answerTasks(agent, {
      answers: {
        init: () => ({ cluster_id: 'fake-observed', runtime_node_id: 'rt-observed' }),
        members: () => ({ members: [{ runtime_node_id: 'rt-observed', hostname: 'observed', address: null, role: 'manager', state: 'ready', availability: held, leader: true }] }),
        inspectWorkloads: () => ({ workloads: [] }),
        setNodeAvailability: (input) => ((held = engine[input.availability as keyof typeof engine]), { availability: input.availability }),
        leave: () => ({ left: true }),
      },
    });
    const node = async () => (await api('GET', `/v1/nodes/${id}`)).json.data;
    // An observation asks every active swarm in turn (the earlier cases' swarms whose doubles no longer answer take their timeout).
    const follows = (availability: string) => waitFor(async () => ((await node()).availability === availability ? true : null), { timeoutMs: 30_000, intervalMs: 250, what: `hangar to say ${availability}` });
    try {
      // In no cluster yet: recorded at once.
      expect((await api('POST', `/v1/nodes/${id}/drain`)).json.data.availability).to.equal('drained');
      const swarm = (await api('POST', '/v1/swarms', { name: 'observed' })).json.data;
      expect((await api('POST', `/v1/swarms/${swarm.id}/join`, { node_id: id })).status).to.equal(202);
      await waitFor(async () => (await swarmOf(swarm.id)).status === 'active', { timeoutMs: 20_000, intervalMs: 250, what: 'the swarm formed' });
      await waitFor(async () => (held === 'drain' ? true : null), { timeoutMs: 10_000, intervalMs: 100, what: 'the engine asked to drain the node' });
      expect(script.calls.filter((c) => c.method === 'setNodeAvailability').map((c) => `${c.input.runtime_node_id} ${c.input.availability}`)).to.deep.equal(['rt-observed drained']);
      expect((await node()).availability).to.equal('drained');

      held = 'pause';
      await follows('cordoned');
      held = 'active';
      await follows('active');
      const events = (await api('GET', `/v1/nodes/events?node_id=${id}`)).json.data as any[];
      expect(events.map((e) => e.kind)).to.include('swarm_availability_held');
      const observed = events.filter((e) => e.data?.observed).map((e) => `${e.kind} ${e.data.from}: ${e.message}`);
      expect(observed).to.include.members([
        'node_cordoned drained: availability set to cordoned: swarm observed has the node cordoned (changed outside hangar)',
        'node_uncordoned cordoned: availability set to active: swarm observed has the node schedulable (changed outside hangar)',
      ]);
      expect((await api('DELETE', `/v1/swarms/${swarm.id}?force=true`)).status).to.be.oneOf([200, 202]);
      await waitFor(async () => (await api('GET', `/v1/swarms/${swarm.id}`)).status === 404, { timeoutMs: 20_000, intervalMs: 250, what: 'the swarm to go' });
    } finally {
      await script.stop();
    }
  });

  it('joining a node whose agent is older than typed tasks is refused at once (409 saying to update the agent), not left to fail in the background', async () => {
    const node = await api('POST', '/v1/nodes', { name: 'old-agent' });
    const agent = await FakeAgent.forNode(t, node.json.data.id);
    expect((await agent.heartbeat({ agent_version: '0.1.0', capabilities: undefined })).status).to.equal(200);
    const swarm = (await api('POST', '/v1/swarms', { name: 'needs-new-agents' })).json.data;
    const join = await api('POST', `/v1/swarms/${swarm.id}/join`, { node_id: node.json.data.id });
    expect(join.status).to.equal(409);
    expect(join.json.message).to.match(new RegExp(`^Node ${node.json.data.id} cannot run this \\(swarm\\.init\\): its agent \\(version 0\\.1\\.0\\) is older than swarm\\.init needs .*: update the agent first$`));
    expect((await swarmOf(swarm.id)).members, 'nothing was recorded').to.deep.equal([]);
  });

  it('a deleted swarm takes its secrets and configs with it, and their tags and its own', async function () {
    this.timeout(30_000);
    const swarm = (await api('POST', '/v1/swarms', { name: 'doomed' })).json.data;
    expect((await api('POST', `/v1/swarms/${swarm.id}/join`, { node_id: answering })).status).to.equal(202);
    await waitFor(async () => (await swarmOf(swarm.id)).status === 'active', { timeoutMs: 10_000, intervalMs: 200, what: 'the swarm to be active' });
    const secret = await api('POST', '/v1/secrets', { name: 'db-password', swarm_id: swarm.id, data: Buffer.from('s3cret').toString('base64') });
    expect(secret.status, secret.text).to.equal(201);
    const config = await api('POST', '/v1/configs', { name: 'site', swarm_id: swarm.id, data: Buffer.from('x').toString('base64') });
    expect(config.status, config.text).to.equal(201);
    for (const [type, id] of [['secret', secret.json.data.id], ['config', config.json.data.id], ['swarm', swarm.id]]) {
      expect((await api('PUT', '/v1/tags', { resource_type: type, resource_id: id, key: 'team', value: 'payments' })).status).to.equal(200);
    }

    expect((await api('DELETE', `/v1/swarms/${swarm.id}`)).status).to.equal(202);
    await waitFor(async () => (await api('GET', `/v1/swarms/${swarm.id}`)).status === 404, { timeoutMs: 15_000, intervalMs: 200, what: 'the swarm to be gone' });
    expect((await api('GET', `/v1/secrets/${secret.json.data.id}`)).status).to.equal(404);
    expect((await api('GET', `/v1/configs/${config.json.data.id}`)).status).to.equal(404);
    await waitFor(async () => (await api('GET', '/v1/tags?key=team')).json.data.length === 0, { timeoutMs: 5000, what: 'the tags to go' });
    expect(manager.calls.map((c) => c.method)).to.include.members(['init', 'createObject', 'leave']);
  });

  it('deleting a swarm that runs services hangar did not create is refused (409 naming them); forced, it is deleted', async function () {
    this.timeout(30_000);
    const swarm = (await api('POST', '/v1/swarms', { name: 'hosting' })).json.data;
    expect((await api('POST', `/v1/swarms/${swarm.id}/join`, { node_id: answering })).status).to.equal(202);
    await waitFor(async () => (await swarmOf(swarm.id)).status === 'active', { timeoutMs: 10_000, intervalMs: 200, what: 'the swarm to be active' });
    unmanaged = [
      { kind: 'service', id: 'svc-by-hand-1', name: 'by-hand', image: 'nginx:1', stack: null, labels: {} },
      { kind: 'service', id: 'svc-by-hand-2', name: 'shop_web', image: 'shop:2', stack: 'shop', labels: { 'com.docker.stack.namespace': 'shop' } },
    ];
    try {
      const refused = await api('DELETE', `/v1/swarms/${swarm.id}`);
      expect(refused.status, refused.text).to.equal(409);
      expect(refused.json.message).to.equal('Swarm hosting runs workloads hangar did not create: service by-hand, service shop_web (deleting the swarm destroys them); remove them or pass force=true');
      expect(refused.json.details).to.deep.equal([
        { type: 'service', id: 'svc-by-hand-1', name: 'by-hand', managed: false },
        { type: 'service', id: 'svc-by-hand-2', name: 'shop_web', managed: false },
      ]);
      expect((await swarmOf(swarm.id)).status, 'nothing was started').to.equal('active');

      expect((await api('DELETE', `/v1/swarms/${swarm.id}?force=true`)).status).to.equal(202);
      await waitFor(async () => (await api('GET', `/v1/swarms/${swarm.id}`)).status === 404, { timeoutMs: 15_000, intervalMs: 200, what: 'the swarm to be gone' });
    } finally {
      unmanaged = [];
    }
  });

  it('deleting a node that manages a swarm is refused (409 naming the swarm) unless forced; forced, the swarm says it lost its manager, asks nothing of the gone node, and can be deleted', async function () {
    this.timeout(30_000);
    const { id: nodeId, agent } = await nodeWithAgent('doomed-manager');
    const script = answerTasks(agent, { answers: { init: () => ({ cluster_id: 'fake-cluster-2', runtime_node_id: 'fake-runtime-2' }), inspectWorkloads: () => ({ workloads: [] }) } });
    try {
      const swarm = (await api('POST', '/v1/swarms', { name: 'loses-manager' })).json.data;
      expect((await api('POST', `/v1/swarms/${swarm.id}/join`, { node_id: nodeId })).status).to.equal(202);
      await waitFor(async () => (await swarmOf(swarm.id)).status === 'active', { timeoutMs: 10_000, intervalMs: 200, what: 'the swarm to be active' });

      const refused = await api('DELETE', `/v1/nodes/${nodeId}`);
      expect(refused.status).to.equal(409);
      expect(refused.json.message).to.equal(
        `Node ${nodeId} manages swarm loses-manager (${swarm.id}): remove it from the swarm first (POST /v1/swarms/${swarm.id}/leave), or pass force=true to delete it anyway and leave the swarm without this manager`,
      );
      expect((await swarmOf(swarm.id)).manager.node_id, 'nothing changed').to.equal(nodeId);

      expect((await api('DELETE', `/v1/nodes/${nodeId}?force=true`)).status).to.equal(202);
      const orphaned = await swarmOf(swarm.id);
      expect(orphaned).to.include({ status: 'failed', manager: null });
      expect(orphaned.members).to.deep.equal([]);
      expect(orphaned.error).to.equal(`its manager, node ${nodeId}, was deleted; delete the swarm (force=true) to remove what hangar recorded of it, or join a node to start it anew`);
      const members = await api('GET', `/v1/swarms/${swarm.id}/members`);
      expect(members.status, 'answers at once, asking no agent').to.equal(200);
      expect(members.json.data).to.deep.equal([]);
      // Past an observation interval: nothing is queued for the deleted node.
      await new Promise((resolve) => setTimeout(resolve, 2500));
      expect(await t.hangar.services.tasks.countOpen(nodeId)).to.equal(0);
      expect((await api('DELETE', `/v1/swarms/${swarm.id}?force=true`)).status).to.equal(200);
      expect((await api('GET', `/v1/swarms/${swarm.id}`)).status).to.equal(404);
    } finally {
      await script.stop();
    }
  });
});
