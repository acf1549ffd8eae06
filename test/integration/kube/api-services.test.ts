import { expect } from 'chai';
import { AppsV1Api, CoreV1Api, RbacAuthorizationV1Api } from '@kubernetes/client-node';
import { waitFor } from '../../support/agents.js';
import { describeEachDialect } from '../../support/dialects.js';
import type { TestHangar } from '../../support/hangar.js';
import { bearer, createUser, type Credentials } from '../../support/identity.js';
import type { KubeControlPlane } from '../../support/kube.js';
import { releaseSharedKube, sharedKubeForSuite, startOnAdoptedCluster, stopOnAdoptedCluster, type KubeCluster } from '../../support/kube-cluster.js';

// Manifest services through the HTTP API on a Kubernetes cluster that is the real upstream control
// plane (API server, controllers, scheduler; kwok's simulated nodes and pods — no container runs),
// reached by a real agent running the Kubernetes driver (test/support/kube-cluster.ts). The lab
// e2e (test/e2e/kubernetes.test.ts) covers the same on k3s-stand-in machines; this suite covers it
// on both store dialects.

const b64 = (text: string) => Buffer.from(text, 'utf8').toString('base64');

describe('manifest services through the API on a Kubernetes cluster (real control plane, kwok nodes)', function () {
  let kube: KubeControlPlane;

  before(async function () {
    kube = await sharedKubeForSuite(this);
  });
  after(() => {
    if (kube) releaseSharedKube();
  });

  describeEachDialect('apply, prune on PUT, stop and start, delete', (dialect) => {
    let t: TestHangar;
    let admin: Credentials;
    let cluster: KubeCluster;
    // Each dialect in its own namespace of the shared cluster.
    const namespace = `svc-${dialect.name}`;
    const api = (method: string, p: string, body?: unknown) => t.request(method, p, { body, headers: bearer(admin.token) });

    before(async function () {
      this.timeout(60_000);
      ({ t, admin, cluster } = await startOnAdoptedCluster(dialect, kube, { plugins: ['services', 'projects'] }));
      await kube.api(CoreV1Api).createNamespace({ body: { metadata: { name: namespace } } });
      // The adopted cluster (inserted as a cluster made before projects would be) goes in the `default` project.
      const knex = t.hangar.services.db.knex;
      const project = await knex('projects').where({ name: 'default' }).first();
      await knex('clusters').where({ id: cluster.clusterId }).update({ project_id: project.id });
    });
    after(async function () {
      this.timeout(30_000);
      await stopOnAdoptedCluster(t);
    });

    it('applies a Deployment + ConfigMap manifest (pods Running on kwok nodes), prunes the ConfigMap on PUT, stop deletes the objects and start applies them again, deletes the objects with the service', async function () {
      this.timeout(120_000);
      const deployment = `apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: shop, namespace: ${namespace}}\nspec:\n  replicas: 2\n  selector: {matchLabels: {app: shop}}\n  template:\n    metadata: {labels: {app: shop}}\n    spec: {containers: [{name: shop, image: registry.invalid/shop:1}]}\n`;
      const config = `apiVersion: v1\nkind: ConfigMap\nmetadata: {name: shop-settings, namespace: ${namespace}}\ndata: {mode: fast}\n`;
      const created = await api('POST', '/v1/services', { name: 'shop', cluster_id: cluster.clusterName, manifest: b64(`${deployment}---\n${config}`) });
      expect(created.status, created.text).to.equal(202);
      const id = created.json.data.id as string;

      const running = await waitFor(
        async () => {
          const sv = (await api('GET', `/v1/services/${id}`)).json.data;
          if (sv.status === 'failed') throw new Error(`the service failed: ${sv.error}\n${cluster.agent.output()}`);
          return sv.status === 'running' && sv.replicas.shop?.running === 2 ? sv : null;
        },
        { timeoutMs: 90_000, intervalMs: 500, what: 'the service running with 2 replicas' },
      );
      expect(running).to.deep.include({ backend: 'manifest', cluster_id: cluster.clusterId });
      expect(running.applied_objects).to.deep.equal([
        { api_version: 'apps/v1', kind: 'Deployment', name: 'shop', namespace },
        { api_version: 'v1', kind: 'ConfigMap', name: 'shop-settings', namespace },
      ]);
      const pods = await kube.api(CoreV1Api).listNamespacedPod({ namespace, labelSelector: 'app=shop' });
      expect(pods.items.filter((p) => p.status?.phase === 'Running')).to.have.length(2);

      const put = await api('PUT', `/v1/services/${id}`, { manifest: b64(deployment) });
      expect(put.status, put.text).to.equal(202);
      await waitFor(
        async () => {
          const sv = (await api('GET', `/v1/services/${id}`)).json.data;
          if (sv.applied_objects.length !== 1) return false;
          return kube
            .api(CoreV1Api)
            .readNamespacedConfigMap({ name: 'shop-settings', namespace })
            .then(() => false, () => true);
        },
        { timeoutMs: 60_000, intervalMs: 500, what: 'the ConfigMap pruned' },
      );

      // Stop deletes the applied objects and keeps the manifest; start applies it again.
      const liveDeployments = async () =>
        (await kube.api(AppsV1Api).listNamespacedDeployment({ namespace })).items.filter((d) => !d.metadata?.deletionTimestamp).map((d) => d.metadata?.name);
      const stopped = await api('POST', `/v1/services/${id}/stop`);
      expect(stopped.status, stopped.text).to.equal(200);
      expect(stopped.json.data.status).to.equal('stopped');
      await waitFor(async () => (await liveDeployments()).length === 0, { timeoutMs: 60_000, intervalMs: 500, what: 'the Deployment deleted by the stop' });
      expect((await api('GET', `/v1/services/${id}`)).json.data).to.deep.include({ status: 'stopped', manifest: deployment });
      const twice = await api('POST', `/v1/services/${id}/stop`);
      expect([twice.status, twice.json.data?.status], 'stopped already: nothing to do').to.deep.equal([200, 'stopped']);

      const started = await api('POST', `/v1/services/${id}/start`);
      expect(started.status, started.text).to.equal(202);
      await waitFor(
        async () => {
          const sv = (await api('GET', `/v1/services/${id}`)).json.data;
          if (sv.status === 'failed') throw new Error(`the start failed: ${sv.error}\n${cluster.agent.output()}`);
          return sv.status === 'running' && sv.replicas.shop?.running === 2 ? sv : null;
        },
        { timeoutMs: 90_000, intervalMs: 500, what: 'the service running again with 2 replicas' },
      );
      expect(await liveDeployments()).to.deep.equal(['shop']);
      expect((await api('POST', `/v1/services/${id}/start`)).status, 'running already').to.equal(409);

      const removed = await api('DELETE', `/v1/services/${id}`);
      expect(removed.status, removed.text).to.equal(202);
      await waitFor(async () => (await api('GET', `/v1/services/${id}`)).status === 404, { timeoutMs: 60_000, intervalMs: 500, what: 'the service gone' });
      const left = await kube.api(AppsV1Api).listNamespacedDeployment({ namespace });
      const stillThere = left.items.filter((d) => !d.metadata?.deletionTimestamp).map((d) => d.metadata?.name);
      expect(stillThere, 'its Deployment deleted').to.deep.equal([]);
    });

    it('a deployer’s manifest goes in its project’s namespace, made on first use (hangar’s, Pod Security restricted), applied, read and deleted as the project’s user (no token: a pod naming a ServiceAccount is refused)', async function () {
      this.timeout(120_000);
      const home = 'hangar-project-default';
      const dana = await createUser(t, admin, { username: 'dana', role: 'user' });
      expect((await api('PUT', '/v1/projects/default/members/dana', { role: 'deployer' })).status).to.equal(201);
      const as = (method: string, p: string, body?: unknown) => t.request(method, p, { body, headers: bearer(dana.token) });
      const name = `web-${dialect.name}`;
      // Pods of a project namespace meet Pod Security `restricted`; the manifest names no namespace.
      const web = `apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: ${name}}\nspec:\n  replicas: 1\n  selector: {matchLabels: {app: ${name}}}\n  template:\n    metadata: {labels: {app: ${name}}}\n    spec:\n      securityContext: {runAsNonRoot: true, runAsUser: 1000, seccompProfile: {type: RuntimeDefault}}\n      containers: [{name: web, image: registry.invalid/web:1, securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}}]\n`;
      const created = await as('POST', '/v1/services', { name, cluster_id: cluster.clusterName, manifest: b64(web) });
      expect(created.status, created.text).to.equal(202);
      expect(created.json.data).to.deep.include({ namespace: home, confined: true });
      const id = created.json.data.id as string;
      const running = await waitFor(
        async () => {
          const sv = (await as('GET', `/v1/services/${id}`)).json.data;
          if (sv.status === 'failed') throw new Error(`the service failed: ${sv.error}\n${cluster.agent.output()}`);
          return sv.status === 'running' && sv.replicas[name]?.running === 1 ? sv : null;
        },
        { timeoutMs: 90_000, intervalMs: 500, what: 'the deployer’s service running' },
      );
      expect(running.applied_objects).to.deep.equal([{ api_version: 'apps/v1', kind: 'Deployment', name, namespace: home }]);
      const ns = await kube.api(CoreV1Api).readNamespace({ name: home });
      const project = (await api('GET', '/v1/projects/default')).json.data.id;
      expect(ns.metadata?.labels).to.include({ 'app.kubernetes.io/managed-by': 'hangar', 'io.hangar.project': project, 'pod-security.kubernetes.io/enforce': 'restricted' });
      const pods = await kube.api(CoreV1Api).listNamespacedPod({ namespace: home, labelSelector: `app=${name}` });
      expect(pods.items.filter((p) => p.status?.phase === 'Running')).to.have.length(1);
      // Applied as a user bound in the namespace, not a ServiceAccount whose token a pod could mount.
      const binding = await kube.api(RbacAuthorizationV1Api).readNamespacedRoleBinding({ name: 'hangar-project', namespace: home });
      expect(binding.subjects).to.deep.equal([{ apiGroup: 'rbac.authorization.k8s.io', kind: 'User', name: `hangar:project:${home}` }]);
      expect((await kube.api(CoreV1Api).listNamespacedServiceAccount({ namespace: home })).items.map((a) => a.metadata?.name)).to.not.include('hangar-project');
      const mounting = await as('PUT', `/v1/services/${id}`, { manifest: b64(web.replace('    spec:\n', '    spec:\n      serviceAccountName: hangar-project\n      automountServiceAccountToken: true\n')) });
      expect(mounting.status, mounting.text).to.equal(400);
      expect(mounting.json.message).to.contain(`Deployment ${home}/${name} spec.template.spec.serviceAccountName: running as the ServiceAccount hangar-project is for installation admins`);

      // Its logs, read as the project's user in its namespace.
      kube.appendPodLog([{ text: `${name} says hi` }]);
      const queued = await as('POST', `/v1/services/${id}/logs?lines=1`);
      expect(queued.status, queued.text).to.equal(202);
      const read = await waitFor(
        async () => {
          const r = await as('GET', `/v1/services/${id}/logs/${queued.json.data.task_id}`);
          if (r.json.data?.status === 'failed') throw new Error(`the log read failed: ${r.json.data.error}`);
          return r.json.data?.status === 'completed' ? r.json.data : null;
        },
        { timeoutMs: 30_000, intervalMs: 300, what: 'the log read' },
      );
      expect(read.lines).to.have.length(1);
      expect(read.lines[0]).to.match(new RegExp(`^${name} \\| \\S+Z ${name} says hi$`));

      const removed = await as('DELETE', `/v1/services/${id}`);
      expect(removed.status, removed.text).to.equal(202);
      await waitFor(async () => (await as('GET', `/v1/services/${id}`)).status === 404, { timeoutMs: 60_000, intervalMs: 500, what: 'the service gone' });
      const left = (await kube.api(AppsV1Api).listNamespacedDeployment({ namespace: home })).items.filter((d) => !d.metadata?.deletionTimestamp);
      expect(left.map((d) => d.metadata?.name), 'its Deployment deleted').to.deep.equal([]);
    });
  });
});
