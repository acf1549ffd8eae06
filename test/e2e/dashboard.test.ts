import { expect } from 'chai';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { chromium, type Browser, type Page } from 'playwright-core';
import { docker } from '../../lab/docker.js';
import { cleanupAgents, joinedNodeId, spawnAgent, waitFor } from '../support/agents.js';
import { TestDialect } from '../support/dialects.js';
import { startHangar, type TestHangar } from '../support/hangar.js';
import { dockerOnlyPath, hostSwarm, TEST_IMAGE } from '../support/host-swarm.js';
import { GOOD_PASSWORD, signed } from '../support/identity.js';
import { requireService } from '../support/requirements.js';
import { SWARM_TEST_OVERRIDES } from '../support/swarm-member.js';
import { loadConfig } from '../../core/config.js';

// What page.evaluate() callbacks see runs in the browser; this program is type-checked without the DOM library.
declare const document: any;
declare const window: any;
type HTMLElement = any;
type HTMLLabelElement = any;
type NodeListOf<T> = ArrayLike<T>;

export const CHROMIUM = process.env.HANGAR_CHROMIUM ?? '/usr/bin/chromium';
/** Flags that work as root in a container: no sandbox, no GPU, nothing phoning home. */
export const CHROMIUM_ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'];
const ARTIFACTS = path.resolve('test-artifacts/dashboard');
const UI_BUILT = existsSync(path.resolve('dist/ui/index.html'));

/**
 * The dashboard in a real browser (Debian's chromium, driven by playwright-core) against a real
 * control plane: claim the install, log in, see a real agent join live, cordon it, create a swarm
 * and an instance on the host engine's swarm and scale it, edit a service with a diff, create an
 * API key; the audit log records the dashboard's writes; keyboard navigation and labels are checked.
 * Runs on SQLite (the default store); the instance part uses the host swarm
 * (test/support/host-swarm.ts), not the machine lab, to stay within CI's time (docs/dashboard.md).
 */
describe('the dashboard in chromium [sqlite, host swarm]', function () {
  this.timeout(60_000);
  const dialect = new TestDialect('sqlite');
  const suffix = Math.random().toString(36).slice(2, 7);
  let t: TestHangar;
  let browser: Browser;
  let page: Page;
  let profile: string;
  let nodeId: string;
  let swarmId: string;
  const shot = (name: string) => page.screenshot({ path: path.join(ARTIFACTS, `${name}.png`), fullPage: true });
  const row = (table: string, text: string) => page.getByRole('table', { name: table }).getByRole('row').filter({ hasText: text });
  const nav = (name: string) => page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name, exact: true }).click();
  const adminApi = async (method: string, p: string, body?: unknown) => signed(t, admin(), method, p, { body });
  let connection: { access_key_id: string; secret_access_key: string; username: string; password?: string };
  const admin = () => ({ accessKeyId: connection.access_key_id, secretAccessKey: connection.secret_access_key });

  before(async function () {
    this.timeout(180_000);
    requireService(this, existsSync(CHROMIUM), `chromium at ${CHROMIUM} (apt-get install chromium)`);
    requireService(this, UI_BUILT, 'the dashboard built (npm run build)');
    const missing = await hostSwarm();
    requireService(this, missing === null, missing ?? '');
    mkdirSync(ARTIFACTS, { recursive: true });
    t = await startHangar(dialect, { plugins: loadConfig({ env: {} }).plugins, overrides: { ...SWARM_TEST_OVERRIDES, login: { port: 0 } } });
    profile = mkdtempSync(path.join(os.tmpdir(), 'hangar-chromium-'));
    browser = await chromium.launch({ executablePath: CHROMIUM, args: [...CHROMIUM_ARGS, `--user-data-dir=${profile}`] });
    // The control plane's own CA is not in the browser's store: this test trusts it the way an operator would click through.
    const context = await browser.newContext({ ignoreHTTPSErrors: true, acceptDownloads: true, viewport: { width: 1360, height: 860 } });
    page = await context.newPage();
  });
  after(async function () {
    this.timeout(120_000);
    await browser?.close();
    if (profile) rmSync(profile, { recursive: true, force: true });
    for (const name of [`web-${suffix}`]) await docker(['service', 'rm', name]);
    await docker(['stack', 'rm', `hangar-stack-${suffix}`]);
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
    expect(command).to.match(/^curl -fsSLk -o hangar-agent 'https:\/\/127\.0\.0\.1:\d+\/v1\/agent\/binary\?arch=amd64' && chmod \+x hangar-agent && sudo \.\/hangar-agent --join --token '[^']+' --api https:\/\/127\.0\.0\.1:\d+ --data-dir \/var\/lib\/hangar-agent$/);
    const token = /--token '([^']+)'/.exec(command)![1]!;
    expect(await page.getByTestId('join-token').textContent()).to.equal(token);
    await shot('02-join-dialog');
    await page.getByRole('button', { name: 'Done' }).click();
    const agent = spawnAgent({ join: { token, api: t.url }, path: dockerOnlyPath() });
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

  it('creates a swarm and joins the node to it', async function () {
    this.timeout(90_000);
    await nav('Swarms');
    await page.getByRole('button', { name: 'Create swarm' }).click();
    await page.getByRole('dialog').getByLabel('Name').fill(`ui-${suffix}`);
    await page.getByRole('dialog').getByRole('button', { name: 'Create' }).click();
    await row('Swarms', `ui-${suffix}`).getByRole('link').click();
    await page.getByRole('heading', { name: `Swarm ui-${suffix}` }).waitFor();
    swarmId = decodeURIComponent(page.url().split('/').pop()!);
    await page.getByRole('button', { name: 'Join a node' }).click();
    await page.getByRole('dialog').getByLabel('Node').selectOption(nodeId);
    await page.getByRole('dialog').getByRole('button', { name: 'Join' }).click();
    await row('Members', 'manager').getByText('active').waitFor({ timeout: 60_000 });
  });

  it('creates an instance on the swarm and scales it, the replicas showing live', async function () {
    this.timeout(150_000);
    await nav('Instances');
    await page.getByRole('button', { name: 'Create instance' }).click();
    const dialog = page.getByRole('dialog', { name: 'Create an instance' });
    await dialog.getByLabel('Name').fill(`web-${suffix}`);
    await dialog.getByLabel('Swarm').selectOption(swarmId);
    await dialog.getByLabel('Image').fill(TEST_IMAGE);
    await dialog.getByLabel('Command').fill('exec sleep 3600');
    await dialog.getByRole('button', { name: 'Create' }).click();
    const instance = row('Instances', `web-${suffix}`);
    await instance.getByText('running').waitFor({ timeout: 60_000 });
    await instance.getByText('1 / 1').waitFor();
    await instance.getByRole('button', { name: 'Scale' }).click();
    await page.getByRole('dialog', { name: `Scale web-${suffix}` }).getByLabel('Replicas').fill('2');
    await page.getByRole('dialog', { name: `Scale web-${suffix}` }).getByRole('button', { name: 'Scale' }).click();
    await instance.getByText('2 / 2').waitFor({ timeout: 60_000 });
    await instance.getByText('running').waitFor();
    await shot('04-instances');
  });

  it('edits a service: the YAML, a diff of the change, then applied', async function () {
    this.timeout(150_000);
    const compose = `services:\n  app:\n    image: ${TEST_IMAGE}\n    command: ["sleep", "3600"]\n`;
    await nav('Services');
    await page.getByRole('button', { name: 'Create service' }).click();
    const create = page.getByRole('dialog');
    await create.getByLabel('Name').fill(`stack-${suffix}`);
    await create.getByLabel('Swarm').selectOption(swarmId);
    await create.getByLabel('Compose file (YAML)').fill(compose);
    await create.getByRole('button', { name: 'Deploy' }).click();
    await row('Services', `stack-${suffix}`).getByText('running').waitFor({ timeout: 90_000 });
    await row('Services', `stack-${suffix}`).getByRole('link').click();
    await page.getByLabel('Compose file', { exact: true }).getByText('sleep').waitFor();
    await page.getByRole('button', { name: 'Edit' }).click();
    const edited = compose.replace('["sleep", "3600"]', '["sleep", "7200"]');
    await page.getByLabel('Compose file (YAML)').fill(edited);
    await page.getByRole('button', { name: 'Review changes' }).click();
    const diff = page.getByLabel('Difference between the deployed and the edited compose file');
    expect(await diff.locator('.del').allTextContents()).to.deep.equal(['-     command: ["sleep", "3600"]']);
    expect(await diff.locator('.add').allTextContents()).to.deep.equal(['+     command: ["sleep", "7200"]']);
    await shot('05-service-diff');
    await page.getByRole('button', { name: 'Apply changes' }).click();
    await page.getByLabel('Compose file', { exact: true }).getByText('7200').waitFor();
    const id = decodeURIComponent(page.url().split('/').pop()!);
    await waitFor(async () => (await adminApi('GET', `/v1/services/${id}`)).json.data.compose_file === edited, { timeoutMs: 10_000, what: 'the edited compose file' });
  });

  it('creates an API key whose secret is shown once, and which works', async () => {
    await nav('Users & keys');
    await row('Users', 'admin').getByRole('link').click();
    await page.getByRole('button', { name: 'Create API key' }).click();
    await page.getByRole('dialog').getByLabel('Description').fill('from the dashboard');
    await page.getByRole('dialog').getByRole('button', { name: 'Create' }).click();
    const secret = await page.getByTestId('key-secret').inputValue();
    const keyId = await page.getByRole('dialog').getByLabel('Access key id').inputValue();
    expect(secret).to.have.length.greaterThan(20);
    await shot('06-api-key');
    await page.getByRole('button', { name: 'I have stored it' }).click();
    await row('API keys', 'from the dashboard').waitFor();
    expect(await page.content()).not.to.contain(secret);
    expect((await signed(t, { accessKeyId: keyId, secretAccessKey: secret }, 'GET', '/v1/nodes')).status).to.equal(200);
  });

  it('records the dashboard’s writes in the audit log (as session writes), shown in its view', async () => {
    const entries = (await adminApi('GET', '/v1/audit?principal=admin&limit=1000')).json.data as any[];
    const cordon = entries.find((e) => e.route === '/v1/nodes/{id}/cordon');
    expect(cordon).to.include({ resource_id: nodeId, auth_method: 'session', status: 200, method: 'POST' });
    expect(entries.filter((e) => e.auth_method === 'session').map((e) => e.route)).to.include.members(['/v1/swarms', '/v1/compute/instances', '/v1/compute/instances/{id}/scale', '/v1/services/{id}', '/v1/iam/users/{id}/keys']);
    await nav('Audit log');
    await page.getByLabel('Resource').fill(nodeId);
    await page.getByRole('button', { name: 'Filter' }).click();
    await row('Audit log', 'POST /v1/nodes/{id}/cordon').getByText('(session)').waitFor();
    await shot('07-audit');
  });

  it('works from the keyboard: skip link, navigation by Tab and Enter, dialogs that Escape closes; every control has a label', async () => {
    await nav('Fleet');
    await page.getByRole('heading', { name: 'Fleet' }).waitFor();
    await page.keyboard.press('Control+L').catch(() => undefined);
    await page.locator('body').focus();
    await page.evaluate(() => (document.activeElement as HTMLElement | null)?.blur());
    await page.keyboard.press('Tab');
    expect(await page.evaluate(() => document.activeElement?.textContent)).to.equal('Skip to content');
    // Tab to the "Instances" link of the navigation and follow it with Enter.
    for (let i = 0; i < 30 && (await page.evaluate(() => document.activeElement?.textContent)) !== 'Instances'; i++) await page.keyboard.press('Tab');
    await page.keyboard.press('Enter');
    await page.getByRole('heading', { name: 'Instances' }).waitFor();
    expect(await page.evaluate(() => document.activeElement?.id)).to.equal('page-title');
    // A dialog opened from the keyboard takes the focus; Escape closes it and gives the focus back.
    await page.getByRole('button', { name: 'Create instance' }).focus();
    await page.keyboard.press('Enter');
    await page.getByRole('dialog', { name: 'Create an instance' }).waitFor();
    expect(await page.evaluate(() => Boolean(document.activeElement?.closest('dialog')))).to.equal(true);
    await page.keyboard.press('Escape');
    await page.getByRole('dialog').waitFor({ state: 'detached' });
    expect(await page.evaluate(() => document.activeElement?.textContent)).to.equal('Create instance');
    // Labels, on every view.
    const unlabelled: string[] = [];
    for (const view of ['fleet', `nodes/${nodeId}`, 'swarms', `swarms/${swarmId}`, 'instances', 'services', 'volumes', 'secrets', 'configs', 's3', 'gateway', 'users', 'ssh-profiles', 'audit']) {
      await page.goto(`${t.url}/ui#/${view}`);
      await page.locator('#page-title').waitFor();
      await page.waitForTimeout(300);
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
    expect(unlabelled).to.deep.equal([]);
  });
});
