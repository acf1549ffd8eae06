import { expect } from 'chai';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { AppsV1Api, CoreV1Api } from '@kubernetes/client-node';
import { randomUUID } from 'node:crypto';
import { readOrNull } from '../../../drivers/kubernetes/client.js';
import { joinedNodeId, spawnAgent, waitFor } from '../../support/agents.js';
import { describeEachDialect } from '../../support/dialects.js';
import type { TestHangar } from '../../support/hangar.js';
import { bearer, type Credentials } from '../../support/identity.js';
import type { KubeControlPlane } from '../../support/kube.js';
import { releaseSharedKube, sharedKubeForSuite, startOnAdoptedCluster, stopOnAdoptedCluster, type KubeCluster } from '../../support/kube-cluster.js';

// Compute instances and NFS volumes through the HTTP API on a Kubernetes cluster that is the real
// upstream control plane (API server, controllers, scheduler; kwok's simulated nodes and pods — no
// container runs, and nothing mounts NFS), reached by a real agent running the Kubernetes driver
// (test/support/kube-cluster.ts). What is checked is what a user sees through the API and what
// hangar made on the cluster: Deployments whose pods reach Running on the kwok nodes, a static NFS
// PersistentVolume bound to its claim by the real controller, the claim mounted by an instance.

const NAMESPACE = 'default';

describe('compute instances and volumes through the API on a Kubernetes cluster (real control plane, kwok nodes)', function () {
  let kube: KubeControlPlane;
  let work: string;
  const previousExportsDir = process.env.HANGAR_EXPORTS_DIR;

  before(async function () {
    kube = await sharedKubeForSuite(this);
    work = mkdtempSync(path.join(os.tmpdir(), 'hangar-kube-workloads-'));
    // The agents write NFS export entries here instead of /etc/exports.d (they read it at start).
    process.env.HANGAR_EXPORTS_DIR = path.join(work, 'exports.d');
  });
  after(async () => {
    if (kube) releaseSharedKube();
    if (previousExportsDir === undefined) delete process.env.HANGAR_EXPORTS_DIR;
    else process.env.HANGAR_EXPORTS_DIR = previousExportsDir;
    if (work) rmSync(work, { recursive: true, force: true });
  });

  describeEachDialect('instances as Deployments, NFS volumes as claims', (dialect) => {
    let t: TestHangar;
    let admin: Credentials;
    let cluster: KubeCluster;
    /** A second agent, in no cluster: it holds the NFS volume's folder. */
    let holder: string;
    // Names of their own per dialect: both dialects use the driver's namespace and PersistentVolumes are cluster-wide.
    const web = `web-${dialect.name}`;
    const deployment = `inst-${web}`;
    const volumeName = `data-${dialect.name}`;
    const claim = `hangar-vol-${volumeName}`;
    let instanceId: string;
    let volumeId: string;

    const api = (method: string, p: string, body?: unknown) => t.request(method, p, { body, headers: bearer(admin.token) });
    const instance = async () => (await api('GET', `/v1/compute/instances/${instanceId}`)).json.data;
    const waitInstance = (what: string, test: (i: any) => boolean) =>
      waitFor(
        async () => {
          const i = await instance();
          if (i?.status === 'failed') throw new Error(`the instance failed: ${i.reason}\n${cluster.agent.output()}`);
          return i && test(i) ? i : null;
        },
        { timeoutMs: 90_000, intervalMs: 500, what },
      );
    const runningPods = async () => (await kube.api(CoreV1Api).listNamespacedPod({ namespace: NAMESPACE, labelSelector: `io.hangar.id=${instanceId}` })).items.filter((p) => p.status?.phase === 'Running' && !p.metadata?.deletionTimestamp);
    // null for a 404 only: another error of the API server fails the test instead of reading as "gone".
    const readClaim = () => readOrNull(`reading claim ${claim}`, () => kube.api(CoreV1Api).readNamespacedPersistentVolumeClaim({ name: claim, namespace: NAMESPACE }));
    const readVolume = () => readOrNull(`reading PersistentVolume ${claim}`, () => kube.api(CoreV1Api).readPersistentVolume({ name: claim }));

    before(async function () {
      this.timeout(90_000);
      ({ t, admin, cluster } = await startOnAdoptedCluster(dialect, kube, { plugins: ['volumes', 'compute'], overrides: { clusters: { observe_interval_seconds: 1, advertise: 'address' } } }));
      const token = await api('POST', '/v1/nodes/token', {});
      const agent = spawnAgent({ join: { token: token.json.data.token, api: t.url } });
      holder = await joinedNodeId(agent);
      await waitFor(async () => (await api('GET', `/v1/nodes/${holder}`)).json.data?.status === 'ready', { timeoutMs: 20_000, what: `node ${holder} to be ready` });
    });
    after(async function () {
      this.timeout(60_000);
      await stopOnAdoptedCluster(t);
    });

    it('attaches an NFS volume from a node outside the cluster: a PersistentVolume bound to its claim, listed with the claim’s phase; a second attach is a 200; the export names the cluster’s member', async function () {
      this.timeout(120_000);
      const folder = path.join(work, dialect.name, 'data');
      const created = await api('POST', '/v1/volumes', { name: volumeName, node_id: holder, folder });
      expect(created.status, created.text).to.equal(202);
      volumeId = created.json.data.id;
      const ready = await waitFor(
        async () => {
          const v = (await api('GET', `/v1/volumes/${volumeId}`)).json.data;
          return v.status !== 'preparing' ? v : null;
        },
        { timeoutMs: 30_000, what: 'the volume prepared' },
      );
      expect(ready.status, ready.error).to.equal('ready');
      expect(await readClaim(), 'its node is in no cluster: nothing staged yet').to.equal(null);

      const attached = await api('POST', `/v1/kubernetes/clusters/${cluster.clusterName}/volumes`, { volume_id: volumeName });
      expect(attached.status, attached.text).to.equal(201);
      expect(attached.json.data).to.include({ volume_id: volumeId, name: volumeName, claim, phase: 'Bound', type: 'nfs' });

      const boundClaim = await readClaim();
      expect(boundClaim?.status?.phase, 'read on the cluster').to.equal('Bound');
      expect(boundClaim?.spec?.volumeName).to.equal(claim);
      const pv = await readVolume();
      expect(pv?.spec?.nfs).to.deep.equal({ server: ready.server_ip, path: folder });
      expect(pv?.spec?.persistentVolumeReclaimPolicy, 'deleting it leaves the data').to.equal('Retain');
      expect(pv?.metadata?.labels).to.include({ 'io.hangar.id': volumeId });

      const listed = await api('GET', `/v1/kubernetes/clusters/${cluster.clusterId}/volumes`);
      expect(listed.status, listed.text).to.equal(200);
      expect(listed.json.data.map((v: any) => [v.name, v.phase])).to.deep.equal([[volumeName, 'Bound']]);
      expect(listed.json.error).to.equal(undefined);

      const again = await api('POST', `/v1/kubernetes/clusters/${cluster.clusterId}/volumes`, { volume_id: volumeId });
      expect(again.status, again.text).to.equal(200);

      // The export names the cluster's member now (its kubelets mount the share), not only the configured clients.
      const member = (await api('GET', `/v1/nodes/${cluster.nodeId}`)).json.data;
      const exported = (await api('GET', `/v1/volumes/${volumeId}`)).json.data.nfs_export;
      expect(exported.clients).to.include(member.ip_address);
      expect(readFileSync(exported.file, 'utf8')).to.contain(member.ip_address);
    });

    it('refuses a local volume (409, saying why), an unknown volume or cluster (404), detaching what is not attached (404), a cluster that is not active (409)', async function () {
      this.timeout(60_000);
      const local = await api('POST', '/v1/volumes', { name: `local-${dialect.name}`, node_id: holder, folder: path.join(work, dialect.name, 'local'), type: 'local' });
      expect(local.status, local.text).to.equal(202);
      await waitFor(async () => (await api('GET', `/v1/volumes/${local.json.data.id}`)).json.data.status === 'ready', { timeoutMs: 30_000, what: 'the local volume prepared' });
      const refused = await api('POST', `/v1/kubernetes/clusters/${cluster.clusterId}/volumes`, { volume_id: local.json.data.id });
      expect(refused.status, refused.text).to.equal(409);
      expect(refused.json.message).to.match(/is a local folder on node .*nothing to attach.*attach an nfs volume/);

      expect((await api('POST', `/v1/kubernetes/clusters/${cluster.clusterId}/volumes`, { volume_id: 'nope' })).status).to.equal(404);
      expect((await api('POST', '/v1/kubernetes/clusters/nope/volumes', { volume_id: volumeId })).status).to.equal(404);
      expect((await api('POST', `/v1/kubernetes/clusters/${cluster.clusterId}/volumes`, {})).status).to.equal(400);
      const notAttached = await api('DELETE', `/v1/kubernetes/clusters/${cluster.clusterId}/volumes/${local.json.data.id}`);
      expect(notAttached.status, notAttached.text).to.equal(404);
      expect(notAttached.json.message).to.contain('is not attached to cluster');
      expect((await api('DELETE', `/v1/volumes/${local.json.data.id}`)).status).to.equal(202);

      const idle = await insertIdleCluster(`idle-${dialect.name}`);
      const inactive = await api('POST', `/v1/kubernetes/clusters/${idle}/volumes`, { volume_id: volumeId });
      expect(inactive.status, inactive.text).to.equal(409);
      expect(inactive.json.message).to.contain('has no manager yet');
    });

    /** A k8s cluster record with no server yet (as a cluster is while its first node installs). */
    async function insertIdleCluster(name: string): Promise<string> {
      const id = `cluster-${randomUUID()}`;
      const now = new Date().toISOString();
      await t.hangar.store.knex('clusters').insert({ id, name, backend: 'k8s', status: 'forming', manager_node_id: null, runtime_id: null, error: null, created_at: now, updated_at: now });
      await t.hangar.store.knex('k8s_clusters').insert({ cluster_id: id, kubeconfig_endpoint: 'public', version: null });
      return id;
    }

    it('refuses an instance naming both swarm_id and cluster_id or neither (400), an unknown cluster (404), a cluster with no server (409)', async () => {
      const base = { name: 'bad', image: 'registry.invalid/web:1' };
      for (const body of [base, { ...base, swarm_id: cluster.clusterId, cluster_id: cluster.clusterId }]) {
        const res = await api('POST', '/v1/compute/instances', body);
        expect(res.status, JSON.stringify(body)).to.equal(400);
        expect(res.json.message).to.contain('exactly one of body.swarm_id (a swarm) and body.cluster_id');
      }
      const unknown = await api('POST', '/v1/compute/instances', { ...base, cluster_id: 'no-such-cluster' });
      expect(unknown.status, unknown.text).to.equal(404);
      const asSwarm = await api('POST', '/v1/compute/instances', { ...base, swarm_id: cluster.clusterId });
      expect(asSwarm.status, 'a Kubernetes cluster is not a swarm').to.equal(404);
      const idle = await api('POST', '/v1/compute/instances', { ...base, cluster_id: `idle-${dialect.name}` });
      expect(idle.status, idle.text).to.equal(409);
      expect(idle.json.message).to.contain('has no manager yet');
      expect((await api('GET', '/v1/compute/instances?cluster_id=nope')).status).to.equal(400);
    });

    it('runs an instance with cluster_id as a Deployment whose pods reach Running on the kwok nodes; it names cluster_id; scale, stop and start reach the Deployment', async function () {
      this.timeout(180_000);
      const created = await api('POST', '/v1/compute/instances', { name: web, cluster_id: cluster.clusterName, image: 'registry.invalid/web:1', replicas: 2, env: { GREETING: 'hello' } });
      expect(created.status, created.text).to.equal(202);
      instanceId = created.json.data.id;
      expect(created.json.data).to.include({ cluster_id: cluster.clusterId, runtime_name: deployment });
      expect(created.json.data).to.not.have.property('swarm_id');

      const running = await waitInstance('2 replicas running', (i) => i.status === 'running' && i.running === 2);
      expect(running.placement.map((p: any) => p.state)).to.deep.equal(['running', 'running']);
      const live = await kube.api(AppsV1Api).readNamespacedDeployment({ name: deployment, namespace: NAMESPACE });
      expect(live.spec?.replicas).to.equal(2);
      expect(live.metadata?.labels).to.include({ 'io.hangar.role': 'instance', 'io.hangar.id': instanceId });
      expect(live.spec?.template.spec?.containers[0]?.env).to.deep.equal([{ name: 'GREETING', value: 'hello' }]);
      expect((await runningPods()).map((p) => p.spec?.nodeName).every((n) => n?.startsWith('kwok-node-'))).to.equal(true);
      expect(await runningPods()).to.have.length(2);

      const listed = await api('GET', `/v1/compute/instances?cluster_id=${cluster.clusterName}`);
      expect(listed.json.data.map((i: any) => i.id)).to.deep.equal([instanceId]);

      expect((await api('POST', `/v1/compute/instances/${instanceId}/scale`, { replicas: 3 })).status).to.equal(202);
      await waitInstance('3 replicas running', (i) => i.status === 'running' && i.running === 3);
      expect(await runningPods()).to.have.length(3);

      expect((await api('POST', `/v1/compute/instances/${instanceId}/stop`)).status).to.equal(202);
      const stopped = await waitInstance('stopped', (i) => i.status === 'stopped');
      expect(stopped).to.include({ desired_state: 'stopped', replicas: 3, running: 0 });
      expect((await kube.api(AppsV1Api).readNamespacedDeployment({ name: deployment, namespace: NAMESPACE })).spec?.replicas).to.equal(0);
      await waitFor(async () => (await runningPods()).length === 0, { timeoutMs: 30_000, what: 'its pods gone' });

      expect((await api('POST', `/v1/compute/instances/${instanceId}/start`)).status).to.equal(202);
      await waitInstance('3 replicas running again', (i) => i.status === 'running' && i.running === 3);
    });

    it('mounts the attached volume as the claim; detaching the volume from the cluster is a 409 naming the instance until the instance lets it go', async function () {
      this.timeout(180_000);
      const attached = await api('POST', `/v1/compute/instances/${instanceId}/volumes`, { volume_id: volumeName, path: '/data' });
      expect(attached.status, attached.text).to.equal(202);
      await waitFor(
        async () => {
          const live = await kube.api(AppsV1Api).readNamespacedDeployment({ name: deployment, namespace: NAMESPACE });
          return live.spec?.template.spec?.volumes?.some((v) => v.persistentVolumeClaim?.claimName === claim) ? live : null;
        },
        { timeoutMs: 60_000, what: 'the Deployment mounting the claim' },
      );
      const mounted = await waitInstance('running 3 with the volume', (i) => i.status === 'running' && i.running === 3 && i.volumes.length === 1);
      expect(mounted.volumes).to.deep.equal([{ volume_id: volumeId, name: volumeName, path: '/data' }]);
      // The rollout replaces the pods: one of the old template may still run a moment after the count is reached.
      const [pod] = await waitFor(
        async () => {
          const pods = await runningPods();
          return pods.length && pods.every((p) => p.spec?.volumes?.some((v) => v.persistentVolumeClaim)) ? pods : null;
        },
        { timeoutMs: 60_000, what: 'every running pod of the new template' },
      );
      expect(pod?.spec?.volumes?.find((v) => v.persistentVolumeClaim)?.persistentVolumeClaim?.claimName).to.equal(claim);
      expect(pod?.spec?.containers[0]?.volumeMounts?.find((m) => m.mountPath === '/data')).to.not.equal(undefined);

      const busy = await api('DELETE', `/v1/kubernetes/clusters/${cluster.clusterId}/volumes/${volumeId}`);
      expect(busy.status, busy.text).to.equal(409);
      expect(busy.json.message).to.contain(`instance ${web}`);
      expect((await readClaim())?.status?.phase, 'the claim stays').to.equal('Bound');
      const deleteVolume = await api('DELETE', `/v1/volumes/${volumeId}`);
      expect(deleteVolume.status).to.equal(409);
      expect(deleteVolume.json.message).to.contain(`instance ${web}`);

      expect((await api('DELETE', `/v1/compute/instances/${instanceId}/volumes/${volumeName}`)).status).to.equal(202);
      await waitFor(
        async () => {
          const live = await kube.api(AppsV1Api).readNamespacedDeployment({ name: deployment, namespace: NAMESPACE });
          return !live.spec?.template.spec?.volumes?.some((v) => v.persistentVolumeClaim);
        },
        { timeoutMs: 60_000, what: 'the Deployment without the claim' },
      );
      await waitInstance('running without the volume', (i) => i.status === 'running' && i.volumes.length === 0);

      const detached = await api('DELETE', `/v1/kubernetes/clusters/${cluster.clusterId}/volumes/${volumeId}`);
      expect(detached.status, detached.text).to.equal(200);
      expect(detached.json.data).to.include({ volume_id: volumeId, detached: true });
      expect(await readClaim(), 'the claim is gone').to.equal(null);
      expect(await readVolume(), 'the PersistentVolume is gone').to.equal(null);
      expect((await api('GET', `/v1/kubernetes/clusters/${cluster.clusterId}/volumes`)).json.data).to.deep.equal([]);
    });

    it('reads the instance’s logs through a read-once task: what the cluster serves as its containers’ log (kwok serves the lines this test wrote; no container runs)', async function () {
      this.timeout(60_000);
      const line = `hello from ${web} ${randomUUID()}`;
      kube.appendPodLog([{ text: line }]);
      const queued = await api('POST', `/v1/compute/instances/${instanceId}/logs?lines=50`);
      expect(queued.status, queued.text).to.equal(202);
      const taskId = queued.json.data.task_id;
      const done = await waitFor(
        async () => {
          const r = await api('GET', `/v1/compute/instances/${instanceId}/logs/${taskId}`);
          if (r.json.data?.status === 'failed') throw new Error(`the log read failed: ${r.text}`);
          return r.json.data?.status === 'completed' ? r.json.data : null;
        },
        { timeoutMs: 30_000, what: 'the log read' },
      );
      expect(done.lines.join('\n')).to.contain(line);
      expect((await api('GET', `/v1/compute/instances/${instanceId}/logs/${taskId}`)).status, 'read once').to.equal(404);
    });

    it('rolls an update out as its declared rollout says; a revision whose pods fail readiness is rolled back by hangar to the one before (rolled_back, naming it); the next update clears that', async function () {
      this.timeout(180_000);
      const name = `roll-${dialect.name}`;
      // monitor_s is waited out by every rollout of this test (and is part of the failing one's deadline): short, yet long enough to be seen rolling_out.
      const rollout = { parallelism: 2, monitor_s: 3, order: 'start-first', on_failure: 'rollback' };
      const health = { tcp: { port: 80 }, interval_s: 1, timeout_s: 1, retries: 1 };
      const created = await api('POST', '/v1/compute/instances', { name, cluster_id: cluster.clusterName, image: 'registry.invalid/roll:1', replicas: 1, rollout, health });
      expect(created.status, created.text).to.equal(202);
      const id = created.json.data.id as string;
      try {
        await rollOut(id);
      } finally {
        // Whatever happened: the cluster's delete below needs it gone.
        await api('DELETE', `/v1/compute/instances/${id}`);
        await waitFor(async () => (await api('GET', `/v1/compute/instances/${id}`)).status === 404, { timeoutMs: 90_000, intervalMs: 500, what: 'the instance gone' });
      }
    });

    async function rollOut(id: string) {
      const name = `roll-${dialect.name}`;
      const get = async () => (await api('GET', `/v1/compute/instances/${id}`)).json.data;
      const seen = new Set<string>();
      const until = (what: string, test: (i: any) => boolean) =>
        waitFor(
          async () => {
            const i = await get();
            seen.add(i.status);
            return test(i) ? i : null;
          },
          { timeoutMs: 120_000, intervalMs: 250, what },
        );
      const read = () => kube.api(AppsV1Api).readNamespacedDeployment({ name: `inst-${name}`, namespace: NAMESPACE });
      await until('running', (i) => i.status === 'running');
      const first = await read();
      expect(first.spec?.strategy).to.deep.equal({ type: 'RollingUpdate', rollingUpdate: { maxSurge: 2, maxUnavailable: 0 } });
      // monitor_s; then the health check's own time (1 × 1 s + 1 s timeout) and the slack (10 s).
      expect(first.spec).to.include({ minReadySeconds: 3, progressDeadlineSeconds: 15 });
      expect(first.spec?.template.metadata?.annotations).to.include({ 'io.hangar.revision': '1' });

      let res = await api('PATCH', `/v1/compute/instances/${id}`, { image: 'registry.invalid/roll:2' });
      expect(res.status, res.text).to.equal(202);
      await until('revision 2 running', (i) => i.status === 'running' && i.image === 'registry.invalid/roll:2');
      expect([...seen], 'the update is shown while new pods are watched for monitor_s').to.include('rolling_out');

      // Revision 3's pods fail their readiness probe: this test plays their kubelet, saying so (kwok would call them ready).
      res = await api('PATCH', `/v1/compute/instances/${id}`, { image: 'registry.invalid/roll:3' });
      expect(res.status, res.text).to.equal(202);
      const failing = new Set<string>();
      const failReadiness = async () => {
        const core = kube.api(CoreV1Api);
        for (const pod of (await core.listNamespacedPod({ namespace: NAMESPACE, labelSelector: `io.hangar.id=${id}` })).items) {
          const ready = pod.status?.conditions?.find((c) => c.type === 'Ready');
          if (pod.metadata?.annotations?.['io.hangar.revision'] !== '3' || pod.metadata.deletionTimestamp || ready?.status !== 'True') continue;
          for (const c of pod.status!.conditions!) if (c.type === 'Ready' || c.type === 'ContainersReady') Object.assign(c, { status: 'False', reason: 'ReadinessProbeFailed', lastTransitionTime: new Date() });
          // A conflict (kwok wrote meanwhile) is tried again on the next round.
          await core.replaceNamespacedPodStatus({ name: pod.metadata.name!, namespace: NAMESPACE, body: pod }).then(
            () => failing.add(pod.metadata!.name!),
            () => undefined,
          );
        }
      };
      const rolledBack = await waitFor(
        async () => {
          const i = await get();
          if (i.status === 'rolled_back') return i;
          await failReadiness();
          return null;
        },
        { timeoutMs: 120_000, intervalMs: 250, what: 'rolled back' },
      );
      expect(failing.size, 'the pods of revision 3 were made to fail readiness').to.be.greaterThan(0);
      expect(rolledBack.reason).to.contain('revision 3 did not become available within 15 s').and.to.contain('what runs is revision 2');
      const back = await read();
      expect(back.spec?.template.spec?.containers[0]?.image).to.equal('registry.invalid/roll:2');
      expect(back.spec?.template.metadata?.annotations).to.include({ 'io.hangar.revision': '2' });
      const pods = (await kube.api(CoreV1Api).listNamespacedPod({ namespace: NAMESPACE, labelSelector: `io.hangar.id=${id}` })).items;
      expect(pods.filter((p) => !p.metadata?.deletionTimestamp).map((p) => p.spec?.containers[0]?.image)).to.include('registry.invalid/roll:2');

      res = await api('PATCH', `/v1/compute/instances/${id}`, { image: 'registry.invalid/roll:4' });
      expect(res.status, res.text).to.equal(202);
      await until('revision 4 running', (i) => i.status === 'running' && i.image === 'registry.invalid/roll:4');
      const cleared = await read();
      expect(cleared.metadata?.annotations ?? {}).to.not.have.property('io.hangar.rollout-outcome');
      expect(cleared.spec?.template.spec?.containers[0]?.image).to.equal('registry.invalid/roll:4');
      expect((await api('GET', `/v1/compute/instances/${id}/revisions`)).json.data.map((r: any) => r.number)).to.deep.equal([4, 3, 2, 1]);
    }

    it('terminates the instance: its Deployment and pods go, then the record', async function () {
      this.timeout(120_000);
      expect((await api('DELETE', `/v1/compute/instances/${instanceId}`)).status).to.equal(202);
      await waitFor(async () => (await api('GET', `/v1/compute/instances/${instanceId}`)).status === 404, { timeoutMs: 90_000, intervalMs: 500, what: 'the instance gone' });
      const left = await kube.api(AppsV1Api).listNamespacedDeployment({ namespace: NAMESPACE });
      expect(left.items.filter((d) => d.metadata?.name === deployment && !d.metadata?.deletionTimestamp)).to.deep.equal([]);
    });

    it('deletes the cluster with the volume attached (the agent leaves alone the Kubernetes it did not install): the claim went with the cluster, so the export stops naming the member and the volume deletes without force', async function () {
      this.timeout(120_000);
      const attached = await api('POST', `/v1/kubernetes/clusters/${cluster.clusterId}/volumes`, { volume_id: volumeId });
      expect(attached.status, attached.text).to.equal(201);
      const member = (await api('GET', `/v1/nodes/${cluster.nodeId}`)).json.data;
      expect((await api('GET', `/v1/volumes/${volumeId}`)).json.data.nfs_export.clients).to.include(member.ip_address);

      const deleted = await api('DELETE', `/v1/kubernetes/clusters/${cluster.clusterId}`);
      expect(deleted.status, deleted.text).to.be.oneOf([200, 202]);
      await waitFor(async () => (await api('GET', `/v1/kubernetes/clusters/${cluster.clusterId}`)).status === 404, { timeoutMs: 60_000, intervalMs: 500, what: 'the cluster gone' });
      expect((await api('GET', `/v1/nodes/${cluster.nodeId}`)).json.data?.status, 'its node stays, ready').to.equal('ready');
      expect(await readVolume(), 'the harness still runs: the agent did not touch it').to.not.equal(null);

      const narrowed = await waitFor(
        async () => {
          const exported = (await api('GET', `/v1/volumes/${volumeId}`)).json.data.nfs_export;
          return exported.clients.includes(member.ip_address) ? null : exported;
        },
        { timeoutMs: 30_000, intervalMs: 500, what: 'the export no longer naming the former member' },
      );
      expect(readFileSync(narrowed.file, 'utf8')).to.not.contain(member.ip_address);

      const removed = await api('DELETE', `/v1/volumes/${volumeId}`);
      expect(removed.status, removed.text).to.equal(202);
      const gone = await waitFor(
        async () => {
          const got = await api('GET', `/v1/volumes/${volumeId}`);
          if (got.status === 200 && got.json.data.status === 'failed') throw new Error(`deleting the volume failed: ${got.json.data.error}`);
          return got.status === 404 ? got : null;
        },
        { timeoutMs: 30_000, intervalMs: 500, what: 'the volume gone' },
      );
      expect(gone.status).to.equal(404);
    });
  });
});
