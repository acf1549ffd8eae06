import type { V1Deployment, V1Pod, V1Service } from '@kubernetes/client-node';
import type { PortSpec, WorkloadState, WorkloadTask } from './contract.js';
import { attempt, BUNDLE_LABEL, selectorString, type KubeContext } from './client.js';
import { rolloutStateOf } from './rollouts.js';

/** Kubernetes CPU quantity ("250m", "1.5", "2") as cores, or null. */
export function parseCpu(quantity: string | undefined): number | null {
  if (!quantity) return null;
  const m = /^(\d+(?:\.\d+)?)(m?)$/.exec(quantity);
  if (!m) return null;
  return m[2] === 'm' ? Number(m[1]) / 1000 : Number(m[1]);
}

const MEMORY_UNITS: Record<string, number> = { '': 1, k: 1e3, M: 1e6, G: 1e9, T: 1e12, Ki: 1024, Mi: 1024 ** 2, Gi: 1024 ** 3, Ti: 1024 ** 4 };

/** Kubernetes memory quantity ("32Mi", "1G", "1048576") in MiB, or null. */
export function parseMemoryMb(quantity: string | undefined): number | null {
  if (!quantity) return null;
  const m = /^(\d+(?:\.\d+)?)([kMGT]i?|)$/.exec(quantity);
  if (!m || MEMORY_UNITS[m[2]!] === undefined) return null;
  return (Number(m[1]) * MEMORY_UNITS[m[2]!]!) / 1024 ** 2;
}

/** A Deployment's name as hangar knows it: the name, qualified by the namespace when that is not the driver's. */
export function workloadName(ctx: KubeContext, deployment: V1Deployment): string {
  const ns = deployment.metadata?.namespace;
  const name = deployment.metadata?.name ?? '';
  return ns && ns !== ctx.namespace ? `${ns}/${name}` : name;
}

/** `name` or `namespace/name` → where the Deployment is. */
export function locate(ctx: KubeContext, name: string): { namespace: string; name: string } {
  const slash = name.indexOf('/');
  return slash > 0 ? { namespace: name.slice(0, slash), name: name.slice(slash + 1) } : { namespace: ctx.namespace, name };
}

function latestTransition(pod: V1Pod): string | null {
  const times = (pod.status?.conditions ?? []).map((c) => c.lastTransitionTime).filter((t): t is Date => !!t);
  const created = pod.metadata?.creationTimestamp;
  if (created) times.push(created);
  if (!times.length) return null;
  return new Date(Math.max(...times.map((t) => new Date(t).getTime()))).toISOString();
}

/** Whether a pod runs: Running and Ready, and not being deleted. */
export function podRunning(pod: V1Pod): boolean {
  return !pod.metadata?.deletionTimestamp && pod.status?.phase === 'Running' && (pod.status.conditions ?? []).some((c) => c.type === 'Ready' && c.status === 'True');
}

/** A pod as one task of the workload, in the words the swarm driver uses for tasks (running, pending, failed…; desired running or shutdown). */
export function taskOf(pod: V1Pod): WorkloadTask {
  const unscheduled = pod.status?.conditions?.find((c) => c.type === 'PodScheduled' && c.status === 'False');
  const container = pod.status?.containerStatuses?.find((c) => c.state?.waiting?.message || c.state?.terminated?.message);
  return {
    runtime_node_id: pod.spec?.nodeName || null,
    state: (pod.status?.phase ?? 'unknown').toLowerCase(),
    desired_state: pod.metadata?.deletionTimestamp ? 'shutdown' : 'running',
    message: unscheduled ? `${unscheduled.reason ?? 'Unschedulable'}: ${unscheduled.message ?? ''}`.trim() : pod.status?.message || null,
    error: container?.state?.waiting?.message ?? container?.state?.terminated?.message ?? null,
    updated_at: latestTransition(pod),
  };
}

export function portsOf(service: V1Service | null): PortSpec[] {
  if (!service) return [];
  const type = service.spec?.type;
  return (service.spec?.ports ?? []).map((p) => ({
    published: type === 'LoadBalancer' ? p.port : type === 'NodePort' ? (p.nodePort ?? 0) : 0,
    target: typeof p.targetPort === 'number' ? p.targetPort : p.port,
    protocol: p.protocol === 'UDP' ? ('udp' as const) : ('tcp' as const),
  }));
}

/** The pods a Deployment selects. */
export async function podsOf(ctx: KubeContext, deployment: V1Deployment): Promise<V1Pod[]> {
  const namespace = deployment.metadata?.namespace ?? ctx.namespace;
  const labelSelector = selectorString(deployment.spec?.selector);
  if (!labelSelector) return [];
  const list = await attempt(`listing the pods of ${deployment.metadata?.name}`, () => ctx.core.listNamespacedPod({ namespace, labelSelector }));
  return list.items;
}

/** WorkloadState from a Deployment, its pods and its Service. */
export function toState(ctx: KubeContext, deployment: V1Deployment, pods: V1Pod[], service: V1Service | null): WorkloadState {
  const container = deployment.spec?.template.spec?.containers[0];
  const labels = { ...(deployment.metadata?.labels ?? {}) };
  const stack = labels[BUNDLE_LABEL] ?? null;
  const sorted = [...pods].sort((a, b) => (latestTransition(b) ?? '').localeCompare(latestTransition(a) ?? ''));
  return {
    name: workloadName(ctx, deployment),
    labels,
    image: container?.image ?? '',
    replicas: deployment.spec?.replicas ?? 1,
    running: pods.filter(podRunning).length,
    tasks: sorted.map(taskOf),
    ports: portsOf(service),
    limits: { cpus: parseCpu(container?.resources?.limits?.cpu), memoryMb: parseMemoryMb(container?.resources?.limits?.memory) },
    stack,
    component: stack ? (deployment.metadata?.name ?? null) : null,
    rollout: rolloutStateOf(deployment),
  };
}
