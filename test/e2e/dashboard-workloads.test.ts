import { expect } from 'chai';
import { existsSync } from 'node:fs';
import path from 'node:path';
import type { Page } from 'playwright-core';
import { FAST_NODES, waitFor } from '../support/agents.js';
import { chromiumInstalled, CHROMIUM, logIn, navigate, openBrowser, tableRow, UI_BUILT } from '../support/browser.js';
import { TestDialect } from '../support/dialects.js';
import { startHangar, type TestHangar } from '../support/hangar.js';
import { bearer, bootstrapAdmin, type Credentials } from '../support/identity.js';
import { requireService } from '../support/requirements.js';
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
 * created, scaled (the replicas showing live), stopped, started and its logs read; and a service
 * is deployed, found with the list's name filter, and its YAML edited with a diff of the change
 * before it is applied; the Gateway page shows the swarm's routes and its load balancer (by the
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
    requireService(this, chromiumInstalled(), `chromium at ${CHROMIUM} (apt-get install chromium)`);
    requireService(this, UI_BUILT(), 'the dashboard built (npm run build)');
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
