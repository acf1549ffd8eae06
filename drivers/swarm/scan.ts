import { HANGAR_LABELS, HANGAR_STACK_PREFIX, type UnmanagedResource } from '../../core/orchestrator.js';
import type { SwarmContext } from './client.js';
import { listServices, STACK_LABEL } from './state.js';

/** Services hangar did not create: no role label, and not in a stack named with hangar's prefix. */
export async function scanUnmanaged(ctx: SwarmContext): Promise<{ resources: UnmanagedResource[] }> {
  const services = await listServices(ctx);
  const resources: UnmanagedResource[] = [];
  for (const service of services) {
    const labels: Record<string, string> = { ...(service.Spec?.Labels ?? {}) };
    const stack = labels[STACK_LABEL] ?? null;
    if (labels[HANGAR_LABELS.role] !== undefined) continue;
    if (stack?.startsWith(HANGAR_STACK_PREFIX)) continue;
    resources.push({ kind: 'service', id: service.ID, name: service.Spec?.Name ?? '', image: service.Spec?.TaskTemplate?.ContainerSpec?.Image ?? '', stack, labels });
  }
  resources.sort((a, b) => a.name.localeCompare(b.name));
  return { resources };
}
