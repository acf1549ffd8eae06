/**
 * A hangar Kubernetes cluster backed by the real upstream control plane of test/support/kube.ts
 * (the API server and controllers, kwok's simulated nodes and pods): a real agent (separate
 * process) joins the test control plane with a join token and runs the Kubernetes driver against
 * the harness's admin kubeconfig (HANGAR_KUBECONFIG), and the cluster is recorded as an active
 * `k8s` cluster whose server is that agent's node.
 *
 * The cluster is ADOPTED, not installed: installing k3s through the agents (the k3s stand-in on
 * lab machines) is what test/e2e/kubernetes.test.ts covers. Suites that use this fixture test what
 * hangar does on an existing cluster — secrets, instances, volumes, services, load balancers —
 * through the HTTP API, on both dialects, in seconds instead of a lab run.
 *
 *   describe('…', function () {
 *     let kube: KubeControlPlane;
 *     before(async function () {
 *       kube = await sharedKubeForSuite(this);           // one harness for both dialects (and the next suites)
 *     });
 *     after(() => {
 *       if (kube) releaseSharedKube();
 *     });
 *     describeEachDialect('…', (dialect) => {
 *       let t: TestHangar;
 *       let admin: Credentials;
 *       let cluster: KubeCluster;
 *       before(async function () {
 *         this.timeout(60_000);
 *         ({ t, admin, cluster } = await startOnAdoptedCluster(dialect, kube, { plugins: ['secrets'] }));
 *       });
 *       after(async function () {
 *         this.timeout(30_000);
 *         await stopOnAdoptedCluster(t);
 *       });
 */
import { randomUUID } from 'node:crypto';
import { cleanupAgents, FAST_NODES, joinedNodeId, spawnAgent, waitFor, type AgentProcess } from './agents.js';
import type { TestDialect } from './dialects.js';
import { startHangar, type TestHangar } from './hangar.js';
import { bearer, bootstrapAdmin, type Credentials } from './identity.js';
import { KUBE_START_TIMEOUT_MS, KubeControlPlane, kubeAvailability, type KubeStartOptions } from './kube.js';
import { requireService } from './requirements.js';
import { SharedService } from './shared-service.js';

/** The plugins a control plane needs to hold a Kubernetes cluster and reach it through an agent. */
export const KUBE_CLUSTER_PLUGINS = ['system', 'iam', 'nodes', 'agent-internal', 'kubernetes'];

/** Node settings for suites on an adopted cluster: fast heartbeats and task leases. */
export const KUBE_TEST_OVERRIDES = { ...FAST_NODES };

export interface KubeCluster {
  agent: AgentProcess;
  /** The hangar node whose agent runs the driver (the cluster's "server"). */
  nodeId: string;
  clusterId: string;
  clusterName: string;
}

/**
 * Joins a fresh agent that reaches `kube` and records an active k8s cluster `name` served by it.
 * `reportedAs` is the Kubernetes node the member is reported as (a kwok node's name, so that the
 * cluster's node list shows it Ready with its roles); by default none matches.
 */
export async function adoptKubeCluster(t: TestHangar, admin: Credentials, kube: KubeControlPlane, name: string, options: { reportedAs?: string } = {}): Promise<KubeCluster> {
  const api = (method: string, path: string, body?: unknown) => t.request(method, path, { body, headers: bearer(admin.token) });
  const token = await api('POST', '/v1/nodes/token', {});
  if (token.status !== 201) throw new Error(`join token: ${token.status} ${token.text}`);
  const agent = spawnAgent({ join: { token: token.json.data.token, api: t.url }, env: { HANGAR_KUBECONFIG: kube.kubeconfigPath } });
  const nodeId = await joinedNodeId(agent);
  await waitFor(async () => (await api('GET', `/v1/nodes/${nodeId}`)).json.data?.status === 'ready', { timeoutMs: 20_000, what: `node ${nodeId} to be ready` });

  const knex = t.hangar.store.knex;
  const now = new Date().toISOString();
  const clusterId = `cluster-${randomUUID()}`;
  await knex('clusters').insert({ id: clusterId, name, backend: 'k8s', status: 'active', manager_node_id: nodeId, runtime_id: null, error: null, created_at: now, updated_at: now });
  await knex('k8s_clusters').insert({ cluster_id: clusterId, kubeconfig_endpoint: 'public', version: null });
  await knex('cluster_members').insert({
    id: `member-${randomUUID()}`,
    cluster_id: clusterId,
    node_id: nodeId,
    role: 'manager',
    status: 'active',
    runtime_node_id: options.reportedAs ?? nodeId,
    advertise_address: '127.0.0.1',
    error: null,
    created_at: now,
    updated_at: now,
  });
  const got = await api('GET', `/v1/kubernetes/clusters/${clusterId}`);
  if (got.status !== 200 || got.json.data.status !== 'active') throw new Error(`the adopted cluster does not read back active: ${got.status} ${got.text}`);
  return { agent, nodeId, clusterId, clusterName: name };
}

/**
 * For a suite's before hook: the harness started (built first when needed; the hook's timeout is
 * raised for that), or the suite skipped loudly when it cannot be built here.
 */
export async function startKubeForSuite(ctx: Mocha.Context, options: KubeStartOptions = { nodes: 2 }): Promise<KubeControlPlane> {
  ctx.timeout(KUBE_START_TIMEOUT_MS);
  const available = await kubeAvailability();
  requireService(ctx, available.ok, available.why);
  return KubeControlPlane.start(options);
}

const shared = new SharedService('the Kubernetes control plane', () => KubeControlPlane.start({ nodes: 2 }), (kube) => kube.stop());

/**
 * startKubeForSuite's control plane (two kwok nodes), shared by the suites of this process that
 * take it one after the other (test/support/shared-service.ts) instead of one each: a suite that
 * takes it uses namespaces and names of its own, leaves the nodes schedulable and removes what it
 * made. Give it back with releaseSharedKube() in the after hook of the suite that got it.
 */
export async function sharedKubeForSuite(ctx: Mocha.Context): Promise<KubeControlPlane> {
  ctx.timeout(KUBE_START_TIMEOUT_MS);
  const available = await kubeAvailability();
  requireService(ctx, available.ok, available.why);
  return shared.acquire();
}

export function releaseSharedKube(): void {
  shared.release();
}

/** A control plane with an adopted cluster, and its bootstrap admin. */
export interface OnAdoptedCluster {
  t: TestHangar;
  admin: Credentials;
  cluster: KubeCluster;
}

/**
 * A control plane on the dialect with KUBE_CLUSTER_PLUGINS and `plugins`, its bootstrap admin, and
 * `kube` adopted as its cluster `kube-<dialect>` (or `name`).
 */
export async function startOnAdoptedCluster(
  dialect: TestDialect,
  kube: KubeControlPlane,
  options: { plugins?: string[]; overrides?: Record<string, unknown>; name?: string; reportedAs?: string } = {},
): Promise<OnAdoptedCluster> {
  const plugins = [...new Set([...KUBE_CLUSTER_PLUGINS, ...(options.plugins ?? [])])];
  const t = await startHangar(dialect, { plugins, overrides: { ...KUBE_TEST_OVERRIDES, ...options.overrides } });
  try {
    const admin = await bootstrapAdmin(t);
    const cluster = await adoptKubeCluster(t, admin, kube, options.name ?? `kube-${dialect.name}`, { reportedAs: options.reportedAs });
    return { t, admin, cluster };
  } catch (err) {
    await stopOnAdoptedCluster(t);
    throw err;
  }
}

/** Stops what startOnAdoptedCluster started: the agents, then the control plane. */
export async function stopOnAdoptedCluster(t: TestHangar | undefined): Promise<void> {
  await cleanupAgents();
  await t?.stop();
}
