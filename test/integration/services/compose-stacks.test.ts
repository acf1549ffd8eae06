import { expect } from 'chai';
import { randomBytes } from 'node:crypto';
import { docker, dockerOk } from '../../../lab/docker.js';
import type { Route } from '../../../core/orchestrator.js';
import type { ServicesApi } from '../../../plugins/services/index.js';
import { cleanupAgents, waitFor } from '../../support/agents.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { hostSwarm, TEST_IMAGE } from '../../support/host-swarm.js';
import { bearer, bootstrapAdmin, type Credentials } from '../../support/identity.js';
import { requireService } from '../../support/requirements.js';
import { composeWithObjects, stays } from '../../support/stays.js';
import { hostSwarmMember, SWARM_TEST_OVERRIDES, type SwarmMember } from '../../support/swarm-member.js';
import { RoutesChanged } from '../../../core/clusters/topics.js';
import { ResourceDeleted } from '../../../core/events.js';

// Compose stacks deployed through a real agent on this host into the host engine's swarm.
// (`sh -c` ignores SIGTERM as PID 1 unless it traps it: the commands do (stays()), and a short
// stop_grace_period stays as a bound, so updates and removals are quick.)
const RUN = randomBytes(3).toString('hex');
const b64 = (text: string) => Buffer.from(text, 'utf8').toString('base64');

const TWO_SERVICES = `# two busybox services; web is routed by the load balancer
services:
  web:
    image: ${TEST_IMAGE}
    command: ${JSON.stringify(stays('echo hello from web'))}
    stop_grace_period: 1s
    x-hangar:
      port: 8080
  worker:
    image: ${TEST_IMAGE}
    command: ${JSON.stringify(stays('echo hello from worker'))}
    stop_grace_period: 1s
`;
const WEB_ONLY = `services:
  web:
    image: ${TEST_IMAGE}
    command: ${JSON.stringify(stays('echo hello again from web'))}
    stop_grace_period: 1s
    x-hangar:
      domain: shop.example.test
      port: 8080
`;

/** Names of the host engine's services that belong to a stack. */
async function stackServices(stack: string): Promise<string[]> {
  const out = await docker(['service', 'ls', '--filter', `label=com.docker.stack.namespace=${stack}`, '--format', '{{.Name}}']);
  return out.stdout.split('\n').filter(Boolean).sort();
}

describeEachDialect('services: compose stacks on a swarm through a real agent (host dockerd)', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  let member: SwarmMember;
  const name = `st${dialect.name[0]}${RUN}`;
  const stack = `hangar-${name}`;
  const routeEvents: unknown[] = [];
  const deletedEvents: unknown[] = [];
  let serviceId = '';

  const api = (method: string, path: string, body?: unknown) => t.request(method, path, { body, headers: bearer(admin.token) });
  const get = async () => (await api('GET', `/v1/services/${serviceId}`)).json.data;
  const waitStatus = (status: string, timeoutMs = 60_000) =>
    waitFor(
      async () => {
        const s = await get();
        if (s.status === 'failed' && status !== 'failed') throw new Error(`the service failed: ${s.error}`);
        return s.status === status ? s : null;
      },
      { timeoutMs, intervalMs: 300, what: `service ${name} to be ${status}` },
    );
  const routesOf = () => (t.hangar.services.provided.get('services') as ServicesApi).routes(member.swarmId);

  before(async function () {
    this.timeout(120_000);
    const missing = await hostSwarm();
    requireService(this, missing === null, missing ?? '');
    t = await startHangar(dialect, { plugins: ['system', 'iam', 'nodes', 'agent-internal', 'swarms', 'secrets', 'services', 'cleanup'], overrides: SWARM_TEST_OVERRIDES });
    admin = await bootstrapAdmin(t);
    t.hangar.services.events.subscribe(RoutesChanged, (payload) => void routeEvents.push(payload));
    t.hangar.services.events.subscribe(ResourceDeleted, (payload) => void deletedEvents.push(payload));
    member = await hostSwarmMember(t, admin, `sw${dialect.name[0]}${RUN}`);
  });
  after(async function () {
    this.timeout(60_000);
    for (const s of [stack, `${stack}x`, `${stack}s`, `${stack}f`]) await docker(['stack', 'rm', s]);
    await t?.stop();
    await cleanupAgents();
  });

  it('deploys a stack of two services (202 deploying, then running); GET shows the YAML, replicas per service and the x-hangar route', async function () {
    this.timeout(120_000);
    const res = await api('POST', '/v1/services', { name, swarm_id: member.swarmId, compose_file: b64(TWO_SERVICES) });
    expect(res.status, res.text).to.equal(202);
    expect(res.json.data).to.include({ name, backend: 'compose', swarm_id: member.swarmId, stack, status: 'deploying', compose_file: TWO_SERVICES });
    expect(res.json.data.id).to.match(/^svc-/);
    serviceId = res.json.data.id;

    await waitStatus('running');
    const running = await waitFor(
      async () => {
        const s = await get();
        return s.replicas.web?.running === 1 && s.replicas.worker?.running === 1 ? s : null;
      },
      { timeoutMs: 60_000, intervalMs: 500, what: 'both services to run one task' },
    );
    expect(running.replicas).to.deep.equal({ web: { desired: 1, running: 1 }, worker: { desired: 1, running: 1 } });
    expect(running.error).to.equal(null);
    const domain = `web.${name}.${member.swarmName}.hangar.local`;
    expect(running.routes).to.deep.equal([{ service: 'web', domain, port: 8080 }]);
    expect(await stackServices(stack)).to.deep.equal([`${stack}_web`, `${stack}_worker`]);

    // The routed service is on the edge network and keeps the stack's default network.
    const networks = (await docker(['service', 'inspect', '--format', '{{range .Spec.TaskTemplate.Networks}}{{.Target}} {{end}}', `${stack}_web`])).stdout.trim().split(' ');
    const names = await Promise.all(networks.map(async (id) => (await docker(['network', 'inspect', '--format', '{{.Name}}', id])).stdout.trim()));
    expect(names).to.have.members(['hangar-edge', `${stack}_default`]);
    // No hangar role label: the stack's services are told apart by the stack name.
    const labels = JSON.parse((await docker(['service', 'inspect', '--format', '{{json .Spec.Labels}}', `${stack}_worker`])).stdout);
    expect(Object.keys(labels).filter((l) => l.startsWith('io.hangar.'))).to.deep.equal([]);

    const routes: Route[] = await routesOf();
    expect(routes).to.deep.equal([{ domain, service: `${stack}_web`, port: 8080, source: 'service', source_id: serviceId }]);
    expect(routeEvents).to.deep.include({ clusterId: member.swarmId });
    expect(await t.hangar.services.clusters.workloadsIn(member.swarmId)).to.deep.include({ type: 'service', id: serviceId, name });

    const list = await api('GET', '/v1/services');
    expect(list.json.data.map((s: { id: string }) => s.id)).to.deep.equal([serviceId]);
    expect(list.json.next_cursor).to.equal(null);
    expect((await api('GET', `/v1/services/${name}`)).json.data.id, 'by name').to.equal(serviceId);
  });

  it('refuses a second service of the same name (409) and a broken compose file (400 naming the line) without deploying anything', async function () {
    this.timeout(30_000);
    const dup = await api('POST', '/v1/services', { name, swarm_id: member.swarmId, compose_file: b64(WEB_ONLY) });
    expect(dup.status).to.equal(409);
    const bad = await api('POST', '/v1/services', { name: `${name}x`, swarm_id: member.swarmId, compose_file: b64('services:\n  web:\n    image: [unclosed\n') });
    expect(bad.status).to.equal(400);
    expect(bad.json.message).to.match(/not valid YAML: line \d+, column \d+/);
    expect((await api('GET', `/v1/services/${name}x`)).status).to.equal(404);
    expect(await stackServices(`${stack}x`)).to.deep.equal([]);
  });

  it('hands the stack’s logs over once: 202 with a task id, then the lines of both services, then 404', async function () {
    this.timeout(60_000);
    const queued = await api('POST', `/v1/services/${serviceId}/logs?lines=50`);
    expect(queued.status, queued.text).to.equal(202);
    const taskId = queued.json.data.task_id as string;
    expect(taskId).to.match(/^task-/);
    const done = await waitFor(
      async () => {
        const read = await api('GET', `/v1/services/${serviceId}/logs/${taskId}`);
        expect(read.status, read.text).to.equal(200);
        return read.json.data.status === 'completed' || read.json.data.status === 'failed' ? read.json.data : null;
      },
      { timeoutMs: 30_000, intervalMs: 300, what: 'the log task' },
    );
    expect(done.status, done.error).to.equal('completed');
    expect(done.lines.join('\n')).to.contain('hello from web').and.contain('hello from worker');
    expect((await api('GET', `/v1/services/${serviceId}/logs/${taskId}`)).status, 'read once').to.equal(404);
  });

  it('PUT replaces the spec and redeploys with prune: a service left out is removed; the route follows x-hangar', async function () {
    this.timeout(120_000);
    const res = await api('PUT', `/v1/services/${serviceId}`, { compose_file: b64(WEB_ONLY) });
    expect(res.status, res.text).to.equal(202);
    expect(res.json.data).to.include({ status: 'deploying', compose_file: WEB_ONLY });
    const again = await api('PUT', `/v1/services/${serviceId}`, { compose_file: b64(WEB_ONLY) });
    expect([202, 409], 'while deploying: 409').to.include(again.status);
    await waitStatus('running');
    await waitFor(async () => (await stackServices(stack)).join() === `${stack}_web`, { timeoutMs: 30_000, what: 'the worker to be pruned' });
    let last: unknown;
    const s = await waitFor(
      async () => {
        const current = await get();
        last = current;
        return current.replicas.web?.running === 1 ? current : null;
      },
      { timeoutMs: 60_000, intervalMs: 500, what: 'web to run' },
    ).catch((err: Error) => {
      throw new Error(`${err.message}: ${JSON.stringify(last)}`);
    });
    expect(Object.keys(s.replicas)).to.deep.equal(['web']);
    expect(s.routes).to.deep.equal([{ service: 'web', domain: 'shop.example.test', port: 8080 }]);
    expect((await routesOf()).map((r) => r.domain)).to.deep.equal(['shop.example.test']);
  });

  it('renders a declared health check as the stack service’s Docker healthcheck, and a rollback really changes the running service', async function () {
    this.timeout(180_000);
    const withMode = WEB_ONLY.replace('    stop_grace_period: 1s\n', '    stop_grace_period: 1s\n    environment:\n      MODE: b\n');
    const [before] = (await api('GET', `/v1/services/${serviceId}/revisions`)).json.data;
    const res = await api('PUT', `/v1/services/${serviceId}`, { compose_file: b64(withMode), health: { web: { command: ['true'], interval_s: 1, timeout_s: 1, retries: 2 } } });
    expect(res.status, res.text).to.equal(202);
    await waitStatus('running');
    const inspect = async () => JSON.parse(await dockerOk(['service', 'inspect', `${stack}_web`, '--format', '{{json .Spec.TaskTemplate.ContainerSpec}}']));
    const declared = await inspect();
    expect(declared.Healthcheck).to.deep.equal({ Test: ['CMD', 'true'], Interval: 1e9, Timeout: 1e9, Retries: 2 });
    expect(declared.Env).to.include('MODE=b');
    /** The env of the one running container of the stack's web service, once it is the one wanted. */
    const runningEnv = (ok: (env: string[]) => boolean, what: string) =>
      waitFor(
        async () => {
          const ids = (await dockerOk(['ps', '-q', '--filter', `label=com.docker.swarm.service.name=${stack}_web`])).split('\n').filter(Boolean);
          if (ids.length !== 1) return null;
          const env = JSON.parse(await dockerOk(['inspect', '--format', '{{json .Config.Env}}', ids[0]!])) as string[];
          return ok(env) ? env : null;
        },
        { timeoutMs: 60_000, intervalMs: 300, what },
      );
    await runningEnv((env) => env.includes('MODE=b'), 'the web container with MODE=b');

    const back = await api('POST', `/v1/services/${serviceId}/rollback`, { revision: before.number });
    expect(back.status, back.text).to.equal(202);
    await waitStatus('running');
    const restored = await inspect();
    expect(restored).to.not.have.property('Healthcheck');
    expect(restored.Env ?? []).to.not.include('MODE=b');
    await runningEnv((env) => !env.includes('MODE=b'), 'the web container without MODE');
    expect((await get()).compose_file).to.equal(WEB_ONLY);
  });

  it('stop removes the stack but keeps the spec (no routes); start deploys it again', async function () {
    this.timeout(120_000);
    const stopped = await api('POST', `/v1/services/${serviceId}/stop`);
    expect(stopped.status, stopped.text).to.equal(200);
    expect(stopped.json.data).to.include({ status: 'stopped', compose_file: WEB_ONLY });
    expect(stopped.json.data.replicas, 'nothing runs, the desired count is kept').to.deep.equal({ web: { desired: 1, running: 0 } });
    await waitFor(async () => (await stackServices(stack)).length === 0, { timeoutMs: 30_000, what: 'the stack to be removed' });
    expect(await routesOf()).to.deep.equal([]);
    expect((await api('POST', `/v1/services/${serviceId}/logs`)).status, 'no logs of a stopped service').to.equal(409);
    expect((await api('POST', `/v1/services/${serviceId}/stop`)).json.data.status, 'stopping twice').to.equal('stopped');

    const started = await api('POST', `/v1/services/${serviceId}/start`);
    expect(started.status, started.text).to.equal(202);
    expect(started.json.data.status).to.equal('deploying');
    await waitStatus('running');
    expect(await stackServices(stack)).to.deep.equal([`${stack}_web`]);
    expect((await api('POST', `/v1/services/${serviceId}/start`)).status, 'starting a running service').to.equal(409);
  });

  it('DELETE removes the stack, then the record (202 while removing)', async function () {
    this.timeout(60_000);
    const res = await api('DELETE', `/v1/services/${serviceId}`);
    expect(res.status, res.text).to.equal(202);
    expect(res.json.data.status).to.equal('removing');
    await waitFor(async () => (await api('GET', `/v1/services/${serviceId}`)).status === 404, { timeoutMs: 30_000, what: 'the record to go' });
    await waitFor(async () => (await stackServices(stack)).length === 0, { timeoutMs: 30_000, what: 'the stack to be removed' });
    expect(await routesOf()).to.deep.equal([]);
    expect(await t.hangar.services.clusters.workloadsIn(member.swarmId)).to.deep.equal([]);
    expect(deletedEvents, 'tags and the like forget it').to.deep.include({ type: 'service', id: serviceId });
  });

  it('uses hangar secrets and configs: mounted under their compose keys; a rotation redeploys the stack with the new version', async function () {
    this.timeout(180_000);
    const secretName = `db-${dialect.name}-${RUN}`;
    const configName = `site-${dialect.name}-${RUN}`;
    const secret = await api('POST', '/v1/secrets', { name: secretName, swarm_id: member.swarmId, data: b64('first-password') });
    expect(secret.status, secret.text).to.equal(201);
    const config = await api('POST', '/v1/configs', { name: configName, swarm_id: member.swarmId, data: b64('site-config') });
    expect(config.status, config.text).to.equal(201);
    const compose = composeWithObjects(TEST_IMAGE, stays('echo "secret=$$(cat /run/secrets/db_password) config=$$(cat /etc/site.conf)"'), { secret: secretName, config: configName });
    const res = await api('POST', '/v1/services', { name: `${name}s`, swarm_id: member.swarmId, compose_file: b64(compose) });
    expect(res.status, res.text).to.equal(202);
    const id = res.json.data.id as string;
    expect(res.json.data.secret_refs).to.deep.equal([secret.json.data.id]);
    expect(res.json.data.config_refs).to.deep.equal([config.json.data.id]);
    const unused = await api('POST', '/v1/secrets', { name: `${secretName}-unused`, swarm_id: member.swarmId, data: b64('spare') });
    const usersInList = async (kind: string) =>
      Object.fromEntries(((await api('GET', `/v1/${kind}?swarm_id=${member.swarmId}`)).json.data as Array<{ name: string; services: string[] }>).map((o) => [o.name, o.services]));
    expect(await usersInList('secrets')).to.deep.include({ [secretName]: [`${name}s`], [`${secretName}-unused`]: [] });
    expect(await usersInList('configs')).to.deep.include({ [configName]: [`${name}s`] });
    expect((await api('DELETE', `/v1/secrets/${unused.json.data.id}`)).status).to.equal(200);
    await waitFor(async () => (await api('GET', `/v1/services/${id}`)).json.data.replicas.app?.running === 1, { timeoutMs: 60_000, intervalMs: 500, what: 'app to run' });
    const mounted = async () => JSON.parse((await docker(['service', 'inspect', '--format', '{{json .Spec.TaskTemplate.ContainerSpec.Secrets}}', `${stack}s_app`])).stdout);
    expect((await mounted()).map((m: { SecretName: string; File: { Name: string } }) => [m.SecretName, m.File.Name])).to.deep.equal([[`${secretName}-v1`, 'db_password']]);
    const logLines = async (): Promise<string> => {
      const queued = await api('POST', `/v1/services/${id}/logs?lines=100`);
      const taskId = queued.json.data.task_id as string;
      const done = await waitFor(
        async () => {
          const read = (await api('GET', `/v1/services/${id}/logs/${taskId}`)).json.data;
          return read.status === 'completed' || read.status === 'failed' ? read : null;
        },
        { timeoutMs: 30_000, intervalMs: 300, what: 'the log task' },
      );
      return (done.lines ?? []).join('\n');
    };
    await waitFor(async () => (await logLines()).includes('secret=first-password config=site-config'), { timeoutMs: 30_000, intervalMs: 1000, what: 'the app to print its secret and config' });

    // Rotation: the secrets plugin asks who uses the secret and has the stack redeployed with version 2.
    const rotated = await api('PUT', `/v1/secrets/${secret.json.data.id}`, { data: b64('second-password') });
    expect(rotated.status, rotated.text).to.equal(200);
    expect(rotated.json.data.redeployed).to.deep.equal([`${name}s`]);
    expect((await mounted()).map((m: { SecretName: string; File: { Name: string } }) => [m.SecretName, m.File.Name])).to.deep.equal([[`${secretName}-v2`, 'db_password']]);
    expect((await api('GET', `/v1/services/${id}`)).json.data).to.include({ status: 'running', error: null });
    await waitFor(async () => (await logLines()).includes('secret=second-password'), { timeoutMs: 60_000, intervalMs: 1000, what: 'the redeployed app to print the new secret' });

    const inUse = await api('DELETE', `/v1/secrets/${secret.json.data.id}`);
    expect(inUse.status, 'a secret a service uses is not deleted').to.equal(409);
    expect((await api('DELETE', `/v1/services/${id}`)).status).to.equal(202);
    await waitFor(async () => (await api('GET', `/v1/services/${id}`)).status === 404, { timeoutMs: 30_000, what: 'the service to go' });
    expect((await api('DELETE', `/v1/secrets/${secret.json.data.id}`)).status).to.equal(200);
    expect((await api('DELETE', `/v1/configs/${config.json.data.id}`)).status).to.equal(200);
  });

  it('records a deployment the swarm refuses as failed with its reason; cleanup force-removes the service', async function () {
    this.timeout(60_000);
    // Valid YAML and a valid service to hangar; docker's own compose schema refuses the replica count.
    const refused = `services:\n  web:\n    image: ${TEST_IMAGE}\n    deploy:\n      replicas: many\n`;
    const res = await api('POST', '/v1/services', { name: `${name}f`, swarm_id: member.swarmId, compose_file: b64(refused) });
    expect(res.status, res.text).to.equal(202);
    const id = res.json.data.id as string;
    const failed = await waitFor(
      async () => {
        const s = (await api('GET', `/v1/services/${id}`)).json.data;
        return s.status === 'failed' ? s : null;
      },
      { timeoutMs: 30_000, intervalMs: 300, what: 'the deployment to fail' },
    );
    expect(failed.error).to.match(/^deploying failed: deploying stack hangar-\w+: /).and.contain('replicas');
    expect(await stackServices(`${stack}f`)).to.deep.equal([]);
    const cleaned = await api('POST', `/v1/cleanup/service/${id}`);
    expect(cleaned.status, cleaned.text).to.equal(200);
    expect((await api('GET', `/v1/services/${id}`)).status).to.equal(404);
    expect((await api('POST', `/v1/cleanup/service/${id}`)).status, 'gone').to.equal(404);
  });
});
