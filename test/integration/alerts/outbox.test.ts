import { expect } from 'chai';
import { FakeAgent, waitFor } from '../../support/agents.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, type Credentials } from '../../support/identity.js';
import { FORCED, failOutboxInserts } from '../notifications/outbox-failure.js';
import { Receiver } from '../notifications/receiver.js';

/**
 * An alert's announcement (its mark) and its notification (the outbox rows) are written in one
 * transaction: a failure after the outbox insert leaves neither — the alert is announced again at
 * the next check and delivered once the store takes it. With the notification written after the
 * mark (the bus), such a failure lost it for good. The failure is a trigger on the outbox table
 * that aborts the inserts of one alert's rows, as a full disk or a lost connection at that point
 * would; another alert, checked after it, is announced meanwhile (a failing alert once held back
 * every other alert's announcement).
 */
describeEachDialect('alerts: an announcement and its notification commit together', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  const receiver = new Receiver();

  before(async function () {
    this.timeout(60_000);
    await receiver.start();
    t = await startHangar(dialect, {
      plugins: ['system', 'iam', 'nodes', 'agent-internal', 'alerts', 'notifications'],
      overrides: {
        notifications: { allow_http: true, allow_private_addresses: true, poll_interval_ms: 100, retry_base_seconds: 0.2, retry_max_seconds: 0.5 },
        alerts: { interval_seconds: 1 },
      },
    });
    admin = await bootstrapAdmin(t);
  });
  after(async function () {
    this.timeout(30_000);
    await t?.stop();
    await receiver.stop();
  });

  const api = (method: string, p: string, body?: unknown) => t.request(method, p, { body, headers: bearer(admin.token) });
  const knex = () => t.hangar.services.db.knex;
  it('a failure after the outbox insert leaves the alert unannounced and undelivered, holds back no other alert, and it is delivered once at the next check that succeeds', async function () {
    this.timeout(60_000);
    const channel = await api('POST', '/v1/notifications/channels', { name: 'ops', kind: 'webhook', url: receiver.url });
    expect(channel.status, channel.text).to.equal(201);
    receiver.secret = channel.json.data.secret;
    const nodes: string[] = [];
    for (const name of ['old-agent', 'other-agent']) {
      const node = await api('POST', '/v1/nodes', { name });
      expect(node.status, node.text).to.equal(201);
      nodes.push(node.json.data.id as string);
    }
    const [nodeId, otherId] = nodes as [string, string];
    // Only the outbox rows of old-agent's alerts fail.
    await failOutboxInserts(knex(), dialect.name, true, `new.event like '%${nodeId}%'`);
    const sub = await api('POST', '/v1/notifications/subscriptions', { channel_id: 'ops', event_types: ['alert.firing'], resource_ids: [nodeId, otherId] });
    expect(sub.status, sub.text).to.equal(201);
    const alertOf = async (id: string) => ((await api('GET', `/v1/alerts?rule=agent_outdated&resource_id=${id}`)).json.data as Array<Record<string, any>>).find((a) => a.state === 'firing');
    const deliveries = async () => (await api('GET', '/v1/notifications/deliveries?event_type=alert.firing')).json.data as Array<Record<string, any>>;

    // Its agent reports an old version: agent_outdated fires; each announcement fails after its outbox insert (logged with the alert's id).
    const beat = await (await FakeAgent.forNode(t, nodeId)).heartbeat({ agent_version: '0.0.1' });
    expect(beat.status, beat.text).to.equal(200);
    const firing = await waitFor(() => alertOf(nodeId), { timeoutMs: 15_000, what: 'agent_outdated to fire' });
    const failures = () => t.logs.filter((l) => l.includes(`"alert":"${firing.id}"`) && l.includes(FORCED)).length;
    await waitFor(() => failures() >= 2, { timeoutMs: 15_000, what: 'two checks to fail after the outbox insert' });
    // Neither part stayed: no delivery, nothing sent.
    expect(await deliveries()).to.deep.equal([]);
    expect(receiver.requests).to.deep.equal([]);

    // Another node's alert, newer (checked after the failing one at every check), is announced and delivered meanwhile.
    const other = await (await FakeAgent.forNode(t, otherId)).heartbeat({ agent_version: '0.0.1' });
    expect(other.status, other.text).to.equal(200);
    const otherFiring = await waitFor(() => alertOf(otherId), { timeoutMs: 15_000, what: "the other node's agent_outdated to fire" });
    const otherDelivered = await waitFor(async () => (await deliveries()).find((d) => d.status === 'delivered'), { timeoutMs: 15_000, what: "the other node's alert to be delivered" });
    expect(otherDelivered.event.data).to.include({ id: otherFiring.id, resource_id: otherId });
    const stillFailing = failures();
    await waitFor(() => failures() > stillFailing, { timeoutMs: 15_000, what: 'the failing alert to fail again after the other was announced' });
    expect((await deliveries()).map((d) => d.event.data.id)).to.deep.equal([otherFiring.id]);

    await failOutboxInserts(knex(), dialect.name, false);
    const delivered = await waitFor(async () => (await deliveries()).find((d) => d.status === 'delivered' && d.event.data.id === firing.id), {
      timeoutMs: 15_000,
      what: 'the alert to be delivered once the store takes the outbox row',
    });
    expect(delivered.event.data).to.include({ id: firing.id, rule: 'agent_outdated', resource_id: nodeId });
    // Two more checks: an announcement marked but not delivered, or announced twice, would show now.
    const checks = failures();
    await waitFor(() => receiver.requests.length >= 2, { timeoutMs: 5000, what: 'the receiver to get it' });
    await new Promise((r) => setTimeout(r, 2500));
    expect(failures()).to.equal(checks);
    expect(await deliveries()).to.have.length(2);
    for (const id of [firing.id, otherFiring.id]) expect(receiver.requests.filter((r) => r.body?.data?.id === id)).to.have.length(1);
    expect(receiver.requests.every((r) => r.verified)).to.equal(true);
  });
});
