import { expect } from 'chai';
import { AppsV1Api, CoreV1Api, NetworkingV1Api } from '@kubernetes/client-node';
import { HANGAR_LABELS } from '../../../core/orchestrator.js';
import { createKubernetesDriver, WORKLOAD_LABEL, type KubernetesDriver } from '../../../drivers/kubernetes/index.js';
import type { WorkloadSpec, WorkloadState } from '../../../drivers/kubernetes/contract.js';
import { waitFor } from '../../support/agents.js';
import { failureOf } from '../../support/failures.js';
import { KUBE_START_TIMEOUT_MS, KubeControlPlane, kubeAvailability } from '../../support/kube.js';
import { requireService } from '../../support/requirements.js';

// drivers/kubernetes against the real upstream control plane (kube-apiserver, controllers and
// scheduler 1.33 on etcd) with three kwok-simulated nodes: workloads as Deployments, their
// Services and Ingresses, scaling, placement, logs (kwok serves the lines the test writes as every
// container's log: no container runs), secrets and configs, NFS volumes as bound claims, the
// unmanaged scan. Everything through the driver's interface; the cluster is looked at directly
// only to check what the driver made there.

const NODES = ['kwok-node-1', 'kwok-node-2', 'kwok-node-3'];
/** hangar node id → Kubernetes node name, as the control plane passes them to the driver. */
const CLUSTER_NODES = { 'node-a': 'kwok-node-1', 'node-b': 'kwok-node-2', 'node-c': 'kwok-node-3' };
const b64 = (text: string) => Buffer.from(text, 'utf8').toString('base64');

describe('Kubernetes driver: workloads, logs, secrets and configs, volumes, the unmanaged scan (real control plane, kwok nodes)', function () {
  this.timeout(90_000);
  let kube: KubeControlPlane;
  let driver: KubernetesDriver;
  let core: CoreV1Api;
  let apps: AppsV1Api;

  const spec = (name: string, overrides: Partial<WorkloadSpec> = {}): WorkloadSpec => ({
    name,
    role: 'instance',
    resource_id: `inst-${name}`,
    image: 'registry.invalid/web:1',
    replicas: 1,
    ...overrides,
  });
  const deploy = (s: WorkloadSpec) => driver.deployWorkload({ spec: s, cluster_nodes: CLUSTER_NODES });
  const inspect = async (name: string) => (await driver.inspectWorkloads({ names: [name] })).workloads[0];
  const waitRunning = (name: string, running: number) =>
    waitFor(
      async () => {
        const state = await inspect(name);
        return state && state.running === running && state.tasks.filter((t) => t.desired_state === 'running').length === running ? state : undefined;
      },
      { what: `${name} to run ${running} replica(s)`, timeoutMs: 60_000, intervalMs: 300 },
    );

  before(async function () {
    this.timeout(KUBE_START_TIMEOUT_MS);
    const available = await kubeAvailability();
    requireService(this, available.ok, available.why);
    kube = await KubeControlPlane.start({ nodes: NODES.length });
    driver = createKubernetesDriver({ kubeconfig: kube.kubeconfigPath });
    core = kube.api(CoreV1Api);
    apps = kube.api(AppsV1Api);
  });
  after(() => kube?.stop());

  describe('workloads', () => {
    let uid: string | undefined;

    it('deploys a workload as a Deployment whose replicas reach Running on the kwok nodes, with hangar’s labels, the limits, a Service for its ports and an Ingress for its domain', async () => {
      const state = await deploy(
        spec('web', {
          replicas: 2,
          env: { GREETING: 'hello' },
          labels: { 'io.example.team': 'blue' },
          command: ['sh', '-c', 'echo $GREETING'],
          resources: { cpus: 0.25, memory_mb: 32 },
          exposure: { ports: [{ published: 8080, target: 80 }], domain: 'web.example.test' },
        }),
      );
      expect(state).to.include({ name: 'web', image: 'registry.invalid/web:1', replicas: 2, stack: null });
      expect(state.labels).to.include({ [HANGAR_LABELS.role]: 'instance', [HANGAR_LABELS.id]: 'inst-web', 'io.example.team': 'blue' });
      expect(state.limits).to.deep.equal({ cpus: 0.25, memoryMb: 32 });
      expect(state.ports).to.deep.equal([{ published: 8080, target: 80, protocol: 'tcp' }]);

      const running = await waitRunning('web', 2);
      for (const task of running.tasks) expect(NODES).to.include(task.runtime_node_id);
      expect(JSON.parse(JSON.stringify(running)), 'plain JSON').to.deep.equal(running);

      const deployment = await apps.readNamespacedDeployment({ name: 'web', namespace: 'default' });
      uid = deployment.metadata?.uid;
      const container = deployment.spec!.template.spec!.containers[0]!;
      expect(container.env).to.deep.equal([{ name: 'GREETING', value: 'hello' }]);
      expect(container.command).to.deep.equal(['sh', '-c', 'echo $GREETING']);
      expect(deployment.metadata?.managedFields?.map((f) => [f.manager, f.operation])).to.deep.include(['hangar', 'Apply']);
      const service = await core.readNamespacedService({ name: 'web', namespace: 'default' });
      expect(service.spec?.type).to.equal('LoadBalancer');
      expect(service.spec?.selector).to.deep.equal({ [WORKLOAD_LABEL]: 'web' });
      const ingress = await kube.api(NetworkingV1Api).readNamespacedIngress({ name: 'web', namespace: 'default' });
      expect(ingress.spec?.rules?.[0]).to.deep.include({ host: 'web.example.test' });
      expect(ingress.spec?.rules?.[0]?.http?.paths[0]?.backend.service).to.deep.equal({ name: 'web', port: { number: 8080 } });
    });

    it('deploying again updates the same Deployment in place: a changed env rolls new pods (a new pod template hash); a dropped domain drops the Ingress', async () => {
      const hashes = async () => new Set((await core.listNamespacedPod({ namespace: 'default', labelSelector: `${WORKLOAD_LABEL}=web` })).items.map((p) => p.metadata?.labels?.['pod-template-hash']));
      const before = await hashes();
      await deploy(spec('web', { replicas: 2, env: { GREETING: 'bonjour' }, labels: { 'io.example.team': 'blue' }, exposure: { ports: [{ published: 8080, target: 80 }] } }));
      const deployment = await apps.readNamespacedDeployment({ name: 'web', namespace: 'default' });
      expect(deployment.metadata?.uid, 'not created anew').to.equal(uid);
      expect(deployment.spec!.template.spec!.containers[0]!.env).to.deep.equal([{ name: 'GREETING', value: 'bonjour' }]);
      expect(deployment.spec!.template.spec!.containers[0]!.command, 'a field hangar no longer sets is gone').to.equal(undefined);
      await waitFor(
        async () => {
          const now = await hashes();
          return now.size === 1 && ![...now].some((h) => before.has(h));
        },
        { what: 'web’s pods replaced by pods of the new template', timeoutMs: 60_000 },
      );
      await waitRunning('web', 2);
      const ingresses = await kube.api(NetworkingV1Api).listNamespacedIngress({ namespace: 'default' });
      expect(ingresses.items.map((i) => i.metadata?.name)).to.not.include('web');
    });

    it('a declared stop-first rollout with on_failure pause: maxSurge 0, maxUnavailable = parallelism; new pods that fail readiness past the deadline pause the Deployment (state paused, naming the revision); the next deploy unpauses it', async () => {
      const rollout = { parallelism: 1, monitor_s: 1, order: 'stop-first' as const, on_failure: 'pause' as const };
      await deploy(spec('paused', { rollout, revision: 1 }));
      await waitRunning('paused', 1);
      const first = await apps.readNamespacedDeployment({ name: 'paused', namespace: 'default' });
      expect(first.spec?.strategy).to.deep.equal({ type: 'RollingUpdate', rollingUpdate: { maxSurge: 0, maxUnavailable: 1 } });
      expect(first.spec).to.include({ minReadySeconds: 1, progressDeadlineSeconds: 11 });
      await deploy(spec('paused', { rollout, revision: 2, image: 'registry.invalid/web:2' }));
      let failed = 0;
      const state = await waitFor(
        async () => {
          const s = await inspect('paused');
          if (s?.rollout?.state === 'paused') return s;
          // The test plays the kubelet of revision 2's pods, whose readiness probe fails.
          for (const pod of (await core.listNamespacedPod({ namespace: 'default', labelSelector: `${WORKLOAD_LABEL}=paused` })).items) {
            if (pod.metadata?.annotations?.['io.hangar.revision'] !== '2' || pod.status?.conditions?.find((c) => c.type === 'Ready')?.status !== 'True') continue;
            for (const c of pod.status!.conditions!) if (c.type === 'Ready' || c.type === 'ContainersReady') Object.assign(c, { status: 'False', reason: 'ReadinessProbeFailed', lastTransitionTime: new Date() });
            await core.replaceNamespacedPodStatus({ name: pod.metadata.name!, namespace: 'default', body: pod }).then(() => failed++, () => undefined);
          }
          return undefined;
        },
        { what: 'the rollout paused', timeoutMs: 60_000, intervalMs: 250 },
      );
      expect(failed).to.be.greaterThan(0);
      expect(state.rollout).to.include({ state: 'paused', revision: 2 });
      expect(state.rollout?.message).to.contain('revision 2 did not become available within 11 s');
      expect((await apps.readNamespacedDeployment({ name: 'paused', namespace: 'default' })).spec?.paused).to.equal(true);
      await deploy(spec('paused', { rollout, revision: 3, image: 'registry.invalid/web:3' }));
      const resumed = await apps.readNamespacedDeployment({ name: 'paused', namespace: 'default' });
      expect(resumed.spec?.paused ?? false).to.equal(false);
      expect(resumed.metadata?.annotations ?? {}).to.not.have.property('io.hangar.rollout-outcome');
      await waitFor(async () => ((await inspect('paused'))?.rollout === null ? true : undefined), { what: 'revision 3 rolled out', timeoutMs: 60_000, intervalMs: 300 });
      await driver.removeWorkload({ name: 'paused' });
    });

    it('scales to 3 and to 0 keeping the rest of the spec; inspect leaves unknown names out', async () => {
      expect((await driver.scaleWorkload({ name: 'web', replicas: 3 })).replicas).to.equal(3);
      await waitRunning('web', 3);
      expect((await driver.scaleWorkload({ name: 'web', replicas: 0 })).replicas).to.equal(0);
      const state = await waitRunning('web', 0);
      expect(state.labels['io.example.team']).to.equal('blue');
      expect((await apps.readNamespacedDeployment({ name: 'web', namespace: 'default' })).metadata?.uid).to.equal(uid);
      const { workloads } = await driver.inspectWorkloads({ names: ['web', 'nosuch'] });
      expect(workloads.map((w: WorkloadState) => w.name)).to.deep.equal(['web']);
    });

    it('places replicas only on the nodes the placement names; a node that is no member is refused by name', async () => {
      await deploy(spec('pinned', { replicas: 3, placement: { node_ids: ['node-b'] } }));
      const state = await waitRunning('pinned', 3);
      expect(state.tasks.map((t) => t.runtime_node_id)).to.deep.equal(['kwok-node-2', 'kwok-node-2', 'kwok-node-2']);
      const stranger = await failureOf(deploy(spec('stranger', { placement: { node_ids: ['node-notamember'] } })));
      expect(stranger.message).to.contain('node node-notamember is not a member');
      expect(await inspect('stranger')).to.equal(undefined);
      const bad = await failureOf(deploy(spec('Not_A_Name')));
      expect(bad.message).to.contain('invalid workload name "Not_A_Name"');
    });

    it('removes a workload with its Service and pods ({removed: false} the second time); scaling or logs of an unknown one name it', async () => {
      expect(await driver.removeWorkload({ name: 'pinned' })).to.deep.equal({ removed: true });
      expect(await driver.removeWorkload({ name: 'web' })).to.deep.equal({ removed: true });
      expect(await driver.removeWorkload({ name: 'web' })).to.deep.equal({ removed: false });
      expect(await inspect('web')).to.equal(undefined);
      expect((await core.listNamespacedService({ namespace: 'default' })).items.map((s) => s.metadata?.name)).to.not.include('web');
      expect((await core.listNamespacedPod({ namespace: 'default', labelSelector: `${WORKLOAD_LABEL}=pinned` })).items).to.deep.equal([]);
      const scale = await failureOf(driver.scaleWorkload({ name: 'web', replicas: 1 }));
      expect(scale.message).to.contain('web');
      expect(scale.statusCode).to.equal(404);
      expect((await failureOf(driver.workloadLogs({ name: 'web' }))).message).to.contain('no such workload');
    });
  });

  describe('logs (kwok serves the lines written to its log file as every container’s log)', () => {
    it('answers the pods’ lines merged and timestamped; `lines` and `since` honoured; a `since` that is no time is refused', async () => {
      const early = new Date(Date.now() - 60_000);
      kube.appendPodLog([
        { text: 'oops', stream: 'stderr', time: early },
        ...Array.from({ length: 5 }, (_, i) => ({ text: `line-${i + 1}`, time: new Date(early.getTime() + (i + 1) * 1000) })),
      ]);
      await deploy(spec('talker', { replicas: 2 }));
      await waitRunning('talker', 2);
      const { lines } = await driver.workloadLogs({ name: 'talker' });
      // Two pods, each with the six lines: merged in time order.
      expect(lines).to.have.length(12);
      expect(lines[0]).to.match(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z oops$/);
      expect(lines.slice(-2).map((l) => l.replace(/^\S+ /, ''))).to.deep.equal(['line-5', 'line-5']);
      const last3 = (await driver.workloadLogs({ name: 'talker', lines: 3 })).lines;
      expect(last3.map((l) => l.replace(/^\S+ /, ''))).to.deep.equal(['line-4', 'line-5', 'line-5']);
      expect((await driver.workloadLogs({ name: 'talker', since: new Date(Date.now() + 3_600_000).toISOString() })).lines).to.deep.equal([]);
      const since = new Date(early.getTime() + 3500).toISOString();
      expect((await driver.workloadLogs({ name: 'talker', since })).lines.map((l) => l.replace(/^\S+ /, ''))).to.deep.equal(['line-4', 'line-4', 'line-5', 'line-5']);
      expect((await failureOf(driver.workloadLogs({ name: 'talker', since: 'yesterday' }))).message).to.match(/RFC 3339/);
      expect(await driver.removeWorkload({ name: 'talker' })).to.deep.equal({ removed: true });
    });
  });

  describe('secrets and configs', () => {
    it('creates immutable Secrets and ConfigMaps (the same id when asked again), mounts them as files, refuses removing one in use without its value, names a missing one', async () => {
      const labels = { [HANGAR_LABELS.object]: 'sec-1', [HANGAR_LABELS.version]: '1' };
      const first = await driver.createObject({ kind: 'secret', name: 'db-password-v1', data: b64('s3cret-value'), labels });
      expect(await driver.createObject({ kind: 'secret', name: 'db-password-v1', data: b64('s3cret-value'), labels })).to.deep.equal(first);
      await driver.createObject({ kind: 'config', name: 'app-conf-v1', data: b64('mode=fast'), labels: {} });
      const secret = await core.readNamespacedSecret({ name: 'db-password-v1', namespace: 'default' });
      expect(secret.immutable).to.equal(true);
      expect(secret.metadata?.uid).to.equal(first.id);
      expect(Buffer.from(secret.data!.value!, 'base64').toString()).to.equal('s3cret-value');
      expect((await core.readNamespacedConfigMap({ name: 'app-conf-v1', namespace: 'default' })).data).to.deep.equal({ value: 'mode=fast' });

      await deploy(spec('reader', { secrets: [{ name: 'db-password-v1', target: 'db' }], configs: [{ name: 'app-conf-v1', target: '/etc/app.conf' }] }));
      await waitRunning('reader', 1);
      const pod = (await core.listNamespacedPod({ namespace: 'default', labelSelector: `${WORKLOAD_LABEL}=reader` })).items[0]!;
      expect(pod.spec!.containers[0]!.volumeMounts!.filter((m) => m.subPath).map((m) => [m.mountPath, m.subPath])).to.deep.equal([
        ['/run/secrets/db', 'value'],
        ['/etc/app.conf', 'value'],
      ]);

      const refused = await failureOf(driver.removeObject({ kind: 'secret', name: 'db-password-v1' }));
      expect(refused.statusCode).to.equal(409);
      expect(refused.message).to.contain('db-password-v1').and.contain('in use by deployment/reader');
      expect(refused.message).not.to.include('s3cret-value');

      expect(await driver.removeWorkload({ name: 'reader' })).to.deep.equal({ removed: true });
      expect(await driver.removeObject({ kind: 'secret', name: 'db-password-v1' })).to.deep.equal({ removed: true });
      expect(await driver.removeObject({ kind: 'secret', name: 'db-password-v1' })).to.deep.equal({ removed: false });
      expect(await driver.removeObject({ kind: 'config', name: 'app-conf-v1' })).to.deep.equal({ removed: true });
      const missing = await failureOf(deploy(spec('reader', { secrets: [{ name: 'db-password-v1', target: 'db' }] })));
      expect(missing.message).to.contain('secret db-password-v1 does not exist');
      expect(await inspect('reader')).to.equal(undefined);
    });
  });

  describe('volumes', () => {
    it('stages an NFS volume as a PersistentVolume bound to a claim, mounts the claim, refuses unstaging while mounted, and unstages once', async () => {
      const input = { name: 'shared', nfs: { server: '10.0.0.5', path: '/exports/shared' }, local_path: null, labels: { [HANGAR_LABELS.id]: 'vol-1' } };
      expect(await driver.stageVolume(input)).to.deep.equal({ name: 'shared' });
      expect(await driver.stageVolume(input), 'again: kept').to.deep.equal({ name: 'shared' });
      expect(await driver.volumePhase({ name: 'shared' })).to.deep.equal({ phase: 'Bound' });
      const volume = await core.readPersistentVolume({ name: 'shared' });
      expect(volume.status?.phase).to.equal('Bound');
      expect(volume.spec?.nfs).to.deep.equal({ server: '10.0.0.5', path: '/exports/shared' });
      expect(volume.spec?.persistentVolumeReclaimPolicy, 'the data outlives the volume object').to.equal('Retain');
      expect(volume.spec?.claimRef).to.include({ name: 'shared', namespace: 'default' });

      await deploy(spec('writer', { volumes: [{ source: { nfs: { name: 'shared', server: '10.0.0.5', path: '/exports/shared' } }, target: '/data' }] }));
      await waitRunning('writer', 1);
      const refused = await failureOf(driver.unstageVolume({ name: 'shared' }));
      expect(refused.statusCode).to.equal(409);
      expect(refused.message).to.contain('mounted by deployment/writer');

      expect(await driver.removeWorkload({ name: 'writer' })).to.deep.equal({ removed: true });
      expect(await driver.unstageVolume({ name: 'shared' })).to.deep.equal({ removed: true });
      expect(await driver.unstageVolume({ name: 'shared' })).to.deep.equal({ removed: false });
      expect(await driver.volumePhase({ name: 'shared' })).to.deep.equal({ phase: null });
      const unstaged = await failureOf(deploy(spec('writer', { volumes: [{ source: { nfs: { name: 'shared', server: '10.0.0.5', path: '/exports/shared' } }, target: '/data' }] })));
      expect(unstaged.message).to.contain('volume shared does not exist');
    });

    it('mounts a folder of a node as a host path, and runs the workload on that node', async () => {
      await deploy(spec('local', { replicas: 2, volumes: [{ source: { host_path: { node_id: 'node-c', path: '/srv/data' } }, target: '/data' }] }));
      const state = await waitRunning('local', 2);
      expect(state.tasks.map((t) => t.runtime_node_id)).to.deep.equal(['kwok-node-3', 'kwok-node-3']);
      const deployment = await apps.readNamespacedDeployment({ name: 'local', namespace: 'default' });
      expect(deployment.spec!.template.spec!.volumes![0]!.hostPath).to.deep.equal({ path: '/srv/data', type: 'DirectoryOrCreate' });
      expect(await driver.removeWorkload({ name: 'local' })).to.deep.equal({ removed: true });
    });
  });

  describe('the load balancer', () => {
    const routeTo = (domain: string, service: string) => ({ domain, service, port: 8080, source: 'instance', source_id: `inst-${service}` });
    const lbSpec = (routes: ReturnType<typeof routeTo>[]) => ({
      name: 'hangar-system/hangar-lb-test',
      resource_id: 'lb-test',
      image: 'registry.invalid/traefik:3',
      http_port: 80,
      node_id: 'node-a',
      routes,
    });
    const networking = () => kube.api(NetworkingV1Api);

    it('deploys the ingress controller in hangar’s namespace (Running on a kwok node, a LoadBalancer Service on the port, its IngressClass and account) and the routes as one Ingress of that class; new routes rewrite only the Ingress; none removes it', async () => {
      const state = await driver.applyLoadBalancer({ spec: lbSpec([routeTo('a.example', 'web-a')]), cluster_nodes: CLUSTER_NODES });
      expect(state.name).to.equal('hangar-system/hangar-lb-test');
      expect(state.ports).to.deep.equal([{ published: 80, target: 8000, protocol: 'tcp' }]);
      const running = await waitRunning('hangar-system/hangar-lb-test', 1);
      expect(NODES).to.include(running.tasks[0]!.runtime_node_id);
      const deployment = await apps.readNamespacedDeployment({ name: 'hangar-lb-test', namespace: 'hangar-system' });
      expect(deployment.metadata!.labels).to.include({ [HANGAR_LABELS.role]: 'loadbalancer', [HANGAR_LABELS.id]: 'lb-test' });
      const pod = deployment.spec!.template.spec!;
      expect(pod.serviceAccountName).to.equal('hangar-ingress');
      expect(pod.containers[0]!.image).to.equal('registry.invalid/traefik:3');
      expect(pod.containers[0]!.args).to.include('--providers.kubernetesingress.ingressclass=hangar');
      const service = await core.readNamespacedService({ name: 'hangar-lb-test', namespace: 'hangar-system' });
      expect(service.spec!.type).to.equal('LoadBalancer');
      const ingressClass = await networking().readIngressClass({ name: 'hangar' });
      expect(ingressClass.spec!.controller).to.equal('traefik.io/ingress-controller');
      const binding = kube.kubectl(['get', 'clusterrolebinding', 'hangar-ingress', '-o', 'jsonpath={.subjects[0].namespace}/{.subjects[0].name}']);
      expect(binding.stdout).to.equal('hangar-system/hangar-ingress');

      const routes = await networking().readNamespacedIngress({ name: 'hangar-lb-test-routes', namespace: 'default' });
      expect(routes.spec!.ingressClassName).to.equal('hangar');
      expect(routes.spec!.rules!.map((r) => [r.host, r.http!.paths[0]!.backend.service!.name, r.http!.paths[0]!.backend.service!.port!.number])).to.deep.equal([['a.example', 'web-a', 8080]]);

      const generation = deployment.metadata!.generation;
      await driver.applyLoadBalancer({ spec: lbSpec([routeTo('a.example', 'web-a'), routeTo('b.example', 'web-b')]), cluster_nodes: CLUSTER_NODES });
      const rewritten = await networking().readNamespacedIngress({ name: 'hangar-lb-test-routes', namespace: 'default' });
      expect(rewritten.spec!.rules!.map((r) => r.host)).to.deep.equal(['a.example', 'b.example']);
      expect((await apps.readNamespacedDeployment({ name: 'hangar-lb-test', namespace: 'hangar-system' })).metadata!.generation).to.equal(generation);

      await driver.applyLoadBalancer({ spec: lbSpec([]), cluster_nodes: CLUSTER_NODES });
      const gone = await failureOf(networking().readNamespacedIngress({ name: 'hangar-lb-test-routes', namespace: 'default' }));
      expect((gone as { code?: number }).code).to.equal(404);

      // hangar's own parts are not "unmanaged".
      expect((await driver.scanUnmanaged({})).resources.map((r) => r.name)).not.to.include('hangar-system/hangar-lb-test');
    });

    it('removes the controller, its Service, account and IngressClass ({removed: false} the second time); a name outside hangar’s namespace is refused', async () => {
      expect(await driver.removeLoadBalancer({ name: 'hangar-system/hangar-lb-test' })).to.deep.equal({ removed: true });
      expect(await inspect('hangar-system/hangar-lb-test')).to.equal(undefined);
      for (const read of [
        () => core.readNamespacedService({ name: 'hangar-lb-test', namespace: 'hangar-system' }),
        () => networking().readIngressClass({ name: 'hangar' }),
        () => core.readNamespacedServiceAccount({ name: 'hangar-ingress', namespace: 'hangar-system' }),
      ]) {
        expect(((await failureOf(read())) as { code?: number }).code).to.equal(404);
      }
      expect(await driver.removeLoadBalancer({ name: 'hangar-system/hangar-lb-test' })).to.deep.equal({ removed: false });
      const refused = await failureOf(driver.applyLoadBalancer({ spec: { ...lbSpec([]), name: 'hangar-lb-test' }, cluster_nodes: CLUSTER_NODES }));
      expect(refused.message).to.match(/belongs in namespace hangar-system/);
    });
  });

  describe('the unmanaged scan', () => {
    it('lists workloads made outside hangar (kubectl), in any namespace but the system ones, and none of hangar’s', async () => {
      await deploy(spec('managed', { replicas: 0 }));
      await driver.deployBundle({ name: 'hangar-shop', spec: 'apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: shop}\nspec:\n  replicas: 0\n  selector: {matchLabels: {app: shop}}\n  template:\n    metadata: {labels: {app: shop}}\n    spec: {containers: [{name: c, image: registry.invalid/shop:1}]}\n', prune: false });
      for (const args of [
        ['create', 'deployment', 'manual', '--image=registry.invalid/manual:2', '--replicas=0'],
        ['create', 'namespace', 'team'],
        ['-n', 'team', 'create', 'deployment', 'elsewhere', '--image=registry.invalid/x:1', '--replicas=0'],
        ['-n', 'kube-system', 'create', 'deployment', 'system-part', '--image=registry.invalid/x:1', '--replicas=0'],
      ]) {
        const result = kube.kubectl(args);
        expect(result.code, result.stderr).to.equal(0);
      }
      const { resources } = await driver.scanUnmanaged({});
      expect(resources.map((r) => `${r.kind} ${r.name}`)).to.deep.equal(['deployment manual', 'deployment team/elsewhere']);
      expect(resources[0]).to.include({ image: 'registry.invalid/manual:2', stack: null });
      expect(resources[0]!.id).to.match(/^[0-9a-f-]{36}$/);
      expect(await driver.removeBundle({ name: 'hangar-shop' })).to.deep.equal({ removed: true });
      expect(await driver.removeWorkload({ name: 'managed' })).to.deep.equal({ removed: true });
    });
  });
});
