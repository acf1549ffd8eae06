import { expect } from 'chai';
import { randomBytes } from 'node:crypto';
import type { Page } from 'playwright-core';
import { docker, dockerOk } from '../../lab/docker.js';
import { cleanupAgents, waitFor } from '../support/agents.js';
import { logIn, navigate, openBrowser, requireBrowser, tableRow } from '../support/browser.js';
import { TestDialect } from '../support/dialects.js';
import { startHangar, type TestHangar } from '../support/hangar.js';
import { hostSwarm, TEST_IMAGE } from '../support/host-swarm.js';
import { bearer, bootstrapAdmin, type Credentials } from '../support/identity.js';
import { postgresAvailable, requireService } from '../support/requirements.js';
import { hostSwarmMember, SWARM_TEST_OVERRIDES } from '../support/swarm-member.js';
import { loadConfig } from '../../core/config.js';

/**
 * An instance's revisions and a rollback from its page in chromium, on PostgreSQL (the lab suite,
 * test/e2e/dashboard-workloads.test.ts, does the same and the live rollout on SQLite): an instance on
 * the host engine's swarm, updated twice through the API, shows its three revisions with what
 * changed; *Roll back to this revision* on the first, confirmed, rolls its spec out again as
 * revision 4, and the swarm's service runs it.
 */
describe('the dashboard in chromium: an instance’s revisions and a rollback [postgres, host swarm]', function () {
  this.timeout(60_000);
  const dialect = new TestDialect('postgres');
  const name = `rev-${randomBytes(3).toString('hex')}`;
  let t: TestHangar;
  let admin: Credentials;
  let page: Page;
  let closeBrowser: (() => Promise<void>) | undefined;
  let runtime = '';
  const adminApi = (method: string, p: string, body?: unknown) => t.request(method, p, { body, headers: bearer(admin.token) });

  before(async function () {
    this.timeout(180_000);
    requireBrowser(this);
    requireService(this, await postgresAvailable(), 'PostgreSQL (HANGAR_TEST_PG_URL, or run scripts/services.sh as root)');
    const missing = await hostSwarm();
    requireService(this, missing === null, missing ?? '');
    t = await startHangar(dialect, { plugins: loadConfig({ env: {} }).plugins, overrides: { ...SWARM_TEST_OVERRIDES, login: { port: 0 } } });
    admin = await bootstrapAdmin(t);
    const member = await hostSwarmMember(t, admin, `${name}-swarm`);
    const created = await adminApi('POST', '/v1/compute/instances', {
      name,
      swarm_id: member.swarmId,
      image: TEST_IMAGE,
      replicas: 1,
      env: { VERSION: 'v1' },
      command: ['sh', '-c', 'trap "exit 0" TERM; while :; do sleep 1; done'],
    });
    expect(created.status, created.text).to.equal(202);
    runtime = created.json.data.runtime_name;
    const running = (version: string) =>
      waitFor(async () => {
        const i = (await adminApi('GET', `/v1/compute/instances/${name}`)).json.data;
        if (i?.status === 'failed') throw new Error(`the instance failed: ${i.reason ?? i.error}`);
        return i?.status === 'running' && i.env?.VERSION === version;
      }, { timeoutMs: 90_000, intervalMs: 500, what: `${version} running` });
    await running('v1');
    for (const env of [{ VERSION: 'v2' }, { VERSION: 'v3', MODE: 'fast' }]) {
      const patched = await adminApi('PATCH', `/v1/compute/instances/${name}`, { env });
      expect(patched.status, patched.text).to.equal(202);
      await running(env.VERSION);
    }
    const revisions = (await adminApi('GET', `/v1/compute/instances/${name}/revisions`)).json.data as Array<{ number: number }>;
    expect(revisions.map((r) => r.number).sort()).to.deep.equal([1, 2, 3]);
    const opened = await openBrowser();
    page = opened.page;
    closeBrowser = opened.close;
  });
  after(async function () {
    this.timeout(60_000);
    await closeBrowser?.();
    await t?.stop();
    await cleanupAgents();
    if (runtime) await docker(['service', 'rm', runtime]);
    await dialect.cleanup();
  });

  it('lists the revisions with what changed, and rolls back to the first from its row: revision 4, which the swarm runs', async function () {
    this.timeout(180_000);
    await logIn(page, t.url, admin.username, admin.password);
    await navigate(page, 'Instances');
    await tableRow(page, 'Instances', name).getByRole('link', { name, exact: true }).click();
    await page.getByRole('heading', { name: `Instance ${name}` }).waitFor();
    const revisions = page.getByRole('table', { name: 'Revisions' });
    const revision = (n: number) => revisions.locator(`tr[data-revision="${n}"]`);
    await revision(3).waitFor();
    const changes3 = revision(3).getByLabel('Changes of revision 3');
    expect(await changes3.locator('.del').allTextContents()).to.deep.equal(['- env.VERSION: "v2"']);
    expect(await changes3.locator('.add').allTextContents()).to.deep.equal(['+ env.MODE: "fast"', '+ env.VERSION: "v3"']);

    await revision(1).getByRole('button', { name: 'Roll back to this revision' }).click();
    const confirm = page.getByRole('dialog', { name: `Roll ${name} back to revision 1` });
    await confirm.getByRole('button', { name: 'Roll back' }).click();
    await revision(4).getByText('(rollback to 1)').waitFor({ timeout: 30_000 });
    const changes4 = revision(4).getByLabel('Changes of revision 4');
    expect(await changes4.locator('.del').allTextContents()).to.have.members(['- env.MODE: "fast"', '- env.VERSION: "v3"']);
    expect(await changes4.locator('.add').allTextContents()).to.deep.equal(['+ env.VERSION: "v1"']);
    expect(await revision(4).getByRole('button', { name: 'Roll back to this revision' }).count()).to.equal(0);

    await waitFor(
      async () => {
        const i = (await adminApi('GET', `/v1/compute/instances/${name}`)).json.data;
        return i.status === 'running' && i.env?.VERSION === 'v1' && !('MODE' in (i.env ?? {}));
      },
      { timeoutMs: 90_000, intervalMs: 500, what: 'the rollback rolled out' },
    );
    const env = JSON.parse(await dockerOk(['service', 'inspect', runtime, '--format', '{{json .Spec.TaskTemplate.ContainerSpec.Env}}'])) as string[];
    expect(env).to.include('VERSION=v1').and.not.include('MODE=fast');
  });
});
