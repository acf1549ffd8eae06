import { statSync } from 'node:fs';
import { KubeConfig } from '@kubernetes/client-node';
import type { InPlaceObjectDriver, OrchestratorDriver } from '../../core/orchestrator.js';
import type { K3sMembership } from './membership-calls.js';
import { createContext, KubeDriverError, type KubeContext } from './client.js';
import { issueUserCredential, revokeUserCredential } from './credentials.js';
import { K3S_PATHS } from './k3s.js';
import { applyLoadBalancer, removeLoadBalancer } from './loadbalancer.js';
import { logsOf } from './logs.js';
import { SERVICES_NAMESPACE } from './names.js';
import { bundleLogs, bundleObjects, deployBundle, removeBundle, type AppliedObject, type ManifestState } from './manifests.js';
import { listNodes, removeNode, setNodeAvailability, type KubeNode } from './nodes.js';
import { createObject, deleteObject, objectUsers, putObject, removeObject, restartWorkload, stageVolume, unstageVolume, volumePhase } from './objects.js';
import { scanUnmanaged } from './scan.js';
import { deployWorkload, inspectWorkloads, removeWorkload, requireDeployment, scaleWorkload } from './workloads.js';

export { KubeDriverError, FIELD_MANAGER, BUNDLE_LABEL, WORKLOAD_LABEL } from './client.js';
export type { AppliedObject, KubeNode, ManifestState };

/**
 * The Kubernetes driver: the orchestrator contract (workloads, bundles = manifests, secrets and
 * configs, volumes, node availability, the unmanaged scan, the load balancer), the objects kept in
 * place (a cluster's own secrets and configs, rolled out to their users), the k3s membership
 * calls that go through the API (the cluster's nodes) and a few reads of its own, on
 * @kubernetes/client-node against one cluster's API server. Every method takes one named input (a
 * task's payload without `backend`), answers plain JSON and throws a KubeDriverError saying what
 * failed and the API server's reason.
 */
export type KubernetesDriver = Omit<OrchestratorDriver, 'deployBundle'> &
  K3sMembership &
  InPlaceObjectDriver & {
    readonly backend: 'k8s';
    /** A bundle on Kubernetes is a manifest (multi-document YAML), applied server-side; the answer lists what it applied. */
    deployBundle(input: Parameters<OrchestratorDriver['deployBundle']>[0]): Promise<ManifestState>;
    /** The objects a bundle's manifest applied, or null for no such bundle. */
    bundleObjects(input: { name: string; namespace?: string; confined?: boolean }): Promise<{ objects: AppliedObject[] | null }>;
  };

export interface KubernetesDriverOptions {
  /** The cluster: a kubeconfig file's path, or a loaded KubeConfig (default: k3s's /etc/rancher/k3s/k3s.yaml). */
  kubeconfig?: string | KubeConfig;
  /** Where hangar's own workloads, secrets, configs and volume claims go (default `default`: names.ts SERVICES_NAMESPACE). */
  namespace?: string;
  /** How long a drain keeps asking for evictions a PodDisruptionBudget refuses (default 60 s). */
  drainTimeoutMs?: number;
}


/**
 * The driver for one cluster. With a kubeconfig file it is read again whenever the file changes
 * (k3s installed anew on the machine has a new CA and credentials).
 */
export function createKubernetesDriver(options: KubernetesDriverOptions = {}): KubernetesDriver {
  const namespace = options.namespace ?? SERVICES_NAMESPACE;
  let loaded: { ctx: KubeContext; mtimeMs: number } | undefined;
  const current = (): KubeContext => {
    if (options.kubeconfig instanceof KubeConfig) {
      loaded ??= { ctx: createContext(options.kubeconfig, namespace), mtimeMs: 0 };
      return loaded.ctx;
    }
    const path = options.kubeconfig ?? K3S_PATHS.kubeconfig;
    let mtimeMs: number;
    try {
      mtimeMs = statSync(path).mtimeMs;
    } catch {
      throw new KubeDriverError(`no kubeconfig at ${path}: k3s is not installed on this machine, or it is not the cluster's server`, 409);
    }
    if (!loaded || loaded.mtimeMs !== mtimeMs) {
      const kubeConfig = new KubeConfig();
      kubeConfig.loadFromFile(path);
      loaded = { ctx: createContext(kubeConfig, namespace), mtimeMs };
    }
    return loaded.ctx;
  };
  /** Runs with the current context; a missing kubeconfig is the call's failure, not the driver's creation's. */
  const run = <R>(work: (ctx: KubeContext) => Promise<R>): Promise<R> => Promise.resolve().then(() => work(current()));
  return {
    backend: 'k8s',
    deployWorkload: ({ spec, cluster_nodes, settings }) => run((ctx) => deployWorkload(ctx, spec, { cluster_nodes, settings })),
    removeWorkload: ({ name }) => run((ctx) => removeWorkload(ctx, name)),
    scaleWorkload: ({ name, replicas }) => run((ctx) => scaleWorkload(ctx, name, replicas)),
    workloadLogs: ({ name, ...logOptions }) => run(async (ctx) => logsOf(ctx, [{ prefix: '', deployment: await requireDeployment(ctx, name, 'reading the logs of') }], logOptions)),
    inspectWorkloads: (filter) => run((ctx) => inspectWorkloads(ctx, filter ?? {})),
    deployBundle: ({ name, spec, prune, health, namespace, confined, project }) => run((ctx) => deployBundle(ctx, name, spec, { prune: !!prune, health, namespace, confined, project })),
    removeBundle: ({ name, namespace, confined }) => run((ctx) => removeBundle(ctx, name, { namespace, confined })),
    bundleLogs: ({ name, ...logOptions }) => run((ctx) => bundleLogs(ctx, name, logOptions)),
    applyLoadBalancer: ({ spec, cluster_nodes, settings }) => run((ctx) => applyLoadBalancer(ctx, spec, { cluster_nodes, settings })),
    removeLoadBalancer: ({ name }) => run((ctx) => removeLoadBalancer(ctx, name)),
    setNodeAvailability: ({ runtime_node_id, availability, drain_timeout_seconds }) =>
      run((ctx) => setNodeAvailability(ctx, runtime_node_id, availability, drain_timeout_seconds ? drain_timeout_seconds * 1000 : options.drainTimeoutMs)),
    createObject: ({ kind, name, data, labels }) => run((ctx) => createObject(ctx, kind, name, data, labels ?? {})),
    removeObject: ({ kind, name }) => run((ctx) => removeObject(ctx, kind, name)),
    putObject: (input) => run((ctx) => putObject(ctx, input)),
    deleteObject: ({ kind, name, namespace }) => run((ctx) => deleteObject(ctx, kind, name, namespace)),
    objectUsers: ({ kind, names, namespace }) => run((ctx) => objectUsers(ctx, kind, names, namespace)),
    restartWorkload: ({ workload, namespace }) => run((ctx) => restartWorkload(ctx, workload, namespace)),
    stageVolume: (input) => run((ctx) => stageVolume(ctx, input)),
    unstageVolume: ({ name }) => run((ctx) => unstageVolume(ctx, name)),
    scanUnmanaged: () => run((ctx) => scanUnmanaged(ctx)),
    nodes: () => run((ctx) => listNodes(ctx)),
    removeNode: ({ runtime_node_id }) => run((ctx) => removeNode(ctx, runtime_node_id)),
    bundleObjects: ({ name, namespace, confined }) => run(async (ctx) => ({ objects: await bundleObjects(ctx, name, { namespace, confined }) })),
    volumePhase: ({ name }) => run(async (ctx) => ({ phase: await volumePhase(ctx, name) })),
    issueUserCredential: (input) => run((ctx) => issueUserCredential(ctx, input)),
    revokeUserCredential: ({ user_id }) => run((ctx) => revokeUserCredential(ctx, { user_id })),
  };
}
