import { posix } from 'node:path';
import type { V1Container, V1Deployment, V1Probe, V1Ingress, V1NodeSelectorRequirement, V1PodSpec, V1Service, V1Volume, V1VolumeMount } from '@kubernetes/client-node';
import { HANGAR_LABELS, healthTimings, type HealthSpec } from '../../core/orchestrator.js';
import type { ClusterContext, WorkloadSpec, WorkloadState } from './contract.js';
import {
  apply,
  attempt,
  BUNDLE_LABEL,
  checkName,
  failure,
  FIELD_MANAGER,
  isNotFound,
  KubeDriverError,
  mergePatch,
  readOrNull,
  waitUntil,
  WORKLOAD_LABEL,
  type KubeContext,
} from './client.js';
import { objectKey } from './objects.js';
import { REVISION_ANNOTATION, ROLLOUT_ANNOTATION, rolloutStrategyOf, settleRollout } from './rollouts.js';
import { locate, podsOf, toState } from './state.js';

/** How long removing a workload waits for its Deployment and pods to be gone. */
const REMOVE_WAIT_MS = 60_000;

/** The node a runtime id names, for messages and checks: hangar node id → Kubernetes node name. */
function runtimeNode(spec: WorkloadSpec, nodeId: string, clusterNodes: Record<string, string>): string {
  const runtime = clusterNodes[nodeId];
  if (!runtime) throw new KubeDriverError(`deploying ${spec.name}: node ${nodeId} is not a member of this cluster`, 400);
  return runtime;
}

/** The Kubernetes nodes the workload may run on (placement, and the node holding a host folder it mounts), or null for any. */
function allowedNodes(spec: WorkloadSpec, clusterNodes: Record<string, string>): string[] | null {
  let allowed: string[] | null = spec.placement?.node_ids.length ? spec.placement.node_ids.map((id) => runtimeNode(spec, id, clusterNodes)) : null;
  for (const mount of spec.volumes ?? []) {
    if (!('host_path' in mount.source)) continue;
    const holder = runtimeNode(spec, mount.source.host_path.node_id, clusterNodes);
    if (allowed && !allowed.includes(holder)) {
      throw new KubeDriverError(`deploying ${spec.name}: its folder ${mount.source.host_path.path} is on node ${mount.source.host_path.node_id}, which its placement leaves out`, 400);
    }
    allowed = [holder];
  }
  return allowed;
}

function quantityCpu(cpus: number): string {
  return `${Math.round(cpus * 1000)}m`;
}

/** Where a secret or config is mounted: a secret's relative target under /run/secrets (as swarm does), a config's at / . */
function mountPath(kind: 'secret' | 'config', target: string): string {
  if (target.startsWith('/')) return target;
  return kind === 'secret' ? posix.join('/run/secrets', target) : posix.join('/', target);
}

/** A declared health check as the container's readinessProbe: a pod that fails it takes no traffic and holds a rollout. */
export function readinessProbeOf(health: HealthSpec): V1Probe {
  const t = healthTimings(health);
  const probe: V1Probe = { periodSeconds: t.interval_s, timeoutSeconds: t.timeout_s, failureThreshold: t.retries, initialDelaySeconds: t.start_period_s };
  if (health.command) probe.exec = { command: [...health.command] };
  else if (health.http) probe.httpGet = { path: health.http.path, port: health.http.port };
  else probe.tcpSocket = { port: health.tcp!.port };
  return probe;
}

/**
 * How long a pod reached through its Service goes on serving once it is told to stop (a preStop
 * `sleep`, before the container's SIGTERM): the endpoint controllers and every node's kube-proxy
 * take it out of the Service meanwhile, so no request reaches a container that has gone. A rolling
 * update without it loses the requests of that moment (502s through the ingress).
 */
export const DRAIN_SECONDS = 3;

/** Whether the workload is reached through a Service (published ports, or routed by the ingress). */
const servedThroughService = (spec: WorkloadSpec) => (spec.exposure?.ports?.length ?? 0) > 0 || !!spec.exposure?.routed || !!spec.exposure?.domain;

/** The pod spec of a workload: one container, its mounts, where it may run. */
function podSpec(spec: WorkloadSpec, clusterNodes: Record<string, string>): V1PodSpec {
  const volumes: V1Volume[] = [];
  const mounts: V1VolumeMount[] = [];
  (spec.volumes ?? []).forEach((mount, i) => {
    const name = `volume-${i}`;
    if ('nfs' in mount.source) volumes.push({ name, persistentVolumeClaim: { claimName: checkName('volume', mount.source.nfs.name), readOnly: !!mount.read_only } });
    else volumes.push({ name, hostPath: { path: mount.source.host_path.path, type: 'DirectoryOrCreate' } });
    mounts.push({ name, mountPath: mount.target, readOnly: !!mount.read_only });
  });
  for (const [kind, refs] of [['secret', spec.secrets ?? []], ['config', spec.configs ?? []]] as const) {
    refs.forEach((ref, i) => {
      const name = `${kind}-${i}`;
      volumes.push(kind === 'secret' ? { name, secret: { secretName: ref.name } } : { name, configMap: { name: ref.name } });
      mounts.push({ name, mountPath: mountPath(kind, ref.target), subPath: objectKey, readOnly: true });
    });
  }
  const limits: Record<string, string> = {};
  if (spec.resources?.cpus) limits.cpu = quantityCpu(spec.resources.cpus);
  if (spec.resources?.memory_mb) limits.memory = `${spec.resources.memory_mb}Mi`;
  if (spec.resources?.gpus) limits['nvidia.com/gpu'] = String(spec.resources.gpus);
  const container: V1Container = {
    name: 'main',
    image: spec.image,
    ...(spec.command?.length ? { command: spec.command } : {}),
    ...(spec.args?.length ? { args: spec.args } : {}),
    env: Object.entries(spec.env ?? {}).map(([name, value]) => ({ name, value })),
    ports: (spec.exposure?.ports ?? []).map((p) => ({ containerPort: p.target, protocol: p.protocol === 'udp' ? 'UDP' : 'TCP' })),
    resources: Object.keys(limits).length ? { limits } : {},
    volumeMounts: mounts,
    ...(spec.health ? { readinessProbe: readinessProbeOf(spec.health) } : {}),
    ...(servedThroughService(spec) ? { lifecycle: { preStop: { sleep: { seconds: DRAIN_SECONDS } } } } : {}),
  };
  const nodes = allowedNodes(spec, clusterNodes);
  const requirements: V1NodeSelectorRequirement[] = nodes ? [{ key: 'metadata.name', operator: 'In', values: nodes }] : [];
  const nodeSelector: Record<string, string> = {};
  if (spec.platform?.os) nodeSelector['kubernetes.io/os'] = spec.platform.os;
  if (spec.platform?.architecture) nodeSelector['kubernetes.io/arch'] = spec.platform.architecture;
  return {
    containers: [container],
    volumes,
    ...(Object.keys(nodeSelector).length ? { nodeSelector } : {}),
    ...(requirements.length ? { affinity: { nodeAffinity: { requiredDuringSchedulingIgnoredDuringExecution: { nodeSelectorTerms: [{ matchFields: requirements }] } } } } : {}),
  };
}

function workloadLabels(spec: WorkloadSpec): Record<string, string> {
  return { ...(spec.labels ?? {}), [HANGAR_LABELS.role]: spec.role, [HANGAR_LABELS.id]: spec.resource_id };
}

export function deploymentOf(ctx: KubeContext, spec: WorkloadSpec, clusterNodes: Record<string, string>): V1Deployment {
  const selector = { [WORKLOAD_LABEL]: spec.name };
  const templateAnnotations = spec.revision ? { [REVISION_ANNOTATION]: String(spec.revision) } : undefined;
  return {
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: {
      name: spec.name,
      namespace: ctx.namespace,
      labels: workloadLabels(spec),
      ...(spec.rollout ? { annotations: { [ROLLOUT_ANNOTATION]: spec.rollout.on_failure ?? 'rollback' } } : {}),
    },
    spec: {
      replicas: spec.replicas,
      selector: { matchLabels: selector },
      ...(spec.rollout ? rolloutStrategyOf(spec.rollout, spec.health) : {}),
      template: {
        metadata: { labels: { ...selector, [HANGAR_LABELS.role]: spec.role, [HANGAR_LABELS.id]: spec.resource_id }, ...(templateAnnotations ? { annotations: templateAnnotations } : {}) },
        spec: podSpec(spec, clusterNodes),
      },
    },
  };
}

/**
 * The Service in front of the workload, when it is reached at all: published ports make it a
 * LoadBalancer (k3s's service load balancer publishes them on the nodes), otherwise a ClusterIP
 * for the routes of the cluster's ingress.
 */
function serviceOf(ctx: KubeContext, spec: WorkloadSpec): V1Service | null {
  const ports = spec.exposure?.ports ?? [];
  if (!servedThroughService(spec)) return null;
  const published = ports.some((p) => p.published > 0);
  const servicePorts = ports.length ? ports : [{ published: 0, target: 80, protocol: 'tcp' as const }];
  return {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: { name: spec.name, namespace: ctx.namespace, labels: workloadLabels(spec) },
    spec: {
      type: published ? 'LoadBalancer' : 'ClusterIP',
      selector: { [WORKLOAD_LABEL]: spec.name },
      ports: servicePorts.map((p) => ({
        name: `${p.protocol ?? 'tcp'}-${p.target}`,
        port: p.published || p.target,
        targetPort: p.target,
        protocol: p.protocol === 'udp' ? 'UDP' : 'TCP',
      })),
    },
  };
}

/** The Ingress routing the workload's domain to its Service (the cluster's ingress controller serves it). */
function ingressOf(ctx: KubeContext, spec: WorkloadSpec, service: V1Service | null): V1Ingress | null {
  const domain = spec.exposure?.domain;
  if (!domain || !service) return null;
  const port = service.spec!.ports![0]!.port;
  return {
    apiVersion: 'networking.k8s.io/v1',
    kind: 'Ingress',
    metadata: { name: spec.name, namespace: ctx.namespace, labels: workloadLabels(spec) },
    spec: {
      rules: [{ host: domain, http: { paths: [{ path: '/', pathType: 'Prefix', backend: { service: { name: spec.name, port: { number: port } } } }] } }],
    },
  };
}

/** Secrets, configs and claims the spec names must exist: a missing one is named (the pods would only wait for it). */
async function checkReferences(ctx: KubeContext, spec: WorkloadSpec): Promise<void> {
  const namespace = ctx.namespace;
  const checks: Array<[string, string, () => Promise<unknown>]> = [
    ...(spec.secrets ?? []).map((r) => ['secret', r.name, () => ctx.core.readNamespacedSecret({ name: r.name, namespace })] as [string, string, () => Promise<unknown>]),
    ...(spec.configs ?? []).map((r) => ['config', r.name, () => ctx.core.readNamespacedConfigMap({ name: r.name, namespace })] as [string, string, () => Promise<unknown>]),
    ...(spec.volumes ?? []).flatMap((v) =>
      'nfs' in v.source ? [['volume', v.source.nfs.name, () => ctx.core.readNamespacedPersistentVolumeClaim({ name: (v.source as { nfs: { name: string } }).nfs.name, namespace })] as [string, string, () => Promise<unknown>]] : [],
    ),
  ];
  for (const [kind, name, read] of checks) {
    if (!(await readOrNull(`reading ${kind} ${name}`, read))) throw new KubeDriverError(`deploying ${spec.name}: ${kind} ${name} does not exist in namespace ${namespace}`, 404);
  }
}

/** Removes an object hangar may have made for a workload earlier and no longer wants (a Service, an Ingress). */
async function removeIfPresent(what: string, remove: () => Promise<unknown>): Promise<boolean> {
  try {
    await remove();
    return true;
  } catch (err) {
    if (isNotFound(err)) return false;
    throw failure(`removing ${what}`, err);
  }
}

/**
 * Creates the workload, or updates it in place: the Deployment (a rolling update when its pod
 * template changes), its Service and Ingress, all by server-side apply with hangar's field
 * manager, forced (these objects are hangar's: a field someone changed by hand is taken back).
 */
export async function deployWorkload(ctx: KubeContext, spec: WorkloadSpec, context: ClusterContext): Promise<WorkloadState> {
  checkName('workload', spec.name);
  const deployment = deploymentOf(ctx, spec, context.cluster_nodes ?? {});
  await checkReferences(ctx, spec);
  const namespace = ctx.namespace;
  const service = serviceOf(ctx, spec);
  const ingress = ingressOf(ctx, spec, service);
  const applied = await attempt(`deploying ${spec.name}`, () => apply(ctx, deployment, { force: true }));
  if (service) await attempt(`deploying the service of ${spec.name}`, () => apply(ctx, service, { force: true }));
  else await removeIfPresent(`the service of ${spec.name}`, () => ctx.core.deleteNamespacedService({ name: spec.name, namespace }));
  if (ingress) await attempt(`deploying the ingress of ${spec.name}`, () => apply(ctx, ingress, { force: true }));
  else await removeIfPresent(`the ingress of ${spec.name}`, () => ctx.networking.deleteNamespacedIngress({ name: spec.name, namespace }));
  const live = service ? await readOrNull(`reading service ${spec.name}`, () => ctx.core.readNamespacedService({ name: spec.name, namespace })) : null;
  return toState(ctx, applied, await podsOf(ctx, applied), live);
}

async function readDeployment(ctx: KubeContext, name: string): Promise<V1Deployment | null> {
  const where = locate(ctx, name);
  return readOrNull(`reading workload ${name}`, () => ctx.apps.readNamespacedDeployment(where));
}

export async function requireDeployment(ctx: KubeContext, name: string, doing: string): Promise<V1Deployment> {
  const deployment = await readDeployment(ctx, name);
  if (!deployment) throw new KubeDriverError(`${doing} ${name}: no such workload in namespace ${locate(ctx, name).namespace}`, 404);
  return deployment;
}

/** The state of a Deployment now (its pods and Service read fresh). */
export async function stateOf(ctx: KubeContext, deployment: V1Deployment): Promise<WorkloadState> {
  const namespace = deployment.metadata?.namespace ?? ctx.namespace;
  const name = deployment.metadata!.name!;
  const service = await readOrNull(`reading service ${name}`, () => ctx.core.readNamespacedService({ name, namespace }));
  return toState(ctx, deployment, await podsOf(ctx, deployment), service);
}

/** Removes the workload's Deployment, Service and Ingress, and waits until its pods are gone. */
export async function removeWorkload(ctx: KubeContext, name: string): Promise<{ removed: boolean }> {
  const where = locate(ctx, name);
  const deployment = await readDeployment(ctx, name);
  await removeIfPresent(`the ingress of ${name}`, () => ctx.networking.deleteNamespacedIngress(where));
  await removeIfPresent(`the service of ${name}`, () => ctx.core.deleteNamespacedService(where));
  if (!deployment) return { removed: false };
  // Foreground: the Deployment goes only after its ReplicaSets and pods, so a secret it used is free once this returns.
  const removed = await removeIfPresent(`workload ${name}`, () => ctx.apps.deleteNamespacedDeployment({ ...where, propagationPolicy: 'Foreground' }));
  const gone = await waitUntil(async () => !(await readDeployment(ctx, name)), REMOVE_WAIT_MS);
  if (!gone) throw new KubeDriverError(`removing workload ${name}: it is still there after ${REMOVE_WAIT_MS / 1000} s (its pods are not gone)`, 504);
  return { removed };
}

/** Sets the replica count (a merge patch of spec.replicas: the rest of the spec, and who owns it, stays). */
export async function scaleWorkload(ctx: KubeContext, name: string, replicas: number): Promise<WorkloadState> {
  if (!Number.isInteger(replicas) || replicas < 0) throw new KubeDriverError(`scaling ${name}: replicas must be a whole number, 0 or more`, 400);
  await requireDeployment(ctx, name, 'scaling');
  const where = locate(ctx, name);
  const scaled = await attempt(`scaling ${name} to ${replicas}`, () =>
    ctx.apps.patchNamespacedDeployment({ ...where, body: { spec: { replicas } }, fieldManager: FIELD_MANAGER }, mergePatch),
  );
  return stateOf(ctx, scaled);
}

/** Workloads by name, by bundle, or (neither) every Deployment of the cluster; unknown names and Deployments being deleted are left out. */
export async function inspectWorkloads(ctx: KubeContext, filter: { names?: string[]; stacks?: string[] }): Promise<{ workloads: WorkloadState[] }> {
  const deployments: V1Deployment[] = [];
  if (filter.names?.length || filter.stacks?.length) {
    for (const name of filter.names ?? []) {
      const found = await readDeployment(ctx, name);
      if (found) deployments.push(found);
    }
    for (const stack of filter.stacks ?? []) {
      const list = await attempt(`listing the workloads of bundle ${stack}`, () => ctx.apps.listDeploymentForAllNamespaces({ labelSelector: `${BUNDLE_LABEL}=${stack}` }));
      deployments.push(...list.items);
    }
  } else {
    deployments.push(...(await attempt('listing the workloads', () => ctx.apps.listDeploymentForAllNamespaces())).items);
  }
  const workloads: WorkloadState[] = [];
  // A Deployment being deleted (a pruned bundle part, a removed workload whose pods are still
  // going) is no longer one of the cluster's workloads, as it is not in the bundle's own state.
  // A declared rollout that failed is rolled back (or paused) here, as the workload is observed.
  for (const deployment of deployments) if (!deployment.metadata?.deletionTimestamp) workloads.push(await stateOf(ctx, await settleRollout(ctx, deployment)));
  return { workloads };
}
