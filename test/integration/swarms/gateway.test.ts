import { expect } from 'chai';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { docker, dockerOk } from '../../../lab/docker.js';
import { cleanupAgents, waitFor } from '../../support/agents.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { haproxyImage, hostSwarm, HAPROXY_IMAGE, TEST_IMAGE } from '../../support/host-swarm.js';
import { freePort } from '../../support/ports.js';
import { bearer, bootstrapAdmin, type Credentials } from '../../support/identity.js';
import { requireService } from '../../support/requirements.js';
import { hostSwarmMember, SWARM_TEST_OVERRIDES, type SwarmMember } from '../../support/swarm-member.js';

const PLUGINS = ['system', 'iam', 'nodes', 'agent-internal', 'swarms', 'compute', 'gateway', 'cleanup'];
/** An image nobody has, and nothing can pull: the swarm rejects every task of it. */
const MISSING_IMAGE = 'hangar-test/no-such-lb-image:never';
/**
 * A swarm's load balancer through the HTTP API, run for real on the host engine's swarm: one whose
 * image nobody has fails with the swarm's reason (as an instance does) and stays failed; the list,
 * the single read and the gateway answer one shape; a changed gateway.image reaches the balancer
 * through a redeploy (after a restart of the control plane with the new configuration).
 */
describeEachDialect('the gateway on the host engine: load balancer failures, shapes and redeploys', (dialect) => {
  const storage = dialect.freshStorage();
  const suffix = randomBytes(3).toString('hex');
  const named = (base: string) => `${base}-${dialect.name.slice(0, 2)}-${suffix}`;
  let configDir: string | undefined;
  let port: number;
  let lbPort: number;
  let t: TestHangar | undefined;
  let admin: Credentials;
  let member: SwarmMember;
  let lbId: string;

  const start = async (image: string) =>
    (t = await startHangar(dialect, {
      plugins: PLUGINS,
      overrides: { ...SWARM_TEST_OVERRIDES, api: { port }, gateway: { image, http_port: lbPort, host_config_dir: configDir! } },
      storage,
    }));
  const api = (method: string, p: string, body?: unknown) => t!.request(method, p, { body, headers: bearer(admin.token) });
  const balancer = async () => (await api('GET', `/v1/loadbalancers/${lbId}`)).json.data;
  /** Turns of the gateway's routes loop this control plane has completed (hangar_loop_runs_total). */
  const routesLoopTurns = async () =>
    (await t!.hangar.services.metrics.loopRuns.get()).values.find((v) => v.labels.loop === 'gateway:routes' && v.labels.outcome === 'ok')?.value ?? 0;

  before(async function () {
    this.timeout(120_000);
    const missing = await hostSwarm();
    requireService(this, missing === null, missing ?? '');
    port = await freePort();
    lbPort = await freePort();
    // Where the agent writes the balancer's haproxy.cfg (bind-mounted into its container).
    configDir = mkdtempSync(path.join(os.tmpdir(), 'hangar-lb-'));
    await start(MISSING_IMAGE);
    admin = await bootstrapAdmin(t!);
    member = await hostSwarmMember(t!, admin, named('gw'));
  });
  after(async function () {
    this.timeout(60_000);
    // The control plane first: it would deploy a balancer removed under it again.
    await t?.stop();
    await cleanupAgents();
    for (const name of [`hangar-lb-${named('gw')}`, `inst-${named('web')}`]) await docker(['service', 'rm', name]);
    if (configDir) rmSync(configDir, { recursive: true, force: true });
  });

  it('a load balancer whose image nobody has goes failed with the swarm’s reason, and stays failed', async function () {
    this.timeout(120_000);
    const deployed = await api('POST', `/v1/swarms/${member.swarmId}/lb`);
    expect(deployed.status, deployed.text).to.equal(202);
    expect(deployed.json.data).to.include({ swarm_id: member.swarmId, image: MISSING_IMAGE, status: 'deploying' });
    expect(deployed.json.data.routes).to.deep.equal([]);
    lbId = deployed.json.data.id;
    const t0 = Date.now();
    const failed = await waitFor(async () => ((await balancer()).status === 'failed' ? balancer() : null), { timeoutMs: 90_000, intervalMs: 300, what: 'the balancer failed' });
    console.log(`      failed after ${((Date.now() - t0) / 1000).toFixed(1)} s: ${failed.error}`);
    expect(failed.error).to.match(new RegExp(`^deploying failed: latest task (rejected|failed): .*No such image: ${MISSING_IMAGE.replace(/[/.]/g, '\\$&')}`));
    expect((await api('GET', `/v1/swarms/${member.swarmId}`)).json.data.load_balancer).to.include({ id: lbId, status: 'failed' });
    // Observations (every second here) and the routes loop neither re-apply it nor hide the reason.
    for (const until = Date.now() + 6000; Date.now() < until; ) {
      expect(await balancer()).to.include({ status: 'failed', error: failed.error, config_version: failed.config_version });
      await new Promise((resolve) => setTimeout(resolve, 300));
    }
  });

  it('the list, the single read and the gateway answer one shape: the routes as an array', async function () {
    this.timeout(120_000);
    const created = await api('POST', '/v1/compute/instances', { name: named('web'), swarm_id: member.swarmId, image: TEST_IMAGE, command: ['sleep', '3600'], http_port: 8080 });
    expect(created.status, created.text).to.equal(202);
    const route = { domain: created.json.data.domain, service: `inst-${named('web')}`, port: 8080, source: 'instance', source_id: created.json.data.id };
    // The new route is applied to the balancer (which fails again: its image is still missing).
    const views = await waitFor(
      async () => {
        const [list, single, gateway] = await Promise.all([api('GET', '/v1/loadbalancers'), api('GET', `/v1/loadbalancers/${lbId}`), api('GET', '/v1/gateway')]);
        const found = { list: list.json.data.find((l: { id: string }) => l.id === lbId), single: single.json.data, gateway: gateway.json.data.load_balancers.find((l: { id: string }) => l.id === lbId), routes: gateway.json.data.routes };
        const settled = found.single.status === 'failed' && JSON.stringify(found.single.routes) === JSON.stringify([route]);
        return settled && JSON.stringify(found.list) === JSON.stringify(found.single) && JSON.stringify(found.gateway) === JSON.stringify(found.single) ? found : null;
      },
      { timeoutMs: 60_000, intervalMs: 500, what: 'the list, the single read and the gateway to agree on the balancer with its route' },
    );
    expect(views.single.routes).to.deep.equal([route]);
    expect(views.list).to.deep.equal(views.single);
    expect(views.gateway).to.deep.equal(views.single);
    expect(views.routes).to.deep.include({ ...route, swarm_id: member.swarmId, load_balancer_id: lbId });
  });

  it('a changed gateway.image reaches an existing balancer through a redeploy', async function () {
    this.timeout(240_000);
    const missing = await haproxyImage();
    requireService(this, missing === null, missing ?? '');
    const before = await balancer();
    await t!.stop();
    await start(HAPROXY_IMAGE);
    // The configuration alone changes nothing: the balancer keeps the image it was deployed with, and
    // a turn of the routes loop of the new configuration (which applies whatever differs) applies nothing.
    const turnsAtStart = await routesLoopTurns();
    await waitFor(async () => (await routesLoopTurns()) > turnsAtStart, { timeoutMs: 30_000, intervalMs: 100, what: 'a turn of the routes loop after the restart' });
    const after = await balancer();
    expect(after).to.include({ image: MISSING_IMAGE, status: 'failed', config_version: before.config_version, applied_at: before.applied_at });
    console.log(`      after the restart, ${(await routesLoopTurns()) - turnsAtStart} turn(s) of the routes loop: image, config_version ${after.config_version} and applied_at unchanged`);

    expect((await api('POST', '/v1/loadbalancers/lb-nosuch/redeploy')).status).to.equal(404);
    const redeployed = await api('POST', `/v1/loadbalancers/${lbId}/redeploy`);
    expect(redeployed.status, redeployed.text).to.equal(202);
    expect(redeployed.json.data).to.include({ id: lbId, image: HAPROXY_IMAGE, status: 'deploying' });
    expect(redeployed.json.data).to.not.have.property('error');
    const running = await waitFor(async () => ((await balancer()).status === 'running' ? balancer() : null), { timeoutMs: 120_000, intervalMs: 500, what: 'the redeployed balancer running' });
    expect(running).to.include({ image: HAPROXY_IMAGE });
    expect(running).to.not.have.property('error');
    expect((await dockerOk(['service', 'inspect', `hangar-lb-${named('gw')}`, '--format', '{{.Spec.TaskTemplate.ContainerSpec.Image}}'])).trim().split('@')[0]).to.equal(HAPROXY_IMAGE);

    expect((await api('DELETE', `/v1/swarms/${member.swarmId}/lb`)).status).to.equal(202);
    await waitFor(async () => (await api('GET', `/v1/loadbalancers/${lbId}`)).status === 404, { timeoutMs: 60_000, intervalMs: 500, what: 'the balancer removed' });
  });
});
