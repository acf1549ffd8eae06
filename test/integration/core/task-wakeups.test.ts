import { expect } from 'chai';
import { FAST_NODES, FakeAgent, NODE_PLUGINS, waitFor } from '../../support/agents.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, type Credentials } from '../../support/identity.js';
import { hangarCli, storageEnv } from '../runner/support.js';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

// The agent side is played by the test (FakeAgent, a test double holding a certificate of the shared CA).
describeEachDialect('task wake-ups between two control planes on one store', (dialect) => {
  // Control planes share PostgreSQL only (on SQLite, a control plane's workers: test/integration/ha/workers.test.ts).
  if (dialect.name !== 'postgres') return;
  let a: TestHangar;
  let b: TestHangar;
  let admin: Credentials;
  const overrides = { ...FAST_NODES, tasks: { ...FAST_NODES.tasks, poll_wait_seconds: 20, lease_seconds: 30 } };

  before(async function () {
    this.timeout(30_000);
    const storage = dialect.freshStorage();
    a = await startHangar(dialect, { plugins: NODE_PLUGINS, overrides, storage });
    b = await startHangar(dialect, { plugins: NODE_PLUGINS, overrides, storage: { ...dialect.freshStorage(), schema: storage.schema } });
    admin = await bootstrapAdmin(a);
  });
  after(async () => {
    await b?.stop();
    await a?.stop();
  });

  /** The backends LISTENing on this schema's channels (whatever they are called). */
  const listening = `select pid from pg_stat_activity where query like 'listen %' and query like ?`;
  const listeners = async () => (await a.hangar.store.knex.raw(listening, [`%${a.hangar.store.schema}%`])).rows as Array<{ pid: number }>;

  /** Holds a long-poll on A, queues a task for the node through B's API, answers how long A's poll took and what it got. */
  async function queueOnBWhilePollingA(agent: FakeAgent, beforeQueue: () => Promise<void> = async () => undefined) {
    const started = Date.now();
    const polling = agent.poll(15);
    await sleep(300);
    await beforeQueue();
    const queued = await b.request('POST', `/v1/nodes/${agent.nodeId}/logs?lines=3`, { headers: bearer(admin.token) });
    expect(queued.status, queued.text).to.equal(202);
    const res = await polling;
    expect(res.status, res.text).to.equal(200);
    return { took: Date.now() - started, ids: (res.json.data as Array<{ task_id: string }>).map((task) => task.task_id), queued: queued.json.data.task_id as string };
  }

  it('a task queued through B wakes the long-poll held by A at once, also after A’s listening connection was killed', async function () {
    this.timeout(60_000);
    const created = await a.request('POST', '/v1/nodes', { body: { name: 'polled-on-a' }, headers: bearer(admin.token) });
    expect(created.status, created.text).to.equal(201);
    const agent = await FakeAgent.forNode(a, created.json.data.id);
    expect((await agent.poll(0)).json.data, 'the first poll since the start (answered anywhere in its wait)').to.deep.equal([]);

    const first = await queueOnBWhilePollingA(agent);
    expect(first.ids).to.deep.equal([first.queued]);
    expect(first.took, 'woken through NOTIFY, not by the 15 s deadline').to.be.lessThan(5000);

    // The database ends both control planes' listening connections (a restart, a failover, an idle timeout…).
    const before = (await listeners()).length;
    expect(before).to.be.at.least(2);
    await a.hangar.store.knex.raw(`select pg_terminate_backend(pid) from (${listening}) l`, [`%${a.hangar.store.schema}%`]);
    // A task queued while nobody listens: A's held poll hears of it when its listener is back.
    const missed = await queueOnBWhilePollingA(agent);
    expect(missed.ids).to.deep.equal([missed.queued]);
    expect(missed.took, 'woken once the listener reconnected, not by the 15 s deadline').to.be.lessThan(8000);
    await waitFor(async () => (await listeners()).length === before, { timeoutMs: 10_000, what: 'the listeners to reconnect' });
    expect(a.logs.join('')).to.contain('store notice listener lost; reconnecting');

    const after = await queueOnBWhilePollingA(agent);
    expect(after.ids).to.deep.equal([after.queued]);
    expect(after.took, 'woken through NOTIFY on the new connection').to.be.lessThan(5000);
  });

  it('an agent that goes back to the capabilities it had is recorded again, though another control plane wrote in between', async function () {
    this.timeout(20_000);
    const created = await a.request('POST', '/v1/nodes', { body: { name: 'capabilities' }, headers: bearer(admin.token) });
    expect(created.status, created.text).to.equal(201);
    const nodeId = created.json.data.id as string;
    const [throughA, throughB] = [await FakeAgent.forNode(a, nodeId), await FakeAgent.forNode(b, nodeId)];
    const recorded = async () => (await a.hangar.services.tasks.capabilities(nodeId))?.version;
    expect((await throughA.heartbeat()).status).to.equal(200);
    const current = await recorded();
    // The agent is replaced by an older one whose heartbeat reaches B, then updated again, heard by A.
    expect((await throughB.heartbeat({ agent_version: '0.9.0' })).status).to.equal(200);
    expect(await recorded()).to.equal('0.9.0');
    await waitFor(
      async () => {
        expect((await throughA.heartbeat()).status).to.equal(200);
        return (await recorded()) === current;
      },
      { timeoutMs: 5_000, intervalMs: 200, what: `A to record version ${current} again (it wrote it before B wrote 0.9.0)` },
    );
  });
});

describeEachDialect('task wake-ups from the runner’s tools to the control plane', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  let env: Record<string, string | undefined>;
  const overrides = { ...FAST_NODES, tasks: { ...FAST_NODES.tasks, poll_wait_seconds: 20, lease_seconds: 30 } };

  before(async function () {
    this.timeout(30_000);
    const storage = dialect.freshStorage();
    t = await startHangar(dialect, { plugins: NODE_PLUGINS, overrides, storage });
    env = storageEnv(dialect, storage);
    admin = await bootstrapAdmin(t);
  });
  after(() => t?.stop());

  it('a task a script queues (hangar terminal) reaches the agent polling the control plane at once, though its queue was known empty', async function () {
    this.timeout(60_000);
    const created = await t.request('POST', '/v1/nodes', { body: { name: 'polled-by-a-tool' }, headers: bearer(admin.token) });
    expect(created.status, created.text).to.equal(201);
    const nodeId = created.json.data.id as string;
    const agent = await FakeAgent.forNode(t, nodeId);
    // A poll that finds the queue empty: the control plane remembers it so and asks the store no more.
    expect((await agent.poll(1)).json.data).to.deep.equal([]);
    const polling = agent.poll(20);
    await sleep(300);
    const queued = await hangarCli(['terminal'], { env, input: `(await services.tasks.enqueue({ nodeId: '${nodeId}', kind: 'agent.logs', payload: { lines: 1 } })).id\n` });
    expect(queued.code, queued.stderr).to.equal(0);
    const taskId = queued.stdout.trim().replace(/'/g, '');
    const doneAt = Date.now();
    const res = await polling;
    expect(res.status, res.text).to.equal(200);
    expect((res.json.data as Array<{ task_id: string }>).map((task) => task.task_id)).to.deep.equal([taskId]);
    expect(Date.now() - doneAt, 'woken by the tool’s notice, not by the 20 s deadline').to.be.lessThan(3000);
  });
});
