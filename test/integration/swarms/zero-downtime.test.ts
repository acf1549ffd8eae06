import { expect } from 'chai';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { docker, dockerOk } from '../../../lab/docker.js';
import { cleanupAgents, waitFor } from '../../support/agents.js';
import { TestDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { haproxyImage, hostSwarm, HAPROXY_IMAGE, TEST_IMAGE } from '../../support/host-swarm.js';
import { freePort } from '../../support/ports.js';
import { bearer, bootstrapAdmin, type Credentials } from '../../support/identity.js';
import { answersOnly as answersOnlyAt, describeLoop, RequestLoop, VERSIONED_HEALTH as HEALTH, VERSIONED_HTTPD } from '../../support/request-loop.js';
import { requireService } from '../../support/requirements.js';
import { hostSwarmMember, SWARM_TEST_OVERRIDES, type SwarmMember } from '../../support/swarm-member.js';

const PLUGINS = ['system', 'iam', 'nodes', 'agent-internal', 'swarms', 'compute', 'services', 'gateway', 'cleanup'];
const b64 = (text: string) => Buffer.from(text, 'utf8').toString('base64');

/** A compose stack of that httpd, two replicas, rolled out start-first and rolled back by the swarm on a failure ($$: no interpolation at deploy). */
const versionedStack = (version: string, ready = true) => `services:
  web:
    image: ${TEST_IMAGE}
    command: ${JSON.stringify(VERSIONED_HTTPD).replaceAll('$', '$$$$')}
    environment:
      VERSION: ${version}
      READY: "${ready ? 'yes' : 'no'}"
    stop_grace_period: 1s
    deploy:
      replicas: 2
      update_config: { parallelism: 1, order: start-first, failure_action: rollback, monitor: 2s }
      rollback_config: { parallelism: 1, order: start-first }
    x-hangar:
      port: 8080
`;

const seconds = (ms: number) => `${(ms / 1000).toFixed(1)} s`;

/**
 * Zero downtime, proven on a real swarm (the host engine's) through hangar's load balancer (HAProxy
 * on the same swarm, its port published on this host): a steady request loop (every 50 ms, a new
 * connection each) runs while a routed workload is updated v1 → v2 (start-first, health-gated),
 * then while an update to a v3 whose health check never passes is rolled back by the swarm. Not one
 * request fails, and no answer comes from v3. For a compute instance (three replicas) and for a
 * compose service (two).
 *
 * One dialect: what is proven here is the runtime's (the swarm's rollout, the balancer's server
 * list); the revisions and rollouts these updates write are tested on both dialects by
 * compute.test.ts and services/revisions.test.ts, and a second run would double ~70 s of CI.
 */
describe('zero downtime through the load balancer on the host engine’s swarm [sqlite]', () => {
  const dialect = new TestDialect('sqlite');
  const suffix = randomBytes(3).toString('hex');
  const named = (base: string) => `${base}-${dialect.name.slice(0, 2)}-${suffix}`;
  let configDir: string | undefined;
  let lbPort: number;
  let t: TestHangar | undefined;
  let admin: Credentials;
  let member: SwarmMember;
  const removeAfter: string[] = [];
  const stacksAfter: string[] = [];

  const api = (method: string, p: string, body?: unknown) => t!.request(method, p, { body, headers: bearer(admin.token) });
  const loop = (domain: string) => new RequestLoop(`http://127.0.0.1:${lbPort}/`, domain, 50);
  /** The swarm's own account of a service's last update (UpdateStatus.State), '' before any. */
  const updateState = async (service: string) => (await dockerOk(['service', 'inspect', service, '--format', '{{if .UpdateStatus}}{{.UpdateStatus.State}}{{end}}'])).trim();
  const answersOnly = (domain: string, version: string) => answersOnlyAt(`http://127.0.0.1:${lbPort}/`, domain, version);

  before(async function () {
    this.timeout(180_000);
    const missing = (await hostSwarm()) ?? (await haproxyImage());
    requireService(this, missing === null, missing ?? '');
    lbPort = await freePort();
    configDir = mkdtempSync(path.join(os.tmpdir(), 'hangar-lb-'));
    t = await startHangar(dialect, {
      plugins: PLUGINS,
      overrides: { ...SWARM_TEST_OVERRIDES, gateway: { image: HAPROXY_IMAGE, http_port: lbPort, host_config_dir: configDir } },
    });
    admin = await bootstrapAdmin(t);
    member = await hostSwarmMember(t, admin, named('zd'));
    const deployed = await api('POST', `/v1/swarms/${member.swarmId}/lb`);
    expect(deployed.status, deployed.text).to.equal(202);
    removeAfter.push(`hangar-lb-${named('zd')}`);
    await waitFor(async () => (await api('GET', `/v1/swarms/${member.swarmId}`)).json.data.load_balancer?.status === 'running', { timeoutMs: 120_000, intervalMs: 500, what: 'the balancer running' });
  });
  after(async function () {
    this.timeout(60_000);
    await t?.stop();
    await cleanupAgents();
    for (const stack of stacksAfter) await docker(['stack', 'rm', stack]);
    for (const name of removeAfter) await docker(['service', 'rm', name]);
    if (configDir) rmSync(configDir, { recursive: true, force: true });
    await dialect.cleanup();
  });

  it('an instance: v1 → v2 with 0 failed requests; a v3 that never gets healthy is rolled back to v2 by the swarm with 0 failed requests and no answer from v3', async function () {
    this.timeout(240_000);
    const rollout = { order: 'start-first', on_failure: 'rollback', parallelism: 1, monitor_s: 2 };
    const created = await api('POST', '/v1/compute/instances', {
      name: named('web'),
      swarm_id: member.swarmId,
      image: TEST_IMAGE,
      type: 'nano',
      replicas: 3,
      http_port: 8080,
      env: { VERSION: 'v1' },
      command: VERSIONED_HTTPD,
      health: HEALTH,
      rollout,
    });
    expect(created.status, created.text).to.equal(202);
    const { id, domain, runtime_name: runtime } = created.json.data;
    removeAfter.push(runtime);
    const instance = async () => (await api('GET', `/v1/compute/instances/${id}`)).json.data;
    await waitFor(async () => ((await instance()).status === 'running' && (await instance()).running === 3), { timeoutMs: 90_000, intervalMs: 300, what: 'v1 running 3' });
    await answersOnly(domain, 'v1');

    // v1 → v2 under a steady loop.
    const update = loop(domain);
    const t0 = Date.now();
    const v2 = await api('PATCH', `/v1/compute/instances/${id}`, { env: { VERSION: 'v2' } });
    expect(v2.status, v2.text).to.equal(202);
    await waitFor(async () => (await updateState(runtime)) === 'completed', { timeoutMs: 120_000, intervalMs: 200, what: 'the swarm to complete the update to v2' });
    const updatedIn = Date.now() - t0;
    await waitFor(async () => {
      const i = await instance();
      return i.status === 'running' && i.running === 3 && i.env.VERSION === 'v2';
    }, { timeoutMs: 30_000, intervalMs: 300, what: 'the instance running v2' });
    await new Promise((resolve) => setTimeout(resolve, 1000));
    const updated = await update.stop();
    console.log(`      v1 → v2 in ${seconds(updatedIn)}: ${describeLoop(updated)}`);
    expect(updated.failures, 'failed requests during v1 → v2').to.deep.equal([]);
    expect(Object.keys(updated.answers)).to.have.members(['v1', 'v2']);
    expect(updated.sequence.at(-1)).to.equal('v2');

    // v2 → v3, whose health check never passes: the swarm rolls it back, the loop sees v2 only.
    const failing = loop(domain);
    const t1 = Date.now();
    const v3 = await api('PATCH', `/v1/compute/instances/${id}`, { env: { VERSION: 'v3', READY: 'no' } });
    expect(v3.status, v3.text).to.equal(202);
    const rolledBack = await waitFor(async () => {
      const i = await instance();
      return i.status === 'rolled_back' ? i : null;
    }, { timeoutMs: 120_000, intervalMs: 200, what: 'the instance rolled_back' });
    const rolledBackIn = Date.now() - t1;
    console.log(`      ${rolledBack.reason}`);
    expect(rolledBack.reason).to.match(/rolled the update back.*; what runs is revision 2$/);
    await waitFor(async () => (await updateState(runtime)) === 'rollback_completed', { timeoutMs: 120_000, intervalMs: 200, what: 'the swarm to complete the rollback' });
    const settledIn = Date.now() - t1;
    await new Promise((resolve) => setTimeout(resolve, 1000));
    const rollback = await failing.stop();
    console.log(`      v2 → v3 rolled back: rolled_back after ${seconds(rolledBackIn)}, rollback completed after ${seconds(settledIn)}: ${describeLoop(rollback)}`);
    expect(rollback.failures, 'failed requests during the failed update and its rollback').to.deep.equal([]);
    expect(Object.keys(rollback.answers)).to.deep.equal(['v2']);
    const env = JSON.parse(await dockerOk(['service', 'inspect', runtime, '--format', '{{json .Spec.TaskTemplate.ContainerSpec.Env}}']));
    expect(env).to.include('VERSION=v2');
    expect((await instance()).status, 'stays rolled_back: the record holds the spec that failed').to.equal('rolled_back');
  });

  it('a compose service (deploy.update_config start-first, failure_action rollback; hangar’s health check): v1 → v2 with 0 failed requests; a failing v3 is rolled back to v2 with 0 failed requests', async function () {
    this.timeout(240_000);
    const name = `zd${dialect.name[0]}${suffix}`;
    const health = { web: HEALTH };
    const created = await api('POST', '/v1/services', { name, swarm_id: member.swarmId, compose_file: b64(versionedStack('v1')), health });
    expect(created.status, created.text).to.equal(202);
    const id = created.json.data.id;
    stacksAfter.push(created.json.data.stack);
    const runtime = `${created.json.data.stack}_web`;
    const service = async () => (await api('GET', `/v1/services/${id}`)).json.data;
    const running = await waitFor(async () => {
      const s = await service();
      if (s.status === 'failed') throw new Error(`the service failed: ${s.error}`);
      return s.status === 'running' && s.replicas.web?.running === 2 ? s : null;
    }, { timeoutMs: 90_000, intervalMs: 300, what: 'v1 running 2' });
    const domain = running.routes[0].domain;
    await answersOnly(domain, 'v1');

    const update = loop(domain);
    const t0 = Date.now();
    const v2 = await api('PUT', `/v1/services/${id}`, { compose_file: b64(versionedStack('v2')) });
    expect(v2.status, v2.text).to.equal(202);
    await waitFor(async () => (await updateState(runtime)) === 'completed', { timeoutMs: 120_000, intervalMs: 200, what: 'the swarm to complete the update to v2' });
    const updatedIn = Date.now() - t0;
    await new Promise((resolve) => setTimeout(resolve, 1000));
    const updated = await update.stop();
    console.log(`      v1 → v2 in ${seconds(updatedIn)}: ${describeLoop(updated)}`);
    expect(updated.failures, 'failed requests during v1 → v2').to.deep.equal([]);
    expect(Object.keys(updated.answers)).to.have.members(['v1', 'v2']);
    expect(updated.sequence.at(-1)).to.equal('v2');

    const failing = loop(domain);
    const t1 = Date.now();
    const v3 = await api('PUT', `/v1/services/${id}`, { compose_file: b64(versionedStack('v3', false)) });
    expect(v3.status, v3.text).to.equal(202);
    await waitFor(async () => (await updateState(runtime)) === 'rollback_completed', { timeoutMs: 120_000, intervalMs: 200, what: 'the swarm to roll the update to v3 back' });
    const settledIn = Date.now() - t1;
    await new Promise((resolve) => setTimeout(resolve, 1000));
    const rollback = await failing.stop();
    console.log(`      v2 → v3 rolled back, completed after ${seconds(settledIn)}: ${describeLoop(rollback)}`);
    expect(rollback.failures, 'failed requests during the failed update and its rollback').to.deep.equal([]);
    expect(Object.keys(rollback.answers)).to.deep.equal(['v2']);
    const env = JSON.parse(await dockerOk(['service', 'inspect', runtime, '--format', '{{json .Spec.TaskTemplate.ContainerSpec.Env}}']));
    expect(env).to.include('VERSION=v2');
    // hangar observes the halted rollout (what the rollout_halted alert reads), until a later one goes through: a rollback to v2's revision.
    const halted = await waitFor(async () => (await service()).halted_rollouts?.web ?? null, { timeoutMs: 30_000, intervalMs: 300, what: 'the service to tell the rolled-back rollout of web' });
    expect(halted.status).to.equal('rolled_back');
    const [, v2Revision] = (await api('GET', `/v1/services/${id}/revisions`)).json.data;
    expect((await api('POST', `/v1/services/${id}/rollback`, { revision: v2Revision.number })).status).to.equal(202);
    await waitFor(async () => {
      const s = await service();
      return s.status === 'running' && Object.keys(s.halted_rollouts).length === 0 ? s : null;
    }, { timeoutMs: 60_000, intervalMs: 300, what: 'the halted rollout to end with the rollback to v2' });
  });
});
