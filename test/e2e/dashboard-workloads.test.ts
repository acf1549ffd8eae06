import { expect } from 'chai';
import { existsSync } from 'node:fs';
import path from 'node:path';
import type { Page } from 'playwright-core';
import { FAST_NODES, waitFor } from '../support/agents.js';
import { logIn, navigate, openBrowser, requireBrowser, tableRow } from '../support/browser.js';
import { TestDialect } from '../support/dialects.js';
import { startHangar, type TestHangar } from '../support/hangar.js';
import { bearer, bootstrapAdmin, type Credentials } from '../support/identity.js';
import { requireService } from '../support/requirements.js';
import { VERSIONED_HEALTH, VERSIONED_HTTPD } from '../support/request-loop.js';
import { loadConfig } from '../../core/config.js';
import { Lab, type Machine } from './lab/lab.js';

// What page.evaluate() callbacks see runs in the browser; this program is type-checked without the DOM library.
declare const window: any;

const AGENT_BUILT = () => existsSync(path.resolve('dist/agent/manifest.json'));
/** The workload image, built inside each machine (nothing can be pulled). */
const IMAGE = 'lab/busybox:latest';
/** The swarm's load balancer (HAProxy), built on the manager, where it runs. */
const LB_IMAGE = 'lab/haproxy:latest';
/** Where a machine's agent started by the join command writes its output. */
const JOIN_LOG = '/var/log/hangar-join.log';

/**
 * Workloads through the dashboard in chromium, on a lab swarm: two lab machines (containers with
 * sshd and their own dockerd) join the control plane with the command the dashboard's "Add a
 * machine" dialog shows, run as an operator would paste it (the agent downloaded from the control
 * plane); a swarm is created and both nodes join it from the swarm's page; then an instance is
 * created, scaled (the replicas showing live), stopped, started and its logs read; another's page
 * follows two updates and a failing one the swarm rolls back (the revisions with their diffs, the
 * rollout live) and rolls it back to its first revision, which an auditor is not offered; a service
 * is deployed, found with the list's name filter, and its YAML edited with a diff of the change
 * before it is applied, then rolled back to its first revision from its page; the Gateway page shows the swarm's routes and its load balancer (by the
 * swarm's name) and redeploys it. SQLite.
 */
describe('the dashboard in chromium: swarms, instances and services [sqlite, lab swarm]', function () {
  this.timeout(60_000);
  const dialect = new TestDialect('sqlite');
  let lab: Lab;
  let machines: Machine[];
  let t: TestHangar;
  let admin: Credentials;
  /** The control plane as the lab machines (and so the browser) reach it: the host's address on the lab network. */
  let url: string;
  let page: Page;
  let shot: (name: string) => Promise<unknown>;
  let closeBrowser: (() => Promise<void>) | undefined;
  const nodeOf = new Map<string, string>();
  let swarmId: string;
  const row = (table: string, text: string) => tableRow(page, table, text);
  const nav = (name: string) => navigate(page, name);
  const adminApi = (method: string, p: string, body?: unknown) => t.request(method, p, { body, headers: bearer(admin.token) });

  before(async function () {
    this.timeout(15 * 60_000); // the first run after a recipe change builds the lab image
    requireBrowser(this);
    requireService(this, AGENT_BUILT(), 'the agent executables (npm run build)');
    const available = await Lab.availability();
    requireService(this, available.docker, 'Docker (dockerd)');
    requireService(this, available.image, available.why ?? 'the lab image');
    lab = new Lab({ name: 'dashboard', subnet: '172.31.72.0/24', log: () => undefined });
    machines = await lab.start({ machines: 2 });
    // Images cannot be pulled: each machine builds the workload image while the rest starts.
    const images = Promise.all([...machines.map((m) => m.sh(`lab-busybox-image ${IMAGE}`)), machines[0]!.sh(`lab-haproxy-image ${LB_IMAGE}`)]);
    t = await startHangar(dialect, {
      plugins: loadConfig({ env: {} }).plugins,
      overrides: {
        ...FAST_NODES,
        api: { host: '0.0.0.0' },
        login: { port: 0 },
        // The lab kernel has no IPVS: no routing mesh and no service VIPs (as test/e2e/swarm.test.ts).
        swarms: { observe_interval_seconds: 1, advertise: 'address', publish_mode: 'host', endpoint_mode: 'dnsrr', drain_wait_seconds: 1 },
        gateway: { image: LB_IMAGE },
      },
    });
    url = `https://${lab.gateway}:${new URL(t.url).port}`;
    admin = await bootstrapAdmin(t);
    const opened = await openBrowser();
    ({ page, shot } = opened);
    closeBrowser = opened.close;
    await logIn(page, url, admin.username, admin.password);
    await images;
  });
  after(async function () {
    this.timeout(120_000);
    await closeBrowser?.();
    await t?.stop();
    await lab?.teardown();
    await dialect.cleanup();
  });
  afterEach(async function () {
    // A failure shows what an open dialog says, what the control plane logged as a warning or an error, and the machines' agents.
    if (this.currentTest?.state !== 'failed' || !t) return;
    for (const text of await page.locator('dialog[open]').allInnerTexts().catch(() => [])) console.log(`    open dialog: ${text.slice(0, 2000)}`);
    for (const line of t.logs.filter((l) => /"level":"(warn|error|fatal)"/.test(l)).slice(-20)) console.log(`    control plane: ${line.trim().slice(0, 1500)}`);
    for (const m of machines ?? []) console.log(`    ${m.name} ${JOIN_LOG}: ${(await m.exec(`tail -n 20 ${JOIN_LOG}`)).stdout}`);
  });

  /** Marks the page's document; sameDocument() says whether it is still the one (no reload in between). */
  const markDocument = () => page.evaluate(() => ((window as any).__sameDocument = true));
  const sameDocument = () => page.evaluate(() => (window as any).__sameDocument === true);

  it('adds both machines with the join command the dashboard shows; they turn ready in the fleet live', async function () {
    this.timeout(120_000);
    await markDocument();
    for (const m of machines) {
      await page.getByRole('button', { name: 'Add a machine' }).click();
      await page.getByRole('button', { name: 'Create a join token' }).click();
      const command = await page.getByLabel('Run this on the machine').inputValue();
      expect(command).to.contain(`'${url}/v1/agent/binary?arch=amd64'`);
      await page.getByRole('button', { name: 'Done' }).click();
      // What an operator pastes into a shell on the machine; the agent keeps running after it.
      await m.sh('cat >/root/join.sh', { input: command });
      await m.sh(`cd /root && setsid nohup sh /root/join.sh >${JOIN_LOG} 2>&1 </dev/null &`);
    }
    for (const m of machines) {
      // The address comes with the agent's first facts; the machine's hostname is its name.
      const nodeRow = row('Nodes', m.ip);
      await nodeRow.getByText('ready').waitFor({ timeout: 90_000 });
      nodeOf.set(m.name, (await nodeRow.getAttribute('data-id'))!);
      expect(await nodeRow.getByRole('link').textContent()).to.equal(m.name);
    }
    expect(await sameDocument(), 'no reload').to.equal(true);
    await shot('08-lab-fleet');
  });

  it('creates a swarm and joins both nodes to it from the swarm’s page: a manager, then a worker', async function () {
    this.timeout(120_000);
    await nav('Swarms');
    await page.getByRole('button', { name: 'Create swarm' }).click();
    await page.getByRole('dialog').getByLabel('Name').fill('lab');
    await page.getByRole('dialog').getByRole('button', { name: 'Create' }).click();
    await row('Swarms', 'lab').getByRole('link').click();
    await page.getByRole('heading', { name: 'Swarm lab' }).waitFor();
    swarmId = decodeURIComponent(page.url().split('/').pop()!);
    for (const [m, role] of [[machines[0]!, 'manager'], [machines[1]!, 'worker']] as const) {
      await page.getByRole('button', { name: 'Join a node' }).click();
      await page.getByRole('dialog').getByLabel('Node').selectOption(nodeOf.get(m.name)!);
      await page.getByRole('dialog').getByRole('button', { name: 'Join' }).click();
      const member = page.getByRole('table', { name: 'Members' }).locator(`tr[data-id="${nodeOf.get(m.name)}"]`);
      await member.locator('.badge', { hasText: 'active' }).waitFor({ timeout: 90_000 });
      expect(await member.textContent()).to.contain(role);
    }
    expect(await machines[0]!.sh("docker node ls --format '{{.Hostname}} {{.ManagerStatus}}' | sort")).to.match(/^m1 Leader\nm2 ?$/);
    await shot('09-lab-swarm');
  });

  it('creates an instance on the swarm, scales it (the replicas showing live), stops and starts it, and reads its logs', async function () {
    this.timeout(240_000);
    await nav('Instances');
    await page.getByRole('button', { name: 'Create instance' }).click();
    const dialog = page.getByRole('dialog', { name: 'Create an instance' });
    await dialog.getByLabel('Name').fill('web');
    await dialog.getByLabel('Swarm').selectOption(swarmId);
    await dialog.getByLabel('Image').fill(IMAGE);
    await dialog.getByLabel('Type').selectOption('nano');
    await dialog.getByLabel('Command').fill('echo "hello from $(hostname)"; exec sleep 3600');
    await dialog.getByRole('button', { name: 'Create' }).click();
    const instance = row('Instances', 'web');
    await instance.getByText('running').waitFor({ timeout: 60_000 });
    await instance.getByText('1 / 1').waitFor();
    await markDocument();

    await instance.getByRole('button', { name: 'Scale' }).click();
    await page.getByRole('dialog', { name: 'Scale web' }).getByLabel('Replicas').fill('4');
    await page.getByRole('dialog', { name: 'Scale web' }).getByRole('button', { name: 'Scale' }).click();
    await instance.getByText('4 / 4').waitFor({ timeout: 60_000 });
    await instance.getByText('running').waitFor();
    expect(await sameDocument(), 'no reload').to.equal(true);
    await shot('04-instances');
    // The replicas run on both machines of the swarm.
    const id = (await instance.getAttribute('data-id'))!;
    const placement = (await adminApi('GET', `/v1/compute/instances/${id}`)).json.data.placement as Array<{ node_id: string; state: string }>;
    expect(new Set(placement.map((p) => p.node_id))).to.deep.equal(new Set(nodeOf.values()));
    for (const m of machines) expect(Number(await m.sh('docker ps -q --filter label=com.docker.swarm.service.name=inst-web | wc -l'))).to.be.greaterThan(0);

    await instance.getByRole('button', { name: 'Stop' }).click();
    await page.getByRole('dialog', { name: 'Stop instance' }).getByRole('button', { name: 'Stop' }).click();
    await instance.getByText('stopped').waitFor({ timeout: 60_000 });
    await instance.getByText('0 / 4').waitFor({ timeout: 30_000 });
    await instance.getByRole('button', { name: 'Start' }).click();
    await page.getByRole('dialog', { name: 'Start instance' }).getByText('starts with 4 replicas').waitFor();
    await page.getByRole('dialog', { name: 'Start instance' }).getByRole('button', { name: 'Start' }).click();
    await instance.getByText('4 / 4').waitFor({ timeout: 60_000 });
    await instance.getByText('running').waitFor();

    await instance.getByRole('button', { name: 'Logs' }).click();
    const logs = page.getByRole('dialog', { name: 'Logs of web' }).getByLabel('Log lines');
    await logs.getByText('hello from inst-web-').first().waitFor({ timeout: 60_000 });
    await shot('10-instance-logs');
    await page.getByRole('dialog', { name: 'Logs of web' }).getByRole('button', { name: 'Close' }).click();
    await page.getByRole('dialog').waitFor({ state: 'detached' });
  });

  /**
   * Records, in the page, every status the Rollout region shows (a MutationObserver: no state is
   * missed between two reads); seenRollout() answers them in order, repeats collapsed.
   */
  const watchRollout = () =>
    // A string: functions compiled here get esbuild's __name() helper, which the page does not have.
    page.evaluate(`(() => {
      window.__rollout = [];
      const note = () => {
        const badge = document.querySelector('[role="status"][aria-label="Rollout"] .badge')?.textContent ?? '';
        if (badge && window.__rollout[window.__rollout.length - 1] !== badge) window.__rollout.push(badge);
      };
      window.__rolloutObserver?.disconnect();
      window.__rolloutObserver = new MutationObserver(note);
      window.__rolloutObserver.observe(document.body, { subtree: true, childList: true, characterData: true });
      note();
    })()`);
  const seenRollout = (): Promise<string[]> => page.evaluate(() => (window as any).__rollout.slice());

  it('an instance’s page: its revisions with what changed, the rollout live (a failing update rolled back by the swarm, saying why), and Roll back to this revision', async function () {
    this.timeout(300_000);
    // Two replicas of an httpd answering its VERSION, health-checked, rolled out start-first and rolled back by the swarm on a failure (as the zero-downtime test).
    const created = await adminApi('POST', '/v1/compute/instances', {
      name: 'rev',
      swarm_id: swarmId,
      image: IMAGE,
      type: 'nano',
      replicas: 2,
      env: { VERSION: 'v1' },
      command: VERSIONED_HTTPD,
      health: VERSIONED_HEALTH,
      rollout: { order: 'start-first', on_failure: 'rollback', parallelism: 1, monitor_s: 2 },
    });
    expect(created.status, created.text).to.equal(202);
    const { id, runtime_name: runtime } = created.json.data;
    await nav('Instances');
    await row('Instances', 'rev').getByRole('link', { name: 'rev', exact: true }).click();
    await page.getByRole('heading', { name: 'Instance rev' }).waitFor();
    const rollout = page.getByRole('status', { name: 'Rollout' });
    const revisions = page.getByRole('table', { name: 'Revisions' });
    const revision = (n: number) => revisions.locator(`tr[data-revision="${n}"]`);
    await rollout.getByText('Revision 1 runs.').waitFor({ timeout: 90_000 });
    await markDocument();

    // Two updates, as an operator makes them (hangar instance update, or the API): each a revision, the page following live.
    await watchRollout();
    const v2 = await adminApi('PATCH', `/v1/compute/instances/${id}`, { env: { VERSION: 'v2' } });
    expect(v2.status, v2.text).to.equal(202);
    await rollout.getByText('Revision 2 runs.').waitFor({ timeout: 120_000 });
    const seenV2 = await seenRollout();
    console.log(`      the rollout to revision 2 as the page showed it: ${seenV2.join(' → ')}`);
    expect(seenV2.at(-1)).to.equal('running');
    expect(seenV2.some((status) => status !== 'running'), 'the page showed the update under way before running').to.equal(true);
    const changes2 = revision(2).getByLabel('Changes of revision 2');
    expect(await changes2.locator('.del').allTextContents()).to.deep.equal(['- env.VERSION: "v1"']);
    expect(await changes2.locator('.add').allTextContents()).to.deep.equal(['+ env.VERSION: "v2"']);

    // v3 never becomes healthy: the swarm rolls it back, and the page says so, why, and what runs.
    await watchRollout();
    const v3 = await adminApi('PATCH', `/v1/compute/instances/${id}`, { env: { VERSION: 'v3', READY: 'no' } });
    expect(v3.status, v3.text).to.equal(202);
    await rollout.locator('.badge', { hasText: 'rolled back' }).waitFor({ timeout: 120_000 });
    expect(await rollout.textContent()).to.match(/rolled the update back.*what runs is revision 2/);
    console.log(`      the failing rollout of revision 3 as the page showed it: ${(await seenRollout()).join(' → ')}`);
    const changes3 = revision(3).getByLabel('Changes of revision 3');
    expect(await changes3.locator('.del').allTextContents()).to.deep.equal(['- env.VERSION: "v2"']);
    expect(await changes3.locator('.add').allTextContents()).to.deep.equal(['+ env.READY: "no"', '+ env.VERSION: "v3"']);
    await shot('12-instance-rolled-back');

    // Back to revision 1 from the page: it becomes revision 4, rolled out, and the instance runs it.
    await watchRollout();
    expect(await revision(4).count()).to.equal(0);
    await revision(1).getByRole('button', { name: 'Roll back to this revision' }).click();
    const confirm = page.getByRole('dialog', { name: 'Roll rev back to revision 1' });
    await confirm.getByText('rolled out again as a new revision').waitFor();
    await confirm.getByRole('button', { name: 'Roll back' }).click();
    await page.getByText('rev: rolling back to revision 1').waitFor();
    await revision(4).getByText('(rollback to 1)').waitFor({ timeout: 30_000 });
    await rollout.getByText('Revision 4 runs (the spec of revision 1, rolled out again).').waitFor({ timeout: 120_000 });
    console.log(`      the rollback to revision 1 as the page showed it: ${(await seenRollout()).join(' → ')}`);
    const changes4 = revision(4).getByLabel('Changes of revision 4');
    expect(await changes4.locator('.del').allTextContents()).to.have.members(['- env.READY: "no"', '- env.VERSION: "v3"']);
    expect(await changes4.locator('.add').allTextContents()).to.deep.equal(['+ env.VERSION: "v1"']);
    // The newest revision offers no rollback to itself; every older one does.
    expect(await revision(4).getByRole('button', { name: 'Roll back to this revision' }).count()).to.equal(0);
    expect(await revision(2).getByRole('button', { name: 'Roll back to this revision' }).count()).to.equal(1);
    expect(await sameDocument(), 'no reload').to.equal(true);
    await shot('13-instance-revisions');
    // The swarm on the machines runs revision 1's spec, labelled with hangar's revision 4.
    const env = JSON.parse(await machines[0]!.sh(`docker service inspect ${runtime} --format '{{json .Spec.TaskTemplate.ContainerSpec.Env}}'`)) as string[];
    expect(env).to.include('VERSION=v1');
    expect(env).not.to.include('READY=no');
    const kept = (await adminApi('GET', `/v1/compute/instances/${id}/revisions`)).json.data as Array<{ number: number; rollback_of?: number; who: { name: string } }>;
    expect(kept.map((r) => [r.number, r.rollback_of ?? null])).to.deep.equal([[4, 1], [3, null], [2, null], [1, null]]);
    // Who made each: the admin, by the name the API gives.
    for (const r of kept) expect(await revision(r.number).locator('td[data-label="By"]').textContent()).to.equal(r.who.name);
  });

  it('an auditor sees an instance’s revisions and rollout but is offered no rollback', async function () {
    this.timeout(60_000);
    const password = 'Correct-Horse-97-Battery!';
    const made = await adminApi('POST', '/v1/iam/users', { username: 'audra', password, role: 'auditor' });
    expect(made.status, made.text).to.equal(201);
    const id = (await adminApi('GET', '/v1/compute/instances?limit=1000')).json.data.find((i: { name: string }) => i.name === 'rev').id as string;
    const auditor = await openBrowser();
    try {
      await logIn(auditor.page, url, 'audra', password);
      await auditor.page.goto(`${url}/ui#/instances/${id}`);
      await auditor.page.getByRole('heading', { name: 'Instance rev' }).waitFor();
      const revisions = auditor.page.getByRole('table', { name: 'Revisions' });
      await revisions.locator('tr[data-revision="4"]').waitFor();
      expect(await revisions.locator('tr[data-revision]').count()).to.equal(4);
      await auditor.page.getByRole('status', { name: 'Rollout' }).getByText('Revision 4 runs').waitFor();
      expect(await auditor.page.getByRole('button', { name: 'Roll back to this revision' }).count()).to.equal(0);
    } finally {
      await auditor.close();
    }
  });

  it('edits a service: the YAML, a diff of the change, then applied', async function () {
    this.timeout(180_000);
    const compose = `services:\n  app:\n    image: ${IMAGE}\n    command: ["sleep", "3600"]\n`;
    await nav('Services');
    await page.getByRole('button', { name: 'Create service' }).click();
    const create = page.getByRole('dialog');
    await create.getByLabel('Name').fill('stack');
    await create.getByLabel('Swarm').selectOption(swarmId);
    await create.getByLabel('Compose file (YAML)').fill(compose);
    await create.getByRole('button', { name: 'Deploy' }).click();
    await row('Services', 'stack').getByText('running').waitFor({ timeout: 90_000 });
    // The list's name filter, applied by the server: another prefix hides the service, its own shows it.
    const filter = page.getByRole('search', { name: 'Filter services' });
    await filter.getByLabel('Name starts with').fill('other');
    await filter.getByRole('button', { name: 'Filter' }).click();
    await page.getByRole('table', { name: 'Services' }).getByText('No services.').waitFor();
    await filter.getByLabel('Name starts with').fill('sta');
    await filter.getByRole('button', { name: 'Filter' }).click();
    await row('Services', 'stack').getByRole('link', { name: 'stack', exact: true }).click();
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
    // The swarm on the machines runs the edited command.
    const stack = (await adminApi('GET', `/v1/services/${id}`)).json.data.stack as string;
    await waitFor(async () => (await machines[0]!.sh(`docker service inspect ${stack}_app --format '{{json .Spec.TaskTemplate.ContainerSpec.Args}}'`)).includes('7200'), { timeoutMs: 60_000, what: 'the stack running the edited command' });
  });

  it('a service’s page: its revisions with what changed in the YAML, and Roll back to this revision', async function () {
    this.timeout(180_000);
    await nav('Services');
    await row('Services', 'stack').getByRole('link', { name: 'stack', exact: true }).click();
    await page.getByRole('heading', { name: 'Service stack' }).waitFor();
    const id = decodeURIComponent(page.url().split('/').pop()!);
    const revisions = page.getByRole('table', { name: 'Revisions' });
    const revision = (n: number) => revisions.locator(`tr[data-revision="${n}"]`);
    const rollout = page.getByRole('status', { name: 'Rollout' });
    // The edit of the test before is revision 2: the compose file read as data, the changed argument.
    const changes2 = revision(2).getByLabel('Changes of revision 2');
    await changes2.waitFor();
    expect(await changes2.locator('.del').allTextContents()).to.deep.equal(['- compose_file.services.app.command[1]: "3600"']);
    expect(await changes2.locator('.add').allTextContents()).to.deep.equal(['+ compose_file.services.app.command[1]: "7200"']);
    await rollout.getByText('Newest revision: 2.').waitFor({ timeout: 60_000 });

    await revision(1).getByRole('button', { name: 'Roll back to this revision' }).click();
    await page.getByRole('dialog', { name: 'Roll stack back to revision 1' }).getByRole('button', { name: 'Roll back' }).click();
    await revision(3).getByText('(rollback to 1)').waitFor({ timeout: 30_000 });
    await rollout.locator('.badge', { hasText: 'running' }).waitFor({ timeout: 90_000 });
    await rollout.getByText('Newest revision: 3 (the spec of revision 1, rolled out again).').waitFor();
    expect(await revision(3).getByLabel('Changes of revision 3').locator('.add').allTextContents()).to.deep.equal(['+ compose_file.services.app.command[1]: "3600"']);
    await page.getByLabel('Compose file', { exact: true }).getByText('3600').waitFor();
    const stack = (await adminApi('GET', `/v1/services/${id}`)).json.data.stack as string;
    await waitFor(async () => (await machines[0]!.sh(`docker service inspect ${stack}_app --format '{{json .Spec.TaskTemplate.ContainerSpec.Args}}'`)).includes('3600'), { timeoutMs: 60_000, what: 'the stack running revision 1’s command again' });
    await shot('14-service-revisions');
  });

  it('shows the gateway: the swarm’s routes and its load balancer by the swarm’s name, and redeploys it', async function () {
    this.timeout(180_000);
    const thrown: string[] = [];
    const onError = (err: Error) => thrown.push(err.message);
    page.on('pageerror', onError);
    // A routed instance (a domain and a port to send it to) and the swarm's balancer, through the API.
    const site = await adminApi('POST', '/v1/compute/instances', { name: 'site', swarm_id: swarmId, image: IMAGE, command: ['sleep', '3600'], http_port: 8080 });
    expect(site.status, site.text).to.equal(202);
    const lb = await adminApi('POST', `/v1/swarms/${swarmId}/lb`);
    expect(lb.status, lb.text).to.equal(202);
    const domain = site.json.data.domain as string;
    expect(domain).to.equal('site.lab.hangar.local');

    // The instances list names the swarm, linked to its page, its id the link's title.
    await nav('Instances');
    const swarmLink = row('Instances', 'site').getByRole('link', { name: 'lab', exact: true });
    await swarmLink.waitFor();
    expect(await swarmLink.getAttribute('href')).to.equal(`#/swarms/${swarmId}`);
    expect(await swarmLink.getAttribute('title')).to.equal(swarmId);

    await nav('Gateway');
    await page.getByRole('heading', { name: 'Gateway' }).waitFor();
    const route = row('Gateway routes', domain);
    await route.waitFor();
    expect(await route.textContent()).to.contain('inst-site:8080');
    expect(await route.getByRole('link', { name: 'lab', exact: true }).getAttribute('href')).to.equal(`#/swarms/${swarmId}`);
    const balancer = row('Load balancers', 'lb-lab');
    // Live: the balancer turns running, its route applied, without a reload.
    await balancer.getByText('running').waitFor({ timeout: 120_000 });
    await route.getByText(lb.json.data.id).waitFor();
    expect(await balancer.getByRole('link', { name: 'lab', exact: true }).getAttribute('href')).to.equal(`#/swarms/${swarmId}`);
    expect(await balancer.textContent()).to.contain(LB_IMAGE);
    await waitFor(async () => (await balancer.locator('td[data-label="Routes"]').textContent()) === '1', { timeoutMs: 30_000, what: 'the balancer’s one route' });
    await shot('11-gateway');

    const before = (await adminApi('GET', `/v1/loadbalancers/${lb.json.data.id}`)).json.data.config_version as number;
    await balancer.getByRole('button', { name: 'Redeploy' }).click();
    await page.getByRole('dialog', { name: 'Redeploy the load balancer' }).getByRole('button', { name: 'Redeploy' }).click();
    await page.getByText('redeploy accepted').waitFor();
    await waitFor(
      async () => {
        const got = (await adminApi('GET', `/v1/loadbalancers/${lb.json.data.id}`)).json.data;
        return got.config_version > before && got.status === 'running';
      },
      { timeoutMs: 60_000, what: 'the balancer deployed anew and running' },
    );
    await balancer.getByText('running').waitFor();
    page.off('pageerror', onError);
    expect(thrown).to.deep.equal([]);
  });
});
