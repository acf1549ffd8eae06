import { expect } from 'chai';
import { waitFor } from '../../support/agents.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, type Credentials } from '../../support/identity.js';
import { Receiver } from './receiver.js';
import { swarmDouble } from '../../support/swarm-double.js';

const PLUGINS = ['system', 'iam', 'audit', 'nodes', 'agent-internal', 'swarms', 'compute', 'notifications'];
const LOOPBACK = { allow_http: true, allow_private_addresses: true, retry_base_seconds: 0.2, retry_max_seconds: 0.5, poll_interval_ms: 100, timeout_seconds: 5 };

/**
 * `workload.failed` and `workload.rolled_back` (issue 31): a webhook subscribed to them hears of an
 * instance whose deploy the swarm refused, and of one the swarm rolled back, each once, with the
 * reason; and audited writes of one kind (`audit.nodes`). The swarm's manager is a test double answering the orchestrator's calls (what a real swarm
 * does on a failing rollout is test/integration/swarms/compute.test.ts).
 */
describeEachDialect('notifications: workloads that fail or roll back, and audited writes by kind', (dialect) => {
  const receiver = new Receiver();
  let t: TestHangar;
  let admin: Credentials;
  let manager: Awaited<ReturnType<typeof swarmDouble>>;
  let swarmId = '';
  const api = (method: string, p: string, body?: unknown) => t.request(method, p, { body, headers: bearer(admin.token) });
  const eventsOf = (type: string, resourceId: string) => receiver.requests.filter((r) => r.event === type && r.body?.resource?.id === resourceId);

  before(async function () {
    this.timeout(60_000);
    await receiver.start();
    t = await startHangar(dialect, { plugins: PLUGINS, overrides: { clusters: { observe_interval_seconds: 1 }, notifications: LOOPBACK } });
    admin = await bootstrapAdmin(t);
    manager = await swarmDouble(t, admin.token, {
      refusals: {
        deployWorkload: (input) => (String(input.spec.image).startsWith('missing/') ? `No such image: ${input.spec.image}` : undefined),
      },
    });
    swarmId = manager.swarmId;

    const channel = await api('POST', '/v1/notifications/channels', { name: 'ops', kind: 'webhook', url: receiver.url });
    expect(channel.status, channel.text).to.equal(201);
    receiver.secret = channel.json.data.secret;
    const subscription = await api('POST', '/v1/notifications/subscriptions', { channel_id: 'ops', event_types: ['workload.failed', 'workload.rolled_back', 'workload.paused'] });
    expect(subscription.status, subscription.text).to.equal(201);
  });
  after(async () => {
    await manager?.stop();
    await t?.stop();
    await receiver.stop();
  });

  it('an instance whose deploy the swarm refuses is announced once as workload.failed (critical), with the reason', async function () {
    this.timeout(60_000);
    const created = await api('POST', '/v1/compute/instances', { name: 'broken', swarm_id: swarmId, image: 'missing/app:1' });
    expect(created.status, created.text).to.equal(202);
    const id = created.json.data.id as string;
    const [delivered] = await waitFor(async () => (eventsOf('workload.failed', id).length ? eventsOf('workload.failed', id) : null), { timeoutMs: 20_000, what: 'workload.failed at the receiver' });
    expect(delivered!.verified).to.equal(true);
    expect(delivered!.body).to.deep.include({ type: 'workload.failed', severity: 'critical' });
    expect(delivered!.body.resource).to.deep.equal({ type: 'instance', id });
    expect(delivered!.body.message).to.contain('instance broken').and.to.contain('No such image: missing/app:1');
    expect(delivered!.body.data).to.include({ noun: 'instance', id, name: 'broken', to: 'failed' });
    expect((await api('GET', `/v1/compute/instances/${id}`)).json.data.status).to.equal('failed');
    // Observations that find it still failed announce nothing more.
    await new Promise((r) => setTimeout(r, 2500));
    expect(eventsOf('workload.failed', id)).to.have.length(1);
  });

  /**
   * A running instance whose swarm then reports `rollout` (as Docker's UpdateStatus does): announced
   * once as `type`, a warning whose message says `what` and the swarm's message.
   */
  const announcedOnce = async (name: string, rollout: { state: string; message: string }, type: string, what: string) => {
    const created = await api('POST', '/v1/compute/instances', { name, swarm_id: swarmId, image: 'app:1' });
    expect(created.status, created.text).to.equal(202);
    const id = created.json.data.id as string;
    await waitFor(async () => ((await api('GET', `/v1/compute/instances/${id}`)).json.data.status === 'running' ? true : null), { timeoutMs: 30_000, intervalMs: 100, what: 'the instance to run' });
    expect(eventsOf(type, id)).to.have.length(0);
    manager.workloadOf(id)!.rollout = rollout;
    const [delivered] = await waitFor(async () => (eventsOf(type, id).length ? eventsOf(type, id) : null), { timeoutMs: 20_000, what: `${type} at the receiver` });
    expect(delivered!.body).to.deep.include({ type, severity: 'warning' });
    expect(delivered!.body.message).to.contain(`instance ${name}`).and.to.contain(what).and.to.contain(rollout.message.split(': ')[1]!);
    // Observations that find it so again announce nothing more.
    await new Promise((r) => setTimeout(r, 2500));
    expect(eventsOf(type, id)).to.have.length(1);
  };

  it('an instance the swarm rolls back is announced once as workload.rolled_back (warning)', async function () {
    this.timeout(60_000);
    await announcedOnce('web', { state: 'rollback_completed', message: 'update rolled back: health check failed' }, 'workload.rolled_back', 'was rolled back');
  });

  it('an instance whose rollout the swarm paused is announced once as workload.paused (warning)', async function () {
    this.timeout(60_000);
    await announcedOnce('held', { state: 'paused', message: 'update paused: task failed' }, 'workload.paused', 'was paused');
  });

  it('audited writes of a subscribed kind are announced as audit.<kind> (refused ones as warnings); other kinds are not', async function () {
    this.timeout(60_000);
    const subscription = await api('POST', '/v1/notifications/subscriptions', { channel_id: 'ops', event_types: ['audit.nodes'] });
    expect(subscription.status, subscription.text).to.equal(201);
    const created = await api('POST', '/v1/nodes', { name: 'audited', ip_address: '192.0.2.20' });
    expect(created.status, created.text).to.equal(201);
    const nodeId = created.json.data.id as string;
    const refused = await api('PATCH', `/v1/nodes/${nodeId}`, { name: '' });
    expect(refused.status, refused.text).to.equal(400);
    const byNode = () => receiver.requests.filter((r) => r.event === 'audit.nodes' && r.body?.resource?.id === nodeId);
    const seen = await waitFor(async () => (byNode().length >= 2 ? byNode() : null), { timeoutMs: 20_000, what: 'both audit.nodes events at the receiver' });
    const made = seen.find((r) => r.body.data.status === 201)!;
    expect(made.verified).to.equal(true);
    expect(made.body).to.deep.include({ severity: 'info' });
    expect(made.body.data).to.include({ kind: 'nodes', permission: 'nodes:write', method: 'POST', route: '/v1/nodes', principal_id: admin.userId });
    expect(made.body.message).to.contain('POST /v1/nodes').and.to.contain('201');
    const no = seen.find((r) => r.body.data.status === 400)!;
    expect(no.body).to.deep.include({ severity: 'warning' });
    expect(no.body.data).to.include({ method: 'PATCH', route: '/v1/nodes/{id}' });
    // A write of another kind (a notification channel) is not delivered to this subscription.
    expect((await api('POST', '/v1/notifications/channels', { name: 'other', kind: 'webhook', url: receiver.url })).status).to.equal(201);
    await new Promise((r) => setTimeout(r, 1500));
    expect(receiver.requests.filter((r) => String(r.event).startsWith('audit.') && r.event !== 'audit.nodes')).to.deep.equal([]);
  });
});
