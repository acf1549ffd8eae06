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

/** Five kinds of event about one node, queued while the receiver fails and then is down. */
const BACKLOG = ['node.created', 'certificate.issued', 'task.failed', 'certificate.revoked', 'node.removed'];

interface Delivery {
  id: string;
  event_type: string;
  status: string;
  event: { resource: { type: string; id: string } };
  attempts: Array<{ status_code: number | null; error: string | null }>;
}

/**
 * A control plane killed (SIGKILL) in the middle of retrying a backlog of five deliveries of five
 * kinds — the receiver failing them, then holding the next attempts unanswered — and the receiver
 * down while another control plane takes over the store; once the dead one's leadership lease and
 * the deliveries' holds ran out the other retries each (refused while the receiver is down, twice:
 * the receiver stays down until then, ~18 s, rather than a full minute, which would add ~40 s per
 * dialect and prove nothing more) and delivers every one once the receiver is up, each with its one
 * idempotency key and the same bytes on every attempt. Two `hangar serve` processes with
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

  /** The first control plane on a new store, with an admin and a webhook channel to the receiver subscribed to `eventTypes`. */
  async function firstPlane(name: string, eventTypes: string[]) {
    const storage = dialect.freshStorage();
    const a = await serve(name, storage);
    caPem = (await httpRequest(`${a.url}/v1/ca`, { ca: false })).text;
    admin = await bootstrapAdmin(a.client);
    const viaA = (method: string, p: string, body?: unknown) => a.client.request(method, p, { body, headers: bearer(admin.token) });
    const channel = await viaA('POST', '/v1/notifications/channels', { name: 'hook', kind: 'webhook', url: receiver.url });
    expect(channel.status, channel.text).to.equal(201);
    receiver.secret = channel.json.data.secret;
    expect((await viaA('POST', '/v1/notifications/subscriptions', { channel_id: 'hook', event_types: eventTypes })).status).to.equal(201);
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

  it('delivers a backlog of five events the killed control plane was retrying, each with its one key, once the receiver is back', async function () {
    this.timeout(240_000);
    const { storage, a, viaA } = await firstPlane('notify-a', BACKLOG);

    // The receiver fails every attempt (503) while five events of five kinds are made: a node record,
    // its client certificate, a failed task on it, its certificates revoked, its removal.
    receiver.mode = 'fail';
    const { id: nodeId, agent } = await nodeWithAgent(viaA, a, 'backlog', '192.0.2.41');
    const queued = await viaA('POST', `/v1/nodes/${nodeId}/logs`);
    expect(queued.status, queued.text).to.equal(202);
    const taskId = queued.json.data.task_id as string;
    await agent.poll(5);
    expect((await agent.report(taskId, { status: 'failed', error: 'journalctl: no such file' })).status).to.equal(200);
    expect((await viaA('POST', `/v1/nodes/${nodeId}/cert/revoke`)).status).to.equal(200);
    const removed = await viaA('DELETE', `/v1/nodes/${nodeId}`);
    expect(removed.status, removed.text).to.be.oneOf([200, 202]);
    const ofA = async () => ((await viaA('GET', '/v1/notifications/deliveries?limit=1000')).json.data as Delivery[]).filter((d) => d.event.resource?.id === nodeId);
    // …each one retried: at least two attempts failed with 503.
    const retried = await waitFor(async () => {
      const ds = await ofA();
      return ds.length === BACKLOG.length && ds.every((d) => d.attempts.length >= 2) ? ds : null;
    }, { timeoutMs: 60_000, intervalMs: 200, what: 'five deliveries, each with two failed attempts' });
    expect(retried.map((d) => d.event_type).sort()).to.deep.equal([...BACKLOG].sort());
    expect(retried.every((d) => d.status !== 'delivered' && d.attempts.every((t) => t.status_code === 503))).to.equal(true);
    const keys = new Map(retried.map((d) => [d.id, d.event_type]));

    // The next attempts are held unanswered when the control plane is killed: those are never recorded.
    receiver.mode = 'hold';
    await waitFor(() => receiver.holding > 0, { timeoutMs: 20_000, what: 'the receiver to hold an attempt' });
    a.child.kill('SIGKILL');
    await new Promise((resolve) => a.child.once('exit', resolve));
    // The receiver goes down (the held attempts' connections dropped) and stays down while the other control plane retries.
    await receiver.stop();
    const downSince = Date.now();
    receiver.mode = 'ok';
    const before = receiver.requests.length;

    const c = await serve('notify-c', storage);
    const ofC = async () => ((await c.client.request('GET', '/v1/notifications/deliveries?limit=1000', { headers: bearer(admin.token) })).json.data as Delivery[]).filter((d) => d.event.resource?.id === nodeId);
    // Once the dead one's lease and holds ran out, the other retries every delivery, twice, refused (connection refused: recorded, no status).
    const refused = await waitFor(async () => {
      const ds = await ofC();
      return ds.every((d) => d.attempts.filter((t) => t.status_code === null).length >= 2) ? ds : null;
    }, { timeoutMs: 120_000, intervalMs: 500, what: 'the other control plane to retry each delivery against the receiver down' });
    expect(refused.map((d) => d.id).sort()).to.deep.equal([...keys.keys()].sort());
    expect(refused.every((d) => d.status === 'pending' || d.status === 'sending')).to.equal(true);
    expect(receiver.requests.length).to.equal(before);

    await receiver.start();
    const downFor = Date.now() - downSince;
    const done = await waitFor(async () => {
      const ds = await ofC();
      return ds.every((d) => d.status === 'delivered') ? ds : null;
    }, { timeoutMs: 30_000, intervalMs: 200, what: 'every delivery once the receiver is up' });
    expect(done.every((d) => d.attempts.at(-1)!.status_code === 200)).to.equal(true);
    // Every delivery arrived; every request of an event carried that delivery's one key and the same signed bytes.
    for (const [key, type] of keys) {
      const got = receiver.requests.filter((r) => r.event === type && r.body?.resource?.id === nodeId);
      expect(got.length, `${type}: requests`).to.be.at.least(3);
      expect(new Set(got.map((r) => r.key)), `${type}: keys`).to.deep.equal(new Set([key]));
      expect(got.every((r) => r.verified && r.raw === got[0]!.raw), `${type}: signed, same bytes`).to.equal(true);
      expect(receiver.requests.slice(before).some((r) => r.key === key), `${type}: delivered after recovery`).to.equal(true);
    }
    console.log(`      (the receiver was down ${Math.round(downFor / 1000)} s across the kill)`);
    c.child.kill('SIGKILL');
  });

  it('delivers task.failed once, sent by the control plane started after the one that recorded it was killed', async function () {
    this.timeout(180_000);
    const { storage, a, viaA } = await firstPlane('change-a', ['task.failed']);

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
    expect(receiver.requests.filter((r) => r.event === 'task.failed' && r.body?.data?.task_id === taskId)).to.deep.equal([]);

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
