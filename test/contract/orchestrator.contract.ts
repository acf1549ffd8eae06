import { expect } from 'chai';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { HANGAR_LABELS, type WorkloadSpec, type WorkloadState } from '../../core/orchestrator.js';
import { waitFor } from '../support/agents.js';
import { exclude, requireService } from '../support/requirements.js';
import type { DriverTarget, TargetSession } from './target.js';

/** The error a promise rejects with (fails the test when it resolves). */
async function failureOf(promise: Promise<unknown>): Promise<Error> {
  try {
    await promise;
  } catch (err) {
    return err as Error;
  }
  throw new Error('expected a failure, got a result');
}

const b64 = (text: string) => Buffer.from(text, 'utf8').toString('base64');

/**
 * The orchestrator driver contract: the same cases for every driver (core/orchestrator.ts),
 * through the driver interface only — the workload, object and scan interfaces, node
 * availability, volumes staged on a node, bundles and the load balancer. Each target says how its
 * runtime is reached and looked at (./target.ts); test/contract/targets.ts lists them.
 */
export function orchestratorContract(target: DriverTarget): void {
  const suite = `orchestrator driver contract: ${target.title}`;
  describe(suite, function () {
    this.timeout(90_000);
    let s: TargetSession;
    /**
     * A case that reads what a workload's process does (its output): declared as an exclusion on a
     * target where no process runs, with the target's reason; never a pending or an empty case.
     */
    const itWhereProcessesRun = (title: string, fn: (this: Mocha.Context) => Promise<void>) =>
      target.noProcesses ? exclude(`${suite} — ${title}`, target.noProcesses) : it(title, fn);
    const name = (base: string) => `${s.prefix}${base}`;
    const inspect = async (n: string): Promise<WorkloadState | undefined> => (await s.driver.inspectWorkloads({ names: [n] })).workloads[0];
    const workload = (base: string, overrides: Partial<WorkloadSpec> = {}): WorkloadSpec => ({
      name: name(base),
      role: 'instance',
      resource_id: `inst-${base}`,
      image: s.image,
      replicas: 1,
      command: s.command(':'),
      ...overrides,
    });
    const deploy = (spec: WorkloadSpec) => s.driver.deployWorkload({ spec, ...s.context });
    const waitRunning = (n: string, running: number, timeoutMs = 60_000) =>
      waitFor(
        async () => {
          const state = await inspect(n);
          return state && state.running === running && state.tasks.filter((t) => t.desired_state === 'running').length === running ? state : null;
        },
        { timeoutMs, intervalMs: 300, what: `${n} to run ${running} replica(s)` },
      );
    const waitLogs = (read: () => Promise<{ lines: string[] }>, done: (lines: string[]) => boolean, what: string) =>
      waitFor(
        async () => {
          const { lines } = await read();
          return done(lines) ? lines : null;
        },
        { timeoutMs: 45_000, intervalMs: 500, what },
      );

    before(async function () {
      this.timeout(600_000);
      const missing = await target.available();
      requireService(this, missing === null, missing ?? '');
      s = await target.setUp();
    });
    after(async function () {
      this.timeout(300_000);
      await target.tearDown();
    });

    describe('workloads', () => {
      const web = () =>
        workload('web', {
          replicas: 2,
          env: { GREETING: 'hello' },
          labels: { 'io.example.team': 'blue' },
          command: s.command('echo "greeting=$GREETING"'),
          resources: { cpus: 0.25, memory_mb: 32 },
        });
      let firstId: string | null = null;

      it('deployWorkload creates it with hangar’s labels and the limits asked for; inspectWorkloads sees 2 running and leaves unknown names out', async () => {
        const spec = web();
        const state = await deploy(spec);
        expect(state).to.include({ name: spec.name, image: s.image, replicas: 2 });
        expect(state.labels).to.include({ [HANGAR_LABELS.role]: 'instance', [HANGAR_LABELS.id]: 'inst-web', 'io.example.team': 'blue' });
        expect(state.limits).to.deep.equal({ cpus: 0.25, memoryMb: 32 });
        firstId = await s.probe.workloadId(spec.name);
        expect(firstId).to.be.a('string');
        await waitRunning(spec.name, 2);
        const { workloads } = await s.driver.inspectWorkloads({ names: [spec.name, name('nosuch')] });
        expect(workloads.map((w) => w.name)).to.deep.equal([spec.name]);
        expect(JSON.parse(JSON.stringify(workloads)), 'plain JSON').to.deep.equal(workloads);
      });

      it('deployWorkload again updates the same workload in place (a changed env rolls its replicas)', async () => {
        const spec = { ...web(), env: { GREETING: 'bonjour' } };
        const before = await s.probe.runningReplicaIds(spec.name);
        expect(before, 'two replicas before').to.have.length(2);
        expect((await deploy(spec)).name).to.equal(spec.name);
        expect(await s.probe.workloadId(spec.name), 'not created anew').to.equal(firstId);
        expect(await s.probe.workloadEnv(spec.name), 'the runtime holds the new env').to.include({ GREETING: 'bonjour' });
        await waitFor(
          async () => {
            const now = await s.probe.runningReplicaIds(spec.name);
            return now.length === 2 && now.every((id) => !before.includes(id)) ? now : null;
          },
          { timeoutMs: 60_000, intervalMs: 300, what: `two new replicas of ${spec.name} in place of ${before.join(', ')}` },
        );
        await waitRunning(spec.name, 2);
      });

      itWhereProcessesRun('the rolled replicas run with the new env (both log the new greeting)', async () => {
        const n = web().name;
        await waitLogs(() => s.driver.workloadLogs({ name: n, lines: 50 }), (lines) => lines.filter((l) => l.endsWith('greeting=bonjour')).length === 2, 'both new replicas to log the new greeting');
      });

      it('scaleWorkload to 3 and to 0 keeps the rest of the spec', async () => {
        const n = web().name;
        expect((await s.driver.scaleWorkload({ name: n, replicas: 3 })).replicas).to.equal(3);
        await waitRunning(n, 3);
        expect((await s.driver.scaleWorkload({ name: n, replicas: 0 })).replicas).to.equal(0);
        const state = await waitRunning(n, 0);
        expect(state.labels['io.example.team']).to.equal('blue');
        expect(await s.probe.workloadId(n)).to.equal(firstId);
      });

      itWhereProcessesRun('workloadLogs: timestamped lines, `lines` honoured, `since` in the future gives none, a `since` that is no time is refused', async () => {
        const talker = workload('talker', { command: s.command('echo oops >&2; sleep 1; for i in 1 2 3 4 5 6 7 8 9 10; do echo line-$i; done') });
        await deploy(talker);
        const all = await waitLogs(() => s.driver.workloadLogs({ name: talker.name }), (lines) => lines.some((l) => l.endsWith(' line-10')), 'the talker’s output');
        expect(all).to.have.length(11);
        expect(all[0], 'stderr too').to.match(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z oops$/);
        expect(all[1]).to.match(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z line-1$/);
        const { lines } = await s.driver.workloadLogs({ name: talker.name, lines: 3 });
        expect(lines.map((l) => l.replace(/^\S+ /, ''))).to.deep.equal(['line-8', 'line-9', 'line-10']);
        expect((await s.driver.workloadLogs({ name: talker.name, since: new Date(Date.now() + 3_600_000).toISOString() })).lines).to.deep.equal([]);
        expect((await s.driver.workloadLogs({ name: talker.name, since: '2000-01-01T00:00:00Z', lines: 2 })).lines).to.have.length(2);
        expect((await failureOf(s.driver.workloadLogs({ name: talker.name, since: 'yesterday' }))).message).to.match(/RFC 3339/);
        expect(await s.driver.removeWorkload({ name: talker.name })).to.deep.equal({ removed: true });
      });

      it('removeWorkload removes once ({removed: false} after); scaling or reading the logs of an unknown workload fails naming it', async () => {
        const n = web().name;
        expect(await s.driver.removeWorkload({ name: n })).to.deep.equal({ removed: true });
        expect(await s.driver.removeWorkload({ name: n })).to.deep.equal({ removed: false });
        expect(await inspect(n)).to.equal(undefined);
        expect((await failureOf(s.driver.scaleWorkload({ name: n, replicas: 1 }))).message).to.contain(n);
        expect((await failureOf(s.driver.workloadLogs({ name: n }))).message).to.contain(n);
      });

      it('places a workload on the node its placement names, and refuses a node that is no member', async () => {
        const pinned = workload('pinned', { placement: { node_ids: [s.node.id] } });
        await deploy(pinned);
        const state = await waitRunning(pinned.name, 1);
        expect(state.tasks.filter((t) => t.desired_state === 'running').map((t) => t.runtime_node_id)).to.deep.equal([s.node.runtimeId]);
        expect(await s.driver.removeWorkload({ name: pinned.name })).to.deep.equal({ removed: true });
        const stranger = await failureOf(deploy(workload('stranger', { placement: { node_ids: ['node-notamember'] } })));
        expect(stranger.message).to.contain('node node-notamember is not a member');
      });
    });

    describe('secrets and configs', () => {
      const secret = () => name('secret-v1');
      const config = () => name('config-v1');
      const reader = () =>
        workload('reader', {
          secrets: [{ name: secret(), target: 'x' }],
          configs: [{ name: config(), target: '/etc/app.conf' }],
          command: s.command('echo "secret=$(cat /run/secrets/x)"; echo "config=$(cat /etc/app.conf)"'),
        });

      it('createObject creates a secret and a config, and answers the same id when asked again', async () => {
        const labels = { [HANGAR_LABELS.object]: 'sec-1', [HANGAR_LABELS.version]: '1' };
        const s1 = await s.driver.createObject({ kind: 'secret', name: secret(), data: b64('s3cret-value'), labels });
        expect(s1.id).to.be.a('string').and.not.equal('');
        expect(await s.driver.createObject({ kind: 'secret', name: secret(), data: b64('s3cret-value'), labels })).to.deep.equal(s1);
        const c1 = await s.driver.createObject({ kind: 'config', name: config(), data: b64('mode=fast'), labels: {} });
        expect(await s.driver.createObject({ kind: 'config', name: config(), data: b64('mode=fast'), labels: {} })).to.deep.equal(c1);
        expect(await s.probe.objectExists('secret', secret())).to.equal(true);
      });

      it('a workload mounting them is given them where asked (the secret at /run/secrets/x, the config at /etc/app.conf); removing one in use is refused without the value in the message', async () => {
        await deploy(reader());
        await waitRunning(reader().name, 1);
        expect(await s.probe.workloadMounts(reader().name)).to.have.deep.members([
          { kind: 'secret', name: secret(), path: '/run/secrets/x' },
          { kind: 'config', name: config(), path: '/etc/app.conf' },
        ]);
        const refused = await failureOf(s.driver.removeObject({ kind: 'secret', name: secret() }));
        expect(refused.message).to.contain(secret()).and.match(/in use/);
        expect(refused.message).not.to.include('s3cret-value');
      });

      itWhereProcessesRun('a workload mounting them reads their values', async () => {
        const lines = await waitLogs(() => s.driver.workloadLogs({ name: reader().name }), (l) => l.some((x) => x.includes('config=')), 'the reader’s output');
        expect(lines.some((l) => l.endsWith(' secret=s3cret-value')), lines.join('\n')).to.equal(true);
        expect(lines.some((l) => l.endsWith(' config=mode=fast')), lines.join('\n')).to.equal(true);
      });

      it('removeObject removes them once the workload is gone ({removed: false} when absent); a missing object in a spec is named', async () => {
        expect(await s.driver.removeWorkload({ name: reader().name })).to.deep.equal({ removed: true });
        expect(await s.driver.removeObject({ kind: 'secret', name: secret() })).to.deep.equal({ removed: true });
        expect(await s.driver.removeObject({ kind: 'secret', name: secret() })).to.deep.equal({ removed: false });
        expect(await s.driver.removeObject({ kind: 'config', name: config() })).to.deep.equal({ removed: true });
        expect(await s.driver.removeObject({ kind: 'config', name: config() })).to.deep.equal({ removed: false });
        expect(await s.probe.objectExists('secret', secret())).to.equal(false);
        expect((await failureOf(deploy(reader()))).message).to.contain(secret());
      });
    });

    describe('volumes', () => {
      let folder: { path: string; remove(): Promise<void> };
      before(async () => {
        folder = await s.probe.folderOnNode();
      });
      after(() => folder?.remove());

      it('stageVolume makes a volume mountable on a node (idempotently) and unstageVolume forgets it once', async () => {
        const vol = name('vol');
        const input = { name: vol, nfs: { server: '127.0.0.1', path: folder.path }, local_path: folder.path, labels: { [HANGAR_LABELS.id]: 'vol-1' } };
        expect(await s.driver.stageVolume(input)).to.deep.equal({ name: vol });
        expect(await s.driver.stageVolume(input), 'again: kept').to.deep.equal({ name: vol });
        expect(await s.probe.volumeStaged(vol)).to.equal(true);
        expect(await s.driver.unstageVolume({ name: vol })).to.deep.equal({ removed: true });
        expect(await s.driver.unstageVolume({ name: vol })).to.deep.equal({ removed: false });
      });

      it('a folder on a node mounts into a workload there, which runs on that node', async () => {
        const writer = workload('writer', {
          volumes: [{ source: { host_path: { node_id: s.node.id, path: folder.path } }, target: '/data' }],
          command: s.command('echo written > /data/proof'),
        });
        await deploy(writer);
        const state = await waitRunning(writer.name, 1);
        expect(state.tasks.filter((t) => t.desired_state === 'running').map((t) => t.runtime_node_id)).to.deep.equal([s.node.runtimeId]);
        expect(await s.driver.removeWorkload({ name: writer.name })).to.deep.equal({ removed: true });
      });
    });

    describe('bundles', () => {
      const bundle = () => name('bundle');
      const parts = (state: { services: WorkloadState[] }) => state.services.map((w) => w.component).sort();

      it('deployBundle deploys two parts; inspectWorkloads by bundle finds them, each knowing its part', async () => {
        const state = await s.driver.deployBundle({ name: bundle(), spec: s.bundle([{ name: 'api' }, { name: 'worker' }], 'echo hello-from-$PART'), prune: false, ...s.context });
        expect(state.name).to.equal(bundle());
        expect(parts(state)).to.deep.equal(['api', 'worker']);
        expect(state.services.every((w) => w.stack === bundle() && w.image === s.image)).to.equal(true);
        const { workloads } = await s.driver.inspectWorkloads({ stacks: [bundle()] });
        expect(workloads).to.have.length(2);
        for (const w of workloads) await waitRunning(w.name, 1);
      });

      itWhereProcessesRun('bundleLogs merges the parts’ lines, each prefixed with its part', async () => {
        const lines = await waitLogs(() => s.driver.bundleLogs({ name: bundle(), lines: 20 }), (l) => l.length >= 2, 'both parts’ output');
        expect(lines.some((l) => / \| \S+ hello-from-api$/.test(l))).to.equal(true);
        expect(lines.some((l) => / \| \S+ hello-from-worker$/.test(l))).to.equal(true);
        expect((await s.driver.bundleLogs({ name: bundle(), lines: 1 })).lines).to.have.length(1);
      });

      it('redeploying without a part and with prune removes it; a bundle the backend cannot read is refused and changes nothing', async () => {
        const state = await s.driver.deployBundle({ name: bundle(), spec: s.bundle([{ name: 'api' }], 'echo hello-from-$PART'), prune: true, ...s.context });
        expect(parts(state)).to.deep.equal(['api']);
        expect((await failureOf(s.driver.deployBundle({ name: bundle(), spec: s.brokenBundle(), prune: false, ...s.context }))).message).to.contain(bundle());
        expect((await s.driver.inspectWorkloads({ stacks: [bundle()] })).workloads, 'untouched').to.have.length(1);
      });

      it('removeBundle removes it and waits until it is gone: it can be deployed again at once; {removed: false} the second time', async () => {
        expect(await s.driver.removeBundle({ name: bundle() })).to.deep.equal({ removed: true });
        expect((await s.driver.inspectWorkloads({ stacks: [bundle()] })).workloads).to.deep.equal([]);
        expect(await s.driver.removeBundle({ name: bundle() })).to.deep.equal({ removed: false });
        expect((await s.driver.deployBundle({ name: bundle(), spec: s.bundle([{ name: 'api' }], ':'), prune: false, ...s.context })).services).to.have.length(1);
        expect(await s.driver.removeBundle({ name: bundle() })).to.deep.equal({ removed: true });
      });
    });

    it('scanUnmanaged lists what was made outside hangar, and neither hangar’s workloads nor its bundles', async () => {
      const managed = await deploy(workload('managed', { replicas: 0 }));
      const ours = `hangar-${s.prefix}scan`;
      await s.driver.deployBundle({ name: ours, spec: s.bundle([{ name: 'p', replicas: 0 }], ':'), prune: false, ...s.context });
      const cleanup = await s.probe.foreign(name('manual'), name('foreign'));
      try {
        const { resources } = await s.driver.scanUnmanaged({});
        // A bundle's part is named by its bundle (swarm: <stack>_<service>) or only by its own name (Kubernetes): either tells it is this session's.
        const ofThisSession = (text: string | null | undefined) => !!text && (text.startsWith(s.prefix) || text.startsWith(ours));
        const mine = resources.filter((r) => ofThisSession(r.name) || ofThisSession(r.stack));
        expect(mine.some((r) => r.name === name('manual')), 'the workload made by hand').to.equal(true);
        expect(mine.some((r) => r.stack === name('foreign')), 'the foreign bundle’s part').to.equal(true);
        expect(mine.some((r) => r.name === managed.name), 'not hangar’s workload').to.equal(false);
        expect(mine.some((r) => r.stack === ours), 'not hangar’s bundle').to.equal(false);
      } finally {
        await cleanup();
        await s.driver.removeWorkload({ name: managed.name });
        await s.driver.removeBundle({ name: ours });
      }
    });

    it('setNodeAvailability cordons and drains a node in hangar’s terms and makes it schedulable again', async () => {
      try {
        expect(await s.driver.setNodeAvailability({ runtime_node_id: s.node.runtimeId, availability: 'cordoned' })).to.deep.equal({ availability: 'cordoned' });
        expect(await s.probe.availability(s.node.runtimeId)).to.equal('cordoned');
        expect(await s.driver.setNodeAvailability({ runtime_node_id: s.node.runtimeId, availability: 'drained' })).to.deep.equal({ availability: 'drained' });
        expect(await s.probe.availability(s.node.runtimeId)).to.equal('drained');
      } finally {
        expect(await s.driver.setNodeAvailability({ runtime_node_id: s.node.runtimeId, availability: 'schedulable' })).to.deep.equal({ availability: 'schedulable' });
      }
      expect(await s.probe.availability(s.node.runtimeId)).to.equal('schedulable');
      expect((await failureOf(s.driver.setNodeAvailability({ runtime_node_id: s.node.runtimeId, availability: 'sleepy' as never }))).message).to.match(/unknown availability|was built wrong: .*availability/);
    });

    it('applyLoadBalancer deploys the balancer with the routes (on the node it names, unless the backend publishes it on every node), updates it in place when only the routes change, and removeLoadBalancer removes it once', async () => {
      const lb = s.loadBalancerName?.(name('lb')) ?? name('lb');
      const spec = {
        name: lb,
        resource_id: 'lb-1',
        image: s.image,
        http_port: 18000 + Math.floor(Math.random() * 1000),
        node_id: s.node.id,
        routes: [{ domain: 'a.contract.test', service: name('web'), port: 80, source: 'instance', source_id: 'inst-web' }],
        // A stand-in for the balancer that outlives its reload signal.
        command: s.command("trap '' HUP"),
        settings: { host_config_dir: mkdtempSync(path.join(os.tmpdir(), 'hangar-contract-lb-')), reload_signal: 'SIGHUP' },
      };
      try {
        const state = await s.driver.applyLoadBalancer({ spec, ...s.context });
        expect(state.labels).to.include({ [HANGAR_LABELS.role]: 'loadbalancer', [HANGAR_LABELS.id]: 'lb-1' });
        const running = await waitRunning(lb, 1);
        const placed = running.tasks.filter((t) => t.desired_state === 'running').map((t) => t.runtime_node_id);
        if (s.loadBalancerOnEveryNode) expect(placed).to.have.length(1);
        else expect(placed).to.deep.equal([s.node.runtimeId]);
        const id = await s.probe.workloadId(lb);
        await s.driver.applyLoadBalancer({ spec: { ...spec, routes: [...spec.routes, { ...spec.routes[0]!, domain: 'b.contract.test' }] }, ...s.context });
        expect(await s.probe.workloadId(lb), 'the same workload, reloaded').to.equal(id);
        expect(await s.driver.removeLoadBalancer({ name: lb })).to.deep.equal({ removed: true });
        expect(await s.driver.removeLoadBalancer({ name: lb })).to.deep.equal({ removed: false });
      } finally {
        rmSync(spec.settings.host_config_dir, { recursive: true, force: true });
      }
    });
  });
}
