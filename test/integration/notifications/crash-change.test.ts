import { expect } from 'chai';
import path from 'node:path';
import { httpRequest } from '../../../core/http/client.js';
import { FakeAgent, waitFor } from '../../support/agents.js';
import { serveControlPlane, type ControlPlane } from '../../support/control-plane.js';
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

/**
 * A `hangar serve` killed (SIGKILL) the moment an agent's report of a failed task was answered — the
 * task's failure committed, its notification not yet sent (the receiver down) — and another
 * `hangar serve` on the same store (the same PostgreSQL schema, or the same SQLite file started after
 * the first died, as crash.test.ts does): `task.failed` reaches the receiver once the receiver is
 * back, exactly once. (That no publish on the in-process bus is needed for it: transactional.test.ts.)
 */
describeEachDialect('notifications: a control plane killed right after a change committed, its notification delivered after restart', (dialect) => {
  const receiver = new Receiver();
  let a: ControlPlane | undefined;
  let c: ControlPlane | undefined;
  let caPem = '';
  let admin: Credentials;

  before(async () => {
    await receiver.start();
  });

  after(async function () {
    this.timeout(30_000);
    a?.child.kill('SIGKILL');
    c?.child.kill('SIGKILL');
    await receiver.stop();
  });

  it('delivers task.failed once, sent by the control plane started after the one that recorded it was killed', async function () {
    this.timeout(180_000);
    const { schema, dataDir } = dialect.freshStorage();
    const store: Record<string, string> = schema === null ? { HANGAR_DATABASE__SQLITE_FILE: path.join(dataDir, 'shared.db'), HANGAR_SECRETS__MASTER_KEY: TEST_MASTER_KEY } : {};
    a = await serveControlPlane({ name: 'change-a', schema, caPem: () => caPem, env: { ...ENV, ...store } });
    caPem = (await httpRequest(`${a.url}/v1/ca`, { ca: false })).text;
    admin = await bootstrapAdmin(a.client);
    const viaA = (method: string, p: string, body?: unknown) => a!.client.request(method, p, { body, headers: bearer(admin.token) });

    const channel = await viaA('POST', '/v1/notifications/channels', { name: 'hook', kind: 'webhook', url: receiver.url });
    expect(channel.status, channel.text).to.equal(201);
    receiver.secret = channel.json.data.secret;
    expect((await viaA('POST', '/v1/notifications/subscriptions', { channel_id: 'hook', event_types: ['task.failed'] })).status).to.equal(201);

    // A node whose agent is the test: its certificate issued over the API, a heartbeat, a task queued for it (a log fetch).
    const node = await viaA('POST', '/v1/nodes', { name: 'crashing', ip_address: '192.0.2.40' });
    expect(node.status, node.text).to.equal(201);
    const nodeId = node.json.data.id as string;
    const cert = await viaA('POST', `/v1/nodes/${nodeId}/cert`);
    expect(cert.status, cert.text).to.equal(201);
    const agent = FakeAgent.withCertificate(a.client, nodeId, cert.json.data.certificate, cert.json.data.private_key);
    expect((await agent.heartbeat()).status).to.equal(200);
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
    await new Promise((resolve) => a!.child.once('exit', resolve));
    expect(receiver.requests.filter((r) => r.event === 'task.failed')).to.deep.equal([]);

    await receiver.start();
    c = await serveControlPlane({ name: 'change-c', schema, caPem: () => caPem, env: { ...ENV, ...store } });
    const ofTask = () => receiver.requests.filter((r) => r.event === 'task.failed' && r.body?.data?.task_id === taskId);
    const [delivered] = await waitFor(() => (ofTask().length ? ofTask() : null), { timeoutMs: 90_000, intervalMs: 200, what: 'task.failed from the control plane started after the kill' });
    expect(delivered!.verified).to.equal(true);
    expect(delivered!.body).to.deep.include({ type: 'task.failed', severity: 'warning', resource: { type: 'node', id: nodeId } });
    expect(delivered!.body.data).to.include({ task_id: taskId, node_id: nodeId, error: 'journalctl: no such file' });
    await new Promise((resolve) => setTimeout(resolve, 1500));
    // Every request for it (an attempt of the killed one refused while the receiver was down is not one) carried one key.
    expect(ofTask()).to.have.length(1);
    const deliveries = (await c.client.request('GET', '/v1/notifications/deliveries?event_type=task.failed', { headers: bearer(admin.token) })).json.data as Array<{ id: string; status: string; event: { data: { task_id: string } } }>;
    expect(deliveries.filter((d) => d.event.data.task_id === taskId).map((d) => [d.id, d.status])).to.deep.equal([[delivered!.key, 'delivered']]);
  });
});
