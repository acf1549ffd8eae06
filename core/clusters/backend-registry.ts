import type { TaskKindRegistry } from '../tasks/kinds.js';
import type { ClusterBackend, ClusterField } from './backend.js';
import { capitalized, type ClusterRecord } from './store.js';

/** How the API names the clusters of one backend (core/clusters/backend.ts ClusterApiNaming, defaults filled in). */
export interface ClusterNaming {
  backend: string;
  noun: string;
  /** How summaries and the cluster API's own messages call one: `swarm`, `Kubernetes cluster`. */
  title: string;
  field: ClusterField;
  resourceType: string;
  path: string | null;
  /** "join a node to it first (POST /v1/swarms/swm-1/join)". */
  joinHint(clusterId: string): string;
  /** " (POST /v1/swarms/swm-1/leave)", or nothing when the backend names no request. */
  leaveHint(clusterId: string, nodeId: string): string;
}

/** What the fields that name a cluster call one in messages ("No swarm x", "No cluster x"). */
export const FIELD_NOUNS: Record<ClusterField, string> = { swarm_id: 'swarm', cluster_id: 'cluster' };

/** The orchestrator backends loaded (drivers: of kind orchestrator), and how the API names their clusters. */
export class BackendRegistry {
  private readonly registered = new Map<string, ClusterBackend>();

  constructor(private readonly taskKinds: TaskKindRegistry) {}

  /** Makes a backend known: its clusters can be called, its task kinds queued. */
  registerBackend(backend: ClusterBackend): void {
    if (this.registered.has(backend.name)) throw new Error(`two orchestrator backends are named ${backend.name}`);
    this.registered.set(backend.name, backend);
    this.taskKinds.register(...backend.taskKinds);
  }

  /** A registered backend; throws naming the known ones otherwise. */
  get(name: string): ClusterBackend {
    const found = this.registered.get(name);
    if (!found) throw new Error(`no orchestrator backend ${name} is loaded (loaded: ${[...this.registered.keys()].join(', ') || 'none'})`);
    return found;
  }

  /** A registered backend, or undefined (a cluster whose backend is no longer loaded). */
  find(name: string): ClusterBackend | undefined {
    return this.registered.get(name);
  }

  names(): string[] {
    return [...this.registered.keys()];
  }

  /** Every registered backend, in the order they were loaded. */
  all(): ClusterBackend[] {
    return [...this.registered.values()];
  }

  /** How the API names the clusters of a backend (one no longer loaded: as a `cluster`). */
  naming(backend: string): ClusterNaming {
    const found = this.registered.get(backend);
    const api = found?.api ?? {};
    return {
      backend,
      noun: found?.noun ?? 'cluster',
      title: api.title ?? found?.noun ?? 'cluster',
      field: api.field ?? 'cluster_id',
      resourceType: api.resourceType ?? 'cluster',
      path: api.path ?? null,
      joinHint: (id) => (api.join ? `join a node to it first (${api.join(id)})` : 'add a node to it first'),
      leaveHint: (id, nodeId) => (api.leave ? ` (${api.leave(id, nodeId)})` : ''),
    };
  }

  /** One of this cluster's kind in messages, lower case: `swarm`, `cluster`. */
  nounOf(cluster: Pick<ClusterRecord, 'backend'>): string {
    return this.naming(cluster.backend).noun;
  }

  /** The cluster as a sentence starts with it: "Swarm web". */
  named(cluster: Pick<ClusterRecord, 'backend' | 'name'>): string {
    return `${capitalized(this.nounOf(cluster))} ${cluster.name}`;
  }

  /** The address inside a cluster of one part of a bundle (what its load balancer sends a domain to). */
  componentAddress(cluster: Pick<ClusterRecord, 'backend'>, bundle: string, component: string): string {
    return this.get(cluster.backend).componentAddress(bundle, component);
  }
}
