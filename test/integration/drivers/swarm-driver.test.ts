import { expect } from 'chai';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { HANGAR_LABELS, type WorkloadSpec, type WorkloadState } from '../../../core/orchestrator.js';
import { createContext } from '../../../drivers/swarm/client.js';
import { createSwarmDriver, type SwarmDriver } from '../../../drivers/swarm/index.js';
import { defineVolume, ensureNetwork, removeVolumeDefinition } from '../../../drivers/swarm/objects.js';
import { docker, dockerAvailable, dockerOk } from '../../../lab/docker.js';
import { waitFor } from '../../support/agents.js';
import { TEST_IMAGE as IMAGE, testImage } from '../../support/host-swarm.js';
import { requireService } from '../../support/requirements.js';
import { stays } from '../../support/stays.js';

// The swarm driver against this machine's real Docker Engine (/var/run/docker.sock, started by
// scripts/services.sh). Everything the suite creates is named with a per-run prefix and removed at
// the end; the engine leaves swarm mode at the end only if this suite put it there.
const SOCKET = '/var/run/docker.sock';
const RUN = randomBytes(3).toString('hex');
/** Prefix of every runtime object of this run. */
const P = `hst${RUN}`;
/** A stack hangar would have deployed (its services carry no role label). */
const HANGAR_STACK = `hangar-${P}`;
/** A stack hangar did not deploy. */
const FOREIGN_STACK = `${P}foreign`;

const b64 = (text: string) => Buffer.from(text, 'utf8').toString('base64');
/** The error a promise rejects with (fails the test when it resolves). */
async function failureOf(promise: Promise<unknown>): Promise<Error> {
  try {
    await promise;
  } catch (err) {
    return err as Error;
  }
  throw new Error('expected a failure, got a result');
}


function workload(name: string, overrides: Partial<WorkloadSpec> = {}): WorkloadSpec {
  return { name: `${P}${name}`, role: 'instance', resource_id: `inst-${name}`, image: IMAGE, replicas: 1, command: stays(':'), ...overrides };
}

describe('drivers/swarm: the swarm driver against this machine’s Docker Engine (real dockerd, one-node swarm)', function () {
  this.timeout(60_000);
  let driver: SwarmDriver;
  let initialisedHere = false;
  let nodeId = '';
  let clusterId = '';

  const inspect = async (name: string): Promise<WorkloadState | undefined> => (await driver.inspectWorkloads({ names: [name] })).workloads[0];
  const serviceId = (name: string) => dockerOk(['service', 'inspect', '--format', '{{.ID}}', name]);
  const waitRunning = (name: string, running: number, timeoutMs = 30_000) =>
    waitFor(
      async () => {
        const state = await inspect(name);
        return state && state.running === running && state.tasks.filter((t) => t.desired_state === 'running').length === running ? state : null;
      },
      { timeoutMs, intervalMs: 300, what: `${name} to run ${running} task(s)` },
    );
  const waitLogs = (read: () => Promise<{ lines: string[] }>, done: (lines: string[]) => boolean, what: string) =>
    waitFor(
      async () => {
        const { lines } = await read();
        return done(lines) ? lines : null;
      },
      { timeoutMs: 30_000, intervalMs: 500, what },
    );

  before(async function () {
    this.timeout(120_000);
    requireService(this, existsSync(SOCKET) && (await dockerAvailable()), `a running dockerd at ${SOCKET} (bash scripts/services.sh)`);
    const state = (await dockerOk(['info', '--format', '{{.Swarm.LocalNodeState}} {{.Swarm.ControlAvailable}}'])).trim();
    requireService(this, state.startsWith('inactive') || state === 'active true', `a Docker Engine that is a swarm manager or in no swarm (it is: ${state})`);
    const missing = await testImage();
    requireService(this, missing === null, missing ?? '');
    driver = createSwarmDriver({ socketPath: SOCKET });
    initialisedHere = state.startsWith('inactive');
    const ids = await driver.init({ advertise_address: '127.0.0.1' });
    nodeId = ids.runtime_node_id;
    clusterId = ids.cluster_id;
  });

  after(async function () {
    this.timeout(120_000);
    if (!driver) return;
    // Everything named with this run's prefix, whatever a failed test left behind.
    for (const stack of [HANGAR_STACK, FOREIGN_STACK]) await driver.removeBundle({ name: stack }).catch(() => undefined);
    const names = async (args: string[]) => (await docker(args)).stdout.split('\n').map((s) => s.trim()).filter((s) => s.startsWith(P) || s.startsWith(HANGAR_STACK));
    for (const service of await names(['service', 'ls', '--format', '{{.Name}}'])) await docker(['service', 'rm', service]);
    for (const container of await names(['ps', '-a', '--format', '{{.Names}}'])) await docker(['rm', '-f', container]);
    await waitFor(async () => (await names(['ps', '-a', '--format', '{{.Names}}'])).length === 0, { timeoutMs: 30_000, intervalMs: 500, what: 'the run’s containers to go' }).catch(() => undefined);
    for (const secret of await names(['secret', 'ls', '--format', '{{.Name}}'])) await docker(['secret', 'rm', secret]);
    for (const config of await names(['config', 'ls', '--format', '{{.Name}}'])) await docker(['config', 'rm', config]);
    for (const network of await names(['network', 'ls', '--format', '{{.Name}}'])) await docker(['network', 'rm', network]);
    for (const volume of await names(['volume', 'ls', '--format', '{{.Name}}'])) await docker(['volume', 'rm', '-f', volume]);
    if (nodeId) await driver.setNodeAvailability({ runtime_node_id: nodeId, availability: 'schedulable' }).catch(() => undefined);
    if (!initialisedHere) return;
    // Another process may have started using the swarm this suite made (suites of a parallel run
    // share the engine): leave only when nothing but this run's work was ever on it.
    const others = (await docker(['service', 'ls', '--format', '{{.Name}}'])).stdout.trim();
    if (others) {
      console.log(`swarm-driver suite: the engine stays in swarm mode, other services run on it: ${others.split('\n').join(', ')}`);
      return;
    }
    expect(await driver.leave({ force: true })).to.deep.equal({ left: true });
  });

  it('init answers the swarm this engine manages (idempotent); members, joinTokens and join on a member describe it', async () => {
    expect(await driver.init({ advertise_address: '127.0.0.1' })).to.deep.equal({ cluster_id: clusterId, runtime_node_id: nodeId });
    const { members } = await driver.members({});
    const self = members.find((m) => m.runtime_node_id === nodeId);
    expect(self).to.include({ role: 'manager', leader: true, state: 'ready' });
    expect(self!.hostname).to.be.a('string').and.not.equal('');
    const tokens = await driver.joinTokens({});
    expect(tokens.worker).to.match(/^SWMTKN-1-/);
    expect(tokens.manager).to.match(/^SWMTKN-1-/).and.not.equal(tokens.worker);
    expect(tokens.managers.some((a) => a.endsWith(':2377'))).to.be.true;
    expect(await driver.join({ remote_addresses: tokens.managers, token: tokens.worker, advertise_address: null }), 'already in a swarm: its own id').to.deep.equal({ runtime_node_id: nodeId });
    expect(await driver.removeMember({ runtime_node_id: 'nosuchnode0000000000000000', force: true })).to.deep.equal({ removed: false });
  });

  describe('workloads', () => {
    const web = workload('web', {
      replicas: 2,
      env: { GREETING: 'hello' },
      labels: { 'io.example.team': 'blue' },
      command: stays('echo "greeting=$GREETING"'),
      resources: { cpus: 0.25, memory_mb: 32 },
    });
    let firstId = '';

    it('deployWorkload creates a service with hangar’s labels, env and limits; inspectWorkloads sees 2 running and leaves unknown names out', async () => {
      const state = await driver.deployWorkload({ spec: web });
      expect(state).to.include({ name: web.name, image: IMAGE, replicas: 2, stack: null });
      expect(state.labels).to.deep.equal({ [HANGAR_LABELS.role]: 'instance', [HANGAR_LABELS.id]: 'inst-web', 'io.example.team': 'blue' });
      expect(state.limits).to.deep.equal({ cpus: 0.25, memoryMb: 32 });
      firstId = await serviceId(web.name);
      const running = await waitRunning(web.name, 2);
      expect(running.tasks.filter((t) => t.state === 'running').every((t) => t.runtime_node_id === nodeId)).to.be.true;
      const { workloads } = await driver.inspectWorkloads({ names: [web.name, `${P}nosuch`] });
      expect(workloads.map((w) => w.name)).to.deep.equal([web.name]);
      expect(JSON.parse(JSON.stringify(workloads)), 'plain JSON').to.deep.equal(workloads);
    });

    it('deployWorkload again updates the same service in place (env change rolls the tasks)', async () => {
      const state = await driver.deployWorkload({ spec: { ...web, env: { GREETING: 'bonjour' } } });
      expect(state.name).to.equal(web.name);
      expect(await serviceId(web.name)).to.equal(firstId);
      expect(await dockerOk(['service', 'inspect', '--format', '{{json .Spec.TaskTemplate.ContainerSpec.Env}}', web.name])).to.equal('["GREETING=bonjour"]');
      await waitLogs(() => driver.workloadLogs({ name: web.name, lines: 50 }), (lines) => lines.filter((l) => l.endsWith('greeting=bonjour')).length === 2, 'both new tasks to log the new greeting');
      await waitRunning(web.name, 2);
    });

    it('scaleWorkload to 3 and to 0 keeps the rest of the spec', async () => {
      expect((await driver.scaleWorkload({ name: web.name, replicas: 3 })).replicas).to.equal(3);
      await waitRunning(web.name, 3);
      const stopped = await driver.scaleWorkload({ name: web.name, replicas: 0 });
      expect(stopped.replicas).to.equal(0);
      const state = await waitRunning(web.name, 0);
      expect(state.labels['io.example.team']).to.equal('blue');
      expect(await dockerOk(['service', 'inspect', '--format', '{{json .Spec.TaskTemplate.ContainerSpec.Env}}', web.name])).to.equal('["GREETING=bonjour"]');
      expect(await serviceId(web.name)).to.equal(firstId);
    });

    it('workloadLogs: timestamped lines, `lines` honoured, `since` in the future gives none', async () => {
      const talker = workload('talker', { command: stays('echo oops >&2; sleep 1; for i in 1 2 3 4 5 6 7 8 9 10; do echo line-$i; done') });
      await driver.deployWorkload({ spec: talker });
      const all = await waitLogs(() => driver.workloadLogs({ name: talker.name }), (lines) => lines.some((l) => l.endsWith(' line-10')), 'the talker’s output');
      expect(all).to.have.length(11);
      expect(all[0], 'stderr too').to.match(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z oops$/);
      expect(all[1]).to.match(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z line-1$/);
      const { lines } = await driver.workloadLogs({ name: talker.name, lines: 3 });
      expect(lines.map((l) => l.replace(/^\S+ /, ''))).to.deep.equal(['line-8', 'line-9', 'line-10']);
      expect((await driver.workloadLogs({ name: talker.name, since: new Date(Date.now() + 3_600_000).toISOString() })).lines).to.deep.equal([]);
      expect((await driver.workloadLogs({ name: talker.name, since: '2000-01-01T00:00:00Z', lines: 2 })).lines).to.have.length(2);
      expect((await failureOf(driver.workloadLogs({ name: talker.name, since: 'yesterday' }))).message).to.match(/RFC 3339/);
      expect(await driver.removeWorkload({ name: talker.name })).to.deep.equal({ removed: true });
    });

    it('removeWorkload removes once ({removed:false} after); scaling or reading logs of an unknown workload fails naming it', async () => {
      expect(await driver.removeWorkload({ name: web.name })).to.deep.equal({ removed: true });
      expect(await driver.removeWorkload({ name: web.name })).to.deep.equal({ removed: false });
      expect(await inspect(web.name)).to.equal(undefined);
      expect((await failureOf(driver.scaleWorkload({ name: web.name, replicas: 1 }))).message).to.match(new RegExp(`${web.name}: no such service`));
      expect((await failureOf(driver.workloadLogs({ name: web.name }))).message).to.match(new RegExp(`${web.name}: no such service`));
    });

    it('a bad spec is refused with the engine’s reason (dnsrr with a routing-mesh port)', async () => {
      const bad = workload('bad', { exposure: { ports: [{ published: 18080, target: 80 }] } });
      expect((await failureOf(driver.deployWorkload({ spec: bad, settings: { endpoint_mode: 'dnsrr', publish_mode: 'ingress' } }))).message).to.match(/creating service hst\w+bad: .*dnsrr/i);
    });
  });

  describe('secrets and configs', () => {
    const secret = `${P}secret-v1`;
    const config = `${P}config-v1`;
    const reader = workload('reader', {
      secrets: [{ name: secret, target: 'x' }],
      configs: [{ name: config, target: '/etc/app.conf' }],
      command: stays('echo "secret=$(cat /run/secrets/x)"; echo "config=$(cat /etc/app.conf)"; ls -ln /run/secrets/x'),
    });

    it('createObject creates a secret and a config, and answers the same id when asked again', async () => {
      const labels = { [HANGAR_LABELS.object]: 'sec-1', [HANGAR_LABELS.version]: '1' };
      const s1 = await driver.createObject({ kind: 'secret', name: secret, data: b64('s3cret-value'), labels });
      expect(s1.id).to.match(/^\w{20,}$/);
      expect(await driver.createObject({ kind: 'secret', name: secret, data: b64('s3cret-value'), labels })).to.deep.equal(s1);
      const c1 = await driver.createObject({ kind: 'config', name: config, data: b64('mode=fast'), labels: {} });
      expect(await driver.createObject({ kind: 'config', name: config, data: b64('mode=fast'), labels: {} })).to.deep.equal(c1);
      expect(await dockerOk(['secret', 'inspect', '--format', '{{json .Spec.Labels}}', secret])).to.equal(JSON.stringify(labels));
    });

    it('a workload mounting them reads the values; removing one in use fails with the engine’s message', async () => {
      await driver.deployWorkload({ spec: reader });
      const lines = await waitLogs(() => driver.workloadLogs({ name: reader.name }), (l) => l.some((x) => x.includes('/run/secrets/x')), 'the reader’s output');
      expect(lines.some((l) => l.endsWith(' secret=s3cret-value'))).to.be.true;
      expect(lines.some((l) => l.endsWith(' config=mode=fast'))).to.be.true;
      expect(lines.find((l) => l.includes('/run/secrets/x'))).to.match(/-r--r--r--\s+\d+\s+0\s+0\s/);
      const refused = await failureOf(driver.removeObject({ kind: 'secret', name: secret }));
      expect(refused.message).to.match(new RegExp(`removing secret ${secret}: .*in use`));
      expect(refused.message).not.to.include('s3cret-value');
    });

    it('removeObject removes them once the workload is gone; {removed:false} when absent; a missing object in a spec is named', async () => {
      expect(await driver.removeWorkload({ name: reader.name })).to.deep.equal({ removed: true });
      expect(await driver.removeObject({ kind: 'secret', name: secret })).to.deep.equal({ removed: true });
      expect(await driver.removeObject({ kind: 'secret', name: secret })).to.deep.equal({ removed: false });
      expect(await driver.removeObject({ kind: 'config', name: config })).to.deep.equal({ removed: true });
      expect(await driver.removeObject({ kind: 'config', name: config })).to.deep.equal({ removed: false });
      expect((await failureOf(driver.deployWorkload({ spec: reader }))).message).to.match(new RegExp(`no secret named ${secret}`));
    });
  });

  describe('stacks (docker stack deploy)', () => {
    const compose = (services: string[]) =>
      [
        "version: '3.8'",
        'services:',
        ...services.flatMap((name) => [
          `  ${name}:`,
          `    image: ${IMAGE}`,
          `    command: ["sh", "-c", "trap 'exit 0' TERM; echo hello-from-${name}; sleep 3600 & wait"]`,
          '    deploy:',
          '      replicas: 1',
          '      restart_policy: { condition: on-failure }',
        ]),
        '',
      ].join('\n');

    it('deployBundle deploys a compose file with 2 services; inspectWorkloads by stack finds them', async () => {
      const bundle = await driver.deployBundle({ name: HANGAR_STACK, spec: compose(['api', 'worker']), prune: false });
      expect(bundle.name).to.equal(HANGAR_STACK);
      expect(bundle.services.map((s) => s.name)).to.deep.equal([`${HANGAR_STACK}_api`, `${HANGAR_STACK}_worker`]);
      expect(bundle.services.every((s) => s.stack === HANGAR_STACK && s.image === IMAGE)).to.be.true;
      const { workloads } = await driver.inspectWorkloads({ stacks: [HANGAR_STACK] });
      expect(workloads).to.have.length(2);
      await waitRunning(`${HANGAR_STACK}_api`, 1);
      await waitRunning(`${HANGAR_STACK}_worker`, 1);
    });

    it('bundleLogs prefixes every line with its service', async () => {
      const lines = await waitLogs(() => driver.bundleLogs({ name: HANGAR_STACK, lines: 20 }), (l) => l.length >= 2, 'both services’ output');
      expect(lines.some((l) => new RegExp(`^${HANGAR_STACK}_api \\| \\S+ hello-from-api$`).test(l))).to.be.true;
      expect(lines.some((l) => new RegExp(`^${HANGAR_STACK}_worker \\| \\S+ hello-from-worker$`).test(l))).to.be.true;
      expect((await driver.bundleLogs({ name: HANGAR_STACK, lines: 1 })).lines).to.have.length(1);
    });

    it('redeploying without a service and with prune removes it', async () => {
      const bundle = await driver.deployBundle({ name: HANGAR_STACK, spec: compose(['api']), prune: true });
      expect(bundle.services.map((s) => s.name)).to.deep.equal([`${HANGAR_STACK}_api`]);
      expect((await driver.inspectWorkloads({ stacks: [HANGAR_STACK] })).workloads.map((w) => w.name)).to.deep.equal([`${HANGAR_STACK}_api`]);
    });

    it('a compose file docker cannot read fails with docker’s own message', async () => {
      expect((await failureOf(driver.deployBundle({ name: HANGAR_STACK, spec: 'services:\n  api:\n    image: [unclosed\n', prune: false }))).message).to.match(new RegExp(`deploying stack ${HANGAR_STACK}: .*yaml`, 'i'));
      expect((await failureOf(driver.deployBundle({ name: HANGAR_STACK, spec: "version: '3.8'\nservices:\n  api:\n    imagee: x\n", prune: false }))).message).to.match(/imagee/);
      expect((await driver.inspectWorkloads({ stacks: [HANGAR_STACK] })).workloads, 'the stack is untouched').to.have.length(1);
    });

    it('removeBundle removes the stack and waits for its network to go; {removed:false} the second time', async () => {
      expect(await driver.removeBundle({ name: HANGAR_STACK })).to.deep.equal({ removed: true });
      expect((await driver.inspectWorkloads({ stacks: [HANGAR_STACK] })).workloads).to.deep.equal([]);
      expect((await dockerOk(['network', 'ls', '--filter', `label=com.docker.stack.namespace=${HANGAR_STACK}`, '--format', '{{.Name}}'])).trim()).to.equal('');
      expect(await driver.removeBundle({ name: HANGAR_STACK })).to.deep.equal({ removed: false });
      // Deploying it again right away works (no network half removed).
      expect((await driver.deployBundle({ name: HANGAR_STACK, spec: compose(['api']), prune: false })).services).to.have.length(1);
      expect(await driver.removeBundle({ name: HANGAR_STACK })).to.deep.equal({ removed: true });
    });
  });

  it('scanUnmanaged lists a service made by hand and a foreign stack’s, not hangar’s workloads nor hangar- stacks', async function () {
    this.timeout(90_000);
    const manual = `${P}manual`;
    await dockerOk(['service', 'create', '--detach', '--name', manual, '--replicas', '0', '--label', 'io.example.owner=ops', IMAGE, 'sleep', '3600']);
    const managed = await driver.deployWorkload({ spec: workload('managed', { replicas: 0 }) });
    const zero = "version: '3.8'\nservices:\n  s:\n    image: " + IMAGE + '\n    command: ["sleep", "3600"]\n    deploy: { replicas: 0 }\n';
    await driver.deployBundle({ name: HANGAR_STACK, spec: zero, prune: false });
    await driver.deployBundle({ name: FOREIGN_STACK, spec: zero, prune: false });
    try {
      const { resources } = await driver.scanUnmanaged({});
      const mine = resources.filter((r) => r.name.startsWith(P) || r.name.startsWith(HANGAR_STACK));
      expect(mine.map((r) => r.name).sort()).to.deep.equal([`${FOREIGN_STACK}_s`, manual].sort());
      const hand = mine.find((r) => r.name === manual)!;
      expect(hand).to.include({ kind: 'service', image: IMAGE, stack: null, id: await serviceId(manual) });
      expect(hand.labels).to.deep.equal({ 'io.example.owner': 'ops' });
      expect(mine.find((r) => r.name === `${FOREIGN_STACK}_s`)!.stack).to.equal(FOREIGN_STACK);
      expect(resources.some((r) => r.name === managed.name)).to.be.false;
    } finally {
      await docker(['service', 'rm', manual]);
      await driver.removeWorkload({ name: managed.name });
      await driver.removeBundle({ name: HANGAR_STACK });
      await driver.removeBundle({ name: FOREIGN_STACK });
    }
  });

  it('setNodeAvailability cordons this node (engine: pause) and makes it schedulable (active) again', async () => {
    const availability = () => dockerOk(['node', 'inspect', '--format', '{{.Spec.Availability}} {{.Spec.Role}}', nodeId]);
    try {
      expect(await driver.setNodeAvailability({ runtime_node_id: nodeId, availability: 'cordoned' })).to.deep.equal({ availability: 'cordoned' });
      expect(await availability()).to.equal('pause manager');
      expect((await driver.members({})).members.find((m) => m.runtime_node_id === nodeId)?.availability).to.equal('pause');
    } finally {
      expect(await driver.setNodeAvailability({ runtime_node_id: nodeId, availability: 'schedulable' })).to.deep.equal({ availability: 'schedulable' });
    }
    expect(await availability()).to.equal('active manager');
    expect((await failureOf(driver.setNodeAvailability({ runtime_node_id: nodeId, availability: 'sleepy' as never }))).message).to.match(/unknown availability/);
  });

  // Networks and volume definitions are the driver's own steps (no task kind): called on its engine context.
  const engine = createContext(SOCKET, 'docker');

  it('ensureNetwork creates an attachable overlay network once and answers the same id after', async () => {
    const name = `${P}net`;
    const { id } = await ensureNetwork(engine, name);
    expect(await ensureNetwork(engine, name)).to.deep.equal({ id });
    expect(await dockerOk(['network', 'inspect', '--format', '{{.Id}} {{.Driver}} {{.Scope}} {{.Attachable}}', name])).to.equal(`${id} overlay swarm true`);
    await dockerOk(['network', 'rm', name]);
    await dockerOk(['network', 'create', '--driver', 'bridge', `${P}bridge`]);
    expect((await failureOf(ensureNetwork(engine, `${P}bridge`))).message).to.match(/not a swarm overlay network/);
    await dockerOk(['network', 'rm', `${P}bridge`]);
  });

  it('defineVolume keeps a volume with the same options, recreates one with others, refuses while in use naming the user; removeVolumeDefinition', async () => {
    const name = `${P}vol`;
    const tmpfs = (size: string) => ({ type: 'tmpfs', device: 'tmpfs', o: `size=${size}` });
    const created = () => dockerOk(['volume', 'inspect', '--format', '{{.CreatedAt}} {{json .Options}} {{json .Labels}}', name]);
    expect(await defineVolume(engine, name, tmpfs('1m'), { [HANGAR_LABELS.id]: 'vol-1' })).to.deep.equal({ name });
    const first = await created();
    expect(first).to.include('"o":"size=1m"').and.include('"io.hangar.id":"vol-1"');
    expect(await defineVolume(engine, name, tmpfs('1m'), { [HANGAR_LABELS.id]: 'vol-1' })).to.deep.equal({ name });
    expect(await created(), 'kept as it was').to.equal(first);
    await defineVolume(engine, name, tmpfs('2m'), {});
    expect(await created()).to.include('"o":"size=2m"');
    const user = `${P}voluser`;
    await dockerOk(['create', '--name', user, '-v', `${name}:/data`, IMAGE, 'true']);
    expect((await failureOf(defineVolume(engine, name, tmpfs('3m'), {}))).message).to.match(new RegExp(`volume ${name} is in use by ${user}`));
    expect((await failureOf(removeVolumeDefinition(engine, name))).message).to.match(new RegExp(`in use by ${user}`));
    await dockerOk(['rm', user]);
    expect(await removeVolumeDefinition(engine, name)).to.deep.equal({ removed: true });
    expect(await removeVolumeDefinition(engine, name)).to.deep.equal({ removed: false });
  });

  it('applyLoadBalancer writes the configuration, deploys the balancer on this node, then rewrites and reloads it in place with its signal', async function () {
    this.timeout(90_000);
    const dir = mkdtempSync(path.join(os.tmpdir(), 'hangar-lb-'));
    const name = `${P}lb`;
    const route = (domain: string) => ({ domain, service: `${P}web`, port: 8080, source: 'instance', source_id: `inst-${domain}` });
    const spec = {
      name,
      resource_id: 'lb-1',
      image: IMAGE,
      // A published port nothing else on this machine uses (host mode: bound on this node only).
      http_port: 20_000 + (parseInt(RUN, 16) % 20_000),
      node_id: 'node-here',
      routes: [route('one.example')],
      // A stand-in for haproxy: prints its configuration when it gets the reload signal.
      command: ['sh', '-c', "trap 'exit 0' TERM; trap 'echo reloaded: $(cat /etc/lb/haproxy.cfg)' HUP; echo started: $(cat /etc/lb/haproxy.cfg); while true; do sleep 1; done"],
      settings: { host_config_dir: path.join(dir, 'conf'), container_config_dir: '/etc/lb', reload_signal: 'SIGHUP', publish_mode: 'host' },
    };
    const context = { cluster_nodes: { 'node-here': nodeId } };
    const written = () => readFileSync(path.join(dir, 'conf', 'lb-1', 'haproxy.cfg'), 'utf8');
    try {
      const state = await driver.applyLoadBalancer({ spec, ...context });
      expect(state.labels).to.include({ [HANGAR_LABELS.role]: 'loadbalancer', [HANGAR_LABELS.id]: 'lb-1' });
      expect(written()).to.include('one.example').and.not.include('two.example');
      const id = await serviceId(name);
      expect(await dockerOk(['service', 'inspect', '--format', '{{json .Spec.TaskTemplate.Placement.Constraints}}', name])).to.equal(JSON.stringify([`node.id == ${nodeId}`]));
      await waitLogs(() => driver.workloadLogs({ name: name }), (l) => l.some((x) => x.includes('started:') && x.includes('one.example')), 'the balancer to start');

      const again = await driver.applyLoadBalancer({ spec: { ...spec, routes: [route('one.example'), route('two.example')] }, ...context });
      expect(again.running).to.equal(1);
      expect(written()).to.include('two.example');
      expect(await serviceId(name), 'the same service, not redeployed').to.equal(id);
      await waitLogs(() => driver.workloadLogs({ name: name }), (l) => l.some((x) => x.includes('reloaded:') && x.includes('two.example')), 'the reload signal');
      expect((await driver.workloadLogs({ name: name })).lines.filter((l) => l.includes('started:')), 'no restart').to.have.length(1);

      expect(await driver.removeLoadBalancer({ name })).to.deep.equal({ removed: true });
      expect(await driver.removeLoadBalancer({ name })).to.deep.equal({ removed: false });
    } finally {
      await docker(['service', 'rm', name]);
      await waitFor(async () => (await docker(['ps', '-aq', '--filter', `label=com.docker.swarm.service.name=${name}`])).stdout.trim() === '', { timeoutMs: 30_000, intervalMs: 500 }).catch(() => undefined);
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
