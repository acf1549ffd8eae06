import { expect } from 'chai';
import { cleanupAgents, FAST_NODES, NODE_PLUGINS, joinedNodeId, spawnAgent, waitFor } from '../../support/agents.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, type Credentials } from '../../support/identity.js';

const SCRAPE_TOKEN = 'scrape-idle-polls-0123456789abcdef0123456789';

describeEachDialect('nodes: an idle agent’s long-poll re-polls cost no query (real agent)', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  let nodeId: string;

  before(async function () {
    this.timeout(30_000);
    t = await startHangar(dialect, {
      plugins: [...NODE_PLUGINS, 'metrics'],
      // The agent re-polls every second when nothing is queued.
      overrides: { ...FAST_NODES, tasks: { ...FAST_NODES.tasks, poll_wait_seconds: 1, lease_seconds: 30 }, metrics: { scrape_token: SCRAPE_TOKEN } },
    });
    admin = await bootstrapAdmin(t);
    const token = (await t.request('POST', '/v1/nodes/token', { body: {}, headers: bearer(admin.token) })).json.data.token as string;
    nodeId = await joinedNodeId(spawnAgent({ join: { token, api: t.url } }));
  });
  after(async function () {
    this.timeout(30_000);
    await cleanupAgents();
    await t?.stop();
  });

  const looks = async () => {
    const res = await t.request('GET', '/metrics', { headers: bearer(SCRAPE_TOKEN) });
    expect(res.status, res.text).to.equal(200);
    const count = (store: string) => Number(new RegExp(`^hangar_agent_poll_looks_total\\{store="${store}"\\} (\\d+)`, 'm').exec(res.text)?.[1] ?? 0);
    return { queried: count('queried'), idle: count('known_idle') };
  };

  it('answers the re-polls of an empty queue from memory, and a task queued meanwhile still reaches the agent at once', async function () {
    this.timeout(30_000);
    const before = await waitFor(async () => ((await looks()).idle >= 1 ? looks() : null), { timeoutMs: 10_000, what: 'a re-poll answered from memory' });
    await new Promise((r) => setTimeout(r, 3000));
    const idle = await looks();
    // ~3 re-polls in 3 s, and none of them asked the store.
    expect(idle.idle - before.idle, JSON.stringify({ before, idle })).to.be.at.least(2);
    expect(idle.queried, JSON.stringify({ before, idle })).to.equal(before.queried);

    // A task queued now wakes the waiting poll, which looks in the store and hands it over.
    const started = Date.now();
    const queued = await t.request('POST', `/v1/nodes/${nodeId}/logs?lines=1`, { headers: bearer(admin.token) });
    expect(queued.status, queued.text).to.equal(202);
    const taskId = queued.json.data.task_id as string;
    await waitFor(
      async () => {
        const res = await t.request('GET', `/v1/nodes/${nodeId}/logs/${taskId}`, { headers: bearer(admin.token) });
        return res.json.data.status === 'completed';
      },
      { timeoutMs: 5000, intervalMs: 50, what: 'the log fetch to complete' },
    );
    expect(Date.now() - started, 'delivered by the waiting long-poll').to.be.lessThan(2000);
    expect((await looks()).queried).to.be.greaterThan(idle.queried);
  });
});
