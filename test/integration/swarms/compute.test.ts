import { expect } from 'chai';
import { randomBytes } from 'node:crypto';
import { dockerOk, docker } from '../../../lab/docker.js';
import { cleanupAgents, waitFor } from '../../support/agents.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { hostSwarm, TEST_IMAGE } from '../../support/host-swarm.js';
import { bearer, bootstrapAdmin, createUser, type Credentials } from '../../support/identity.js';
import { VolumeUserStoppers } from '../../../plugins/volumes/api.js';
import { requireService } from '../../support/requirements.js';
import { stays } from '../../support/stays.js';
import { hostSwarmMember, SWARM_TEST_OVERRIDES, type SwarmMember } from '../../support/swarm-member.js';

const PLUGINS = ['system', 'iam', 'nodes', 'agent-internal', 'swarms', 'volumes', 'compute', 'gateway', 'cleanup'];

/**
 * Swarm groups and compute instances through the HTTP API, run for real: an agent on this host
 * manages the host engine's swarm and carries out every orchestrator call.
 */
describeEachDialect('swarms and compute instances on the host engine', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  let member: SwarmMember;
  const suffix = randomBytes(3).toString('hex');
  const named = (base: string) => `${base}-${dialect.name.slice(0, 2)}-${suffix}`;
  const created: string[] = [];

  const api = (method: string, p: string, body?: unknown) => t.request(method, p, { body, headers: bearer(admin.token) });
  const instance = async (id: string) => (await api('GET', `/v1/compute/instances/${id}`)).json.data;
  const waitInstance = (id: string, what: string, ok: (i: any) => boolean, timeoutMs = 60_000) =>
    waitFor(
      async () => {
        const i = await instance(id);
        return ok(i) ? i : null;
      },
      { timeoutMs, intervalMs: 300, what: `instance ${id}: ${what}` },
    );

  before(async function () {
    this.timeout(120_000);
    const missing = await hostSwarm();
    requireService(this, missing === null, missing ?? '');
    t = await startHangar(dialect, { plugins: PLUGINS, overrides: SWARM_TEST_OVERRIDES });
    admin = await bootstrapAdmin(t);
    member = await hostSwarmMember(t, admin, named('cmp'));
  });
  after(async function () {
    this.timeout(60_000);
    for (const name of created) await docker(['service', 'rm', name]);
    await cleanupAgents();
    await t?.stop();
  });

  describe('swarm groups', () => {
    it('creates groups with unique DNS-label names and finds them by id or name', async () => {
      expect((await api('POST', '/v1/swarms', { name: 'Not_A_Label' })).status).to.equal(400);
      expect((await api('POST', '/v1/swarms', { name: member.swarmName })).status).to.equal(409);
      const byName = await api('GET', `/v1/swarms/${member.swarmName}`);
      expect(byName.status).to.equal(200);
      expect(byName.json.data).to.include({ id: member.swarmId, status: 'active' });
      expect(byName.json.data.manager).to.include({ node_id: member.nodeId, role: 'manager', status: 'active' });
      expect(byName.json.data.load_balancer).to.equal(null);
      const list = await api('GET', '/v1/swarms');
      expect(list.json.data.map((s: any) => s.id)).to.include(member.swarmId);
    });

    it('lists members with the state and availability the swarm reports', async function () {
      this.timeout(30_000);
      const members = await api('GET', `/v1/swarms/${member.swarmId}/members`);
      expect(members.status).to.equal(200);
      expect(members.json.data).to.have.length(1);
      const [m] = members.json.data;
      expect(m).to.include({ node_id: member.nodeId, role: 'manager', status: 'active', state: 'ready', availability: 'active', leader: true });
      const localId = (await dockerOk(['info', '--format', '{{.Swarm.NodeID}}'])).trim();
      expect(m.runtime_node_id).to.equal(localId);
    });

    it('refuses a second membership and joins of unknown nodes', async () => {
      const again = await api('POST', `/v1/swarms/${member.swarmId}/join`, { node_id: member.nodeId });
      expect(again.status).to.equal(409);
      expect(again.json.message).to.contain('already a member');
      expect((await api('POST', `/v1/swarms/${member.swarmId}/join`, { node_id: 'node-unknown0000' })).status).to.equal(404);
      expect((await api('POST', `/v1/swarms/${member.swarmId}/join`, { node: member.nodeId })).status).to.equal(400);
    });

    it('deletes an empty group at once (200) and says 404 for it afterwards', async () => {
      const empty = await api('POST', '/v1/swarms', { name: named('empty') });
      expect(empty.status).to.equal(201);
      expect(empty.json.data).to.include({ status: 'empty', manager: null });
      const del = await api('DELETE', `/v1/swarms/${empty.json.data.id}`);
      expect(del.status).to.equal(200);
      expect((await api('GET', `/v1/swarms/${empty.json.data.id}`)).status).to.equal(404);
    });

    it('lets only admins change groups; any authenticated user reads them', async () => {
      const user = await createUser(t, admin, { username: `u${suffix}${dialect.name.slice(0, 2)}`, role: 'user' });
      expect((await t.request('POST', '/v1/swarms', { body: { name: named('nope') }, headers: bearer(user.token) })).status).to.equal(403);
      expect((await t.request('GET', '/v1/swarms', { headers: bearer(user.token) })).status).to.equal(200);
    });
  });

  describe('compute instances', () => {
    let webId: string;
    let webRuntime: string;

    it('lists the instance types', async () => {
      const types = (await api('GET', '/v1/compute/instance-types')).json.data;
      expect(types.map((x: any) => [x.name, x.cpus, x.memory_mb])).to.deep.equal([
        ['nano', 0.5, 256],
        ['micro', 1, 512],
        ['small', 1, 1024],
        ['medium', 2, 2048],
        ['large', 4, 4096],
        ['xlarge', 8, 8192],
      ]);
    });

    it('answers bad input with a 4xx that says what to fix, before anything is deployed', async () => {
      const base = { name: named('bad'), swarm_id: member.swarmId, image: TEST_IMAGE };
      const cases: Array<[Record<string, unknown>, number, string]> = [
        [{ ...base, ports: ['80'] }, 400, 'ports'],
        [{ ...base, ports: ['70000:80'] }, 400, 'host port'],
        [{ ...base, type: 'huge' }, 400, 'type'],
        [{ ...base, replicas: -1 }, 400, 'replicas'],
        [{ ...base, volumes: ['nope:/data'] }, 404, 'nope'],
        [{ ...base, gpu: 2 }, 409, 'GPU'],
        [{ ...base, swarm_id: 'swarm-unknown' }, 404, 'swarm'],
      ];
      for (const [body, status, says] of cases) {
        const res = await api('POST', '/v1/compute/instances', body);
        expect(res.status, `${JSON.stringify(body)} → ${res.text}`).to.equal(status);
        expect(res.json.message.toLowerCase()).to.contain(says.toLowerCase());
      }
      const list = await api('GET', '/v1/compute/instances');
      expect(list.json.data.map((i: any) => i.name)).to.not.include(base.name);
      const empty = await api('POST', '/v1/swarms', { name: named('nomgr') });
      const noManager = await api('POST', '/v1/compute/instances', { ...base, swarm_id: empty.json.data.id });
      expect(noManager.status).to.equal(409);
      expect(noManager.json.message).to.contain('no manager');
    });

    it('creates an instance: 202, then running with its replicas; the service carries hangar’s labels and the type’s limits', async function () {
      this.timeout(90_000);
      const res = await api('POST', '/v1/compute/instances', {
        name: named('web'),
        swarm_id: member.swarmId,
        image: TEST_IMAGE,
        type: 'nano',
        replicas: 2,
        http_port: 8080,
        env: { GREETING: 'hi' },
        command: stays('echo "$GREETING from $(hostname)"'),
      });
      expect(res.status, res.text).to.equal(202);
      expect(res.json.data).to.include({ status: 'deploying', desired_state: 'running', replicas: 2, domain: `${named('web')}.${member.swarmName}.hangar.local` });
      webId = res.json.data.id;
      webRuntime = res.json.data.runtime_name;
      created.push(webRuntime);
      expect((await api('POST', '/v1/compute/instances', { name: named('web'), swarm_id: member.swarmId, image: TEST_IMAGE })).status, 'same name').to.equal(409);
      const running = await waitInstance(webId, 'running 2', (i) => i.status === 'running' && i.running === 2);
      const onSwarm = await api('GET', `/v1/compute/instances?swarm_id=${member.swarmId}`);
      expect(onSwarm.status, onSwarm.text).to.equal(200);
      expect(onSwarm.json.data.map((i: any) => i.id)).to.deep.equal([webId]);
      // The swarm by name lists the same; a filter naming no swarm is a 400, never an empty list.
      expect((await api('GET', `/v1/compute/instances?swarm_id=${member.swarmName}`)).json.data.map((i: any) => i.id)).to.deep.equal([webId]);
      const unknown = await api('GET', '/v1/compute/instances?swarm_id=swarm-other');
      expect(unknown.status).to.equal(400);
      expect(unknown.json.message).to.equal('Validation failed: query.swarm_id names no swarm (swarm-other): give a swarm’s id or name');
      expect(running.placement).to.have.length(2);
      expect(running.placement.every((p: any) => p.node_id === member.nodeId)).to.equal(true);
      const spec = JSON.parse(await dockerOk(['service', 'inspect', webRuntime, '--format', '{{json .Spec}}']));
      expect(spec.Labels).to.include({ 'io.hangar.role': 'instance', 'io.hangar.id': webId });
      expect(spec.TaskTemplate.Resources.Limits).to.deep.include({ NanoCPUs: 500_000_000, MemoryBytes: 256 * 1024 * 1024 });
      expect(spec.TaskTemplate.ContainerSpec.Env).to.include('GREETING=hi');
    });

    it('scales, stops (remembering the replicas) and starts again', async function () {
      this.timeout(120_000);
      expect((await api('POST', `/v1/compute/instances/${webId}/scale`, { replicas: 3 })).status).to.equal(202);
      await waitInstance(webId, 'running 3', (i) => i.status === 'running' && i.running === 3);
      expect((await api('POST', `/v1/compute/instances/${webId}/stop`)).status).to.equal(202);
      const stopped = await waitInstance(webId, 'stopped', (i) => i.status === 'stopped');
      expect(stopped).to.include({ replicas: 3, desired_state: 'stopped', running: 0 });
      expect(JSON.parse(await dockerOk(['service', 'inspect', webRuntime, '--format', '{{json .Spec.Mode}}'])).Replicated.Replicas).to.equal(0);
      expect((await api('POST', `/v1/compute/instances/${webId}/start`)).status).to.equal(202);
      await waitInstance(webId, 'running 3 again', (i) => i.status === 'running' && i.running === 3);
    });

    it('is stopped for a restore of a volume it mounts and brought back to its replicas (what a restore with stop_workloads calls)', async function () {
      this.timeout(120_000);
      // The backups plugin calls this between its HTTP request and the restore (test/integration/backups drives that part).
      const stopper = t.hangar.services.provided.contributions(VolumeUserStoppers).find((s) => s.type === 'instance')!;
      // An instance stops whole, whichever of its volumes is restored.
      const volumeId = 'vol-restored';
      expect(await stopper.stop(webId, volumeId), 'the replicas it had').to.equal(3);
      // Answered once the deploy to zero has settled: the service asks for none.
      expect(JSON.parse(await dockerOk(['service', 'inspect', webRuntime, '--format', '{{json .Spec.Mode}}'])).Replicated.Replicas).to.equal(0);
      expect(await instance(webId)).to.include({ replicas: 0, desired_state: 'running' });
      await stopper.start(webId, 3, volumeId);
      expect(JSON.parse(await dockerOk(['service', 'inspect', webRuntime, '--format', '{{json .Spec.Mode}}'])).Replicated.Replicas).to.equal(3);
      await waitInstance(webId, 'running 3 after the restore', (i) => i.status === 'running' && i.running === 3);
      expect(await stopper.stop(named('nothing'), volumeId), 'an instance that is gone: nothing to bring back').to.equal(null);
    });

    it('shows drift when the runtime is changed behind hangar’s back, and start puts hangar’s spec back', async function () {
      this.timeout(120_000);
      await dockerOk(['service', 'scale', '-d', `${webRuntime}=1`]);
      const drifted = await waitInstance(webId, 'drifted', (i) => i.status === 'drifted');
      expect(drifted.reason).to.contain('replicas 1 (hangar set 3)');
      expect((await api('POST', `/v1/compute/instances/${webId}/start`)).status).to.equal(202);
      await waitInstance(webId, 'running 3 after the repair', (i) => i.status === 'running' && i.running === 3);
    });

    it('reads logs through a read-once task', async function () {
      this.timeout(60_000);
      const queued = await api('POST', `/v1/compute/instances/${webId}/logs?lines=20`);
      expect(queued.status, queued.text).to.equal(202);
      const taskId = queued.json.data.task_id;
      const done = await waitFor(
        async () => {
          const r = await api('GET', `/v1/compute/instances/${webId}/logs/${taskId}`);
          return r.json.data?.status === 'completed' ? r.json.data : null;
        },
        { timeoutMs: 30_000, what: 'the log read' },
      );
      expect(done.lines.join('\n')).to.contain('hi from');
      expect((await api('GET', `/v1/compute/instances/${webId}/logs/${taskId}`)).status).to.equal(404);
      expect((await api('POST', `/v1/compute/instances/${webId}/logs?lines=0`)).status).to.equal(400);
    });

    it('lists the instance’s domain in the gateway routes', async () => {
      const gateway = (await api('GET', '/v1/gateway')).json.data;
      expect(gateway.load_balancers).to.deep.equal([]);
      const route = gateway.routes.find((r: any) => r.source_id === webId);
      expect(route).to.include({ domain: `${named('web')}.${member.swarmName}.hangar.local`, service: webRuntime, port: 8080, source: 'instance', swarm_id: member.swarmId });
    });

    it('names the running workloads when the last manager would leave or the swarm be deleted', async () => {
      const leave = await api('POST', `/v1/swarms/${member.swarmId}/leave`, { node_id: member.nodeId });
      expect(leave.status).to.equal(409);
      expect(leave.json.message).to.contain(named('web'));
      const del = await api('DELETE', `/v1/swarms/${member.swarmId}`);
      expect(del.status).to.equal(409);
      expect(del.json.message).to.contain(named('web'));
    });

    it('marks an instance whose image does not exist as failed with the reason, and cleanup removes it', async function () {
      this.timeout(90_000);
      const res = await api('POST', '/v1/compute/instances', { name: named('broken'), swarm_id: member.swarmId, image: 'hangar-test/no-such-image:never' });
      expect(res.status).to.equal(202);
      const id = res.json.data.id;
      created.push(res.json.data.runtime_name);
      const failed = await waitInstance(id, 'failed', (i) => i.status === 'failed');
      expect(failed.reason).to.match(/image|No such/i);
      // By name, as the instance's own paths take it: the answer names its id.
      const cleaned = await api('POST', `/v1/cleanup/instance/${named('broken')}`);
      expect(cleaned.status, cleaned.text).to.equal(200);
      expect(cleaned.json.data).to.deep.equal({ resource_type: 'instance', resource_id: id, removed: true });
      expect((await api('GET', `/v1/compute/instances/${id}`)).status).to.equal(404);
      expect((await docker(['service', 'inspect', res.json.data.runtime_name])).code).to.not.equal(0);
      expect((await api('POST', `/v1/cleanup/instance/${id}`)).status, 'already gone').to.equal(404);
      expect((await api('POST', '/v1/cleanup/planet/x')).status).to.equal(400);
      expect((await api('POST', `/v1/cleanup/instance/${named('no-such-instance')}`)).status, 'a name of no instance').to.equal(404);
    });

    it('reports a service created by hand in the unmanaged scan, and not hangar’s instance (result read once)', async function () {
      this.timeout(60_000);
      const handmade = named('handmade');
      await dockerOk(['service', 'create', '-d', '--name', handmade, TEST_IMAGE, 'sleep', '3600']);
      created.push(handmade);
      const queued = await api('POST', `/v1/nodes/${member.nodeId}/unmanaged?backend=swarm`);
      expect(queued.status, queued.text).to.equal(202);
      const done = await waitFor(
        async () => {
          const r = await api('GET', `/v1/nodes/${member.nodeId}/unmanaged/${queued.json.data.task_id}`);
          return ['completed', 'failed'].includes(r.json.data?.status) ? r.json.data : null;
        },
        { timeoutMs: 30_000, what: 'the scan' },
      );
      expect(done.status, done.error).to.equal('completed');
      const names = done.resources.map((r: any) => r.name);
      expect(names).to.include(handmade);
      expect(names).to.not.include(webRuntime);
      expect(done.resources.find((r: any) => r.name === handmade)).to.include({ kind: 'service', image: TEST_IMAGE.split(':')[0] + ':latest' });
      expect((await api('GET', `/v1/nodes/${member.nodeId}/unmanaged/${queued.json.data.task_id}`)).status, 'read once').to.equal(404);
    });

    it('renders a declared health check as the service’s Docker healthcheck, and a rollback really changes the running image and env', async function () {
      this.timeout(180_000);
      const v2 = `hangar-test/busybox-v2-${dialect.name.slice(0, 2)}-${suffix}:v2`;
      await dockerOk(['tag', TEST_IMAGE, v2]);
      const res = await api('POST', '/v1/compute/instances', {
        name: named('rev'),
        swarm_id: member.swarmId,
        image: TEST_IMAGE,
        type: 'nano',
        env: { MODE: 'a' },
        command: stays(),
        health: { command: ['true'], interval_s: 1, timeout_s: 1, retries: 2 },
      });
      expect(res.status, res.text).to.equal(202);
      const id = res.json.data.id;
      const runtime = res.json.data.runtime_name;
      created.push(runtime);
      await waitInstance(id, 'running', (i) => i.status === 'running' && i.running === 1);
      const inspect = async () => JSON.parse(await dockerOk(['service', 'inspect', runtime, '--format', '{{json .Spec.TaskTemplate.ContainerSpec}}']));
      // (Docker leaves a zero StartPeriod out.)
      expect((await inspect()).Healthcheck).to.deep.equal({ Test: ['CMD', 'true'], Interval: 1e9, Timeout: 1e9, Retries: 2 });
      /** The image and MODE of the one running container of the instance, once it is the one wanted. */
      const runningContainer = (image: string, mode: string) =>
        waitFor(
          async () => {
            const ids = (await dockerOk(['ps', '-q', '--filter', `label=com.docker.swarm.service.name=${runtime}`])).split('\n').filter(Boolean);
            if (ids.length !== 1) return null;
            const c = JSON.parse(await dockerOk(['inspect', '--format', '{{json .Config}}', ids[0]!]));
            return c.Image.split('@')[0] === image && c.Env.includes(`MODE=${mode}`) ? c : null;
          },
          { timeoutMs: 60_000, intervalMs: 300, what: `the container of ${runtime} to run ${image} with MODE=${mode}` },
        );

      const updated = await api('PATCH', `/v1/compute/instances/${id}`, { image: v2, env: { MODE: 'b' }, health: null });
      expect(updated.status, updated.text).to.equal(202);
      await waitInstance(id, 'running v2', (i) => i.status === 'running' && i.image === v2);
      await runningContainer(v2, 'b');
      expect(await inspect()).to.not.have.property('Healthcheck');

      const back = await api('POST', `/v1/compute/instances/${id}/rollback`, { revision: 1 });
      expect(back.status, back.text).to.equal(202);
      await waitInstance(id, 'running the first revision again', (i) => i.status === 'running' && i.image === TEST_IMAGE);
      await runningContainer(TEST_IMAGE, 'a');
      const spec = await inspect();
      expect(spec.Image.split('@')[0]).to.equal(TEST_IMAGE);
      expect(spec.Env).to.deep.equal(['MODE=a']);
      expect(spec.Healthcheck).to.include({ Retries: 2 });
      const revisions = (await api('GET', `/v1/compute/instances/${id}/revisions`)).json.data;
      expect(revisions.map((r: any) => [r.number, r.rollback_of ?? null])).to.deep.equal([[3, 1], [2, null], [1, null]]);
      expect((await api('DELETE', `/v1/compute/instances/${id}`)).status).to.equal(202);
      await waitFor(async () => (await api('GET', `/v1/compute/instances/${id}`)).status === 404, { timeoutMs: 30_000, what: 'the record to go' });
      await docker(['rmi', v2]);
    });

    it('rolls an update out as declared (start-first, roll back on failure): a new revision whose health check fails is rolled back by the swarm, and the instance says rolled_back', async function () {
      this.timeout(180_000);
      const rollout = { order: 'start-first', on_failure: 'rollback', monitor_s: 5, parallelism: 1 };
      const res = await api('POST', '/v1/compute/instances', {
        name: named('roll'),
        swarm_id: member.swarmId,
        image: TEST_IMAGE,
        type: 'nano',
        env: { MODE: 'good' },
        command: stays(),
        health: { command: ['true'], interval_s: 1, timeout_s: 1, retries: 1 },
        rollout,
      });
      expect(res.status, res.text).to.equal(202);
      expect(res.json.data.rollout).to.deep.equal(rollout);
      const id = res.json.data.id;
      const runtime = res.json.data.runtime_name;
      created.push(runtime);
      await waitInstance(id, 'running', (i) => i.status === 'running' && i.running === 1);
      const config = JSON.parse(await dockerOk(['service', 'inspect', runtime, '--format', '{{json .Spec.UpdateConfig}}']));
      expect(config).to.deep.include({ Parallelism: 1, Order: 'start-first', FailureAction: 'rollback', Monitor: 5e9 });

      // A check that never passes: the new task never becomes healthy, the swarm returns to the previous spec.
      const bad = await api('PATCH', `/v1/compute/instances/${id}`, { env: { MODE: 'bad' }, health: { command: ['false'], interval_s: 1, timeout_s: 1, retries: 1 } });
      expect(bad.status, bad.text).to.equal(202);
      const rolledBack = await waitInstance(id, 'rolled_back', (i) => i.status === 'rolled_back', 120_000);
      expect(rolledBack.reason).to.contain('rolled the update back');
      const env = JSON.parse(await dockerOk(['service', 'inspect', runtime, '--format', '{{json .Spec.TaskTemplate.ContainerSpec.Env}}']));
      expect(env).to.deep.equal(['MODE=good']);
      // A rollback through hangar to the first revision puts the record in line with what runs.
      expect((await api('POST', `/v1/compute/instances/${id}/rollback`, { revision: 1 })).status).to.equal(202);
      await waitInstance(id, 'running revision 1 again', (i) => i.status === 'running' && i.env.MODE === 'good');
      expect((await api('DELETE', `/v1/compute/instances/${id}`)).status).to.equal(202);
      await waitFor(async () => (await api('GET', `/v1/compute/instances/${id}`)).status === 404, { timeoutMs: 30_000, what: 'the record to go' });
    });

    it('terminates an instance: 202, then the service and the record are gone', async function () {
      this.timeout(60_000);
      const res = await api('DELETE', `/v1/compute/instances/${webId}`);
      expect(res.status).to.equal(202);
      expect(res.json.data.status).to.equal('terminating');
      await waitFor(async () => (await api('GET', `/v1/compute/instances/${webId}`)).status === 404, { timeoutMs: 30_000, what: 'the record to go' });
      expect((await docker(['service', 'inspect', webRuntime])).code).to.not.equal(0);
    });
  });
});
