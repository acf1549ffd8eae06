import { expect } from 'chai';
import { AppsV1Api, CoreV1Api, NetworkingV1Api } from '@kubernetes/client-node';
import { waitFor } from '../../support/agents.js';
import { describeEachDialect } from '../../support/dialects.js';
import type { TestHangar } from '../../support/hangar.js';
import { bearer, type Credentials } from '../../support/identity.js';
import type { KubeControlPlane } from '../../support/kube.js';
import { releaseSharedKube, sharedKubeForSuite, startOnAdoptedCluster, stopOnAdoptedCluster, type KubeCluster } from '../../support/kube-cluster.js';

// The cluster's load balancer through the HTTP API on a Kubernetes cluster that is the real
// upstream control plane (API server, controllers, scheduler; kwok's simulated nodes and pods — no
// container runs, so the ingress controller's pod is Running without Traefik serving anything),
// reached by a real agent running the Kubernetes driver (test/support/kube-cluster.ts).

describe('the load balancer of a Kubernetes cluster through the API (real control plane, kwok nodes)', function () {
  let kube: KubeControlPlane;

  before(async function () {
    kube = await sharedKubeForSuite(this);
  });
  after(() => {
    if (kube) releaseSharedKube();
  });

  describeEachDialect('POST/DELETE /v1/kubernetes/clusters/{id}/lb, GET /v1/gateway and /v1/loadbalancers', (dialect) => {
    let t: TestHangar;
    let admin: Credentials;
    let cluster: KubeCluster;
    const api = (method: string, p: string, body?: unknown) => t.request(method, p, { body, headers: bearer(admin.token) });

    before(async function () {
      this.timeout(60_000);
      ({ t, admin, cluster } = await startOnAdoptedCluster(dialect, kube, { plugins: ['gateway', 'volumes', 'compute'], overrides: { clusters: { observe_interval_seconds: 1 } } }));
    });
    after(async function () {
      this.timeout(30_000);
      await stopOnAdoptedCluster(t);
    });

    it('deploys the ingress controller on the cluster (its pod Running on a kwok node), lists it with cluster_id, and removes it', async function () {
      this.timeout(120_000);
      const created = await api('POST', `/v1/kubernetes/clusters/${cluster.clusterName}/lb`);
      expect(created.status, created.text).to.equal(202);
      const lb = created.json.data;
      expect(lb).to.include({ name: `lb-${cluster.clusterName}`, cluster_id: cluster.clusterId, image: 'rancher/mirrored-library-traefik:3.3.6', http_port: 80 });
      expect(lb).not.to.have.property('swarm_id');

      // Running is what the cluster's observation reports: the controller's pod Running on a node.
      const running = await waitFor(
        async () => {
          const got = (await api('GET', `/v1/loadbalancers/${lb.id}`)).json.data;
          if (got.status === 'failed') throw new Error(`the load balancer failed: ${got.error}\n${cluster.agent.output()}`);
          return got.status === 'running' ? got : null;
        },
        { timeoutMs: 90_000, intervalMs: 500, what: 'the load balancer running' },
      );
      expect(running).to.deep.include({ cluster_id: cluster.clusterId, routes: [] });
      const deployment = await kube.api(AppsV1Api).readNamespacedDeployment({ name: `hangar-lb-${cluster.clusterName}`, namespace: 'hangar-system' });
      expect(deployment.status?.readyReplicas).to.equal(1);
      expect((await kube.api(CoreV1Api).readNamespacedService({ name: `hangar-lb-${cluster.clusterName}`, namespace: 'hangar-system' })).spec!.ports![0]).to.include({ port: 80, targetPort: 8000 });
      expect((await kube.api(NetworkingV1Api).readIngressClass({ name: 'hangar' })).metadata!.name).to.equal('hangar');

      const gateway = await api('GET', '/v1/gateway');
      expect(gateway.status).to.equal(200);
      expect(gateway.json.data.load_balancers.map((x: { id: string; cluster_id?: string; status: string }) => [x.id, x.cluster_id, x.status])).to.deep.equal([[lb.id, cluster.clusterId, 'running']]);
      expect(gateway.json.data.routes).to.deep.equal([]);
      const list = await api('GET', '/v1/loadbalancers');
      expect(list.json.data.map((x: { id: string; cluster_id?: string }) => [x.id, x.cluster_id])).to.deep.equal([[lb.id, cluster.clusterId]]);
      const view = await api('GET', `/v1/kubernetes/clusters/${cluster.clusterId}`);
      expect(view.json.data.load_balancer).to.include({ id: lb.id, status: 'running' });

      // A Kubernetes cluster is not a swarm: the swarm path does not find it.
      expect((await api('POST', `/v1/swarms/${cluster.clusterId}/lb`)).status).to.equal(404);
      // Again: 202, the same balancer re-applied.
      const again = await api('POST', `/v1/kubernetes/clusters/${cluster.clusterId}/lb`);
      expect(again.status, again.text).to.equal(202);
      expect(again.json.data.id).to.equal(lb.id);
      await waitFor(async () => (await api('GET', `/v1/loadbalancers/${lb.id}`)).json.data.status === 'running', { timeoutMs: 60_000, intervalMs: 500, what: 'the re-apply done' });

      const removed = await api('DELETE', `/v1/kubernetes/clusters/${cluster.clusterId}/lb`);
      expect(removed.status, removed.text).to.equal(202);
      await waitFor(async () => (await api('GET', `/v1/loadbalancers/${lb.id}`)).status === 404, { timeoutMs: 90_000, intervalMs: 500, what: 'the load balancer gone' });
      const left = await kube.api(AppsV1Api).listNamespacedDeployment({ namespace: 'hangar-system' });
      expect(left.items.filter((d) => !d.metadata?.deletionTimestamp).map((d) => d.metadata?.name)).to.deep.equal([]);
      expect((await api('GET', '/v1/gateway')).json.data.load_balancers).to.deep.equal([]);
      const none = await api('DELETE', `/v1/kubernetes/clusters/${cluster.clusterId}/lb`);
      expect(none.status).to.equal(404);
      expect(none.json.message).to.match(/has no load balancer/);
    });

    it('routes an instance with a domain on the cluster: its host rule in the Ingress of class hangar, listed by /v1/gateway, gone with the instance', async function () {
      this.timeout(180_000);
      const networking = kube.api(NetworkingV1Api);
      /** The cluster's routing table as the cluster has it: host → service:port of the Ingresses of class hangar. */
      const rules = async () =>
        (await networking.listNamespacedIngress({ namespace: 'default' })).items
          .filter((i) => i.spec?.ingressClassName === 'hangar' && !i.metadata?.deletionTimestamp)
          .flatMap((i) => (i.spec?.rules ?? []).map((r) => `${r.host} → ${r.http?.paths[0]?.backend.service?.name}:${r.http?.paths[0]?.backend.service?.port?.number}`));
      const domain = `shop-${dialect.name}.example.test`;

      const lb = (await api('POST', `/v1/kubernetes/clusters/${cluster.clusterId}/lb`)).json.data;
      await waitFor(async () => (await api('GET', `/v1/loadbalancers/${lb.id}`)).json.data.status === 'running', { timeoutMs: 90_000, intervalMs: 500, what: 'the load balancer running' });
      const created = await api('POST', '/v1/compute/instances', { name: `shop-${dialect.name}`, cluster_id: cluster.clusterId, image: 'registry.invalid/shop:1', domain, http_port: 8080 });
      expect(created.status, created.text).to.equal(202);
      const instance = created.json.data;

      const routed = await waitFor(async () => ((await rules()).find((r) => r.startsWith(`${domain} `)) ?? null), { timeoutMs: 90_000, intervalMs: 500, what: `the cluster's Ingress to route ${domain}` });
      expect(routed).to.equal(`${domain} → ${instance.runtime_name ?? instance.name}:8080`);
      const gateway = (await api('GET', '/v1/gateway')).json.data;
      expect(gateway.routes.map((r: { domain: string; source: string; source_id: string }) => [r.domain, r.source, r.source_id])).to.deep.include([domain, 'instance', instance.id]);

      // Deleted at once: the balancer's apply that wrote the route may still be under way (the removal joins it).
      expect((await api('DELETE', `/v1/compute/instances/${instance.id}`)).status).to.equal(202);
      await waitFor(async () => !(await rules()).some((r) => r.startsWith(`${domain} `)), { timeoutMs: 90_000, intervalMs: 500, what: `the route of ${domain} gone from the cluster` });
      expect((await api('DELETE', `/v1/kubernetes/clusters/${cluster.clusterId}/lb`)).status).to.equal(202);
      await waitFor(async () => (await api('GET', `/v1/loadbalancers/${lb.id}`)).status === 404, { timeoutMs: 90_000, intervalMs: 500, what: 'the load balancer gone' });
    });
  });
});
