import type { HangarConfig } from '../../config/schema.js';
import type { TaskKind } from '../tasks/kinds.js';

/**
 * What the control plane knows of an orchestrator backend (swarm, k8s): the control-plane half of
 * its driver package. The other half, the driver, runs on the agents and implements the
 * workload, object and scan interfaces of core/orchestrator.ts and the backend's membership
 * interface. A backend is built in (the composition root's catalogue) or loaded by configuration
 * (`drivers:` entries whose driver has `kind: 'orchestrator'` and creates one of these).
 */
export interface ClusterBackend {
  /** The name clusters, tasks and agents use: `swarm`, `k8s`. */
  name: string;
  /** In messages: "swarm web has no manager". */
  noun: string;
  /** Its own task kinds (its membership calls), registered with the task queue. */
  taskKinds: readonly TaskKind[];
  /** The address inside the cluster of one part of a bundle (what a load balancer sends a domain to). */
  componentAddress(bundle: string, component: string): string;
  /** The backend's policies, added to the calls that take `settings` (how ports are published…). */
  settings(config: HangarConfig): Record<string, string | number | boolean>;
}

export function defineBackend(backend: ClusterBackend): ClusterBackend {
  return backend;
}
