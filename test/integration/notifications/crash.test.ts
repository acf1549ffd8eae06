import { expect } from 'chai';
import path from 'node:path';
import { httpRequest } from '../../../core/http/client.js';
import { waitFor } from '../../support/agents.js';
import { nodeWithAgent, serveControlPlane, type ControlPlane } from '../../support/control-plane.js';
import { describeEachDialect, TEST_MASTER_KEY } from '../../support/dialects.js';
import { bearer, bootstrapAdmin, type Credentials } from '../../support/identity.js';
import { Receiver } from './receiver.js';

const ENV = {
  HANGAR_PLUGINS: 'system,iam,nodes,agent-internal,notifications',
  HANGAR_NOTIFICATIONS__ALLOW_HTTP: 'true',
  HANGAR_NOTIFICATIONS__ALLOW_PRIVATE_ADDRESSES: 'true',
  HANGAR_NOTIFICATIONS__RETRY_BASE_SECONDS: '0.2',
  HANGAR_NOTIFICATIONS__RETRY_MAX_SECONDS: '0.5',
  HANGAR_NOTIFICATIONS__POLL_INTERVAL_MS: '200',
  HANGAR_NOTIFICATIONS__TIMEOUT_SECONDS: '2',
};

interface Delivery {
  id: string;
  status: string;
  event: { resource: { type: string; id: string } };
  attempts: Array<{ status_code: number | null; error: string | null }>;
}

/**
 * A control plane killed (SIGKILL) in the middle of retrying a delivery — the receiver failing it,
 * then holding the next attempt unanswered — and the receiver down while another control plane
 * takes over the store; once the dead one's leadership lease and the delivery's hold ran out the
 * other retries (refused while the receiver is down) and delivers it once the receiver is up, with
 * the same idempotency key and the same bytes on every attempt. Two `hangar serve` processes with
 * data dirs of their own (two holders of the lease): on PostgreSQL the same schema; on SQLite the
 * same database file (`database.sqlite_file`), the second started after the first was killed — one
 * SQLite file is one control plane's at a time (docs/high-availability.md), so this is a restart on
 * the same file by a process that does not hold the dead one's lease.
 *
 * And a control plane killed the moment an agent's report of a failed task was answered — the
 * failure committed, its notification not yet sent (the receiver down): the other sends
 * `task.failed`, exactly once (that no publish on the in-process bus is needed for it:
 * transactional.test.ts).
 */
describeEachDialect('notifications: a control plane killed (mid-retry, or right after a change committed), another on the same store delivers', (dialect) => {
  const receiver = new Receiver();
  const planes: ControlPlane[] = [];
  let caPem = '';
  let admin: Credentials;

  /** A `hangar serve` on a store of this test: the same PostgreSQL schema, or the same SQLite file. */
  async function serve(name: string, storage: { schema: string | null; dataDir: string }): Promise<ControlPlane> {
    const { schema, dataDir } = storage;
    const store: Record<string, string> = schema === null ? { HANGAR_DATABASE__SQLITE_FILE: path.join(dataDir, 'shared.db'), HANGAR_SECRETS__MASTER_KEY: TEST_MASTER_KEY } : {};
    const plane = await serveControlPlane({ name, schema, caPem: () => caPem, env: { ...ENV, ...store } });
    planes.push(plane);
    return plane;
  }

  /** The first control plane on a new store, with an admin and a webhook channel to the receiver subscribed to `eventType`. */
  async function firstPlane(name: string, eventType: string) {
    const storage = dialect.freshStorage();
    const a = await serve(name, storage);
    caPem = (await httpRequest(`${a.url}/v1/ca`, { ca: false })).text;
    admin = await bootstrapAdmin(a.client);
    const viaA = (method: string, p: string, body?: unknown) => a.client.request(method, p, { body, headers: bearer(admin.token) });
    const channel = await viaA('POST', '/v1/notifications/channels', { name: 'hook', kind: 'webhook', url: receiver.url });
    expect(channel.status, channel.text).to.equal(201);
    receiver.secret = channel.json.data.secret;
    expect((await viaA('POST', '/v1/notifications/subscriptions', { channel_id: 'hook', event_types: [eventType] })).status).to.equal(201);
    return { storage, a, viaA };
  }

  before(async () => {
    await receiver.start();
  });

  after(async function () {
    this.timeout(30_000);
    for (const plane of planes) plane.child.kill('SIGKILL');
    await receiver.stop();
  });

  it('delivers what the killed control plane was retrying, with the same key, once the receiver is back', async function () {
    this.timeout(180_000);
    const { storage, a, viaA } = await firstPlane('notify-a', 'node.created');

    // The receiver fails the first attempts (503): the delivery is being retried…
    receiver.mode = 'fail';
    const node = await viaA('POST', '/v1/nodes', { name: 'crash' });
    expect(node.status, node.text).to.equal(201);
    const failed = await waitFor(
      async () => ((await viaA('GET', '/v1/notifications/deliveries')).json.data as Delivery[]).find((d) => d.event.resource?.id === node.json.data.id && d.attempts.length >= 2),
      { timeoutMs: 20_000, intervalMs: 100, what: 'two failed attempts' },
    );
    expect(failed.status).to.equal('pending');
    expect(failed.attempts.every((t) => t.status_code === 503)).to.equal(true);
    // …and the next attempt is held unanswered when the control plane is killed: that attempt is never recorded.
    receiver.mode = 'hold';
    await waitFor(() => receiver.holding > 0, { timeoutMs: 20_000, what: 'the receiver to hold an attempt' });
    const key = failed.id;
    expect(receiver.requests.at(-1)!.key).to.equal(key);
    a.child.kill('SIGKILL');
    await new Promise((resolve) => a.child.once('exit', resolve));
    // The receiver goes down (the held attempt's connection dropped).
    await receiver.stop();
    receiver.mode = 'ok';
    const before = receiver.requests.length;

    const c = await serve('notify-c', storage);
    const viaC = (method: string, p: string) => c.client.request(method, p, { headers: bearer(admin.token) });
    const ofKey = async () => ((await viaC('GET', `/v1/notifications/deliveries/${key}`)).json.data as Delivery | undefined) ?? null;
    // The other control plane retries while the receiver is down: a refused attempt is recorded.
    const refused = await waitFor(async () => {
      const d = await ofKey();
      return d && d.attempts.length > failed.attempts.length ? d : null;
    }, { timeoutMs: 90_000, intervalMs: 500, what: 'the other control plane to retry against the receiver down' });
    expect(refused.attempts.at(-1)).to.include({ status_code: null });
    expect(refused.attempts.at(-1)!.error).to.be.a('string');
    expect(receiver.requests.length).to.equal(before);

    await receiver.start();
    const done = await waitFor(async () => {
      const d = await ofKey();
      return d?.status === 'delivered' ? d : null;
    }, { timeoutMs: 30_000, intervalMs: 200, what: 'the delivery once the receiver is up' });
    expect(done.event.resource).to.deep.equal({ type: 'node', id: node.json.data.id });
    expect(done.attempts.at(-1)).to.include({ status_code: 200 });
    // Every request the receiver got for the event carried one key and the same signed bytes.
    const ofNode = receiver.requests.filter((r) => r.body?.resource?.id === node.json.data.id);
    expect(ofNode.length).to.be.at.least(4);
    expect(new Set(ofNode.map((r) => r.key))).to.deep.equal(new Set([key]));
    expect(ofNode.every((r) => r.verified && r.raw === ofNode[0]!.raw)).to.equal(true);
    c.child.kill('SIGKILL');
  });

  it('delivers task.failed once, sent by the control plane started after the one that recorded it was killed', async function () {
    this.timeout(180_000);
    const { storage, a, viaA } = await firstPlane('change-a', 'task.failed');

    // A node whose agent is the test (its certificate issued over the API, a heartbeat), a task queued for it (a log fetch).
    const { id: nodeId, agent } = await nodeWithAgent(viaA, a, 'crashing', '192.0.2.40');
    const queued = await viaA('POST', `/v1/nodes/${nodeId}/logs`);
    expect(queued.status, queued.text).to.equal(202);
    const taskId = queued.json.data.task_id as string;
    const polled = await agent.poll(5);
    expect((polled.json.data as Array<{ task_id: string }>).map((task) => task.task_id)).to.deep.equal([taskId]);

    // The receiver is down: nothing can be sent. The report is answered once the failure is committed; the control plane dies then.
    await receiver.stop();
    const reported = await agent.report(taskId, { status: 'failed', error: 'journalctl: no such file' });
    expect(reported.status, reported.text).to.equal(200);
    a.child.kill('SIGKILL');
    await new Promise((resolve) => a.child.once('exit', resolve));
    expect(receiver.requests.filter((r) => r.event === 'task.failed')).to.deep.equal([]);

    await receiver.start();
    const c = await serve('change-c', storage);
    const ofTask = () => receiver.requests.filter((r) => r.event === 'task.failed' && r.body?.data?.task_id === taskId);
    const [delivered] = await waitFor(() => (ofTask().length ? ofTask() : null), { timeoutMs: 90_000, intervalMs: 200, what: 'task.failed from the control plane started after the kill' });
    expect(delivered!.verified).to.equal(true);
    expect(delivered!.body).to.deep.include({ type: 'task.failed', severity: 'warning', resource: { type: 'node', id: nodeId } });
    expect(delivered!.body.data).to.include({ task_id: taskId, node_id: nodeId, error: 'journalctl: no such file' });
    await new Promise((resolve) => setTimeout(resolve, 1500));
    // Delivered once: one request, keyed with its one delivery (the killed one's attempts, if any, were refused: the receiver was down).
    expect(ofTask()).to.have.length(1);
    const deliveries = (await c.client.request('GET', '/v1/notifications/deliveries?event_type=task.failed', { headers: bearer(admin.token) })).json.data as Array<{ id: string; status: string; event: { data: { task_id: string } } }>;
    expect(deliveries.filter((d) => d.event.data.task_id === taskId).map((d) => [d.id, d.status])).to.deep.equal([[delivered!.key, 'delivered']]);
  });
});
