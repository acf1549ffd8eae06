import { expect } from 'chai';
import { waitFor } from '../../support/agents.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, type Credentials } from '../../support/identity.js';
import { Receiver } from './receiver.js';

/** A retry period of 3.6 s (`retry_hours: 0.001`), retried every 0.2–0.5 s: a handful of attempts, then given up. */
const RETRY_HOURS = 0.001;
const SHORT_RETRY = { allow_http: true, allow_private_addresses: true, retry_hours: RETRY_HOURS, retry_base_seconds: 0.2, retry_max_seconds: 0.5, poll_interval_ms: 100, timeout_seconds: 2 };

interface Delivery {
  id: string;
  status: string;
  give_up_at: string;
  created_at: string;
  last_error: string | null;
  event: { resource?: { id: string } };
  attempts: Array<{ status_code: number | null; error: string | null }>;
}

/**
 * A delivery whose receiver keeps failing (503) is retried for `notifications.retry_hours`, then
 * ends `failed`: listed as such with every attempt, retried no more, and redelivered by hand with
 * the same idempotency key once the receiver works again.
 */
describeEachDialect('notifications: a delivery given up after notifications.retry_hours', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  const receiver = new Receiver();
  const api = (method: string, p: string, body?: unknown) => t.request(method, p, { body, headers: bearer(admin.token) });

  before(async function () {
    this.timeout(60_000);
    await receiver.start();
    t = await startHangar(dialect, { plugins: ['system', 'iam', 'nodes', 'notifications'], overrides: { notifications: SHORT_RETRY } });
    admin = await bootstrapAdmin(t);
    const channel = await api('POST', '/v1/notifications/channels', { name: 'failing', kind: 'webhook', url: receiver.url });
    expect(channel.status, channel.text).to.equal(201);
    receiver.secret = channel.json.data.secret;
    expect((await api('POST', '/v1/notifications/subscriptions', { channel_id: 'failing', event_types: ['node.created'] })).status).to.equal(201);
  });

  after(async function () {
    this.timeout(30_000);
    await t?.stop();
    await receiver.stop();
  });

  it('ends failed with its attempts listed, sends no more, and is redelivered with the same key', async function () {
    this.timeout(60_000);
    receiver.mode = 'fail';
    const node = await api('POST', '/v1/nodes', { name: 'given-up' });
    expect(node.status, node.text).to.equal(201);
    const nodeId = node.json.data.id as string;
    const ofNode = async (status: string) =>
      ((await api('GET', `/v1/notifications/deliveries?status=${status}`)).json.data as Delivery[]).find((d) => d.event.resource?.id === nodeId);

    const failed = await waitFor(() => ofNode('failed'), { timeoutMs: 30_000, intervalMs: 200, what: 'the delivery to be given up' });
    expect(Date.parse(failed.give_up_at) - Date.parse(failed.created_at)).to.equal(RETRY_HOURS * 3600_000);
    expect(failed.attempts.length).to.be.at.least(3);
    expect(failed.attempts.every((a) => a.status_code === 503)).to.equal(true);
    expect(failed.last_error).to.be.a('string').and.include('503');
    expect(await ofNode('pending')).to.equal(undefined);
    const sent = receiver.withKey(failed.id);
    expect(sent).to.have.length(failed.attempts.length);
    // Given up: no attempt comes after, though retries came every 0.5 s at most.
    await new Promise((resolve) => setTimeout(resolve, 2000));
    expect(receiver.withKey(failed.id)).to.have.length(sent.length);
    const one = await api('GET', `/v1/notifications/deliveries/${failed.id}`);
    expect(one.json.data).to.include({ status: 'failed' });
    expect(one.json.data.attempts).to.have.length(failed.attempts.length);

    receiver.mode = 'ok';
    const again = await api('POST', `/v1/notifications/deliveries/${failed.id}/redeliver`);
    expect(again.status, again.text).to.equal(202);
    const done = await waitFor(() => ofNode('delivered'), { timeoutMs: 20_000, intervalMs: 200, what: 'the redelivery' });
    expect(done.id).to.equal(failed.id);
    expect(done.attempts).to.have.length(failed.attempts.length + 1);
    expect(done.attempts.at(-1)).to.include({ status_code: 200 });
    const all = receiver.withKey(failed.id);
    expect(all).to.have.length(failed.attempts.length + 1);
    expect(all.every((r) => r.verified && r.raw === all[0]!.raw)).to.equal(true);
  });
});
