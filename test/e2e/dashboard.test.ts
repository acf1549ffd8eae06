import { expect } from 'chai';
import { readFileSync } from 'node:fs';
import os from 'node:os';
import type { Page } from 'playwright-core';
import { cleanupAgents, joinedNodeId, spawnAgent } from '../support/agents.js';
import { navigate, openBrowser, requireBrowser, tableRow } from '../support/browser.js';
import { TestDialect } from '../support/dialects.js';
import { startHangar, type TestHangar } from '../support/hangar.js';
import { GOOD_PASSWORD, signed } from '../support/identity.js';
import { FAST_NODES } from '../support/agents.js';
import { loadConfig } from '../../core/config.js';
import { reachableLocalAddresses } from '../../plugins/nodes/join-command.js';

// What page.evaluate() callbacks see runs in the browser; this program is type-checked without the DOM library.
declare const document: any;
declare const window: any;
type HTMLElement = any;
type HTMLLabelElement = any;
type NodeListOf<T> = ArrayLike<T>;

/**
 * The dashboard in a real browser (Debian's chromium, driven by playwright-core) against a real
 * control plane: claim the install, log in, see a real agent join live, cordon it, create an API
 * key; the audit log records the dashboard's writes; keyboard navigation and labels are checked.
 * Runs on SQLite (the default store). Swarms, instances and services: dashboard-workloads.test.ts.
 */
describe('the dashboard in chromium [sqlite]', function () {
  this.timeout(60_000);
  const dialect = new TestDialect('sqlite');
  let t: TestHangar;
  let page: Page;
  let shot: (name: string) => Promise<unknown>;
  let closeBrowser: (() => Promise<void>) | undefined;
  let nodeId: string;
  const row = (table: string, text: string) => tableRow(page, table, text);
  const nav = (name: string) => navigate(page, name);
  const adminApi = async (method: string, p: string, body?: unknown) => signed(t, admin(), method, p, { body });
  let connection: { access_key_id: string; secret_access_key: string; username: string; user_id: string; password?: string };
  const admin = () => ({ accessKeyId: connection.access_key_id, secretAccessKey: connection.secret_access_key });

  before(async function () {
    this.timeout(120_000);
    requireBrowser(this);
    t = await startHangar(dialect, { plugins: loadConfig({ env: {} }).plugins, overrides: { ...FAST_NODES, login: { port: 0 } } });
    const opened = await openBrowser();
    ({ page, shot } = opened);
    closeBrowser = opened.close;
  });
  after(async function () {
    this.timeout(60_000);
    await closeBrowser?.();
    await cleanupAgents();
    await t?.stop();
    await dialect.cleanup();
  });

  it('claims a fresh install on the first-run screen (from loopback) and offers the CLI’s connection file', async () => {
    await page.goto(`${t.url}/ui`);
    await page.getByRole('heading', { name: 'Claim this hangar' }).waitFor();
    await shot('01-first-run');
    await page.getByLabel('Email').fill('admin@example.test');
    await page.getByLabel('Password').fill(GOOD_PASSWORD);
    await page.getByRole('button', { name: 'Claim' }).click();
    await page.getByRole('heading', { name: 'hangar is yours' }).waitFor();
    const [download] = await Promise.all([page.waitForEvent('download'), page.getByRole('button', { name: 'Download connection.json' }).click()]);
    connection = JSON.parse(readFileSync((await download.path())!, 'utf8')).data;
    expect(connection).to.include({ username: 'admin', api_url: t.url });
    expect(connection.secret_access_key).to.have.length.greaterThan(20);
    await page.getByRole('button', { name: 'Continue to the dashboard' }).click();
    await page.getByRole('heading', { name: 'Fleet' }).waitFor();
    // The session is an HttpOnly cookie the page's scripts cannot read.
    expect(await page.evaluate(() => document.cookie)).to.equal('');
    const [cookie] = await page.context().cookies();
    expect(cookie).to.include({ name: 'hangar_session', httpOnly: true, secure: true, sameSite: 'Strict' });
  });

  it('logs out and in again with the IAM user', async () => {
    await page.getByRole('button', { name: 'Log out' }).click();
    await page.getByRole('heading', { name: 'Log in to hangar' }).waitFor();
    await page.getByLabel('Username').fill('admin');
    await page.getByLabel('Password').fill('wrong-Password-1!');
    await page.getByRole('button', { name: 'Log in' }).click();
    await page.getByRole('alert').filter({ hasText: 'Invalid username or password' }).waitFor();
    await page.getByLabel('Password').fill(GOOD_PASSWORD);
    await page.getByRole('button', { name: 'Log in' }).click();
    await page.getByRole('heading', { name: 'Fleet' }).waitFor();
    await page.locator('.live.on').waitFor();
  });

  it('shows a node join live: the join dialog’s token, a real agent, the row appearing and going ready without a reload', async function () {
    this.timeout(90_000);
    await page.evaluate(() => ((window as any).__sameDocument = true));
    await page.getByRole('button', { name: 'Add a machine' }).click();
    await page.getByRole('button', { name: 'Create a join token' }).click();
    const command = await page.getByLabel('Run this on the machine').inputValue();
    // The address the control plane says machines reach it by, not the browser's loopback one; the download compressed.
    const port = new URL(t.url).port;
    const host = reachableLocalAddresses()[0] ?? '127.0.0.1';
    expect(command).to.equal(
      `curl -fsSLk --compressed -o hangar-agent 'https://${host}:${port}/v1/agent/binary?arch=amd64' && chmod +x hangar-agent && ` +
        `echo '${/ echo '([^']+)' \| sudo/.exec(command)?.[1]}' | sudo ./hangar-agent --join --token-stdin --api 'https://${host}:${port}' --data-dir /var/lib/hangar-agent`,
    );
    const token = /^.* echo '([^']+)' \| sudo/.exec(command)![1]!;
    expect(await page.getByTestId('join-token').textContent()).to.equal(token);
    await shot('02-join-dialog');
    await page.getByRole('button', { name: 'Done' }).click();
    const agent = spawnAgent({ join: { token, api: t.url, tokenArg: 'stdin' } });
    nodeId = await joinedNodeId(agent, 30_000);
    const nodeRow = page.locator(`tr[data-id="${nodeId}"]`);
    await nodeRow.getByText('ready').waitFor({ timeout: 30_000 });
    expect(await page.evaluate(() => (window as any).__sameDocument)).to.equal(true);
    expect(await nodeRow.textContent()).to.contain(os.hostname());
    await shot('03-fleet');
  });

  it('cordons the node after a confirmation, and uncordons it', async () => {
    const nodeRow = page.locator(`tr[data-id="${nodeId}"]`);
    await nodeRow.getByRole('button', { name: 'Cordon' }).click();
    const dialog = page.getByRole('dialog', { name: 'Cordon node' });
    await dialog.getByText('No new workloads will be placed').waitFor();
    await dialog.getByRole('button', { name: 'Cordon' }).click();
    await nodeRow.getByText('cordoned').waitFor();
    expect((await adminApi('GET', `/v1/nodes/${nodeId}`)).json.data.status).to.equal('cordoned');
    await nodeRow.getByRole('button', { name: 'Uncordon' }).click();
    await page.getByRole('dialog', { name: 'Uncordon node' }).getByRole('button', { name: 'Uncordon' }).click();
    await nodeRow.getByText('ready').waitFor();
  });

  it('creates an API key whose secret is shown once, and which works', async () => {
    await nav('Users & keys');
    await row('Users', 'admin').getByRole('link').click();
    await page.getByRole('button', { name: 'Create API key' }).click();
    await page.getByRole('dialog').getByLabel('Description').fill('from the dashboard');
    await page.getByRole('dialog').getByLabel('Expires in').fill('30d');
    await page.getByRole('dialog').getByRole('button', { name: 'Create' }).click();
    const secret = await page.getByTestId('key-secret').inputValue();
    const keyId = await page.getByRole('dialog').getByLabel('Access key id').inputValue();
    expect(secret).to.have.length.greaterThan(20);
    await shot('06-api-key');
    await page.getByRole('button', { name: 'I have stored it' }).click();
    await row('API keys', 'from the dashboard').waitFor();
    // Its scope, what it holds and its expiry are shown with it.
    const made = (await adminApi('GET', `/v1/iam/users/${connection.user_id}/keys`)).json.data.find((k: { access_key_id: string }) => k.access_key_id === keyId);
    expect(Date.parse(made.expires_at) - Date.parse(made.created_at)).to.be.closeTo(30 * 86_400_000, 5_000);
    const shown = await row('API keys', 'from the dashboard').textContent();
    expect(shown).to.contain('installation').and.contain('its owner’s permissions').and.contain(`${made.expires_at.slice(0, 16).replace('T', ' ')} UTC`);
    expect(await page.content()).not.to.contain(secret);
    expect((await signed(t, { accessKeyId: keyId, secretAccessKey: secret }, 'GET', '/v1/nodes')).status).to.equal(200);
  });

  it('records the dashboard’s writes in the audit log (as session writes), shown in its view', async () => {
    const entries = (await adminApi('GET', `/v1/audit?principal=${connection.user_id}&limit=1000`)).json.data as any[];
    const cordon = entries.find((e) => e.route === '/v1/nodes/{id}/cordon');
    expect(cordon).to.include({ resource_id: nodeId, auth_method: 'session', status: 200, method: 'POST' });
    expect(entries.filter((e) => e.auth_method === 'session').map((e) => e.route)).to.include.members(['/v1/nodes/token', '/v1/nodes/{id}/uncordon', '/v1/iam/users/{id}/keys']);
    await nav('Audit log');
    await page.getByLabel('Resource').fill(nodeId);
    await page.getByRole('button', { name: 'Filter' }).click();
    await row('Audit log', 'POST /v1/nodes/{id}/cordon').getByText('(session)').waitFor();
    await shot('07-audit');
  });

  it('works from the keyboard: skip link, navigation by Tab and Enter, dialogs that Escape closes; every control has a label', async () => {
    await nav('Fleet');
    await page.getByRole('heading', { name: 'Fleet' }).waitFor();
    const focused = () => page.evaluate(() => document.activeElement?.textContent?.trim());
    // Preact runs effects after paint, so the focus lands a moment after the heading shows: wait for it (up to 5 s), then report where it is.
    const focusedId = async () => {
      await page.waitForFunction(() => document.activeElement?.id === 'page-title', undefined, { timeout: 5000 }).catch(() => undefined);
      return page.evaluate(() => document.activeElement?.id);
    };
    // A view puts the focus on its heading; Tab goes on to the view's first control.
    expect(await focusedId()).to.equal('page-title');
    await page.keyboard.press('Tab');
    expect(await focused()).to.equal('Add a machine');
    await page.keyboard.press('Shift+Tab');
    // Back through the navigation to "Instances", followed with Enter.
    for (let i = 0; i < 20 && (await focused()) !== 'Instances'; i++) await page.keyboard.press('Shift+Tab');
    await page.keyboard.press('Enter');
    await page.getByRole('heading', { name: 'Instances' }).waitFor();
    expect(await focusedId()).to.equal('page-title');
    // The skip link is the first stop and jumps to the content.
    for (let i = 0; i < 30 && (await focused()) !== 'Skip to content'; i++) await page.keyboard.press('Shift+Tab');
    expect(await focused()).to.equal('Skip to content');
    await page.keyboard.press('Enter');
    expect(await focusedId()).to.equal('page-title');
    // A dialog opened from the keyboard takes the focus; Escape closes it and gives the focus back.
    await page.getByRole('button', { name: 'Create instance' }).focus();
    await page.keyboard.press('Enter');
    await page.getByRole('dialog', { name: 'Create an instance' }).waitFor();
    expect(await page.evaluate(() => Boolean(document.activeElement?.closest('dialog')))).to.equal(true);
    await page.keyboard.press('Escape');
    await page.getByRole('dialog').waitFor({ state: 'detached' });
    expect(await page.evaluate(() => document.activeElement?.textContent)).to.equal('Create instance');
    // Labels, on every view; and no view throws (the gateway's did on every open: h.map is not a function).
    const unlabelled: string[] = [];
    const thrown: string[] = [];
    let current = '';
    const onError = (err: Error) => thrown.push(`${current}: ${err.message}`);
    page.on('pageerror', onError);
    for (const view of ['fleet', `nodes/${nodeId}`, 'projects', 'projects/default', 'swarms', 'instances', 'services', 'volumes', 'backups', 'secrets', 'configs', 's3', 'gateway', 'users', 'ssh-profiles', 'audit']) {
      current = view;
      await page.goto(`${t.url}/ui#/${view}`);
      await page.locator('#page-title').waitFor();
      await page.waitForTimeout(300);
      if (view === 'gateway') {
        // Both lists answered and rendered (the routes are picked out of GET /v1/gateway's {routes, load_balancers}).
        const shown = Promise.all([page.getByRole('table', { name: 'Gateway routes' }).getByText('No routes.').waitFor({ timeout: 10_000 }), page.getByRole('table', { name: 'Load balancers' }).getByText('No load balancers.').waitFor({ timeout: 10_000 })]);
        await shown.catch((err: Error) => expect.fail(`the gateway's lists did not show (${thrown.join('; ') || err.message})`));
      }
      const missing = await page.evaluate(() =>
        [...document.querySelectorAll('button, a[href], input, select, textarea, table')]
          .filter((el) => {
            const e = el as HTMLElement & { labels?: NodeListOf<HTMLLabelElement> };
            const name = e.getAttribute('aria-label') || e.getAttribute('aria-labelledby') || (e.labels && e.labels.length ? 'label' : '') || (e.tagName !== 'INPUT' && e.tagName !== 'SELECT' && e.tagName !== 'TEXTAREA' && e.tagName !== 'TABLE' ? e.textContent?.trim() : '');
            return !name;
          })
          .map((el) => el.outerHTML.slice(0, 120)),
      );
      unlabelled.push(...missing.map((m) => `${view}: ${m}`));
    }
    page.off('pageerror', onError);
    expect(thrown).to.deep.equal([]);
    expect(unlabelled).to.deep.equal([]);
  });

  it('goes to the login screen by itself when the session ends elsewhere (the live stream’s end event): here the password changed through the API', async () => {
    await nav('Fleet');
    await page.locator('.live.on').waitFor();
    const me = connection.user_id;
    const changed = await signed(t, admin(), 'POST', `/v1/iam/users/${me}/password`, { body: { password: 'Second-Password-41-Spring!', current_password: GOOD_PASSWORD, keep_api_keys: true } });
    expect(changed.status, changed.text).to.equal(200);
    // No click, no reload: the stream's end takes the page to the login screen.
    await page.getByRole('heading', { name: 'Log in to hangar' }).waitFor({ timeout: 15_000 });
    await page.getByLabel('Username').fill('admin');
    await page.getByLabel('Password').fill('Second-Password-41-Spring!');
    await page.getByRole('button', { name: 'Log in' }).click();
    await page.getByRole('heading', { name: 'Fleet' }).waitFor();
    await page.locator('.live.on').waitFor();
  });
});
