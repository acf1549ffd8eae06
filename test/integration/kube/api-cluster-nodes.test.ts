import { expect } from 'chai';
import { randomUUID } from 'node:crypto';
import { AppsV1Api, BatchV1Api, CoreV1Api, PolicyV1Api } from '@kubernetes/client-node';
import { mergePatch } from '../../../drivers/kubernetes/client.js';
import { joinedNodeId, spawnAgent, waitFor } from '../../support/agents.js';
import { describeEachDialect } from '../../support/dialects.js';
import type { TestHangar } from '../../support/hangar.js';
import { bearer, type Credentials } from '../../support/identity.js';
import type { KubeControlPlane } from '../../support/kube.js';
import { releaseSharedKube, sharedKubeForSuite, startOnAdoptedCluster, stopOnAdoptedCluster, type KubeCluster } from '../../support/kube-cluster.js';

// A cluster's nodes through the nodes API, and its deletion, on a Kubernetes cluster that is the real
// upstream control plane with kwok's nodes (test/support/kube-cluster.ts). The server member is
// reported as kwok-node-2, so the nodes API's drain is a drain of that node by the real agent's
// driver, through the Eviction API, with a real PodDisruptionBudget (the disruption controller
// counts kwok's Running pods as healthy): hangar records an availability only once the cluster has
// done it, and a drain the budget refuses is not `drained`. A worker member (an agent with no
// kubeconfig, as a k3s agent node has none) is scanned through the cluster's server. Deleting the
// cluster is refused while it runs workloads made with kubectl, naming their namespaces. The
// cluster's node is the truth of a member's availability: cordoned or uncordoned with kubectl, or
// made anew (as a node that joins again is), hangar's record follows it; a removal whose drain a
// budget refuses leaves the node a member, cordoned in both.

const NODE = 'kwok-node-2';
/** The node a worker member is reported as. */
const WORKER_NODE = 'kwok-node-1';

/** The row of an active worker member reported as `runtimeNodeId` (no machine is asked to join). */
function workerMember(clusterId: string, nodeId: string, runtimeNodeId: string, address: string) {
  const now = new Date().toISOString();
  return { id: `member-${randomUUID()}`, cluster_id: clusterId, node_id: nodeId, role: 'worker', status: 'active', runtime_node_id: runtimeNodeId, advertise_address: address, error: null, created_at: now, updated_at: now };
}

describe('a Kubernetes cluster’s members through the nodes API, and deleting the cluster (real control plane, kwok nodes)', function () {
  let kube: KubeControlPlane;

  before(async function () {
    kube = await sharedKubeForSuite(this);
  });
  after(() => {
    if (kube) releaseSharedKube();
  });

  describeEachDialect('availability reaches the cluster before hangar records it; scans from any member; deletion names what kubectl made', (dialect) => {
    let t: TestHangar;
    let admin: Credentials;
    let cluster: KubeCluster;
    const namespace = `drain-${dialect.name}`;
    /** Namespaces with workloads made as kubectl would. */
    const made = [`shop-${dialect.name}`, `batch-${dialect.name}`];
    /** Where the removal of a worker member meets a budget. */
    const leaving = `leave-${dialect.name}`;
    const api = (method: string, p: string, body?: unknown) => t.request(method, p, { body, headers: bearer(admin.token) });
    const node = async () => (await api('GET', `/v1/nodes/${cluster.nodeId}`)).json.data;
    const kubeNode = () => kube.api(CoreV1Api).readNode({ name: NODE });
    const events = async () => (await api('GET', `/v1/nodes/events?node_id=${cluster.nodeId}`)).json.data as any[];
    const podsOnNode = async () =>
      (await kube.api(CoreV1Api).listNamespacedPod({ namespace, fieldSelector: `spec.nodeName=${NODE}` })).items.filter((p) => !p.metadata?.deletionTimestamp);
    /** The outcome of a 202's task, read once it is finished. */
    const finished = (taskId: string) =>
      waitFor(
        async () => {
          const res = await api('GET', `/v1/nodes/${cluster.nodeId}/availability/${taskId}`);
          expect(res.status, res.text).to.equal(200);
          return res.json.data.status === 'completed' || res.json.data.status === 'failed' ? res.json.data : null;
        },
        { timeoutMs: 60_000, intervalMs: 300, what: `task ${taskId} finished` },
      );

    before(async function () {
      this.timeout(90_000);
      // The request waits 2 s for the cluster; a drain gives a budget 3 s (60 s by default) before it fails; the cluster is observed every second.
      ({ t, admin, cluster } = await startOnAdoptedCluster(dialect, kube, {
        reportedAs: NODE,
        overrides: { clusters: { availability_wait_seconds: 2, drain_timeout_seconds: 3, observe_interval_seconds: 1 } },
      }));
      await kube.api(CoreV1Api).createNamespace({ body: { metadata: { name: namespace } } });
      const labels = { app: 'guarded' };
      await kube.api(AppsV1Api).createNamespacedDeployment({
        namespace,
        body: {
          metadata: { name: 'guarded' },
          spec: {
            replicas: 2,
            selector: { matchLabels: labels },
            template: { metadata: { labels }, spec: { nodeSelector: { 'kubernetes.io/hostname': NODE }, containers: [{ name: 'web', image: 'registry.invalid/web:1' }] } },
          },
        },
      });
      await kube.api(PolicyV1Api).createNamespacedPodDisruptionBudget({ namespace, body: { metadata: { name: 'guarded' }, spec: { minAvailable: 2, selector: { matchLabels: labels } } } });
      await waitFor(async () => (await kube.api(PolicyV1Api).readNamespacedPodDisruptionBudget({ name: 'guarded', namespace })).status?.currentHealthy === 2, {
        timeoutMs: 60_000,
        what: 'the budget to see two healthy pods',
      });
    });
    after(async function () {
      this.timeout(180_000);
      for (const name of [namespace, leaving, ...made]) await kube?.api(CoreV1Api).deleteNamespace({ name }).catch(() => undefined);
      // Gone before the next dialect drains the same node: a pod of a namespace still terminating
      // cannot be evicted (403), and its drain would fail on it.
      for (const name of [namespace, leaving, ...made]) {
        await waitFor(async () => (await kube.api(CoreV1Api).readNamespace({ name }).then(() => false, () => true)), { timeoutMs: 50_000, what: `namespace ${name} gone` });
      }
      for (const name of [NODE, WORKER_NODE]) {
        await kube?.api(CoreV1Api).patchNode({ name, body: { spec: { unschedulable: false }, metadata: { annotations: { 'io.hangar.availability': null } } } }, mergePatch).catch(() => undefined);
      }
      await stopOnAdoptedCluster(t);
    });

    it('a drain a PodDisruptionBudget refuses: 202 with its task, the task fails naming the budget, and the node is cordoned (not drained) in hangar and in the cluster', async function () {
      this.timeout(60_000);
      const asked = await api('POST', `/v1/nodes/${cluster.nodeId}/drain`);
      expect(asked.status, asked.text).to.equal(202);
      expect(asked.json.data).to.include.keys('task_id', 'status');
      expect(asked.json.data.availability, 'a task, not the node').to.equal(undefined);
      // While it drains, hangar says what holds: cordoned first.
      expect((await node()).availability).to.equal('cordoned');

      const outcome = await finished(asked.json.data.task_id);
      expect(outcome.status).to.equal('failed');
      expect(outcome.error).to.match(new RegExp(`draining node ${NODE}: after 3 s the eviction of ${namespace}/guarded-\\S+ \\(.*disruption budget guarded.*\\)`));
      expect(outcome.error).to.contain('the node stays cordoned');
      expect((await api('GET', `/v1/nodes/${cluster.nodeId}/availability/${asked.json.data.task_id}`)).status, 'read once').to.equal(404);

      const after = await waitFor(async () => {
        const failed = (await events()).find((e) => e.kind === 'node_availability_failed');
        return failed ? { failed, node: await node() } : null;
      }, { timeoutMs: 10_000, what: 'the failure recorded' });
      expect(after.node).to.include({ availability: 'cordoned', status: 'cordoned' });
      expect(after.failed.message).to.match(/^drain failed: draining node .* in Kubernetes cluster kube-\w+ failed: .*disruption budget guarded/);
      expect((await events()).map((e) => e.kind)).to.not.include('node_drained');
      expect((await kubeNode()).spec?.unschedulable).to.equal(true);
      expect(await podsOnNode(), 'both pods still there').to.have.length(2);
    });

    it('a drain the budget allows evicts the pods, then hangar says drained; uncordon and cordon reach the cluster and answer 200', async function () {
      this.timeout(90_000);
      await kube.api(PolicyV1Api).deleteNamespacedPodDisruptionBudget({ name: 'guarded', namespace });
      const asked = await api('POST', `/v1/nodes/${cluster.nodeId}/drain`);
      expect([200, 202], asked.text).to.include(asked.status);
      if (asked.status === 202) expect((await finished(asked.json.data.task_id)).status).to.equal('completed');
      else expect(asked.json.data).to.include({ availability: 'drained', status: 'drained' });
      await waitFor(async () => (await node()).availability === 'drained', { timeoutMs: 10_000, what: 'hangar to say drained' });
      expect(await podsOnNode()).to.deep.equal([]);
      expect((await kubeNode()).metadata?.annotations?.['io.hangar.availability']).to.equal('drained');

      const back = await api('POST', `/v1/nodes/${cluster.nodeId}/uncordon`);
      expect(back.status, back.text).to.equal(200);
      expect(back.json.data.availability).to.equal('active');
      expect((await kubeNode()).spec?.unschedulable ?? false).to.equal(false);

      const cordoned = await api('POST', `/v1/nodes/${cluster.nodeId}/cordon`);
      expect(cordoned.status, cordoned.text).to.equal(200);
      expect(cordoned.json.data.availability).to.equal('cordoned');
      expect((await kubeNode()).spec?.unschedulable).to.equal(true);
      expect((await api('POST', `/v1/nodes/${cluster.nodeId}/uncordon`)).status).to.equal(200);
    });

    it('the cluster’s node is the truth: cordoned or uncordoned with kubectl, hangar follows with a node event; a node hangar drained whose node object is made anew (it left and joined again) is active in hangar', async function () {
      this.timeout(60_000);
      const kubectl = (unschedulable: boolean, annotation?: null) =>
        kube.api(CoreV1Api).patchNode({ name: NODE, body: { spec: { unschedulable }, ...(annotation === null ? { metadata: { annotations: { 'io.hangar.availability': null } } } : {}) } }, mergePatch);
      const follows = (availability: string) => waitFor(async () => ((await node()).availability === availability ? true : null), { timeoutMs: 15_000, what: `hangar to say ${availability}` });
      const observed = async (kind: string) => (await events()).filter((e) => e.kind === kind && e.data?.observed);

      expect((await node()).availability).to.equal('active');
      await kubectl(true);
      await follows('cordoned');
      expect((await node()).status).to.equal('cordoned');
      const [cordoned] = await observed('node_cordoned');
      expect(cordoned?.message).to.match(new RegExp(`^availability set to cordoned: Kubernetes cluster kube-${dialect.name} has the node cordoned \\(changed outside hangar\\)$`));
      expect(cordoned?.data).to.include({ from: 'active', source: `Kubernetes cluster kube-${dialect.name}` });

      await kubectl(false);
      await follows('active');
      expect((await observed('node_uncordoned')).map((e) => e.data.from)).to.include('cordoned');

      // Drained through hangar, then the node object as a node that registers again has it: schedulable, no annotation.
      const drained = await api('POST', `/v1/nodes/${cluster.nodeId}/drain`);
      expect([200, 202], drained.text).to.include(drained.status);
      await follows('drained');
      await kubectl(false, null);
      await follows('active');
      // hangar asks nothing of the cluster for it: the node stays schedulable.
      expect((await kubeNode()).spec?.unschedulable ?? false).to.equal(false);
      expect((await observed('node_uncordoned')).map((e) => e.data.from)).to.include('drained');

      // Drained through hangar, then uncordoned with kubectl (which keeps annotations): a later kubectl cordon is a cordon, not the old drain.
      expect((await api('POST', `/v1/nodes/${cluster.nodeId}/drain`)).status).to.be.oneOf([200, 202]);
      await follows('drained');
      await kubectl(false);
      await follows('active');
      await waitFor(async () => ((await kubeNode()).metadata?.annotations?.['io.hangar.availability'] === undefined ? true : null), { timeoutMs: 15_000, what: 'hangar to remove its annotation from the uncordoned node' });
      await kubectl(true);
      await follows('cordoned');
      expect((await observed('node_cordoned')).filter((e) => e.data.from === 'active')).to.have.length(2);
      await kubectl(false);
      await follows('active');
    });

    it('a cordon the cluster refuses is a 409 with its reason, and hangar keeps the availability it had', async function () {
      this.timeout(30_000);
      const knex = t.hangar.store.knex;
      await knex('cluster_members').where({ node_id: cluster.nodeId }).update({ runtime_node_id: 'kwok-node-gone' });
      try {
        const refused = await api('POST', `/v1/nodes/${cluster.nodeId}/cordon`);
        expect(refused.status, refused.text).to.equal(409);
        expect(refused.json.message).to.match(/^cordoning node .* in Kubernetes cluster kube-\w+ failed: .*no such node in this cluster/);
        expect((await node()).availability).to.equal('active');
        const failed = (await events()).filter((e) => e.kind === 'node_availability_failed').map((e) => e.message);
        expect(failed.some((m) => /^cordon failed: cordoning node .*no such node/.test(m)), failed.join('\n')).to.equal(true);
      } finally {
        await knex('cluster_members').where({ node_id: cluster.nodeId }).update({ runtime_node_id: NODE });
      }
    });

    it('scans a worker member (no kubeconfig on its machine) through the cluster’s server: the workloads made with kubectl, none of the system namespaces', async function () {
      this.timeout(60_000);
      const [shop] = made;
      await kube.api(CoreV1Api).createNamespace({ body: { metadata: { name: shop! } } });
      const labels = { app: 'shop' };
      await kube.api(AppsV1Api).createNamespacedDeployment({
        namespace: shop!,
        body: { metadata: { name: 'shop' }, spec: { replicas: 1, selector: { matchLabels: labels }, template: { metadata: { labels }, spec: { containers: [{ name: 'web', image: 'registry.invalid/shop:1' }] } } } },
      });
      // A worker: an agent that reaches no cluster (HANGAR_KUBECONFIG unset, no k3s server on its machine), a member reported as kwok-node-1.
      const token = await api('POST', '/v1/nodes/token', {});
      const worker = await joinedNodeId(spawnAgent({ join: { token: token.json.data.token, api: t.url } }));
      await waitFor(async () => (await api('GET', `/v1/nodes/${worker}`)).json.data?.status === 'ready', { timeoutMs: 20_000, what: `node ${worker} ready` });
      const knex = t.hangar.store.knex;
      await knex('cluster_members').insert(workerMember(cluster.clusterId, worker, 'kwok-node-1', '127.0.0.2'));
      try {
        const asked = await api('POST', `/v1/nodes/${worker}/unmanaged?backend=k8s`);
        expect(asked.status, asked.text).to.equal(202);
        expect(asked.json.data.node_id, 'run by the server').to.equal(cluster.nodeId);
        const scan = await waitFor(
          async () => {
            const res = await api('GET', `/v1/nodes/${worker}/unmanaged/${asked.json.data.task_id}`);
            expect(res.status, res.text).to.equal(200);
            return res.json.data.status === 'completed' || res.json.data.status === 'failed' ? res.json.data : null;
          },
          { timeoutMs: 30_000, intervalMs: 300, what: 'the scan finished' },
        );
        expect(scan.status, scan.error).to.equal('completed');
        const names = scan.resources.map((r: any) => `${r.kind} ${r.name}`);
        expect(names).to.include(`deployment ${shop}/shop`);
        expect(scan.resources.find((r: any) => r.name === `${shop}/shop`).namespace).to.equal(shop);
        expect(names.filter((n: string) => n.includes('kube-system/')), 'no system namespace').to.deep.equal([]);
        // The task is the worker's to read, not another node's.
        const other = await api('POST', `/v1/nodes/${worker}/unmanaged?backend=k8s`);
        expect((await api('GET', `/v1/nodes/${cluster.nodeId}/unmanaged/${other.json.data.task_id}`)).status).to.equal(404);
      } finally {
        await knex('cluster_members').where({ node_id: worker }).delete();
      }
    });

    it('removing a worker member whose drain a PodDisruptionBudget refuses: 202, then the node stays a member (active, its error naming the budget), cordoned in the cluster and in hangar, its pods in place', async function () {
      this.timeout(60_000);
      await kube.api(CoreV1Api).createNamespace({ body: { metadata: { name: leaving } } });
      const labels = { app: 'kept' };
      await kube.api(AppsV1Api).createNamespacedDeployment({
        namespace: leaving,
        body: {
          metadata: { name: 'kept' },
          spec: {
            replicas: 1,
            selector: { matchLabels: labels },
            template: { metadata: { labels }, spec: { nodeSelector: { 'kubernetes.io/hostname': WORKER_NODE }, containers: [{ name: 'web', image: 'registry.invalid/kept:1' }] } },
          },
        },
      });
      await kube.api(PolicyV1Api).createNamespacedPodDisruptionBudget({ namespace: leaving, body: { metadata: { name: 'kept' }, spec: { minAvailable: 1, selector: { matchLabels: labels } } } });
      await waitFor(async () => (await kube.api(PolicyV1Api).readNamespacedPodDisruptionBudget({ name: 'kept', namespace: leaving })).status?.currentHealthy === 1, {
        timeoutMs: 60_000,
        what: 'the budget to see its pod healthy',
      });
      // A worker member reported as the kwok node (its machine is never asked: the drain comes first).
      const worker = (await api('POST', '/v1/nodes', { name: `worker-${dialect.name}`, ip_address: '192.0.2.50' })).json.data.id as string;
      const knex = t.hangar.store.knex;
      await knex('cluster_members').insert(workerMember(cluster.clusterId, worker, WORKER_NODE, '192.0.2.50'));
      const member = async () => ((await api('GET', `/v1/kubernetes/clusters/${cluster.clusterId}/nodes`)).json.data as any[]).find((m) => m.node_id === worker);
      try {
        const asked = await api('DELETE', `/v1/kubernetes/clusters/${cluster.clusterId}/nodes/${worker}`);
        expect(asked.status, asked.text).to.equal(202);
        expect(asked.json.data).to.include({ node_id: worker, status: 'leaving' });
        const kept = await waitFor(async () => {
          const m = await member();
          return m?.status === 'active' && m.error ? m : null;
        }, { timeoutMs: 30_000, what: 'the removal refused' });
        expect(kept.error).to.match(new RegExp(`^removing it failed: draining it was refused: draining node ${WORKER_NODE}: after 3 s the eviction of ${leaving}/kept-\\S+ \\(.*disruption budget kept.*\\).*; it stays a member, cordoned`));
        const workerNode = (await api('GET', `/v1/nodes/${worker}`)).json.data;
        expect(workerNode).to.include({ availability: 'cordoned' });
        const workerEvents = (await api('GET', `/v1/nodes/events?node_id=${worker}`)).json.data as any[];
        expect(workerEvents.find((e) => e.kind === 'node_cordoned')?.message).to.match(/^availability set to cordoned: the cluster refused to drain it for its removal and keeps it cordoned \(.*disruption budget kept/);
        expect(workerEvents.map((e) => e.kind)).to.include('k8s_drain_failed').and.not.include('k8s_left');
        expect((await kube.api(CoreV1Api).readNode({ name: WORKER_NODE })).spec?.unschedulable).to.equal(true);
        const pods = (await kube.api(CoreV1Api).listNamespacedPod({ namespace: leaving })).items.filter((p) => !p.metadata?.deletionTimestamp);
        expect(pods.map((p) => p.spec?.nodeName)).to.deep.equal([WORKER_NODE]);
      } finally {
        await knex('cluster_members').where({ node_id: worker }).delete();
      }
    });

    it('deleting the cluster is refused (409) while it runs workloads made with kubectl, naming their namespaces; forced, it is deleted', async function () {
      this.timeout(60_000);
      const [shop, batch] = made;
      await kube.api(CoreV1Api).createNamespace({ body: { metadata: { name: batch! } } });
      await kube.api(BatchV1Api).createNamespacedCronJob({
        namespace: batch!,
        body: {
          metadata: { name: 'nightly' },
          spec: { schedule: '0 3 * * *', jobTemplate: { spec: { template: { spec: { restartPolicy: 'Never', containers: [{ name: 'job', image: 'registry.invalid/job:1' }] } } } } },
        },
      });
      const refused = await api('DELETE', `/v1/kubernetes/clusters/${cluster.clusterId}`);
      expect(refused.status, refused.text).to.equal(409);
      expect(refused.json.message).to.match(new RegExp(`^Kubernetes cluster kube-${dialect.name} runs workloads hangar did not create, in namespaces .*${batch}.*${shop}.*: .*cronjob ${batch}/nightly.*deployment ${shop}/shop.*\\(deleting the cluster destroys them\\); remove them or pass force=true$`));
      expect(refused.json.message).to.not.match(/kube-system/);
      expect(refused.json.details).to.deep.include({ type: 'deployment', id: refused.json.details.find((d: any) => d.name === `${shop}/shop`).id, name: `${shop}/shop`, namespace: shop, managed: false });
      expect((await api('GET', `/v1/kubernetes/clusters/${cluster.clusterId}`)).json.data.status).to.equal('active');

      const forced = await api('DELETE', `/v1/kubernetes/clusters/${cluster.clusterId}?force=true`);
      expect([200, 202], forced.text).to.include(forced.status);
      await waitFor(async () => (await api('GET', `/v1/kubernetes/clusters/${cluster.clusterId}`)).status === 404, { timeoutMs: 30_000, what: 'the cluster deleted' });
    });
  });
});
