import { expect } from 'chai';
import { FakeAgent, waitFor } from '../../support/agents.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, type Credentials } from '../../support/identity.js';
import { Receiver } from '../notifications/receiver.js';

const FORCED = 'forced failure after the outbox insert';

/**
 * An alert's announcement (its mark) and its notification (the outbox rows) are written in one
 * transaction: a failure after the outbox insert leaves neither — the alert is announced again at
 * the next check and delivered once the store takes it. With the notification written after the
 * mark (the bus), such a failure lost it for good. The failure is a trigger on the outbox table
 * that aborts every insert, as a full disk or a lost connection at that point would.
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
  const failOutboxInserts = async (on: boolean) => {
    if (dialect.name === 'postgres') {
      if (on) {
        await knex().raw(`create function fail_outbox() returns trigger language plpgsql as $$ begin raise exception '${FORCED}'; end $$`);
        await knex().raw('create trigger fail_outbox after insert on notification_deliveries for each row execute function fail_outbox()');
      } else {
        await knex().raw('drop trigger fail_outbox on notification_deliveries');
        await knex().raw('drop function fail_outbox()');
      }
    } else if (on) {
      await knex().raw(`create trigger fail_outbox after insert on notification_deliveries begin select raise(abort, '${FORCED}'); end`);
    } else {
      await knex().raw('drop trigger fail_outbox');
    }
  };

  it('a failure after the outbox insert leaves the alert unannounced and undelivered; it is delivered once, at the next check that succeeds', async function () {
    this.timeout(60_000);
    const channel = await api('POST', '/v1/notifications/channels', { name: 'ops', kind: 'webhook', url: receiver.url });
    expect(channel.status, channel.text).to.equal(201);
    receiver.secret = channel.json.data.secret;
    await failOutboxInserts(true);
    const node = await api('POST', '/v1/nodes', { name: 'old-agent' });
    expect(node.status, node.text).to.equal(201);
    const nodeId = node.json.data.id as string;
    const sub = await api('POST', '/v1/notifications/subscriptions', { channel_id: 'ops', event_types: ['alert.firing'], resource_ids: [nodeId] });
    expect(sub.status, sub.text).to.equal(201);

    // Its agent reports an old version: agent_outdated fires; each announcement fails after its outbox insert (the loop logs the error).
    const agent = await FakeAgent.forNode(t, nodeId);
    const beat = await agent.heartbeat({ agent_version: '0.0.1' });
    expect(beat.status, beat.text).to.equal(200);
    const firing = await waitFor(async () => ((await api('GET', `/v1/alerts?rule=agent_outdated&resource_id=${nodeId}`)).json.data as Array<Record<string, any>>).find((a) => a.state === 'firing'), {
      timeoutMs: 15_000,
      what: 'agent_outdated to fire',
    });
    const failures = () => t.logs.filter((l) => l.includes('"loop":"alerts:evaluate"') && l.includes(FORCED)).length;
    await waitFor(() => failures() >= 2, { timeoutMs: 15_000, what: 'two checks to fail after the outbox insert' });
    // Neither part stayed: no delivery, nothing sent.
    expect((await api('GET', '/v1/notifications/deliveries?event_type=alert.firing')).json.data).to.deep.equal([]);
    expect(receiver.requests).to.deep.equal([]);

    await failOutboxInserts(false);
    const delivered = await waitFor(
      async () => ((await api('GET', '/v1/notifications/deliveries?event_type=alert.firing')).json.data as Array<Record<string, any>>).find((d) => d.status === 'delivered'),
      { timeoutMs: 15_000, what: 'the alert to be delivered once the store takes the outbox row' },
    );
    expect(delivered.event.data).to.include({ id: firing.id, rule: 'agent_outdated', resource_id: nodeId });
    // Two more checks: an announcement marked but not delivered, or announced twice, would show now.
    const checks = failures();
    await waitFor(() => receiver.requests.length >= 1, { timeoutMs: 5000, what: 'the receiver to get it' });
    await new Promise((r) => setTimeout(r, 2500));
    expect(failures()).to.equal(checks);
    expect((await api('GET', '/v1/notifications/deliveries?event_type=alert.firing')).json.data).to.have.length(1);
    expect(receiver.requests.filter((r) => r.body?.data?.id === firing.id)).to.have.length(1);
    expect(receiver.requests[0]!.verified).to.equal(true);
  });
});
