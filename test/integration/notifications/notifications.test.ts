import { expect } from 'chai';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { randomToken } from '../../../core/ids.js';
import { waitFor } from '../../support/agents.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, type Credentials } from '../../support/identity.js';
import { TestSmtpServer } from '../../support/smtp.js';
import { hangarCli } from '../runner/support.js';
import { Receiver } from './receiver.js';
import type { AlertAnnouncement } from '../../../plugins/alerts/api.js';
import { alertNotification, NotificationsRef } from '../../../plugins/notifications/api.js';

const PLUGINS = ['system', 'iam', 'nodes', 'notifications'];

/** Fast retries, loopback receivers allowed (the refusal of both is checked against the defaults below). */
const LOOPBACK = { allow_http: true, allow_private_addresses: true, retry_base_seconds: 0.2, retry_max_seconds: 0.5, poll_interval_ms: 100, timeout_seconds: 5 };

/**
 * Notifications through the API and the CLI against a real HTTP receiver on loopback (signature
 * checked as docs/notifications.md tells receivers to) and the SMTP server the tests run. Events
 * are made the way an operator makes them: creating a node record is a `node.created` event.
 */
describeEachDialect('notifications: signed webhooks and email from a durable outbox', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  let smtp: TestSmtpServer;
  let smtpPort: number;
  const receiver = new Receiver();
  const storage = dialect.freshStorage();
  const run = randomToken(6).toLowerCase();
  let channelId: string;
  let nodes = 0;

  const start = () =>
    startHangar(dialect, { plugins: PLUGINS, storage, overrides: { notifications: LOOPBACK, mail: { host: '127.0.0.1', port: smtpPort, starttls: 'off' } } });
  const api = (method: string, p: string, body?: unknown) => t.request(method, p, { body, headers: bearer(admin.token) });
  /** A node.created event: answers the node's id. */
  const newNode = async () => {
    const res = await api('POST', '/v1/nodes', { name: `n${++nodes}-${run}` });
    expect(res.status, res.text).to.equal(201);
    return res.json.data.id as string;
  };
  /** An alert's announcement as plugins/alerts writes it: its notification in a transaction of the store (NotificationsApi.prepare). */
  const announce = async (state: 'firing' | 'resolved', a: AlertAnnouncement) => {
    const write = await t.hangar.services.provided.find(NotificationsRef)!.prepare(alertNotification(state, a));
    if (write) await t.hangar.services.db.knex.transaction(write);
  };
  const deliveriesOf = async (nodeId: string) =>
    ((await api('GET', `/v1/notifications/deliveries?limit=1000`)).json.data as Array<Record<string, any>>).filter((d) => d.event.resource?.id === nodeId);
  const delivered = (nodeId: string, channel = channelId, timeoutMs = 20_000) =>
    waitFor(async () => (await deliveriesOf(nodeId)).find((d) => d.channel_id === channel && d.status === 'delivered'), { timeoutMs, intervalMs: 100, what: `node ${nodeId}'s event to be delivered` });

  before(async function () {
    this.timeout(60_000);
    smtp = new TestSmtpServer();
    smtpPort = await smtp.start();
    await receiver.start();
    t = await start();
    admin = await bootstrapAdmin(t);
  });

  after(async function () {
    this.timeout(30_000);
    await t?.stop();
    await receiver.stop();
    await smtp?.stop();
  });

  it('creates a webhook channel whose secret is answered once, and tests it against the receiver', async () => {
    const res = await api('POST', '/v1/notifications/channels', { name: `hook-${run}`, kind: 'webhook', url: receiver.url, headers: { Authorization: 'Bearer receiver-token' } });
    expect(res.status, res.text).to.equal(201);
    expect(res.json.data.secret).to.match(/^whsec_/);
    // Only the origin is shown: a path can be a credential (Mattermost's /hooks/<key>).
    expect(res.json.data).to.include({ kind: 'webhook', signed: true, url: `http://127.0.0.1:${receiver.port}/…` });
    expect(res.json.data.header_names).to.deep.equal(['Authorization']);
    receiver.secret = res.json.data.secret;
    channelId = res.json.data.id;
    const got = await api('GET', `/v1/notifications/channels/${channelId}`);
    expect(got.json.data).to.not.have.property('secret');
    expect(got.text).to.not.include(receiver.secret!).and.not.include('receiver-token');

    const tested = await api('POST', `/v1/notifications/channels/${channelId}/test`);
    expect(tested.status, tested.text).to.equal(200);
    expect(tested.json.data).to.include({ ok: true, status_code: 200, error: null });
    expect(tested.json.data.latency_ms).to.be.a('number');
    const request = receiver.requests.at(-1)!;
    expect(request.event).to.equal('notification.test');
    expect(request.verified).to.equal(true);
    expect(request.headers.authorization).to.equal('Bearer receiver-token');

    // What a receiver that fails says comes back too.
    receiver.mode = 'fail';
    const failing = await api('POST', `/v1/notifications/channels/${channelId}/test`);
    receiver.mode = 'ok';
    expect(failing.json.data).to.include({ ok: false, status_code: 503 });
    expect(failing.json.data.error).to.include('receiver unavailable');

    // An answer that never ends is read up to 64 KiB and dropped: the status decides, no timeout.
    receiver.mode = 'flood';
    const flooded = await api('POST', `/v1/notifications/channels/${channelId}/test`);
    receiver.mode = 'ok';
    expect(flooded.json.data).to.include({ ok: true, status_code: 200, error: null });
  });

  it('delivers an event to a subscribed receiver exactly once, signed, with the delivery id as its idempotency key', async () => {
    const sub = await api('POST', '/v1/notifications/subscriptions', { channel_id: `hook-${run}`, event_types: ['node.created'] });
    expect(sub.status, sub.text).to.equal(201);
    expect(sub.json.data).to.include({ channel_id: channelId, min_severity: 'info' });
    const first = await newNode();
    const delivery = await delivered(first);
    expect(delivery.attempts).to.have.length(1);
    expect(delivery.attempts[0]).to.include({ status_code: 200, error: null });
    // A second event arriving after it: by then a duplicate of the first would have come too.
    const second = await newNode();
    await delivered(second);
    const got = receiver.withKey(delivery.id);
    expect(got).to.have.length(1);
    expect(got[0]!.verified).to.equal(true);
    expect(got[0]!.body).to.include({ type: 'node.created', id: delivery.event_id, severity: 'info' });
    expect(got[0]!.body.resource).to.deep.equal({ type: 'node', id: first });
    expect(receiver.requests.filter((r) => r.body.resource?.id === first)).to.have.length(1);
  });

  it('delivers alerts the alerts plugin publishes, filtered by resource and least severity', async () => {
    const sub = await api('POST', '/v1/notifications/subscriptions', { channel_id: channelId, event_types: ['alert.firing', 'alert.resolved'], resource_ids: [`node-a${run}`], min_severity: 'critical' });
    expect(sub.status, sub.text).to.equal(201);
    // As plugins/alerts announces them.
    const alert = (resource: string, severity: string, message: string) => ({ id: `alert-${message}`, rule: 'node_offline', resource_type: 'node', resource_id: resource, subject: null, severity, started_at: new Date().toISOString(), resolved_at: null, message });
    await announce('firing', alert(`node-a${run}`, 'warning', `low-${run}`));
    await announce('firing', alert(`node-b${run}`, 'critical', `other-${run}`));
    await announce('resolved', alert(`node-a${run}`, 'critical', `resolved-${run}`));
    await announce('firing', alert(`node-a${run}`, 'critical', `down-${run}`));
    const done = await delivered(`node-a${run}`);
    expect(done.event).to.include({ type: 'alert.firing', severity: 'critical' });
    expect(done.event.data).to.include({ rule: 'node_offline', id: `alert-down-${run}` });
    const got = receiver.withKey(done.id);
    expect(got).to.have.length(1);
    expect(got[0]!.body.message).to.include(`down-${run}`);
    // The warning, the other resource and the resolution (info) were below the filters: no delivery of theirs.
    const alerts = ((await api('GET', '/v1/notifications/deliveries?event_type=alert.firing')).json.data as unknown[]).concat((await api('GET', '/v1/notifications/deliveries?event_type=alert.resolved')).json.data);
    expect(alerts).to.have.length(1);
    expect((await api('DELETE', `/v1/notifications/subscriptions/${sub.json.data.id}`)).status).to.equal(204);
  });

  it('retries while the receiver is down and delivers after it comes back, with the same idempotency key', async function () {
    this.timeout(60_000);
    await receiver.stop();
    const nodeId = await newNode();
    const failing = await waitFor(async () => {
      const d = (await deliveriesOf(nodeId))[0];
      return d && d.attempts.length >= 2 ? d : null;
    }, { timeoutMs: 20_000, what: 'two failed attempts' });
    expect(failing.status).to.be.oneOf(['pending', 'sending']);
    expect(failing.attempts[0].status_code).to.equal(null);
    expect(failing.attempts[0].error).to.match(/ECONNREFUSED/);
    await receiver.start();
    const done = await delivered(nodeId);
    expect(done.attempts.at(-1)).to.include({ status_code: 200 });
    const got = receiver.withKey(done.id);
    expect(got).to.have.length(1);
    expect(got[0]!.verified).to.equal(true);
  });

  it('delivers what a stopped control plane was retrying once a new one runs on the same store', async function () {
    this.timeout(90_000);
    receiver.mode = 'fail';
    const nodeId = await newNode();
    const retried = await waitFor(async () => {
      const d = (await deliveriesOf(nodeId))[0];
      return d && d.attempts.length >= 1 ? d : null;
    }, { timeoutMs: 20_000, what: 'a failed attempt' });
    expect(retried.attempts[0].status_code).to.equal(503);
    await t.stop();
    receiver.mode = 'ok';
    t = await start();
    const done = await delivered(nodeId, channelId, 30_000);
    expect(done.id).to.equal(retried.id);
    expect(done.attempts.at(-1)).to.include({ status_code: 200 });
    expect(receiver.withKey(done.id).filter((r) => r.body.resource?.id === nodeId).length).to.be.at.least(2);
  });

  it('answers API requests while a slow receiver holds a delivery', async function () {
    this.timeout(60_000);
    receiver.mode = 'hold';
    const nodeId = await newNode();
    await waitFor(() => receiver.holding > 0, { timeoutMs: 10_000, what: 'the receiver to hold a delivery' });
    // The receiver has not answered; the API does, reads and writes alike.
    const list = await api('GET', '/v1/notifications/channels');
    expect(list.status).to.equal(200);
    const other = await newNode();
    expect(other).to.match(/^node-/);
    expect(receiver.holding).to.be.greaterThan(0);
    const pending = (await deliveriesOf(nodeId))[0]!;
    expect(pending.status).to.equal('sending');
    receiver.release();
    await delivered(nodeId);
    await delivered(other);
  });

  /**
   * Runs `body` with a second receiver and a channel of its own subscribed as `subscription` says,
   * while this channel's receiver holds what it gets; deletes that channel and releases after.
   */
  async function whileHolding(name: string, subscription: Record<string, unknown>, body: (other: Receiver, otherId: string) => Promise<void>) {
    const other = new Receiver();
    await other.start();
    try {
      const res = await api('POST', '/v1/notifications/channels', { name: `${name}-${run}`, kind: 'webhook', url: other.url });
      expect(res.status, res.text).to.equal(201);
      const otherId = res.json.data.id as string;
      const sub = await api('POST', '/v1/notifications/subscriptions', { channel_id: otherId, ...subscription });
      expect(sub.status, sub.text).to.equal(201);
      receiver.mode = 'hold';
      await body(other, otherId);
      expect((await api('DELETE', `/v1/notifications/channels/${otherId}`)).status).to.equal(204);
    } finally {
      receiver.release();
      await other.stop();
    }
  }

  it('gives a receiver that holds its deliveries no more than notifications.channel_concurrency slots: another channel’s deliveries go on', async function () {
    this.timeout(60_000);
    await whileHolding('other', { event_types: ['node.created'] }, async (_other, otherId) => {
      const ids = [await newNode(), await newNode(), await newNode()];
      // The other channel gets all three while this one's receiver holds two (the default channel_concurrency) and the third waits.
      for (const id of ids) await delivered(id, otherId);
      await waitFor(() => receiver.holding === 2, { timeoutMs: 10_000, what: 'the receiver to hold two deliveries' });
      const held = (await Promise.all(ids.map(deliveriesOf))).map((list) => list.find((d) => d.channel_id === channelId)!.status).sort();
      expect(held).to.deep.equal(['pending', 'sending', 'sending']);
      expect(receiver.holding).to.equal(2);
      receiver.release();
      for (const id of ids) await delivered(id);
    });
  });

  it('sends another channel’s delivery while a stuck receiver holds a backlog of its own', async function () {
    this.timeout(90_000);
    await whileHolding('backlog-b', { event_types: ['alert.firing'], resource_ids: [`node-backlog${run}`] }, async (other, otherId) => {
      // 40 events for this channel: more than the sender used to look at (4 × its free slots, at most 32), all older than the other channel’s one.
      const backlog: string[] = [];
      for (let i = 0; i < 40; i++) backlog.push(await newNode());
      await waitFor(() => receiver.holding > 0, { timeoutMs: 10_000, what: 'the receiver to hold a delivery' });
      await announce('firing', { id: `alert-backlog-${run}`, rule: 'node_offline', resource_type: 'node', resource_id: `node-backlog${run}`, subject: null, severity: 'critical', started_at: new Date().toISOString(), resolved_at: null, message: `backlog-${run}` });
      await delivered(`node-backlog${run}`, otherId);
      expect(other.requests.filter((r) => r.body.message?.includes(`backlog-${run}`))).to.have.length(1);
      const waiting = (await Promise.all(backlog.map(deliveriesOf))).flat().filter((d) => d.channel_id === channelId && d.status !== 'delivered');
      expect(waiting.length).to.be.greaterThan(32);
      receiver.release();
      for (const id of backlog) await delivered(id, channelId, 30_000);
    });
  });

  it('records a failed attempt (no 500, no delivery stuck sending) when a channel cannot be sent to, and fails at once one whose channel is gone', async function () {
    this.timeout(60_000);
    const res = await api('POST', '/v1/notifications/channels', { name: `broken-${run}`, kind: 'webhook', url: receiver.url });
    expect(res.status, res.text).to.equal(201);
    const id = res.json.data.id as string;
    const box = t.hangar.services.ca.secretBox('notifications');
    const knex = t.hangar.services.db.knex;
    // A header value Node refuses, as stored before the schema refused it: the test answers what failed.
    await knex('notification_channels').where({ id }).update({ headers_sealed: box.seal(JSON.stringify({ 'X-Token': 'caf€' })), header_names: JSON.stringify(['X-Token']) });
    const tested = await api('POST', `/v1/notifications/channels/${id}/test`);
    expect(tested.status, tested.text).to.equal(200);
    expect(tested.json.data).to.include({ ok: false, status_code: null });
    expect(tested.json.data.error).to.include('X-Token').and.not.include('caf');
    // A stored value that does not open (another key): each delivery attempt is recorded failed, retried.
    await knex('notification_channels').where({ id }).update({ url_sealed: 'not-a-sealed-value' });
    expect((await api('POST', `/v1/notifications/channels/${id}/test`)).json.data.error).to.include('cannot be opened');
    expect((await api('POST', '/v1/notifications/subscriptions', { channel_id: id, event_types: ['node.created'] })).status).to.equal(201);
    const nodeId = await newNode();
    const failing = await waitFor(async () => (await deliveriesOf(nodeId)).find((d) => d.channel_id === id && d.attempts.length >= 2), { timeoutMs: 20_000, what: 'two recorded failed attempts' });
    expect(failing.attempts[0].error).to.include('cannot be opened');
    expect(failing.status).to.be.oneOf(['pending', 'sending']);
    // The channel row gone under a delivery (deleted by another control plane between matching and writing): failed at once, not retried for retry_hours.
    await knex('notification_channels').where({ id }).delete();
    const gone = await waitFor(async () => (await deliveriesOf(nodeId)).find((d) => d.channel_id === id && d.status === 'failed'), { timeoutMs: 20_000, what: 'the delivery to fail' });
    expect(gone.last_error).to.equal('the channel was deleted');
    await knex('notification_subscriptions').where({ channel_id: id }).delete();
    await knex('notification_attempts').where({ delivery_id: gone.id }).delete();
    await knex('notification_deliveries').where({ channel_id: id }).delete();
  });

  it('redelivers a delivered notification with the same idempotency key', async () => {
    const nodeId = await newNode();
    const done = await delivered(nodeId);
    const again = await api('POST', `/v1/notifications/deliveries/${done.id}/redeliver`);
    expect(again.status, again.text).to.equal(202);
    await waitFor(() => receiver.withKey(done.id).length === 2, { timeoutMs: 10_000, what: 'the redelivery' });
    const after = await delivered(nodeId);
    expect(after.attempts).to.have.length(2);
    const one = await api('GET', `/v1/notifications/deliveries/${done.id}`);
    expect(one.status, one.text).to.equal(200);
    expect(one.json.data).to.include({ id: done.id, status: 'delivered' });
    expect(one.json.data.attempts).to.have.length(2);
    expect((await api('GET', '/v1/notifications/deliveries/ndl-nothing')).status).to.equal(404);
    expect((await api('POST', '/v1/notifications/deliveries/ndl-nothing/redeliver')).status).to.equal(404);
  });

  it('mails events to an email channel through the SMTP server, and tests it', async () => {
    const to = `ops-${run}@example.test`;
    const res = await api('POST', '/v1/notifications/channels', { name: `mail-${run}`, kind: 'email', recipients: [to] });
    expect(res.status, res.text).to.equal(201);
    expect(res.json.data).to.not.have.property('secret');
    const mailChannel = res.json.data.id as string;
    const tested = await api('POST', `/v1/notifications/channels/${mailChannel}/test`);
    expect(tested.json.data).to.include({ ok: true, error: null });
    await smtp.waitFor(to);
    const sub = await api('POST', '/v1/notifications/subscriptions', { channel_id: mailChannel, event_types: ['node.created'] });
    expect(sub.status, sub.text).to.equal(201);
    const before = smtp.messages.length;
    const nodeId = await newNode();
    const mail = await smtp.waitFor(to, before);
    expect(mail.subject).to.include('node.created');
    expect(mail.text).to.include(nodeId);
    const done = await delivered(nodeId, mailChannel);
    expect(mail.text).to.include(done.id);
  });

  it('sends a Slack channel Slack’s message JSON, unsigned', async () => {
    const res = await api('POST', '/v1/notifications/channels', { name: `slack-${run}`, kind: 'slack', url: `${receiver.url}/services/T0/B0/XXXX` });
    expect(res.status, res.text).to.equal(201);
    expect(res.json.data).to.include({ signed: false, url: `http://127.0.0.1:${receiver.port}/…` });
    const tested = await api('POST', `/v1/notifications/channels/${res.json.data.id}/test`);
    expect(tested.json.data).to.include({ ok: true });
    const got = receiver.requests.at(-1)!;
    expect(got.body.text).to.include('notification.test');
    expect(got.headers).to.not.have.property('x-hangar-signature');
    expect(got.key).to.match(/^ntest-/);
  });

  it('refuses bad input with a 400 naming the field', async () => {
    const bad = async (p: string, body: unknown, field: string) => {
      const res = await api('POST', p, body);
      expect(res.status, res.text).to.equal(400);
      expect(res.json.message).to.include(field);
      return res.json.message as string;
    };
    expect(await bad('/v1/notifications/subscriptions', { channel_id: channelId, event_types: ['node.created', 'node.exploded'] }, 'body.event_types[1]')).to.include('node.exploded');
    await bad('/v1/notifications/subscriptions', { channel_id: 'nch-none', event_types: ['node.created'] }, 'body.channel_id');
    await bad('/v1/notifications/channels', { name: `x-${run}`, kind: 'webhook', url: 'not a url' }, 'body.url');
    await bad('/v1/notifications/channels', { name: `x-${run}`, kind: 'webhook' }, 'body.url');
    await bad('/v1/notifications/channels', { name: `x-${run}`, kind: 'email' }, 'body.recipients');
    await bad('/v1/notifications/channels', { name: `x-${run}`, kind: 'webhook', url: receiver.url, headers: { 'X-Hangar-Signature': 'forged' } }, 'body.headers.X-Hangar-Signature');
    await bad('/v1/notifications/channels', { name: `x-${run}`, kind: 'pager', url: receiver.url }, 'kind');
    // Header values Node cannot send: above \xff, control characters.
    await bad('/v1/notifications/channels', { name: `x-${run}`, kind: 'webhook', url: receiver.url, headers: { 'X-Token': 'caf€' } }, 'X-Token');
    await bad('/v1/notifications/channels', { name: `x-${run}`, kind: 'webhook', url: receiver.url, headers: { 'X-Token': 'a\u0001b' } }, 'X-Token');
  });

  it('round-trips channels, subscriptions and deliveries through the CLI', async function () {
    this.timeout(120_000);
    const work = mkdtempSync(path.join(os.tmpdir(), 'hangar-notify-cli-'));
    const ca = path.join(work, 'ca.pem');
    writeFileSync(ca, t.caPem);
    const env = { XDG_CONFIG_HOME: work, HANGAR_API_URL: t.url, HANGAR_ACCESS_KEY: admin.accessKeyId, HANGAR_SECRET_KEY: admin.secretAccessKey, HANGAR_CA_FILE: ca };
    const cli = async (...args: string[]) => {
      const res = await hangarCli(args, { env, timeoutMs: 60_000 });
      expect(res.code, `hangar ${args.join(' ')}\n${res.stdout}\n${res.stderr}`).to.equal(0);
      return res.stdout;
    };
    try {
      // The URL and a credential header from files, not the command line.
      writeFileSync(path.join(work, 'url'), `${receiver.url}\n`);
      writeFileSync(path.join(work, 'headers'), '# the receiver’s token\nAuthorization: Bearer file-token\n');
      const created = await cli('notify', 'channel', 'create', `cli-${run}`, '--kind', 'webhook', '--url-file', path.join(work, 'url'), '--headers-file', path.join(work, 'headers'));
      const secret = /secret: +(whsec_\S+)/.exec(created)?.[1];
      expect(secret, created).to.be.a('string');
      const id = /\((nch-[0-9a-z]+)\)/.exec(created)![1]!;
      expect(await cli('notify', 'channel', 'list')).to.include(`cli-${run}`);
      expect(await cli('notify', 'channel', 'get', `cli-${run}`)).to.include(id).and.not.include(secret!).and.not.include('/hook').and.not.include('file-token');
      receiver.secret = secret!;
      expect(await cli('notify', 'channel', 'test', `cli-${run}`)).to.match(/ok: 200/);
      expect(receiver.requests.at(-1)!.headers.authorization).to.equal('Bearer file-token');
      expect(receiver.requests.at(-1)!.raw).to.include(id);
      const subscribed = await cli('notify', 'subscribe', `cli-${run}`, '--event', 'node.created', '--min-severity', 'info');
      const subscriptionId = /\((nsub-[0-9a-z]+)\)/.exec(subscribed)?.[1];
      expect(subscriptionId, subscribed).to.be.a('string');
      const subscriptions = await cli('notify', 'subscriptions', '--channel', id);
      expect(subscriptions).to.include(subscriptionId!).and.include('node.created').and.include(id);
      const nodeId = await newNode();
      const done = await delivered(nodeId, id);
      expect(receiver.withKey(done.id)[0]!.verified).to.equal(true);
      const listed = await cli('notify', 'deliveries', '--channel', id);
      expect(listed).to.include(done.id).and.include('delivered');
      const shown = await cli('notify', 'deliveries', '--id', done.id);
      expect(shown).to.include(done.id).and.include('delivered').and.include('node.created');
      expect(await cli('notify', 'deliveries', '--redeliver', done.id)).to.include(done.id);
      await waitFor(() => receiver.withKey(done.id).length === 2, { timeoutMs: 10_000, what: 'the redelivery from the CLI' });
      const refused = await hangarCli(['notify', 'subscribe', `cli-${run}`, '--event', 'node.nope'], { env });
      expect(refused.code).to.equal(1);
      expect(refused.stderr).to.include('body.event_types[0]');
      // Unsubscribed: no longer listed, and the next node.created makes no delivery to the channel.
      expect(await cli('notify', 'unsubscribe', subscriptionId!)).to.include(`deleted subscription ${subscriptionId}`);
      expect(await cli('notify', 'subscriptions', '--channel', id)).not.to.include(subscriptionId!);
      expect(((await api('GET', `/v1/notifications/subscriptions?channel_id=${id}`)).json.data as unknown[])).to.deep.equal([]);
      // A delivery is written with its event (the node's 201 came after its outbox rows): none for this channel now.
      const unheard = await newNode();
      expect((await deliveriesOf(unheard)).filter((d) => d.channel_id === id)).to.deep.equal([]);
      const missing = await hangarCli(['notify', 'unsubscribe', subscriptionId!], { env });
      expect(missing.code).to.equal(1);
      expect(missing.stderr).to.include(subscriptionId!);
      expect(await cli('notify', 'channel', 'delete', `cli-${run}`)).to.include('deleted');
      expect((await api('GET', `/v1/notifications/channels/${id}`)).status).to.equal(404);
    } finally {
      receiver.secret = null;
      rmSync(work, { recursive: true, force: true });
    }
  });
});

describeEachDialect('notifications: receivers refused by default (server-side request forgery)', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  const api = (method: string, p: string, body?: unknown) => t.request(method, p, { body, headers: bearer(admin.token) });

  before(async function () {
    this.timeout(60_000);
    t = await startHangar(dialect, { plugins: PLUGINS });
    admin = await bootstrapAdmin(t);
  });
  after(() => t?.stop());

  for (const [what, url, says] of [
    ['a plain http', 'http://example.com/hook', 'notifications.allow_http'],
    ['a loopback', 'https://127.0.0.1:9/hook', 'notifications.allow_private_addresses'],
    ['a name of loopback', 'https://localhost:9/hook', 'notifications.allow_private_addresses'],
    ['a private', 'https://10.1.2.3/hook', 'notifications.allow_private_addresses'],
    ['a link-local (cloud metadata)', 'https://169.254.169.254/latest', 'notifications.allow_private_addresses'],
    ['an IPv6 loopback', 'https://[::1]/hook', 'notifications.allow_private_addresses'],
    ['an IPv4-mapped IPv6 private', 'https://[::ffff:192.168.1.1]/hook', 'notifications.allow_private_addresses'],
    ['a NAT64 loopback (hex form)', 'https://[64:ff9b::7f00:1]/hook', 'notifications.allow_private_addresses'],
    ['a 6to4 private', 'https://[2002:a00:1::1]/hook', 'notifications.allow_private_addresses'],
  ] as const) {
    it(`refuses ${what} receiver URL with a 400 naming body.url`, async () => {
      const res = await api('POST', '/v1/notifications/channels', { name: `ssrf-${randomToken(6).toLowerCase()}`, kind: 'webhook', url });
      expect(res.status, res.text).to.equal(400);
      expect(res.json.message).to.include('body.url').and.include(says);
    });
  }

  it('refuses the same on a change of URL', async () => {
    const res = await api('POST', '/v1/notifications/channels', { name: `mail-${randomToken(6).toLowerCase()}`, kind: 'discord', url: 'https://192.0.2.10/api/webhooks/1/x' });
    expect(res.status, res.text).to.equal(201);
    const patched = await api('PATCH', `/v1/notifications/channels/${res.json.data.id}`, { url: 'https://192.168.0.1/x' });
    expect(patched.status, patched.text).to.equal(400);
    expect(patched.json.message).to.include('body.url');
  });
});
