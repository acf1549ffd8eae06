import { expect } from 'chai';
import type { Page } from 'playwright-core';
import { FakeAgent } from '../support/agents.js';
import { logIn, navigate, openBrowser, requireBrowser, tableRow } from '../support/browser.js';
import { TestDialect } from '../support/dialects.js';
import { startHangar, type TestHangar } from '../support/hangar.js';
import { bearer, bootstrapAdmin, createUser, signed, type Credentials } from '../support/identity.js';
import { loadConfig } from '../../core/config.js';

/**
 * Projects through the dashboard in chromium against a real control plane (no machines: swarms are
 * records until a node joins): an admin makes a project on the Projects page, adds a user to it as
 * viewer and makes a custom role; the header's project switcher narrows the swarms list and is the
 * project of the swarm created under it, and is kept across a reload. The viewer logs in, sees only
 * its project in the switcher and only that project's swarm, and none of the buttons its role does
 * not grant (create, join, members, roles, machines); it makes an API key limited to the project
 * with a role and an expiry, which the keys list shows and which works only there; a key wider than
 * the viewer is refused with the API's words. SQLite (as the other dashboard suites); the API's
 * rules on both dialects are test/integration/projects and test/integration/iam.
 */
describe('the dashboard in chromium: projects, members, roles and scoped keys [sqlite]', function () {
  this.timeout(60_000);
  const dialect = new TestDialect('sqlite');
  let t: TestHangar;
  let admin: Credentials;
  let viewer: Credentials;
  let page: Page;
  let shot: (name: string) => Promise<unknown>;
  let closeBrowser: (() => Promise<void>) | undefined;
  const projects: Record<'alpha' | 'beta', string> = { alpha: '', beta: '' };
  const row = (table: string, text: string) => tableRow(page, table, text);
  const nav = (name: string) => navigate(page, name);
  const dialog = () => page.getByRole('dialog');
  const switcher = () => page.getByRole('banner').getByLabel('Project');
  const adminApi = (method: string, p: string, body?: unknown) => t.request(method, p, { body, headers: bearer(admin.token) });
  /** The names in a table's first column (its rows but the "nothing here" one). */
  const names = async (table: string) => (await page.getByRole('table', { name: table }).locator('tbody tr[data-id] td:first-child').allInnerTexts()).map((s) => s.trim());

  before(async function () {
    this.timeout(120_000);
    requireBrowser(this);
    t = await startHangar(dialect, { plugins: loadConfig({ env: {} }).plugins, overrides: { login: { port: 0 } } });
    admin = await bootstrapAdmin(t);
    viewer = await createUser(t, admin, { username: 'vera', name: 'Vera Viewer' });
    const beta = await adminApi('POST', '/v1/projects', { name: 'beta' });
    expect(beta.status, beta.text).to.equal(201);
    projects.beta = beta.json.data.id;
    const opened = await openBrowser();
    ({ page, shot } = opened);
    closeBrowser = opened.close;
  });
  after(async function () {
    this.timeout(60_000);
    await closeBrowser?.();
    await t?.stop();
    await dialect.cleanup();
  });
  afterEach(async function () {
    if (this.currentTest?.state !== 'failed' || !page) return;
    for (const text of await page.locator('dialog[open], .notice').allInnerTexts().catch(() => [])) console.log(`    on the page: ${text.slice(0, 2000)}`);
  });

  it('an admin makes a project, adds a user to it as viewer and makes a custom role', async () => {
    await logIn(page, t.url, admin.username, admin.password);
    await nav('Projects');
    await page.getByRole('button', { name: 'Create project' }).click();
    await dialog().getByLabel('Name').fill('alpha');
    await dialog().getByLabel('Description').fill('team alpha');
    await dialog().getByRole('button', { name: 'Create' }).click();
    await page.getByRole('heading', { name: 'Project alpha' }).waitFor();
    projects.alpha = ((await adminApi('GET', '/v1/projects/alpha')).json.data as { id: string }).id;

    await page.getByRole('button', { name: 'Add member' }).click();
    await dialog().getByLabel('User').fill('vera');
    await dialog().getByLabel('Role').selectOption('viewer');
    await dialog().getByRole('button', { name: 'Add' }).click();
    await row('Members', 'vera').getByText('viewer', { exact: true }).waitFor();
    const members = (await adminApi('GET', '/v1/projects/alpha/members')).json.data as Array<{ username: string; role: string }>;
    expect(members.map((m) => [m.username, m.role])).to.deep.equal([['vera', 'viewer']]);

    await page.getByRole('button', { name: 'Create role' }).click();
    await dialog().getByLabel('Name').fill('releaser');
    await dialog().getByLabel('services:read', { exact: true }).check();
    await dialog().getByLabel('services:deploy', { exact: true }).check();
    await dialog().getByRole('button', { name: 'Create' }).click();
    await row('Roles', 'releaser').getByText('services:deploy services:read').waitFor();
    const roles = (await adminApi('GET', '/v1/projects/alpha/roles')).json.data as Array<{ name: string; permissions: string[] }>;
    expect(roles.find((r) => r.name === 'releaser')?.permissions).to.deep.equal(['services:deploy', 'services:read']);
    await shot('projects-01-project');
  });

  it('the header’s project narrows the lists, is the project of what is created under it, and is kept across a reload', async () => {
    expect(await switcher().locator('option').allInnerTexts()).to.include.members(['All projects', 'alpha', 'beta']);
    for (const project of ['alpha', 'beta'] as const) {
      await switcher().selectOption({ label: project });
      await nav('Swarms');
      await page.getByRole('button', { name: 'Create swarm' }).click();
      await dialog().getByLabel('Name').fill(`${project}-swarm`);
      await dialog().getByRole('button', { name: 'Create' }).click();
      await row('Swarms', `${project}-swarm`).waitFor();
      expect(await names('Swarms')).to.deep.equal([`${project}-swarm`]);
    }
    const swarms = (await adminApi('GET', '/v1/swarms')).json.data as Array<{ name: string; project_id: string }>;
    expect(Object.fromEntries(swarms.map((s) => [s.name, s.project_id]))).to.deep.equal({ 'alpha-swarm': projects.alpha, 'beta-swarm': projects.beta });

    await switcher().selectOption({ label: 'All projects' });
    await row('Swarms', 'alpha-swarm').waitFor();
    expect((await names('Swarms')).sort()).to.deep.equal(['alpha-swarm', 'beta-swarm']);

    await switcher().selectOption({ label: 'alpha' });
    await page.reload();
    await page.getByRole('heading', { name: 'Swarms' }).waitFor();
    await row('Swarms', 'alpha-swarm').waitFor();
    expect(await switcher().inputValue()).to.equal(projects.alpha);
    expect(await names('Swarms')).to.deep.equal(['alpha-swarm']);
    await page.getByRole('button', { name: 'Log out' }).click();
    await page.getByRole('heading', { name: 'Log in to hangar' }).waitFor();
  });

  it('the viewer sees only its project and its resources, and no button its role does not grant', async () => {
    await logIn(page, t.url, viewer.username, viewer.password);
    expect(await switcher().locator('option').allInnerTexts()).to.deep.equal(['alpha']);
    expect(await switcher().inputValue()).to.equal(projects.alpha);
    // Machines are the installation's: a user reads them and changes nothing.
    expect(await page.getByRole('button', { name: 'Add a machine' }).count()).to.equal(0);
    expect(await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Audit log' }).count()).to.equal(0);

    await nav('Swarms');
    await row('Swarms', 'alpha-swarm').waitFor();
    expect(await names('Swarms')).to.deep.equal(['alpha-swarm']);
    expect(await page.getByRole('button', { name: 'Create swarm' }).count()).to.equal(0);
    await row('Swarms', 'alpha-swarm').getByRole('link').click();
    await page.getByRole('heading', { name: 'Swarm alpha-swarm' }).waitFor();
    expect(await page.getByRole('button', { name: 'Join a node' }).count()).to.equal(0);

    await nav('Volumes');
    await page.getByRole('table', { name: 'Volumes' }).getByText('No volumes.').waitFor();
    expect(await page.getByRole('button', { name: 'Create volume' }).count(), 'a viewer holds no volumes:write').to.equal(0);

    await nav('Projects');
    await row('Projects', 'alpha').getByText('viewer').waitFor();
    expect(await names('Projects')).to.deep.equal(['alpha']);
    await row('Projects', 'alpha').getByRole('link').click();
    await page.getByRole('heading', { name: 'Project alpha' }).waitFor();
    await row('Members', 'vera').waitFor();
    await row('Roles', 'releaser').waitFor();
    for (const name of ['Add member', 'Change role', 'Remove', 'Create role', 'Delete', 'Edit']) {
      expect(await page.getByRole('button', { name, exact: true }).count(), name).to.equal(0);
    }
    // Beta is not the viewer's: its page answers as a project that does not exist.
    await page.goto(`${t.url}/ui#/projects/beta`);
    await page.getByRole('alert').filter({ hasText: 'beta' }).waitFor();
    await shot('projects-02-viewer');
  });

  it('the viewer makes a key limited to its project with a role and an expiry; the list shows them, and a wider key is refused with the API’s words', async () => {
    await nav('Users & keys');
    await page.getByRole('heading', { name: 'API keys' }).waitFor();
    await page.getByRole('button', { name: 'Create API key' }).click();
    await dialog().getByLabel('Description').fill('alpha reader');
    expect(await dialog().getByLabel('Project').inputValue(), 'the header’s project is the default').to.equal(projects.alpha);
    await dialog().getByLabel('Role').selectOption('viewer');
    await dialog().getByLabel('Expires in').fill('30d');
    await dialog().getByLabel('Source networks').fill('127.0.0.0/8');
    await dialog().getByRole('button', { name: 'Create' }).click();
    const secret = await page.getByTestId('key-secret').inputValue();
    const keyId = await dialog().getByLabel('Access key id').inputValue();
    await page.getByRole('button', { name: 'I have stored it' }).click();
    await row('API keys', 'alpha reader').waitFor();

    const made = ((await adminApi('GET', `/v1/iam/users/${viewer.userId}/keys`)).json.data as Array<Record<string, any>>).find((k) => k.access_key_id === keyId)!;
    expect(made).to.include({ scope: 'project', project_id: projects.alpha, role: 'viewer' });
    expect(Date.parse(made.expires_at) - Date.parse(made.created_at)).to.be.closeTo(30 * 86_400_000, 5_000);
    const shown = await row('API keys', 'alpha reader').textContent();
    expect(shown).to.contain('project alpha').and.contain('viewer').and.contain(`${made.expires_at.slice(0, 16).replace('T', ' ')} UTC`).and.contain('127.0.0.0/8');
    expect(await page.content()).not.to.contain(secret);

    // The key works in its project only.
    const key = { accessKeyId: keyId, secretAccessKey: secret };
    const listed = await signed(t, key, 'GET', '/v1/swarms');
    expect(listed.status, listed.text).to.equal(200);
    expect((listed.json.data as Array<{ name: string }>).map((s) => s.name)).to.deep.equal(['alpha-swarm']);
    expect((await signed(t, key, 'GET', `/v1/projects/${projects.beta}`)).status).to.equal(404);
    // Its last use is shown once the page reads the list again.
    await nav('Swarms');
    await nav('Users & keys');
    await row('API keys', 'alpha reader').locator('td[data-label="Last used"] time').waitFor();

    // No key wider than its owner: the refusal says what the viewer lacks.
    await page.getByRole('button', { name: 'Create API key' }).click();
    await dialog().getByLabel('Description').fill('too wide');
    await dialog().getByLabel('Role').selectOption('owner');
    await dialog().getByRole('button', { name: 'Create' }).click();
    await page.locator('.notice.error').filter({ hasText: 'Insufficient permissions: the key would hold' }).filter({ hasText: 'HTTP 403' }).waitFor();
    await dialog().getByRole('button', { name: 'Cancel' }).click();
    expect(((await adminApi('GET', `/v1/iam/users/${viewer.userId}/keys`)).json.data as Array<{ description: string }>).map((k) => k.description)).not.to.include('too wide');
    await shot('projects-03-keys');
  });

  it('a member’s buttons follow its roles as whoami says them: a custom role without projects:read, and the Backups page by the role in the volume’s project', async () => {
    // A volume of alpha with a backup that restores, a target and a schedule (records: no machine here; the API judges each button's request).
    const knex = t.hangar.services.db.knex;
    const at = new Date().toISOString();
    const sealed = t.hangar.services.ca.secretBox('secrets').seal(Buffer.from('dash'));
    await knex('volumes').insert({ id: 'vol-dashalpha', name: 'alpha-data', node_id: 'node-dashnobody', folder: '/srv/alpha-data', type: 'local', status: 'ready', project_id: projects.alpha, created_at: at, updated_at: at });
    await knex('backup_targets').insert({ id: 'bkt-dashalpha', name: 'alpha-target', kind: 's3', endpoint: 'http://127.0.0.1:9', bucket: 'alpha', prefix: '', region: 'us-east-1', access_key_id: 'x', secret_sealed: sealed, password_sealed: sealed, project_id: projects.alpha, checked_at: at, created_at: at, updated_at: at });
    await knex('backup_schedules').insert({ id: 'bks-dashalpha', name: 'alpha-nightly', target_id: 'bkt-dashalpha', volume_ids: JSON.stringify(['vol-dashalpha']), every_seconds: 86_400, next_run_at: '2100-01-01T00:00:00.000Z', project_id: projects.alpha, created_at: at, updated_at: at });
    await knex('backup_runs').insert({ id: 'bak-dashalpha', operation: 'backup', volume_id: 'vol-dashalpha', target_id: 'bkt-dashalpha', node_id: 'node-dashnobody', status: 'succeeded', snapshot_id: 'abcdef12', bytes: 1024, files: 3, started_at: at, finished_at: at, created_at: at, updated_at: at });
    const role = await adminApi('POST', '/v1/projects/alpha/roles', { name: 'backer', permissions: ['volumes:read', 'volumes:backup', 'backups:read'] });
    expect(role.status, role.text).to.equal(201);
    const bea = await createUser(t, admin, { username: 'bea', name: 'Bea Backer' });
    const mia = await createUser(t, admin, { username: 'mia', name: 'Mia Maintainer' });
    expect((await adminApi('PUT', '/v1/projects/alpha/members/bea', { role: 'backer' })).status).to.equal(201);
    expect((await adminApi('PUT', '/v1/projects/alpha/members/mia', { role: 'maintainer' })).status).to.equal(201);
    expect((await t.request('GET', '/v1/projects', { headers: bearer(bea.token) })).json.data, 'bea reads no project').to.deep.equal([]);

    /** The Backups page as the user sees it once the volume's backups are read: which buttons each table shows. */
    async function backupButtons() {
      await nav('Backups');
      await row('Volume backups', 'alpha-data').getByText('succeeded').waitFor();
      // Its buttons wait for the same read ('…' until then).
      await row('Volume backups', 'alpha-data').locator('td.actions').filter({ hasNotText: '…' }).waitFor();
      await row('Backup targets', 'alpha-target').waitFor();
      await row('Backup schedules', 'alpha-nightly').waitFor();
      const count = async (table: string, text: string, name: string) => ((await row(table, text).getByRole('button', { name, exact: true }).count()) > 0 ? [`${table}: ${name}`] : []);
      return [
        ...(await count('Volume backups', 'alpha-data', 'Back up')),
        ...(await count('Volume backups', 'alpha-data', 'Restore')),
        ...(await count('Backup targets', 'alpha-target', 'Delete')),
        ...(await count('Backup schedules', 'alpha-nightly', 'Delete')),
      ];
    }

    // The viewer (still logged in) reads and changes nothing.
    expect(await backupButtons(), 'viewer').to.deep.equal([]);
    await page.getByRole('button', { name: 'Log out' }).click();

    // bea's role reads no project, yet whoami tells the dashboard her project and what she may do there.
    await logIn(page, t.url, 'bea', bea.password);
    expect(await switcher().locator('option').allInnerTexts()).to.deep.equal(['alpha']);
    expect(await backupButtons(), 'backer').to.deep.equal(['Volume backups: Back up']);
    await page.getByRole('button', { name: 'Log out' }).click();

    // A maintainer of the project is not an installation admin, and gets every button of its project's backups.
    await logIn(page, t.url, 'mia', mia.password);
    expect(await backupButtons(), 'maintainer').to.deep.equal(['Volume backups: Back up', 'Volume backups: Restore', 'Backup targets: Delete', 'Backup schedules: Delete']);
    await shot('projects-04-backups-maintainer');
    await page.getByRole('button', { name: 'Log out' }).click();
  });
  it('an admin grants nodes to a project from its page (to a second project only with Share) and takes them back; a node’s page lists its projects; a member sees its own, and no grant button', async () => {
    const nodes: string[] = [];
    for (const [name, ip] of [['dash-n1', '192.0.2.41'], ['dash-n2', '192.0.2.42']]) {
      const made = await adminApi('POST', '/v1/nodes', { name, ip_address: ip });
      expect(made.status, made.text).to.equal(201);
      nodes.push(made.json.data.id);
    }
    const [n1, n2] = nodes as [string, string];
    const granted = async (project: string) => ((await adminApi('GET', `/v1/projects/${project}/nodes`)).json.data as Array<{ node_id: string }>).map((n) => n.node_id);
    const projectPage = async (id: string, name: string) => {
      await page.goto(`${t.url}/ui#/projects/${id}`);
      await page.getByRole('heading', { name: `Project ${name}` }).waitFor();
    };
    /** The projects a node's page says it is granted to. */
    const nodeProjects = async (id: string, name: string) => {
      await page.goto(`${t.url}/ui#/nodes/${id}`);
      await page.getByRole('heading', { name: `Node ${name}` }).waitFor();
      const facts = page.getByLabel('Node', { exact: true });
      await facts.getByText(/granted to none|alpha|beta/).first().waitFor();
      return (await facts.getByLabel('Granted to projects').getByRole('link').allInnerTexts().catch(() => [])).sort();
    };
    const grantOn = async (node: string, share: boolean) => {
      await page.getByRole('button', { name: 'Grant node' }).click();
      await dialog().getByLabel('Node').selectOption(node);
      if (share) await dialog().getByLabel('Share').check();
      await dialog().getByRole('button', { name: 'Grant', exact: true }).click();
    };

    await logIn(page, t.url, admin.username, admin.password);
    await projectPage(projects.alpha, 'alpha');
    await page.getByRole('table', { name: 'Granted nodes' }).getByText('No node is granted to this project').waitFor();
    await grantOn(n1, false);
    await row('Granted nodes', 'dash-n1').getByText('no', { exact: true }).waitFor();
    expect(await granted('alpha')).to.deep.equal([n1]);

    // A node granted to alpha serves beta too only when the admin says so: without Share, the API's words.
    await projectPage(projects.beta, 'beta');
    await grantOn(n1, false);
    await page.locator('.notice.error').filter({ hasText: `Node ${n1} is granted to project alpha: give share: true` }).waitFor();
    expect(await granted('beta')).to.deep.equal([]);
    await dialog().getByLabel('Share').check();
    await dialog().getByRole('button', { name: 'Grant', exact: true }).click();
    await row('Granted nodes', 'dash-n1').getByText('with other projects').waitFor();
    expect(await granted('beta')).to.deep.equal([n1]);
    await shot('projects-05-node-grants');

    expect(await nodeProjects(n1, 'dash-n1')).to.deep.equal(['alpha', 'beta']);
    expect(await nodeProjects(n2, 'dash-n2')).to.deep.equal([]);
    await page.getByLabel('Node', { exact: true }).getByText('granted to none (the installation’s)').waitFor();

    // Revoked from beta: alpha's alone.
    await projectPage(projects.beta, 'beta');
    await row('Granted nodes', 'dash-n1').getByRole('button', { name: 'Revoke' }).click();
    await dialog().getByRole('button', { name: 'Revoke' }).click();
    await page.getByRole('table', { name: 'Granted nodes' }).getByText('No node is granted to this project').waitFor();
    expect(await granted('beta')).to.deep.equal([]);
    expect(await nodeProjects(n1, 'dash-n1')).to.deep.equal(['alpha']);
    await page.getByRole('button', { name: 'Log out' }).click();

    // A maintainer of alpha sees alpha's nodes and grants nothing; a node shared with beta names alpha alone to it.
    expect((await adminApi('PUT', `/v1/projects/beta/nodes/${n1}`, { share: true })).status).to.equal(201);
    const nia = await createUser(t, admin, { username: 'nia', name: 'Nia Maintainer' });
    expect((await adminApi('PUT', '/v1/projects/alpha/members/nia', { role: 'maintainer' })).status).to.equal(201);
    await logIn(page, t.url, 'nia', nia.password);
    await projectPage(projects.alpha, 'alpha');
    await row('Granted nodes', 'dash-n1').waitFor();
    expect(await page.getByRole('button', { name: 'Grant node' }).count()).to.equal(0);
    expect(await row('Granted nodes', 'dash-n1').getByRole('button', { name: 'Revoke' }).count()).to.equal(0);
    expect(await nodeProjects(n1, 'dash-n1')).to.deep.equal(['alpha']);

    // The nodes her clusters can be made of are alpha's: Create cluster offers dash-n1 (ready: its agent heartbeats), not dash-n2.
    for (const id of [n1, n2]) expect((await (await FakeAgent.forNode(t, id)).heartbeat()).status).to.equal(200);
    await nav('Kubernetes');
    await page.getByRole('button', { name: 'Create cluster' }).click();
    const server = dialog().getByLabel('Server node');
    await server.locator('option', { hasText: 'dash-n1' }).waitFor({ state: 'attached' });
    expect(await server.locator('option').allInnerTexts()).to.deep.equal([`dash-n1 (${n1})`]);
    await dialog().getByRole('button', { name: 'Cancel' }).click();

    // So are the nodes her volumes can be on: Create volume offers dash-n1 alone, and the volume is alpha's.
    await nav('Volumes');
    await page.getByRole('button', { name: 'Create volume' }).click();
    const volumeNode = dialog().getByLabel('Node');
    await volumeNode.locator('option', { hasText: 'dash-n1' }).waitFor({ state: 'attached' });
    expect(await volumeNode.locator('option').allInnerTexts()).to.deep.equal([`dash-n1 (${n1})`]);
    await dialog().getByLabel('Name').fill('nia-data');
    await dialog().getByLabel('Type').selectOption('local');
    await dialog().getByLabel('Folder').fill('/srv/hangar/nia-data');
    await dialog().getByRole('button', { name: 'Create', exact: true }).click();
    await row('Volumes', 'nia-data').getByText('alpha', { exact: true }).waitFor();
    const made = ((await adminApi('GET', '/v1/volumes/nia-data')).json.data ?? {}) as Record<string, unknown>;
    expect(made).to.include({ node_id: n1, type: 'local', folder: '/srv/hangar/nia-data', project_id: projects.alpha });
    await page.getByRole('button', { name: 'Log out' }).click();
  });
  it('an admin creates a volume in the switcher’s project on any ready node; the API’s 409 and 400 show with what they name', async () => {
    const volume = async (name: string, node: string, folder: string) => {
      await page.getByRole('button', { name: 'Create volume' }).click();
      await dialog().getByLabel('Name').fill(name);
      await dialog().getByLabel('Type').selectOption('local');
      await dialog().getByLabel('Node').selectOption({ label: node });
      await dialog().getByLabel('Folder').fill(folder);
      await dialog().getByRole('button', { name: 'Create', exact: true }).click();
    };
    const ready = ((await adminApi('GET', '/v1/nodes?status=ready')).json.data as Array<{ id: string; name: string }>).map((n) => `${n.name} (${n.id})`).sort();
    expect(ready).to.have.length(2);
    await logIn(page, t.url, admin.username, admin.password);
    await switcher().selectOption({ label: 'beta' });
    await nav('Volumes');
    await page.getByRole('button', { name: 'Create volume' }).click();
    await dialog().getByLabel('Node').locator('option').nth(1).waitFor({ state: 'attached' });
    expect((await dialog().getByLabel('Node').locator('option').allInnerTexts()).sort(), 'every ready node').to.deep.equal(ready);
    await dialog().getByRole('button', { name: 'Cancel' }).click();
    const n1 = ready.find((n) => n.startsWith('dash-n1'))!;

    await volume('beta-data', n1, '/srv/hangar/beta-data');
    await row('Volumes', 'beta-data').getByText('beta', { exact: true }).waitFor();
    expect(((await adminApi('GET', '/v1/volumes/beta-data')).json.data as Record<string, unknown>).project_id).to.equal(projects.beta);

    await volume('beta-data', n1, '/srv/hangar/other');
    await page.locator('.notice.error').filter({ hasText: 'A volume named beta-data exists' }).waitFor();
    await dialog().getByLabel('Name').fill('beta-more');
    await dialog().getByLabel('Folder').fill('/srv/hangar/../etc');
    await dialog().getByRole('button', { name: 'Create', exact: true }).click();
    await page.locator('.notice.error').filter({ hasText: 'body.folder must not contain' }).waitFor();
    await dialog().getByRole('button', { name: 'Cancel' }).click();
    expect((await adminApi('GET', '/v1/volumes/beta-more')).status).to.equal(404);
    await page.getByRole('button', { name: 'Log out' }).click();
  });
});
