import { expect } from 'chai';
import { BUNDLE_PLACEMENT_VERSION, DeployBundle, DeployWorkload } from '../../../core/orchestrator.js';
import { HttpError } from '../../../core/errors.js';
import { FAST_NODES, FakeAgent, NODE_PLUGINS, waitFor } from '../../support/agents.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, createUser, type Credentials } from '../../support/identity.js';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

// The agent side is played by the test itself (FakeAgent, a test double): it leases tasks and
// reports what it likes, so nothing is ever run on this machine.
describeEachDialect('nodes: the task queue over the agent API, with a test double standing in for the agent', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  let auditor: Credentials;

  const api = (method: string, pathAndQuery: string, body?: unknown) => t.request(method, pathAndQuery, { body, headers: bearer(admin.token) });
  const createNode = async (name: string) => {
    const res = await api('POST', '/v1/nodes', { name });
    expect(res.status, res.text).to.equal(201);
    return res.json.data.id as string;
  };
  const getNode = async (id: string) => (await api('GET', `/v1/nodes/${id}`)).json.data;

  before(async function () {
    this.timeout(30_000);
    t = await startHangar(dialect, { plugins: NODE_PLUGINS, overrides: FAST_NODES });
    admin = await bootstrapAdmin(t);
    auditor = await createUser(t, admin, { username: 'audrey', role: 'auditor', email: 'audrey@example.test' });
  });
  after(() => t?.stop());

  it('long-poll: answers the moment a task is queued, well before the wait is over', async function () {
    this.timeout(20_000);
    const nodeId = await createNode('poller');
    const agent = await FakeAgent.forNode(t, nodeId);
    expect((await agent.poll(0)).json.data, 'the first poll since the start (answered anywhere in its wait)').to.deep.equal([]);
    const started = Date.now();
    const polling = agent.poll(5);
    await sleep(300);
    const queued = await api('POST', `/v1/nodes/${nodeId}/logs?lines=7`);
    expect(queued.status).to.equal(202);
    const res = await polling;
    const took = Date.now() - started;
    expect(res.status, res.text).to.equal(200);
    expect(took, 'woken by the enqueue, not by the 5 s deadline').to.be.lessThan(2000);
    expect(res.json.data).to.have.length(1);
    const [task] = res.json.data;
    expect(task).to.include({ task_id: queued.json.data.task_id, kind: 'agent.logs', attempt: 1 });
    expect(task.payload).to.deep.equal({ lines: 7 });
    const leaseLeft = Date.parse(task.lease_expires_at) - Date.now();
    expect(leaseLeft, 'lease_seconds = 2').to.be.within(1000, 2500);

    const reported = await agent.report(task.task_id, { status: 'completed', output: { lines: ['one', 'two'] } });
    expect(reported.status).to.equal(200);
    expect(reported.json.data).to.deep.equal({ task_id: task.task_id, status: 'completed' });
    // An auditor reads the result and changes nothing: it is still there for the admin who asked.
    const peeked = await t.request('GET', `/v1/nodes/${nodeId}/logs/${task.task_id}`, { headers: bearer(auditor.token) });
    expect(peeked.status, peeked.text).to.equal(200);
    expect(peeked.json.data.result).to.deep.equal({ lines: ['one', 'two'] });
    const read = await api('GET', `/v1/nodes/${nodeId}/logs/${task.task_id}`);
    expect(read.json.data).to.include({ status: 'completed', attempts: 1 });
    expect(read.json.data.result).to.deep.equal({ lines: ['one', 'two'] });
    expect((await api('GET', `/v1/nodes/${nodeId}/logs/${task.task_id}`)).status, 'read once').to.equal(404);
  });

  it('long-poll: a node’s first poll since the start is answered [] anywhere in the wait (a fleet reconnecting together spreads its polls at once)', async function () {
    this.timeout(20_000);
    const agents = await Promise.all(Array.from({ length: 16 }, async (_, i) => FakeAgent.forNode(t, await createNode(`first-${i}`))));
    const started = Date.now();
    const took = await Promise.all(
      agents.map(async (agent) => {
        const res = await agent.poll(4);
        expect(res.status, res.text).to.equal(200);
        expect(res.json.data).to.deep.equal([]);
        return Date.now() - started;
      }),
    );
    expect(Math.max(...took), 'none held past the 4 s wait').to.be.lessThan(6000);
    // Uniform over the wait: that all 16 land in its second half has a chance of 1 in 65 536.
    expect(Math.min(...took), 'some answered in the first half of the wait, not all near its end').to.be.lessThan(2000);
  });

  it('long-poll: with nothing queued it answers [] in the last eighth of the wait (after a node’s first poll); a wait above tasks.poll_wait_seconds is capped; out-of-range waits are 400', async function () {
    this.timeout(20_000);
    const agent = await FakeAgent.forNode(t, await createNode('idle'));
    expect((await agent.poll(0)).json.data, 'the first poll since the start').to.deep.equal([]);
    const started = Date.now();
    const [short, capped] = await Promise.all([
      agent.poll(2).then((res) => ({ res, took: Date.now() - started })),
      agent.poll(60).then((res) => ({ res, took: Date.now() - started })),
    ]);
    expect(short.res.status).to.equal(200);
    expect(short.res.json.data).to.deep.equal([]);
    // An empty answer comes anywhere in the wait's last eighth (jitter), so 2 s → 1.75–2 s.
    expect(short.took, 'held for the 2 s wait').to.be.within(1700, 3500);
    expect(capped.res.json.data).to.deep.equal([]);
    expect(capped.took, 'held for poll_wait_seconds = 5, not 60').to.be.within(4300, 7000);
    expect((await agent.poll(121)).status).to.equal(400);
    expect((await agent.poll(-1)).status).to.equal(400);
  });

  it('refuses a poll for another node (403), a result for another node’s task (404), a second result (409), and callers without a certificate (401)', async () => {
    const p = await FakeAgent.forNode(t, await createNode('p'));
    const q = await FakeAgent.forNode(t, await createNode('q'));
    const queued = await api('POST', `/v1/nodes/${q.nodeId}/logs`);
    const foreign = await p.poll(0, q.nodeId);
    expect(foreign.status).to.equal(403);
    expect(foreign.json).to.include({ error: 'Forbidden', message: 'Insufficient permissions' });
    const noCert = await t.request('GET', `/v1/internal/tasks/${q.nodeId}?wait=0`);
    expect(noCert.status).to.equal(401);
    const asAdmin = await t.request('GET', `/v1/internal/tasks/${q.nodeId}?wait=0`, { headers: bearer(admin.token) });
    expect(asAdmin.status, 'an admin JWT is not an agent').to.equal(401);

    const [task] = (await q.poll(0)).json.data;
    expect(task.task_id).to.equal(queued.json.data.task_id);
    expect(task.payload, 'lines defaults to 100').to.deep.equal({ lines: 100 });
    expect((await p.report(task.task_id, { status: 'completed', output: {} })).status).to.equal(404);
    expect((await q.report(task.task_id, { status: 'failed', error: 'disk on fire' })).status).to.equal(200);
    const again = await q.report(task.task_id, { status: 'completed', output: {} });
    expect(again.status).to.equal(409);
    expect(again.json.message).to.contain('already failed');
    expect((await q.report('task-doesnotexist', { status: 'completed' })).status).to.equal(404);
    expect((await q.report(task.task_id, { status: 'done' as never })).status).to.equal(400);

    const read = await api('GET', `/v1/nodes/${q.nodeId}/logs/${task.task_id}`);
    expect(read.json.data).to.include({ status: 'failed', error: 'disk on fire' });
    expect(read.json.data).not.to.have.property('result');
    expect((await api('GET', `/v1/nodes/${q.nodeId}/logs/${task.task_id}`)).status, 'a failed result is read once too').to.equal(404);
  });

  it('progress: a running task’s agent reports how far it is, recorded only while that node holds it; other nodes and bad input are refused', async () => {
    const p = await FakeAgent.forNode(t, await createNode('p-progress'));
    const q = await FakeAgent.forNode(t, await createNode('q-progress'));
    const queued = await api('POST', `/v1/nodes/${q.nodeId}/logs`);
    const progress = (agent: FakeAgent, taskId: string, body: unknown) => agent.request('POST', `/v1/internal/tasks/${taskId}/progress`, { body });
    const [task] = (await q.poll(0)).json.data;
    expect(task.task_id).to.equal(queued.json.data.task_id);
    const first = await progress(q, task.task_id, { progress: { bytes_done: 10, bytes_total: 100 } });
    expect(first.status, first.text).to.equal(200);
    expect(first.json.data).to.deep.equal({ task_id: task.task_id, recorded: true });
    expect((await progress(q, task.task_id, { progress: { bytes_done: 55, bytes_total: 100 } })).json.data.recorded).to.equal(true);
    // The latest figures are what a read of the task shows while it runs.
    const read = await api('GET', `/v1/nodes/${q.nodeId}/logs/${task.task_id}`);
    expect(read.json.data).to.deep.include({ status: 'leased', progress: { bytes_done: 55, bytes_total: 100 } });
    expect((await progress(p, task.task_id, { progress: { bytes_done: 99 } })).json.data.recorded, 'another node’s task').to.equal(false);
    for (const bad of [{}, { progress: { 'Not-A-Name': 1 } }, { progress: { bytes: { nested: 1 } } }, { progress: {}, extra: 1 }]) {
      expect((await progress(q, task.task_id, bad)).status, JSON.stringify(bad)).to.equal(400);
    }
    expect((await t.request('POST', `/v1/internal/tasks/${task.task_id}/progress`, { body: { progress: {} }, headers: bearer(admin.token) })).status, 'an admin JWT is not an agent').to.equal(401);
    expect((await q.report(task.task_id, { status: 'completed', output: { lines: [] } })).status).to.equal(200);
    expect((await progress(q, task.task_id, { progress: { bytes_done: 100 } })).json.data.recorded, 'once it has ended').to.equal(false);
  });

  it('lease expiry: an unreported task returns to pending and is handed out again, then fails after the last attempt with the reason and a task_failed event', async function () {
    this.timeout(30_000);
    const agent = await FakeAgent.forNode(t, await createNode('forgetful'));
    const queued = await api('POST', `/v1/nodes/${agent.nodeId}/logs?lines=3`);
    const taskId = queued.json.data.task_id as string;
    const view = async () => (await api('GET', `/v1/nodes/${agent.nodeId}/logs/${taskId}`)).json.data;

    const first = (await agent.poll(0)).json.data;
    expect(first.map((x: any) => [x.task_id, x.attempt])).to.deep.equal([[taskId, 1]]);
    expect(await view()).to.include({ status: 'leased', attempts: 1 });
    const leasedAt = Date.now();
    // Nothing is reported: the lease (2 s) runs out and the task is pending again.
    await waitFor(async () => (await view()).status === 'pending', { timeoutMs: 5000, intervalMs: 50, what: 'the lease to expire' });
    expect(Date.now() - leasedAt, 'not before the lease deadline').to.be.greaterThan(1500);

    const second = (await agent.poll(0)).json.data;
    expect(second.map((x: any) => [x.task_id, x.attempt])).to.deep.equal([[taskId, 2]]);
    // A poll already waiting is woken when the lease expires and the task is retried.
    const woken = Date.now();
    const third = (await agent.poll(5)).json.data;
    expect(third.map((x: any) => [x.task_id, x.attempt])).to.deep.equal([[taskId, 3]]);
    expect(Date.now() - woken, 'handed out at lease expiry, not at the end of the poll').to.be.lessThan(3500);

    // The third lease runs out too: max_attempts (3) used up → failed, with the reason.
    const failed = await waitFor(
      async () => {
        const v = await view();
        return v.status === 'failed' ? v : null;
      },
      { timeoutMs: 5000, intervalMs: 100, what: 'the task to fail' },
    );
    expect(failed.attempts).to.equal(3);
    expect(failed.error).to.equal("no result after 3 attempt(s): the agent's lease expired each time");
    expect((await agent.poll(0)).json.data, 'not handed out again').to.deep.equal([]);
    expect((await api('GET', `/v1/nodes/${agent.nodeId}/logs/${taskId}`)).status, 'read once').to.equal(404);

    const event = await waitFor(
      async () => ((await api('GET', `/v1/nodes/events?node_id=${agent.nodeId}`)).json.data as any[]).find((e) => e.kind === 'task_failed'),
      { timeoutMs: 3000, what: 'the task_failed event' },
    );
    expect(event.data).to.deep.equal({ task_id: taskId, kind: 'agent.logs' });
    expect(event.message).to.contain('lease expired');
  });

  it('an answer that does not match its kind fails the task, saying what is wrong, instead of reaching the API as a crash', async function () {
    this.timeout(20_000);
    const agent = await FakeAgent.forNode(t, await createNode('garbled'));
    const queued = await api('POST', `/v1/nodes/${agent.nodeId}/logs?lines=2`);
    const [task] = (await agent.poll(0)).json.data;
    const reported = await agent.report(task.task_id, { status: 'completed', output: { lines: 'not a list' } });
    expect(reported.status, 'the report itself is taken').to.equal(200);
    expect(reported.json.data).to.deep.equal({ task_id: queued.json.data.task_id, status: 'failed' });
    const read = (await api('GET', `/v1/nodes/${agent.nodeId}/logs/${task.task_id}`)).json.data;
    expect(read).to.include({ status: 'failed', error: `the agent on node ${agent.nodeId} answered a malformed agent.logs result: result.lines must be array` });
    expect(read).not.to.have.property('result');
  });

  it('an agent older than the typed orchestrator tasks is refused them with a 409 that says to update it; the kinds it has still run', async function () {
    this.timeout(20_000);
    const agent = await FakeAgent.forNode(t, await createNode('old-agent'));
    // Agents before typed tasks send their version and no capabilities.
    expect((await agent.heartbeat({ agent_version: '0.1.0', capabilities: undefined })).status).to.equal(200);
    const logs = await api('POST', `/v1/nodes/${agent.nodeId}/logs`);
    expect(logs.status, 'agent.logs is as old as agents').to.equal(202);
    const refused = await t.hangar.services.tasks.requireCapable(agent.nodeId, [DeployWorkload]).catch((err: HttpError) => err);
    expect(refused).to.be.instanceOf(HttpError);
    expect((refused as HttpError).status).to.equal(409);
    expect((refused as HttpError).message).to.equal(
      `Node ${agent.nodeId} cannot run this (workload.deploy): its agent (version 0.1.0) is older than workload.deploy needs (${DeployWorkload.minAgentVersion} or later): update the agent first`,
    );
    // Once it is updated (its heartbeat says so), the same kind is accepted.
    expect((await agent.heartbeat()).status).to.equal(200);
    await t.hangar.services.tasks.requireCapable(agent.nodeId, [DeployWorkload]);
  });

  it('an agent that would ignore a field of a task (a bundle placed in its project namespace, applied with the project account) is refused that task with a 409; the same task without the field still goes', async function () {
    this.timeout(20_000);
    const agent = await FakeAgent.forNode(t, await createNode('pre-placement'));
    // An agent of 0.2.0 runs bundle.deploy but knows nothing of namespace/confined: it would apply a
    // project's manifest with its own credentials in the default namespace.
    expect((await agent.heartbeat({ agent_version: '0.2.0' })).status).to.equal(200);
    const bundle = { backend: 'k8s', name: 'shop', spec: 'kind: ConfigMap', prune: true };
    const refused = await t.hangar.services.tasks
      .enqueue({ nodeId: agent.nodeId, kind: DeployBundle, payload: { ...bundle, namespace: 'hangar-project-blue', confined: true } })
      .catch((err: HttpError) => err);
    expect(refused).to.be.instanceOf(HttpError);
    expect((refused as HttpError).status).to.equal(409);
    expect((refused as HttpError).message).to.equal(
      `Node ${agent.nodeId} cannot run this (bundle.deploy): its agent (version 0.2.0) would ignore bundle.deploy's namespace (agents ${BUNDLE_PLACEMENT_VERSION} or later honour it): update the agent first`,
    );
    expect((await agent.poll(0)).json.data, 'nothing was queued').to.deep.equal([]);
    const plain = await t.hangar.services.tasks.enqueue({ nodeId: agent.nodeId, kind: DeployBundle, payload: bundle });
    expect(plain.status).to.equal('pending');
    // Updated, the same agent takes the placed bundle.
    expect((await agent.heartbeat()).status).to.equal(200);
    const placed = await t.hangar.services.tasks.enqueue({ nodeId: agent.nodeId, kind: DeployBundle, payload: { ...bundle, namespace: 'hangar-project-blue', confined: true } });
    expect(placed.status).to.equal('pending');
    // The agent goes back to its previous executable (an update rolled back) before it takes the task:
    // the task is judged again when leased, and fails with the reason instead of being handed out.
    expect((await agent.heartbeat({ agent_version: '0.2.0' })).status).to.equal(200);
    const leased = (await agent.poll(0)).json.data.map((task: { task_id: string }) => task.task_id);
    expect(leased).to.include(plain.id).and.not.include(placed.id);
    const failed = await t.hangar.services.tasks.get(placed.id);
    expect(failed).to.include({ status: 'failed' });
    expect(failed!.error).to.contain("would ignore bundle.deploy's namespace");
    // A node whose agent has not said its version yet gets no placed bundle either.
    const silent = await createNode('never-heard');
    const unheard = await t.hangar.services.tasks
      .enqueue({ nodeId: silent, kind: DeployBundle, payload: { ...bundle, namespace: 'hangar-project-blue', confined: true } })
      .catch((err: HttpError) => err);
    expect((unheard as HttpError).status).to.equal(409);
    expect((unheard as HttpError).message).to.contain("its agent has not reported its version yet, and bundle.deploy's namespace needs");
  });

  it('os-update, check-updates and reboot answer 202 and queue a task for the node; the test double’s report of pending updates and reboot_required makes the node needs_reboot', async function () {
    this.timeout(20_000);
    const agent = await FakeAgent.forNode(t, await createNode('patchable'));
    expect((await agent.heartbeat()).status).to.equal(200);
    expect((await getNode(agent.nodeId)).status).to.equal('ready');

    const kinds: Record<string, string> = {};
    for (const [verb, kind] of [['os-update', 'os.update'], ['check-updates', 'os.check-updates'], ['reboot', 'os.reboot']] as const) {
      const res = await api('POST', `/v1/nodes/${agent.nodeId}/${verb}`);
      expect(res.status, `${verb}: ${res.text}`).to.equal(202);
      expect(res.json.data).to.include({ kind, node_id: agent.nodeId, status: 'pending' });
      kinds[res.json.data.task_id] = kind;
    }
    const leased = (await agent.poll(0)).json.data as any[];
    expect(Object.fromEntries(leased.map((x) => [x.task_id, x.kind]))).to.deep.equal(kinds);

    const check = leased.find((x) => x.kind === 'os.check-updates');
    expect((await agent.report(check.task_id, { status: 'completed', output: { pending_updates: 3, reboot_required: true } })).status).to.equal(200);
    const node = await waitFor(
      async () => {
        const n = await getNode(agent.nodeId);
        return n.status === 'needs_reboot' ? n : null;
      },
      { timeoutMs: 2000, intervalMs: 50, what: 'needs_reboot' },
    );
    expect(node).to.include({ pending_updates: 3, reboot_required: true });
    // Every status change is an event, whatever moved it: a task's result or a heartbeat.
    const lastChange = (from: string, to: string) =>
      waitFor(
        async () => {
          const changes = ((await api('GET', `/v1/nodes/events?node_id=${agent.nodeId}`)).json.data as any[]).filter((e) => e.kind === 'node_status_changed');
          const last = changes.at(-1);
          return last?.data.from === from && last?.data.to === to ? changes.length : null;
        },
        { timeoutMs: 2000, intervalMs: 50, what: `a node_status_changed event ${from} → ${to}` },
      );
    const afterCheck = await lastChange('ready', 'needs_reboot');
    expect((await agent.heartbeat({ reboot_required: false })).status).to.equal(200);
    expect(await lastChange('needs_reboot', 'ready')).to.equal(afterCheck + 1);
    expect((await agent.heartbeat({ reboot_required: true })).status).to.equal(200);
    expect(await lastChange('ready', 'needs_reboot')).to.equal(afterCheck + 2);
    expect((await agent.heartbeat({ reboot_required: true })).status).to.equal(200);
    expect(await lastChange('ready', 'needs_reboot'), 'no event when nothing changed').to.equal(afterCheck + 2);
    for (const x of leased.filter((l) => l !== check)) expect((await agent.report(x.task_id, { status: 'completed', output: {} })).status).to.equal(200);

    const unknown = await api('POST', '/v1/nodes/node-doesnotexist/reboot');
    expect(unknown.status).to.equal(404);
  });
});
