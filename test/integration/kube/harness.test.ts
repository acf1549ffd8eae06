import { expect } from 'chai';
import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import {
  ApiException,
  AppsV1Api,
  CoreV1Api,
  KubernetesObjectApi,
  PatchStrategy,
  PolicyV1Api,
  setHeaderOptions,
  VersionApi,
  type V1ConfigMap,
  type V1Deployment,
  type V1Pod,
} from '@kubernetes/client-node';
import { waitFor } from '../../support/agents.js';
import { KUBE_START_TIMEOUT_MS, KubeControlPlane, kubeAvailability, nodeReady, removeStaleFolders } from '../../support/kube.js';
import { requireService } from '../../support/requirements.js';

// What the Kubernetes work (docs/kubernetes.md) stands on, proven through @kubernetes/client-node
// against the real upstream control plane (etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler) with kwok simulating three nodes and their pods (no container runs).

const CRASH_FIXTURE = fileURLToPath(new URL('../../support/fixtures/kube-crash-fixture.ts', import.meta.url));
const REPO = fileURLToPath(new URL('../../../', import.meta.url));
const NODES = ['kwok-node-1', 'kwok-node-2', 'kwok-node-3'];
const mergePatch = setHeaderOptions('Content-Type', PatchStrategy.MergePatch);

/** The error a promise rejects with (fails the test when it resolves). */
async function apiFailure(promise: Promise<unknown>): Promise<ApiException<string>> {
  try {
    await promise;
  } catch (error) {
    if (error instanceof ApiException) return error as ApiException<string>;
    throw error;
  }
  throw new Error('expected the API server to refuse, it accepted');
}

function running(pod: V1Pod): boolean {
  return pod.status?.phase === 'Running' && (pod.status.conditions ?? []).some((c) => c.type === 'Ready' && c.status === 'True');
}

/** Whether a process runs (a zombie waiting for its reaper does not). */
function pidAlive(pid: number): boolean {
  try {
    return !/^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return false;
  }
}

function deployment(name: string, replicas: number, extra: { nodeName?: string } = {}): V1Deployment {
  const labels = { app: name };
  return {
    metadata: { name, labels },
    spec: {
      replicas,
      selector: { matchLabels: labels },
      template: {
        metadata: { labels },
        spec: {
          containers: [{ name: 'web', image: 'registry.invalid/web:1' }],
          ...(extra.nodeName ? { nodeSelector: { 'kubernetes.io/hostname': extra.nodeName } } : {}),
        },
      },
    },
  };
}

describe('Kubernetes control plane (the real kube-apiserver, controllers and scheduler on etcd; kwok-simulated nodes and pods, no containers)', function () {
  this.timeout(60_000);
  let kube: KubeControlPlane;
  let core: CoreV1Api;
  let apps: AppsV1Api;
  let policy: PolicyV1Api;
  const ns = 'default';

  before(async function () {
    this.timeout(KUBE_START_TIMEOUT_MS);
    const available = await kubeAvailability();
    requireService(this, available.ok, available.why);
    kube = await KubeControlPlane.start({ nodes: NODES.length });
    core = kube.api(CoreV1Api);
    apps = kube.api(AppsV1Api);
    policy = kube.api(PolicyV1Api);
  });
  after(() => kube?.stop());

  it('is the upstream release, with its simulated nodes Ready, as kubectl reports them too', async () => {
    const version = await kube.api(VersionApi).getCode();
    expect(version.gitVersion).to.match(/^v1\.33\.\d+$/);
    const nodes = await core.listNode();
    expect(nodes.items.map((n) => n.metadata?.name).sort()).to.deep.equal(NODES);
    expect(nodes.items.every(nodeReady)).to.equal(true);
    // The node lifecycle controller gave each node a pod CIDR from the cluster CIDR.
    const withCidr = await waitFor(async () => {
      const listed = await core.listNode();
      return listed.items.every((n) => n.spec?.podCIDR) ? listed.items : undefined;
    }, { what: 'pod CIDRs on every node', timeoutMs: 30_000 });
    for (const node of withCidr) expect(node.spec?.podCIDR).to.match(/^10\.42\.\d+\.0\/24$/);

    const kubectl = kube.kubectl(['get', 'nodes', '--no-headers']);
    expect(kubectl.code, kubectl.stderr).to.equal(0);
    const lines = kubectl.stdout.trim().split('\n');
    expect(lines.map((l) => l.split(/\s+/).slice(0, 2))).to.deep.equal(NODES.map((name) => [name, 'Ready']));
  });

  it('turns a Deployment into a ReplicaSet and Pods that the scheduler places and that reach Running on the nodes', async () => {
    await apps.createNamespacedDeployment({ namespace: ns, body: deployment('web', 3) });
    const ready = await waitFor(async () => {
      const d = await apps.readNamespacedDeployment({ name: 'web', namespace: ns });
      return d.status?.availableReplicas === 3 && d.status.updatedReplicas === 3 ? d : undefined;
    }, { what: 'deployment web available with 3 replicas', timeoutMs: 45_000 });
    expect(ready.status?.conditions?.find((c) => c.type === 'Available')?.status).to.equal('True');

    const sets = await apps.listNamespacedReplicaSet({ namespace: ns, labelSelector: 'app=web' });
    expect(sets.items).to.have.length(1);
    const set = sets.items[0];
    expect(set.metadata?.ownerReferences?.[0]).to.include({ kind: 'Deployment', name: 'web', uid: ready.metadata?.uid });
    expect(set.metadata?.labels?.['pod-template-hash']).to.be.a('string').and.not.equal('');

    const pods = (await core.listNamespacedPod({ namespace: ns, labelSelector: 'app=web' })).items;
    expect(pods).to.have.length(3);
    for (const pod of pods) {
      expect(pod.metadata?.ownerReferences?.[0]).to.include({ kind: 'ReplicaSet', name: set.metadata?.name });
      expect(NODES).to.include(pod.spec?.nodeName);
      expect(running(pod), `${pod.metadata?.name} is ${pod.status?.phase}`).to.equal(true);
      expect(pod.status?.podIP).to.match(/^10\.42\./);
    }

    // Scaling down goes through the same controllers: two pods are deleted, and go away.
    await apps.patchNamespacedDeployment({ name: 'web', namespace: ns, body: { spec: { replicas: 1 } } }, mergePatch);
    await waitFor(async () => (await core.listNamespacedPod({ namespace: ns, labelSelector: 'app=web' })).items.length === 1, {
      what: 'web scaled down to one pod',
      timeoutMs: 45_000,
    });
  });

  it('binds a static NFS PersistentVolume to a claim that asks for it', async () => {
    await core.createPersistentVolume({
      body: {
        metadata: { name: 'nfs-data' },
        spec: {
          capacity: { storage: '5Gi' },
          accessModes: ['ReadWriteMany'],
          persistentVolumeReclaimPolicy: 'Retain',
          storageClassName: '',
          nfs: { server: '10.0.0.5', path: '/exports/data' },
        },
      },
    });
    await core.createNamespacedPersistentVolumeClaim({
      namespace: ns,
      body: {
        metadata: { name: 'data' },
        spec: { accessModes: ['ReadWriteMany'], storageClassName: '', volumeName: 'nfs-data', resources: { requests: { storage: '5Gi' } } },
      },
    });
    const claim = await waitFor(async () => {
      const c = await core.readNamespacedPersistentVolumeClaim({ name: 'data', namespace: ns });
      return c.status?.phase === 'Bound' ? c : undefined;
    }, { what: 'claim data Bound', timeoutMs: 45_000 });
    expect(claim.spec?.volumeName).to.equal('nfs-data');
    expect(claim.status?.capacity?.storage).to.equal('5Gi');
    const volume = await core.readPersistentVolume({ name: 'nfs-data' });
    expect(volume.status?.phase).to.equal('Bound');
    expect(volume.spec?.claimRef).to.include({ name: 'data', namespace: ns });

    // A pod mounting the claim is scheduled and runs (kwok: no NFS mount happens).
    await core.createNamespacedPod({
      namespace: ns,
      body: {
        metadata: { name: 'uses-data' },
        spec: {
          containers: [{ name: 'app', image: 'registry.invalid/app:1', volumeMounts: [{ name: 'data', mountPath: '/data' }] }],
          volumes: [{ name: 'data', persistentVolumeClaim: { claimName: 'data' } }],
        },
      },
    });
    await waitFor(async () => running(await core.readNamespacedPod({ name: 'uses-data', namespace: ns })), { what: 'pod uses-data Running', timeoutMs: 45_000 });
  });

  it('cordons a node and evicts through the Eviction API, refusing (429) what would break a PodDisruptionBudget', async () => {
    const node = 'kwok-node-2';
    await apps.createNamespacedDeployment({ namespace: ns, body: deployment('pinned', 2, { nodeName: node }) });
    await policy.createNamespacedPodDisruptionBudget({
      namespace: ns,
      body: { metadata: { name: 'pinned' }, spec: { minAvailable: 2, selector: { matchLabels: { app: 'pinned' } } } },
    });
    await waitFor(async () => {
      const pdb = await policy.readNamespacedPodDisruptionBudget({ name: 'pinned', namespace: ns });
      return pdb.status?.currentHealthy === 2 && pdb.status.observedGeneration === pdb.metadata?.generation;
    }, { what: 'the budget to see two healthy pods', timeoutMs: 45_000 });

    // Cordon: no new pod lands on the node (the scheduler's view), the pods already there stay.
    await core.patchNode({ name: node, body: { spec: { unschedulable: true } } }, mergePatch);
    const cordoned = await core.readNode({ name: node });
    expect(cordoned.spec?.unschedulable).to.equal(true);
    const pods = (await core.listNamespacedPod({ namespace: ns, labelSelector: 'app=pinned' })).items;
    expect(pods.map((p) => p.spec?.nodeName)).to.deep.equal([node, node]);
    const [first, second] = pods.map((p) => p.metadata!.name!);

    const eviction = (name: string) => ({ name, namespace: ns, body: { metadata: { name, namespace: ns } } });
    const refused = await apiFailure(core.createNamespacedPodEviction(eviction(first)));
    expect(refused.code).to.equal(429);
    expect((JSON.parse(refused.body) as { message: string }).message).to.include('disruption budget');
    expect((await core.readNamespacedPod({ name: first, namespace: ns })).metadata?.deletionTimestamp).to.equal(undefined);

    // With room for one disruption, one eviction goes through; its replacement cannot be placed
    // (the only node it may use is cordoned), so the budget has no room left for the second.
    await policy.patchNamespacedPodDisruptionBudget({ name: 'pinned', namespace: ns, body: { spec: { minAvailable: 1 } } }, mergePatch);
    await waitFor(async () => (await policy.readNamespacedPodDisruptionBudget({ name: 'pinned', namespace: ns })).status?.disruptionsAllowed === 1, {
      what: 'the budget to allow one disruption',
      timeoutMs: 30_000,
    });
    await core.createNamespacedPodEviction(eviction(first));
    await waitFor(async () => {
      const left = (await core.listNamespacedPod({ namespace: ns, labelSelector: 'app=pinned' })).items;
      return !left.some((p) => p.metadata?.name === first);
    }, { what: `evicted pod ${first} gone`, timeoutMs: 30_000 });
    const replacement = await waitFor(async () => {
      const left = (await core.listNamespacedPod({ namespace: ns, labelSelector: 'app=pinned' })).items;
      const pending = left.find((p) => p.metadata?.name !== second);
      const scheduled = pending?.status?.conditions?.find((c) => c.type === 'PodScheduled');
      return scheduled?.status === 'False' ? pending : undefined;
    }, { what: 'the replacement pod to be refused by the scheduler', timeoutMs: 30_000 });
    expect(replacement.status?.phase).to.equal('Pending');
    expect(replacement.status?.conditions?.find((c) => c.type === 'PodScheduled')?.reason).to.equal('Unschedulable');
    await waitFor(async () => (await policy.readNamespacedPodDisruptionBudget({ name: 'pinned', namespace: ns })).status?.disruptionsAllowed === 0, {
      what: 'the budget to have no room left',
      timeoutMs: 30_000,
    });
    const second429 = await apiFailure(core.createNamespacedPodEviction(eviction(second)));
    expect(second429.code).to.equal(429);

    // Uncordon: the replacement is placed and runs.
    await core.patchNode({ name: node, body: { spec: { unschedulable: false } } }, mergePatch);
    await waitFor(async () => running(await core.readNamespacedPod({ name: replacement.metadata!.name!, namespace: ns })), {
      what: 'the replacement Running after uncordon',
      timeoutMs: 45_000,
    });
  });

  it('server-side apply records each field manager and reports a conflict unless forced', async () => {
    const objects = KubernetesObjectApi.makeApiClient(kube.kubeConfig);
    const config = (data: Record<string, string>): V1ConfigMap => ({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'settings', namespace: ns }, data });

    await objects.patch(config({ color: 'blue', size: 'm' }), undefined, undefined, 'hangar', undefined, PatchStrategy.ServerSideApply);
    let current = await core.readNamespacedConfigMap({ name: 'settings', namespace: ns });
    expect(current.metadata?.managedFields?.map((f) => [f.manager, f.operation])).to.deep.equal([['hangar', 'Apply']]);
    expect(Object.keys((current.metadata?.managedFields?.[0].fieldsV1 as { 'f:data': object })['f:data'])).to.have.members(['f:color', 'f:size']);

    // Another manager applying a different value for a field hangar owns: 409, naming both.
    const conflict = await apiFailure(objects.patch(config({ color: 'red' }), undefined, undefined, 'operator', false, PatchStrategy.ServerSideApply));
    expect(conflict.code).to.equal(409);
    const status = JSON.parse(conflict.body) as { reason: string; details: { causes: { reason: string; message: string; field: string }[] } };
    expect(status.reason).to.equal('Conflict');
    expect(status.details.causes).to.deep.equal([{ reason: 'FieldManagerConflict', message: 'conflict with "hangar"', field: '.data.color' }]);
    current = await core.readNamespacedConfigMap({ name: 'settings', namespace: ns });
    expect(current.data).to.deep.equal({ color: 'blue', size: 'm' });

    // Forced, the field changes hands; hangar keeps the one it still alone manages.
    await objects.patch(config({ color: 'red' }), undefined, undefined, 'operator', true, PatchStrategy.ServerSideApply);
    current = await core.readNamespacedConfigMap({ name: 'settings', namespace: ns });
    expect(current.data).to.deep.equal({ color: 'red', size: 'm' });
    const owned = Object.fromEntries(
      (current.metadata?.managedFields ?? []).map((f) => [f.manager, Object.keys((f.fieldsV1 as { 'f:data'?: object })['f:data'] ?? {})]),
    );
    expect(owned).to.deep.equal({ hangar: ['f:size'], operator: ['f:color'] });

    // hangar applying its manifest without a field it owned removes that field (how pruning of fields works).
    await objects.patch(config({ color: 'red' }), undefined, undefined, 'hangar', true, PatchStrategy.ServerSideApply);
    current = await core.readNamespacedConfigMap({ name: 'settings', namespace: ns });
    expect(current.data).to.deep.equal({ color: 'red' });
  });

  it('leaves no process behind when the test process is killed (SIGKILL, no cleanup runs)', async function () {
    this.timeout(4 * 60_000);
    const child = spawn(process.execPath, ['--import', 'tsx', CRASH_FIXTURE], { cwd: REPO, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    const exited = new Promise<void>((resolve) => child.on('exit', () => resolve()));
    const { dir, pids } = await new Promise<{ dir: string; pids: Record<string, number> }>((resolve, reject) => {
      let stdout = '';
      child.stdout.on('data', (chunk: Buffer) => {
        stdout += chunk.toString();
        const line = stdout.split('\n').find((l) => l.startsWith('{'));
        if (line) resolve(JSON.parse(line) as { dir: string; pids: Record<string, number> });
      });
      void exited.then(() => reject(new Error(`the fixture ended before its control plane was up:\n${stdout}${output}`)));
    });
    expect(Object.keys(pids).sort()).to.deep.equal(['control-plane', 'etcd', 'kube-apiserver', 'kube-controller-manager', 'kube-scheduler', 'kwok']);
    expect(Object.values(pids).every(pidAlive)).to.equal(true);
    child.kill('SIGKILL');
    await exited;
    await waitFor(() => Object.values(pids).every((pid) => !pidAlive(pid)), {
      what: `every process of the killed run's control plane to end (${JSON.stringify(pids)})`,
      timeoutMs: 60_000,
      intervalMs: 250,
    });
    // Its folder stays until the next start (here: the same cleanup, called directly) removes it.
    expect(existsSync(dir)).to.equal(true);
    removeStaleFolders();
    expect(existsSync(dir)).to.equal(false);
  });
});
