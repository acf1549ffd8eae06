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

  const api = (method: string, p: string, body?: unknown) => t.request(method, p, { body, headers: bearer(admin.token) });
  const swarmOf = async (id: string) => (await api('GET', `/v1/swarms/${id}`)).json.data;
  /** A node whose agent heartbeats once (so it counts as having one) and then, unless scripted, stays quiet. */
  async function nodeWithAgent(name: string): Promise<{ id: string; agent: FakeAgent }> {
    const node = await api('POST', '/v1/nodes', { name });
    expect(node.status, node.text).to.equal(201);
    const agent = await FakeAgent.forNode(t, node.json.data.id);
    expect((await agent.heartbeat()).status).to.equal(200);
    return { id: node.json.data.id, agent };
  }

  before(async () => {
    t = await startHangar(dialect, {
      plugins: ['system', 'iam', 'nodes', 'agent-internal', 'swarms', 'secrets', 'tags'],
      overrides: { swarms: { call_timeout_seconds: 5, drain_wait_seconds: 0 } },
    });
    admin = await bootstrapAdmin(t);
    const a = await nodeWithAgent('answers');
    answering = a.id;
    manager = answerTasks(a.agent, {
      answers: {
        init: () => ({ cluster_id: 'fake-cluster', runtime_node_id: RUNTIME_NODE }),
        members: () => ({ members: [{ runtime_node_id: RUNTIME_NODE, hostname: 'fake-host', state: 'ready', availability: 'active', leader: true }] }),
        inspectWorkloads: () => ({ workloads: [] }),
        leave: () => ({ left: true }),
      },
    });
    silent = (await nodeWithAgent('silent')).id;
  });
  after(async () => {
    await manager?.stop();
    await t?.stop();
  });

  it('refuses a second join while the first node is still forming the swarm (409), and the forming join ends failed when its agent never answers', async function () {
    this.timeout(30_000);
    const swarm = (await api('POST', '/v1/swarms', { name: 'forming' })).json.data;
    expect((await api('POST', `/v1/swarms/${swarm.id}/join`, { node_id: silent })).status).to.equal(202);
    expect((await swarmOf(swarm.id)).status).to.equal('forming');
    const second = await api('POST', `/v1/swarms/${swarm.id}/join`, { node_id: answering });
    expect(second.status).to.equal(409);
    expect(second.json.message).to.equal('Swarm forming is still forming (its first node is initialising it); join more nodes once it is active');
    const failed = await waitFor(
      async () => {
        const s = await swarmOf(swarm.id);
        return s.status === 'failed' ? s : null;
      },
      { timeoutMs: 20_000, intervalMs: 250, what: 'the unanswered init to fail the swarm' },
    );
    expect(failed.error).to.match(/^initialising the swarm on node-[0-9a-z]+ failed: .*no result from the agent/);
    expect(manager.calls.map((c) => c.method)).not.to.include('init');
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
});
