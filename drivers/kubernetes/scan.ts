import type { KubernetesObject, V1PodTemplateSpec } from '@kubernetes/client-node';
import { HANGAR_LABELS, HANGAR_STACK_PREFIX } from '../../core/orchestrator.js';
import type { UnmanagedResource } from './contract.js';
import { attempt, BUNDLE_LABEL, type KubeContext } from './client.js';
import { HANGAR_NAMESPACE, SYSTEM_NAMESPACES } from './names.js';

type Workload = KubernetesObject & { spec?: { template?: V1PodTemplateSpec } };

/**
 * Workloads (Deployments, StatefulSets, DaemonSets, CronJobs) hangar did not create: no role
 * label, not part of a bundle named with hangar's prefix, outside the system namespaces and
 * hangar's own. A name outside the driver's namespace is `namespace/name`.
 */
export async function scanUnmanaged(ctx: KubeContext): Promise<{ resources: UnmanagedResource[] }> {
  const [deployments, statefulSets, daemonSets, cronJobs] = await Promise.all([
    attempt('listing deployments', () => ctx.apps.listDeploymentForAllNamespaces()),
    attempt('listing stateful sets', () => ctx.apps.listStatefulSetForAllNamespaces()),
    attempt('listing daemon sets', () => ctx.apps.listDaemonSetForAllNamespaces()),
    attempt('listing cron jobs', () => ctx.objects.list('batch/v1', 'CronJob')),
  ]);
  const resources: UnmanagedResource[] = [];
  const kinds: Array<[string, Workload[]]> = [
    ['deployment', deployments.items],
    ['statefulset', statefulSets.items],
    ['daemonset', daemonSets.items],
    ['cronjob', cronJobs.items as Workload[]],
  ];
  for (const [kind, items] of kinds) {
    for (const item of items) {
      const namespace = item.metadata?.namespace ?? '';
      if (SYSTEM_NAMESPACES.includes(namespace) || namespace === HANGAR_NAMESPACE) continue;
      const labels: Record<string, string> = { ...(item.metadata?.labels ?? {}) };
      const stack = labels[BUNDLE_LABEL] ?? null;
      if (labels[HANGAR_LABELS.role] !== undefined || stack?.startsWith(HANGAR_STACK_PREFIX)) continue;
      const template = kind === 'cronjob' ? (item.spec as { jobTemplate?: { spec?: { template?: V1PodTemplateSpec } } } | undefined)?.jobTemplate?.spec?.template : item.spec?.template;
      const name = item.metadata?.name ?? '';
      resources.push({
        kind,
        id: item.metadata?.uid ?? '',
        name: namespace && namespace !== ctx.namespace ? `${namespace}/${name}` : name,
        image: template?.spec?.containers[0]?.image ?? '',
        stack,
        labels,
        namespace,
      });
    }
  }
  resources.sort((a, b) => a.name.localeCompare(b.name) || a.kind.localeCompare(b.kind));
  return { resources };
}
