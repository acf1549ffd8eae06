import { expect } from 'chai';
import { createHmac } from 'node:crypto';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Page } from 'playwright-core';
import { FakeAgent, FAST_NODES, waitFor } from '../support/agents.js';
import { logIn, navigate, openBrowser, requireBrowser, tableRow } from '../support/browser.js';
import { describeEachDialect } from '../support/dialects.js';
import { startHangar, type TestHangar } from '../support/hangar.js';
import { bearer, bootstrapAdmin, type Credentials } from '../support/identity.js';
import { loadConfig } from '../../core/config.js';

/**
 * The dashboard's Alerts and Notifications pages in chromium against a real control plane: a node
 * whose (simulated) agent is older than the control plane fires agent_outdated; the page lists it,
 * silences it for an hour (the API then says so) and ends the silence. A webhook channel made on
 * the Notifications page (its secret shown once), tested, subscribed to alerts; the delivery and
 * its attempt are listed, and its Redeliver sends it again with the same key; Unsubscribe ends the
 * subscription (the next alert is not delivered). On SQLite and PostgreSQL; the rules are
 * test/integration/alerts, delivery test/integration/notifications.
 */
describeEachDialect('the dashboard in chromium: alerts and notifications', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  let page: Page;
  let shot: (name: string) => Promise<unknown>;
  let closeBrowser: (() => Promise<void>) | undefined;
  let stopBeating = false;
  let beating: Promise<void> | undefined;
  /** A webhook receiver on loopback: what it was sent. */
  const received: Array<{ headers: IncomingHttpHeaders; body: string }> = [];
  let receiver: Server | undefined;

  before(async function () {
    this.timeout(120_000);
    requireBrowser(this);
    receiver = createServer((req, res) => {
      let body = '';
      req.on('data', (chunk: Buffer) => (body += chunk.toString()));
      req.on('end', () => {
        received.push({ headers: req.headers, body });
        res.writeHead(204).end();
      });
    });
    await new Promise<void>((resolve) => receiver!.listen(0, '127.0.0.1', resolve));
    t = await startHangar(dialect, {
      plugins: loadConfig({ env: {} }).plugins,
      overrides: { ...FAST_NODES, login: { port: 0 }, alerts: { interval_seconds: 1 }, notifications: { allow_http: true, allow_private_addresses: true, poll_interval_ms: 200 } },
    });
    admin = await bootstrapAdmin(t);
    const opened = await openBrowser();
    ({ page, shot } = opened);
    closeBrowser = opened.close;
  });
  after(async function () {
    this.timeout(60_000);
    stopBeating = true;
    await beating;
    await closeBrowser?.();
    await t?.stop();
    await new Promise((resolve) => (receiver ? receiver.close(resolve) : resolve(undefined)));
  });

  it('lists a firing alert, silences it for an hour and ends the silence', async function () {
    this.timeout(60_000);
    const created = await t.request('POST', '/v1/nodes', { body: { name: 'old-agent' }, headers: bearer(admin.token) });
    expect(created.status, created.text).to.equal(201);
    const agent = await FakeAgent.forNode(t, created.json.data.id as string);
    beating = (async () => {
      while (!stopBeating) {
        await agent.heartbeat({ agent_version: '0.0.1' });
        await new Promise((r) => setTimeout(r, 500));
      }
    })();
    const alert = await waitFor(
      async () => ((await t.request('GET', `/v1/alerts?state=firing&rule=agent_outdated&resource_id=${agent.nodeId}`, { headers: bearer(admin.token) })).json.data as Array<{ id: string }>)[0],
      { timeoutMs: 15_000, what: 'agent_outdated to fire' },
    );

    await logIn(page, t.url, admin.username, admin.password);
    await navigate(page, 'Alerts');
    await page.getByRole('heading', { name: 'Alerts' }).waitFor();
    const row = tableRow(page, 'Alerts', agent.nodeId);
    await row.waitFor();
    expect(await row.textContent()).to.contain('firing').and.to.contain('agent outdated').and.to.contain('0.0.1');
    await shot(`alerts-firing-${dialect.name}`);

    await row.getByRole('button', { name: 'Silence 1 h' }).click();
    await page.getByRole('dialog', { name: 'Silence the alert for an hour' }).getByRole('button', { name: 'Silence 1 h' }).click();
    await row.getByRole('button', { name: 'Unsilence' }).waitFor();
    const silenced = (await t.request('GET', `/v1/alerts/${alert.id}`, { headers: bearer(admin.token) })).json.data;
    expect(silenced.silenced).to.equal(true);
    expect(Date.parse(silenced.silenced_until) - Date.now()).to.be.within(55 * 60_000, 61 * 60_000);

    await row.getByRole('button', { name: 'Unsilence' }).click();
    await page.getByRole('dialog', { name: 'End the silence' }).getByRole('button', { name: 'Unsilence' }).click();
    await row.getByRole('button', { name: 'Silence 1 h' }).waitFor();
    expect((await t.request('GET', `/v1/alerts/${alert.id}`, { headers: bearer(admin.token) })).json.data.silenced).to.equal(false);
  });

  it('adds a webhook channel (its secret shown once), tests it, subscribes it to alerts, lists the signed delivery with its attempt, redelivers it and unsubscribes', async function () {
    this.timeout(60_000);
    const url = `http://127.0.0.1:${(receiver!.address() as AddressInfo).port}/hook`;
    await navigate(page, 'Notifications');
    await page.getByRole('heading', { name: 'Notifications' }).waitFor();

    await page.getByRole('button', { name: 'Add channel' }).click();
    const add = page.getByRole('dialog', { name: 'Add a notification channel' });
    await add.getByLabel('Name').fill('ops-hook');
    await add.getByLabel('URL').fill(url);
    await add.getByRole('button', { name: 'Add' }).click();
    const secretDialog = page.getByRole('dialog', { name: 'The channel’s signing secret' });
    const secret = await secretDialog.getByLabel('Signing secret').inputValue();
    expect(secret).to.have.length.greaterThan(20);
    await secretDialog.getByRole('button', { name: 'I have kept it' }).click();
    const channelRow = tableRow(page, 'Channels', 'ops-hook');
    await channelRow.waitFor();
    expect(await channelRow.textContent()).to.contain('webhook').and.to.contain('http://127.0.0.1').and.not.to.contain(secret);
    const channels = (await t.request('GET', '/v1/notifications/channels', { headers: bearer(admin.token) })).json.data as Array<{ id: string; name: string; secret?: string }>;
    expect(channels.find((c) => c.name === 'ops-hook')).to.include({ signed: true }).and.not.to.have.property('secret');

    // Test: the receiver gets notification.test signed with the secret the page showed.
    await channelRow.getByRole('button', { name: 'Test' }).click();
    await page.getByText('test sent to ops-hook: HTTP 204').waitFor();
    const test = received.find((r) => r.body.includes('notification.test'));
    expect(test, 'the receiver got the test').to.not.equal(undefined);
    const timestamp = String(test!.headers['x-hangar-timestamp']);
    const expected = `v1=${createHmac('sha256', secret).update(`${timestamp}.${test!.body}`).digest('hex')}`;
    expect(test!.headers['x-hangar-signature']).to.equal(expected);

    // Subscribe it to alerts; a node with an old agent fires agent_outdated, which is delivered.
    await page.getByRole('button', { name: 'Subscribe' }).click();
    const subscribe = page.getByRole('dialog', { name: 'Subscribe a channel to events' });
    await subscribe.getByLabel('Channel (id or name)').fill('ops-hook');
    await subscribe.getByRole('button', { name: 'Subscribe' }).click();
    await tableRow(page, 'Subscriptions', 'alert.firing').waitFor();
    const created = await t.request('POST', '/v1/nodes', { body: { name: 'older-agent' }, headers: bearer(admin.token) });
    expect(created.status, created.text).to.equal(201);
    const agent = await FakeAgent.forNode(t, created.json.data.id as string);
    await agent.heartbeat({ agent_version: '0.0.1' });
    await waitFor(async () => received.find((r) => r.body.includes('alert.firing') && r.body.includes(agent.nodeId)), { timeoutMs: 20_000, what: 'the alert delivered to the receiver' });

    await page.reload();
    await page.getByRole('heading', { name: 'Notifications' }).waitFor();
    const deliveryRow = tableRow(page, 'Deliveries', 'alert.firing');
    await deliveryRow.first().waitFor();
    expect(await deliveryRow.first().textContent()).to.contain('delivered');
    await deliveryRow.first().getByRole('button', { name: 'Attempts (1)' }).click();
    const attempts = page.getByRole('dialog', { name: /^Attempts of delivery/ });
    expect(await attempts.getByRole('table', { name: 'Attempts' }).textContent()).to.contain('204');
    await shot(`notifications-${dialect.name}`);
    await attempts.getByRole('button', { name: 'Close' }).click();

    // Redeliver: the receiver gets the alert again with the same idempotency key; the row then counts two attempts.
    const alertDeliveries = (await t.request('GET', '/v1/notifications/deliveries?event_type=alert.firing', { headers: bearer(admin.token) })).json.data as Array<{ id: string; event: { resource?: { id: string } } }>;
    expect(alertDeliveries.map((d) => d.event.resource?.id)).to.deep.equal([agent.nodeId]);
    const [delivery] = alertDeliveries;
    const withKey = () => received.filter((r) => r.headers['x-hangar-idempotency-key'] === delivery!.id);
    expect(withKey()).to.have.length(1);
    await deliveryRow.first().getByRole('button', { name: 'Redeliver' }).click();
    await page.getByRole('dialog', { name: 'Send the delivery again' }).getByRole('button', { name: 'Redeliver' }).click();
    await page.getByText('delivery queued again').waitFor();
    await waitFor(() => withKey().length === 2, { timeoutMs: 20_000, what: 'the redelivery at the receiver' });
    expect(withKey()[1]!.body).to.equal(withKey()[0]!.body);
    await page.reload();
    await deliveryRow.first().getByRole('button', { name: 'Attempts (2)' }).waitFor();

    // Unsubscribe: the row goes, and the next alert makes no delivery.
    const subscriptionRow = tableRow(page, 'Subscriptions', 'alert.firing');
    await subscriptionRow.getByRole('button', { name: 'Unsubscribe' }).click();
    await page.getByRole('dialog', { name: 'Delete the subscription' }).getByRole('button', { name: 'Unsubscribe' }).click();
    await page.getByText('subscription deleted').waitFor();
    await subscriptionRow.waitFor({ state: 'detached' });
    expect((await t.request('GET', '/v1/notifications/subscriptions', { headers: bearer(admin.token) })).json.data).to.deep.equal([]);
    const unheard = await t.request('POST', '/v1/nodes', { body: { name: 'unheard-agent' }, headers: bearer(admin.token) });
    expect(unheard.status, unheard.text).to.equal(201);
    const unheardAgent = await FakeAgent.forNode(t, unheard.json.data.id as string);
    await unheardAgent.heartbeat({ agent_version: '0.0.1' });
    await waitFor(
      async () => ((await t.request('GET', `/v1/alerts?state=firing&rule=agent_outdated&resource_id=${unheardAgent.nodeId}`, { headers: bearer(admin.token) })).json.data as unknown[]).length > 0,
      { timeoutMs: 15_000, what: 'agent_outdated to fire for the unheard node' },
    );
    // The alert's deliveries are written with its announcement: none was.
    const deliveries = (await t.request('GET', '/v1/notifications/deliveries?event_type=alert.firing', { headers: bearer(admin.token) })).json.data as Array<{ event: { resource?: { id: string } } }>;
    expect(deliveries.filter((d) => d.event.resource?.id === unheardAgent.nodeId)).to.deep.equal([]);
  });
});
