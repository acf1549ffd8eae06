import { expect } from 'chai';
import type { Page } from 'playwright-core';
import { docker } from '../../lab/docker.js';
import { cleanupAgents, joinedNodeId, spawnAgent, waitFor } from '../support/agents.js';
import { chromiumInstalled, CHROMIUM, logIn, navigate, openBrowser, tableRow, UI_BUILT } from '../support/browser.js';
import { TestDialect } from '../support/dialects.js';
import { startHangar, type TestHangar } from '../support/hangar.js';
import { dockerOnlyPath, hostSwarm, TEST_IMAGE } from '../support/host-swarm.js';
import { bearer, bootstrapAdmin, type Credentials } from '../support/identity.js';
import { requireService } from '../support/requirements.js';
import { SWARM_TEST_OVERRIDES } from '../support/swarm-member.js';
import { loadConfig } from '../../core/config.js';

/**
 * Workloads through the dashboard in chromium: create a swarm and join a real agent's node to it,
 * create an instance and scale it (the replicas showing live), create and edit a service with a
 * diff of the YAML before it is applied. On the host engine's swarm (test/support/host-swarm.ts),
 * not the machine lab, to stay within CI's time (docs/dashboard.md); SQLite.
 */
describe('the dashboard in chromium: swarms, instances and services [sqlite, host swarm]', function () {
  this.timeout(60_000);
  const dialect = new TestDialect('sqlite');
  const suffix = Math.random().toString(36).slice(2, 7);
  let t: TestHangar;
  let admin: Credentials;
  let page: Page;
  let shot: (name: string) => Promise<unknown>;
  let closeBrowser: (() => Promise<void>) | undefined;
  let nodeId: string;
  let swarmId: string;
  const row = (table: string, text: string) => tableRow(page, table, text);
  const nav = (name: string) => navigate(page, name);
  const adminApi = (method: string, p: string) => t.request(method, p, { headers: bearer(admin.token) });

  before(async function () {
    this.timeout(180_000);
    requireService(this, chromiumInstalled(), `chromium at ${CHROMIUM} (apt-get install chromium)`);
    requireService(this, UI_BUILT(), 'the dashboard built (npm run build)');
    const missing = await hostSwarm();
    requireService(this, missing === null, missing ?? '');
    t = await startHangar(dialect, { plugins: loadConfig({ env: {} }).plugins, overrides: { ...SWARM_TEST_OVERRIDES, login: { port: 0 } } });
    admin = await bootstrapAdmin(t);
    const token = await t.request('POST', '/v1/nodes/token', { body: {}, headers: bearer(admin.token) });
    const agent = spawnAgent({ join: { token: token.json.data.token, api: t.url }, path: dockerOnlyPath() });
    nodeId = await joinedNodeId(agent, 30_000);
    await waitFor(async () => (await adminApi('GET', `/v1/nodes/${nodeId}`)).json.data?.status === 'ready', { timeoutMs: 30_000, what: 'the node to be ready' });
    const opened = await openBrowser();
    ({ page, shot } = opened);
    closeBrowser = opened.close;
    await logIn(page, t.url, admin.username, admin.password);
  });
  after(async function () {
    this.timeout(120_000);
    await closeBrowser?.();
    await docker(['service', 'rm', `web-${suffix}`]);
    await docker(['stack', 'rm', `hangar-stack-${suffix}`]);
    await cleanupAgents();
    await t?.stop();
    await dialect.cleanup();
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
    await row('Members', 'manager').locator('.badge', { hasText: 'active' }).waitFor({ timeout: 60_000 });
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

});
