import { expect } from 'chai';
import type { Page } from 'playwright-core';
import { FakeAgent, FAST_NODES, waitFor } from '../support/agents.js';
import { chromiumInstalled, CHROMIUM, logIn, navigate, openBrowser, tableRow, UI_BUILT } from '../support/browser.js';
import { TestDialect } from '../support/dialects.js';
import { startHangar, type TestHangar } from '../support/hangar.js';
import { bearer, bootstrapAdmin, type Credentials } from '../support/identity.js';
import { requireService } from '../support/requirements.js';
import { loadConfig } from '../../core/config.js';

/**
 * The dashboard's Alerts page in chromium against a real control plane: a node whose (simulated)
 * agent is older than the control plane fires agent_outdated; the page lists it, silences it for
 * an hour (the API then says so) and ends the silence. SQLite; the rules are test/integration/alerts.
 */
describe('the dashboard in chromium: alerts [sqlite]', function () {
  this.timeout(60_000);
  const dialect = new TestDialect('sqlite');
  let t: TestHangar;
  let admin: Credentials;
  let page: Page;
  let shot: (name: string) => Promise<unknown>;
  let closeBrowser: (() => Promise<void>) | undefined;
  let stopBeating = false;
  let beating: Promise<void> | undefined;

  before(async function () {
    this.timeout(120_000);
    requireService(this, chromiumInstalled(), `chromium at ${CHROMIUM} (apt-get install chromium)`);
    requireService(this, UI_BUILT(), 'the dashboard built (npm run build)');
    t = await startHangar(dialect, { plugins: loadConfig({ env: {} }).plugins, overrides: { ...FAST_NODES, login: { port: 0 }, alerts: { interval_seconds: 1 } } });
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
    await dialect.cleanup();
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
    await shot('alerts-firing');

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
});
