import type { Clock } from '../../core/clock.js';
import type { BundleRoute } from '../../core/clusters/backend.js';
import { StampedRepository, type Row } from '../../core/db/repository.js';
import type { Store } from '../../core/db/store.js';
import { SERVICES } from './migrations.js';
import type { HealthSpec } from '../../core/orchestrator.js';
import { LEASE_DATES, type LeaseFields } from '../../core/lifecycle.js';
import type { RevisionObject } from '../../core/clusters/revisions.js';

export type ServiceStatus = 'deploying' | 'running' | 'stopped' | 'failed' | 'removing';

/** A domain a part of the service asks the load balancer for (a compose service's `x-hangar`). */
export type ServiceRoute = BundleRoute;

export interface ServiceRecord extends LeaseFields {
  id: string;
  name: string;
  /** Its bundle format (its cluster's backend's: compose, a stack on a swarm; manifest, Kubernetes objects on a cluster). */
  backend: string;
  cluster_id: string;
  spec: string;
  status: ServiceStatus;
  error: string | null;
  secret_refs: string[];
  config_refs: string[];
  replicas: Record<string, { desired: number | null; running: number }>;
  routes: ServiceRoute[];
  /** Services of a format whose deploy answers what it applied (manifests): the objects the last apply made ([{api_version, kind, name, namespace}]); null for the others. */
  applied_objects?: Array<{ api_version: string; kind: string; name: string; namespace: string | null }> | null;
  /** Health checks declared for its parts (by compose service or Deployment name), over the bundle's own; null when none. */
  health?: Record<string, HealthSpec> | null;
  /**
   * For a format with namespaces (manifests): where its objects that name none go, its project's
   * namespace as it was when the service was made; null for a service made before (the driver's
   * own, `default`) and for the other formats.
   */
  namespace?: string | null;
  /**
   * Earlier secret and config versions a rollback restored (those its revision used that were not
   * current): deployed instead of the current ones until the object is rotated or the spec replaced.
   */
  pinned_objects?: RevisionObject[] | null;
  /**
   * The parts whose last rollout their cluster rolled back or paused on a failure (by compose
   * service or Deployment), as last observed; empty once a later rollout went through.
   */
  halted_rollouts?: Record<string, HaltedRollout> | null;
  /** Its spec is a non-admin's: applied, read and removed as the project's user of its namespace (hangar:project:<namespace>). */
  confined?: boolean;
  observed_at: string | null;
  created_at: string;
  updated_at: string;
  [key: string]: unknown;
}

/** A rollout the cluster stopped: returned to the spec before (`rolled_back`) or held (`paused`), with its message. */
export interface HaltedRollout {
  status: 'rolled_back' | 'paused';
  message: string | null;
  /** The revision that runs now (after a rollback), when the cluster keeps it. */
  revision?: number | null;
}

/** Objects looked up per query by `using` (each adds one LIKE to an OR chain). */
const USING_CHUNK = 200;

export class ServiceStore extends StampedRepository<ServiceRecord> {
  constructor(
    store: Store,
    clock: Clock,
  ) {
    super(store, SERVICES, { json: ['secret_refs', 'config_refs', 'replicas', 'routes', 'applied_objects', 'health', 'pinned_objects', 'halted_rollouts'], bool: ['confined'], dates: ['observed_at', 'created_at', 'updated_at', ...LEASE_DATES] }, clock);
  }

  /** By id, or by name (names are unique). */
  require(idOrName: string): Promise<ServiceRecord> {
    return this.requireByIdOrName(idOrName, 'service');
  }

  /** Services whose spec uses a hangar secret (or config) object. */
  /** The services referring to each of these secrets or configs, in one query. */
  async using(kind: 'secret' | 'config', objectIds: string[]): Promise<Map<string, ServiceRecord[]>> {
    const column = kind === 'secret' ? 'secret_refs' : 'config_refs';
    const users = new Map<string, ServiceRecord[]>();
    if (!objectIds.length) return users;
    // The ids are plain [a-z0-9-] strings: a LIKE on the JSON text narrows, the check below decides.
    // PostgreSQL has no LIKE on json: compare the column's text in both dialects. Chunks keep the
    // OR chain well below SQLite's expression depth limit (1000) for a page of up to 1000 objects.
    for (let start = 0; start < objectIds.length; start += USING_CHUNK) {
      const chunk = objectIds.slice(start, start + USING_CHUNK);
      const rows: Row[] = await this.query()
        .where((q) => {
          for (const id of chunk) q.orWhereRaw('cast(?? as text) like ?', [column, `%"${id}"%`]);
        })
        .orderBy('id');
      for (const service of rows.map(this.decode)) {
        for (const id of chunk) if (service[column].includes(id)) users.set(id, [...(users.get(id) ?? []), service]);
      }
    }
    return users;
  }
}
