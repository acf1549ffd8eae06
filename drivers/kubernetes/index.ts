import { KubeConfig } from '@kubernetes/client-node';
import type { BundleState, ClusterContext, LoadBalancerSpec, LogOptions, NodeAvailability, UnmanagedResource, WorkloadSpec, WorkloadState } from './contract.js';
import { createContext, type KubeContext } from './client.js';
import { applyLoadBalancer, removeLoadBalancer } from './loadbalancer.js';
import { logsOf } from './logs.js';
import { bundleLogs, bundleObjects, deployBundle, removeBundle, type AppliedObject, type ManifestState } from './manifests.js';
import { listNodes, removeNode, setNodeAvailability, type KubeNode } from './nodes.js';
import { createObject, removeObject, stageVolume, unstageVolume, volumePhase } from './objects.js';
import { scanUnmanaged } from './scan.js';
import { deployWorkload, inspectWorkloads, removeWorkload, requireDeployment, scaleWorkload } from './workloads.js';

export { KubeDriverError, FIELD_MANAGER, BUNDLE_LABEL, WORKLOAD_LABEL } from './client.js';
export type { AppliedObject, KubeNode, ManifestState };

type ObjectKind = 'secret' | 'config';

/**
 * The Kubernetes driver: the orchestrator contract (workloads, bundles = manifests, secrets and
 * configs, volumes, node availability, the unmanaged scan, the load balancer) and the cluster's
 * own view of its nodes, on @kubernetes/client-node against one cluster's API server. Every
 * method takes one named input (a task's payload without `backend`), answers plain JSON and throws
 * a KubeDriverError saying what failed and the API server's reason.
 */
export interface KubernetesDriver {
  readonly backend: 'k8s';
  deployWorkload(input: { spec: WorkloadSpec } & ClusterContext): Promise<WorkloadState>;
  removeWorkload(input: { name: string }): Promise<{ removed: boolean }>;
  scaleWorkload(input: { name: string; replicas: number }): Promise<WorkloadState>;
  workloadLogs(input: { name: string } & LogOptions): Promise<{ lines: string[] }>;
  inspectWorkloads(input: { names?: string[]; stacks?: string[] }): Promise<{ workloads: WorkloadState[] }>;
  /** A bundle on Kubernetes is a manifest (multi-document YAML), applied server-side; the answer lists what it applied. */
  deployBundle(input: { name: string; spec: string; prune: boolean; objects?: unknown[]; routed?: string[] } & ClusterContext): Promise<BundleState & { applied_objects: AppliedObject[] }>;
  removeBundle(input: { name: string }): Promise<{ removed: boolean }>;
  bundleLogs(input: { name: string } & LogOptions): Promise<{ lines: string[] }>;
  applyLoadBalancer(input: { spec: LoadBalancerSpec } & ClusterContext): Promise<WorkloadState>;
  removeLoadBalancer(input: { name: string }): Promise<{ removed: boolean }>;
  setNodeAvailability(input: { runtime_node_id: string; availability: NodeAvailability }): Promise<{ availability: NodeAvailability }>;
  createObject(input: { kind: ObjectKind; name: string; data: string; labels: Record<string, string> }): Promise<{ id: string }>;
  removeObject(input: { kind: ObjectKind; name: string }): Promise<{ removed: boolean }>;
  stageVolume(input: { name: string; nfs: { server: string; path: string }; local_path: string | null; labels: Record<string, string> }): Promise<{ name: string }>;
  unstageVolume(input: { name: string }): Promise<{ removed: boolean }>;
  scanUnmanaged(input?: Record<string, never>): Promise<{ resources: UnmanagedResource[] }>;
  // ---- Kubernetes only ----
  /** The cluster's nodes as it reports them (Ready, roles, kubelet version, availability). */
  nodes(): Promise<{ nodes: KubeNode[] }>;
  removeNode(input: { runtime_node_id: string }): Promise<{ removed: boolean }>;
  /** The objects a bundle's manifest applied, or null for no such bundle. */
  bundleObjects(input: { name: string }): Promise<{ objects: AppliedObject[] | null }>;
  /** A staged volume's claim phase (Bound, Pending…), or null when it is not staged. */
  volumePhase(input: { name: string }): Promise<{ phase: string | null }>;
}

export interface KubernetesDriverOptions {
  /** The cluster: a kubeconfig file's path, or a loaded KubeConfig (default: k3s's /etc/rancher/k3s/k3s.yaml). */
  kubeconfig?: string | KubeConfig;
  /** Where hangar's own workloads, secrets, configs and volume claims go (default `default`). */
  namespace?: string;
  /** How long a drain keeps asking for evictions a PodDisruptionBudget refuses (default 60 s). */
  drainTimeoutMs?: number;
}

/** Where k3s writes the admin kubeconfig on its server node (the stand-in too). */
export const K3S_KUBECONFIG = '/etc/rancher/k3s/k3s.yaml';

export function createKubernetesDriver(options: KubernetesDriverOptions = {}): KubernetesDriver {
  let kubeConfig: KubeConfig;
  if (options.kubeconfig instanceof KubeConfig) kubeConfig = options.kubeconfig;
  else {
    kubeConfig = new KubeConfig();
    kubeConfig.loadFromFile(options.kubeconfig ?? K3S_KUBECONFIG);
  }
  const ctx: KubeContext = createContext(kubeConfig, options.namespace ?? 'default');
  return {
    backend: 'k8s',
    deployWorkload: ({ spec, cluster_nodes, settings }) => deployWorkload(ctx, spec, { cluster_nodes, settings }),
    removeWorkload: ({ name }) => removeWorkload(ctx, name),
    scaleWorkload: ({ name, replicas }) => scaleWorkload(ctx, name, replicas),
    workloadLogs: async ({ name, ...logOptions }) => logsOf(ctx, [{ prefix: '', deployment: await requireDeployment(ctx, name, 'reading the logs of') }], logOptions),
    inspectWorkloads: (filter) => inspectWorkloads(ctx, filter ?? {}),
    deployBundle: ({ name, spec, prune }) => deployBundle(ctx, name, spec, { prune: !!prune }),
    removeBundle: ({ name }) => removeBundle(ctx, name),
    bundleLogs: ({ name, ...logOptions }) => bundleLogs(ctx, name, logOptions),
    applyLoadBalancer: ({ spec, cluster_nodes, settings }) => applyLoadBalancer(ctx, spec, { cluster_nodes, settings }),
    removeLoadBalancer: ({ name }) => removeLoadBalancer(ctx, name),
    setNodeAvailability: ({ runtime_node_id, availability }) => setNodeAvailability(ctx, runtime_node_id, availability, options.drainTimeoutMs),
    createObject: ({ kind, name, data, labels }) => createObject(ctx, kind, name, data, labels ?? {}),
    removeObject: ({ kind, name }) => removeObject(ctx, kind, name),
    stageVolume: (input) => stageVolume(ctx, input),
    unstageVolume: ({ name }) => unstageVolume(ctx, name),
    scanUnmanaged: () => scanUnmanaged(ctx),
    nodes: () => listNodes(ctx),
    removeNode: ({ runtime_node_id }) => removeNode(ctx, runtime_node_id),
    bundleObjects: async ({ name }) => ({ objects: await bundleObjects(ctx, name) }),
    volumePhase: async ({ name }) => ({ phase: await volumePhase(ctx, name) }),
  };
}
