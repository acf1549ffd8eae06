import { expect } from 'chai';
import { waitFor } from '../../support/agents.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, type Credentials } from '../../support/identity.js';
import { swarmDouble, workloadState } from '../../support/swarm-double.js';

const PLUGINS = ['system', 'iam', 'nodes', 'agent-internal', 'swarms', 'compute', 'services', 'volumes', 'backups', 'alerts'];
const b64 = (text: string) => Buffer.from(text, 'utf8').toString('base64');
const compose = (image: string) => `services:\n  web:\n    image: ${image}\n`;
/** backup_stale's after_hours: 6 seconds (a success keeps it clear that long: long enough to resolve after the 1 s hold-down). */
const AFTER_HOURS = 6 / 3600;

interface Alert {
  id: string;
  state: string;
  severity: string;
  message: string;
  resource_type: string;
}

/**
 * service_not_running, rollout_halted and backup_stale, each made to fire and to resolve. A service's state comes from
 * the swarm (a test double answering the orchestrator's calls: it refuses a deploy, then takes the
 * next); a volume's backups are runs its agent reports, written here as the backups plugin records
 * them (a real run needs an S3 target and restic: the backups suites' business).
 */
describeEachDialect('alerts: service_not_running, rollout_halted and backup_stale fire and resolve', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  let manager: Awaited<ReturnType<typeof swarmDouble>>;
  /** While set, the swarm refuses bundle deploys with it. */
  let refuse: string | undefined;
  /** The workloads of the bundles deployed. */
  let bundles: Array<Record<string, unknown>> = [];

  before(async function () {
    this.timeout(60_000);
    t = await startHangar(dialect, {
      plugins: PLUGINS,
      overrides: {
        clusters: { observe_interval_seconds: 1 },
        alerts: { interval_seconds: 1, hold_down_seconds: 1, rules: { service_not_running: { for_seconds: 0 }, backup_stale: { after_hours: AFTER_HOURS } } },
      },
    });
    admin = await bootstrapAdmin(t);
    manager = await swarmDouble(t, admin.token, {
      refusals: { deployBundle: () => refuse },
      answers: {
        // A deployed bundle runs its one compose service, as the swarm reports it (deploy and inspect).
        deployBundle: (input: { name: string }) => {
          bundles = [{ ...workloadState({ name: `${input.name}_web`, image: 'shop:1', replicas: 1, labels: {} }), stack: input.name, component: 'web' }];
          return { name: input.name, services: bundles };
        },
        // (Also asked while the swarm is being set up, before `manager` is known.)
        inspectWorkloads: () => ({ workloads: [...(manager ? [...manager.running.values()].map(workloadState) : []), ...bundles] }),
      },
    });
  });
  after(async () => {
    await manager?.stop();
    await t?.stop();
  });

  const api = (method: string, p: string, body?: unknown) => t.request(method, p, { body, headers: bearer(admin.token) });
  const alertIn = (rule: string, resourceId: string, state: string) =>
    waitFor(async () => ((await api('GET', `/v1/alerts?rule=${rule}&resource_id=${resourceId}&state=${state}`)).json.data as Alert[])[0] ?? null, {
      timeoutMs: 20_000,
      what: `${rule} on ${resourceId} to be ${state}`,
    });

  it('service_not_running fires for a service whose deploy failed, and resolves once it runs', async function () {
    this.timeout(60_000);
    refuse = 'No such image: shop:missing';
    const created = await api('POST', '/v1/services', { name: 'shop', swarm_id: manager.swarmId, compose_file: b64(compose('shop:missing')) });
    expect(created.status, created.text).to.equal(202);
    const id = created.json.data.id as string;
    const firing = await alertIn('service_not_running', id, 'firing');
    expect(firing).to.include({ resource_type: 'service', severity: 'critical' });
    expect(firing.message).to.contain(`service shop (${id}) failed`).and.to.contain('No such image');

    refuse = undefined;
    expect((await api('PUT', `/v1/services/${id}`, { compose_file: b64(compose('shop:1')) })).status).to.equal(202);
    await waitFor(async () => (await api('GET', `/v1/services/${id}`)).json.data.status === 'running', { timeoutMs: 20_000, what: 'the service to run' });
    const resolved = await alertIn('service_not_running', id, 'resolved');
    expect(resolved.id).to.equal(firing.id);
  });

  it('rollout_halted fires for an instance its swarm rolled back and a service whose part it paused, and resolves once a later rollout completes', async function () {
    this.timeout(60_000);
    const instance = await api('POST', '/v1/compute/instances', { name: 'api', swarm_id: manager.swarmId, image: 'api:2' });
    expect(instance.status, instance.text).to.equal(202);
    const instanceId = instance.json.data.id as string;
    await waitFor(async () => (await api('GET', `/v1/compute/instances/${instanceId}`)).json.data.status === 'running', { timeoutMs: 20_000, what: 'the instance to run' });
    manager.workloadOf(instanceId)!.rollout = { state: 'rollback_completed', message: 'update rolled back due to failure or early termination of task x' };
    const instanceFiring = await alertIn('rollout_halted', instanceId, 'firing');
    expect(instanceFiring).to.include({ resource_type: 'instance', severity: 'warning' });
    expect(instanceFiring.message).to.contain(`instance api (${instanceId}): its rollout was rolled back`).and.to.contain('update rolled back due to failure');

    const service = await api('POST', '/v1/services', { name: 'cart', swarm_id: manager.swarmId, compose_file: b64(compose('cart:2')) });
    expect(service.status, service.text).to.equal(202);
    const serviceId = service.json.data.id as string;
    await waitFor(async () => (await api('GET', `/v1/services/${serviceId}`)).json.data.status === 'running', { timeoutMs: 20_000, what: 'the service to run' });
    bundles[0]!.rollout = { state: 'paused', message: 'update paused due to failure or early termination of task y' };
    const serviceFiring = await alertIn('rollout_halted', serviceId, 'firing');
    expect(serviceFiring).to.include({ resource_type: 'service', severity: 'warning' });
    expect(serviceFiring.message).to.equal(`service cart (${serviceId}): its rollout was halted: web paused (update paused due to failure or early termination of task y)`);
    expect((await api('GET', `/v1/services/${serviceId}`)).json.data.halted_rollouts).to.deep.equal({ web: { status: 'paused', message: 'update paused due to failure or early termination of task y' } });

    // A later rollout that went through (the engine's UpdateStatus completed) ends both.
    manager.workloadOf(instanceId)!.rollout = { state: 'completed', message: 'update completed' };
    bundles[0]!.rollout = { state: 'completed', message: 'update completed' };
    expect((await alertIn('rollout_halted', instanceId, 'resolved')).id).to.equal(instanceFiring.id);
    expect((await alertIn('rollout_halted', serviceId, 'resolved')).id).to.equal(serviceFiring.id);
    expect((await api('GET', `/v1/services/${serviceId}`)).json.data.halted_rollouts).to.deep.equal({});
  });

  it('backup_stale fires for a volume with no successful backup for after_hours, and resolves after one succeeds', async function () {
    this.timeout(60_000);
    const volume = await api('POST', '/v1/volumes', { name: 'data', node_id: manager.nodeId, folder: '/srv/data', type: 'local' });
    expect(volume.status, volume.text).to.equal(202);
    const volumeId = volume.json.data.id as string;
    const run = (status: 'failed' | 'succeeded') => {
      const at = new Date().toISOString();
      return t.hangar.services.db.knex('backup_runs').insert({
        id: `run-${status}-${dialect.name}-${Date.now()}`, operation: 'backup', volume_id: volumeId, target_id: 'bkt-gone', node_id: manager.nodeId, status,
        error: status === 'failed' ? 'restic: repository unreachable' : null, started_at: at, finished_at: at, created_at: at, updated_at: at,
      });
    };
    // A backup that failed: nothing has succeeded since; once that is older than after_hours the rule fires.
    await run('failed');
    const firing = await alertIn('backup_stale', volumeId, 'firing');
    expect(firing).to.include({ resource_type: 'volume', severity: 'warning' });
    expect(firing.message).to.contain(`volume ${volumeId}: no backup has succeeded since the first was tried`);

    await run('succeeded');
    const resolved = await alertIn('backup_stale', volumeId, 'resolved');
    expect(resolved.id).to.equal(firing.id);
  });
});
