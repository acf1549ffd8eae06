import type { Clock } from '../clock.js';
import { StampedRepository } from '../db/repository.js';
import type { Store } from '../db/store.js';
import { CLUSTER_MEMBERS, CLUSTERS } from './migrations.js';
import type { LeaseFields } from '../lifecycle.js';

export type ClusterStatus = 'empty' | 'forming' | 'active' | 'deleting' | 'failed';

/** A group of machines one orchestrator runs workloads on: a swarm (backend swarm) or a Kubernetes cluster (k8s). */
export interface ClusterRecord extends LeaseFields {
  id: string;
  name: string;
  backend: string;
  status: ClusterStatus;
  /** The node asked first for the cluster's orchestrator calls (its manager, or k3s server). */
  manager_node_id: string | null;
  /** The orchestrator's own id of the cluster (a swarm's cluster id). */
  runtime_id: string | null;
  /** The project that owns it (plugins/projects); null when none does. */
  project_id?: string | null;
  error: string | null;
  created_at: string;
  updated_at: string;
  [key: string]: unknown;
}

export interface MemberRecord extends LeaseFields {
  id: string;
  cluster_id: string;
  node_id: string;
  role: 'manager' | 'worker';
  status: 'joining' | 'active' | 'leaving' | 'failed';
  runtime_node_id: string | null;
  advertise_address: string | null;
  /** As the cluster last reported it (each observation): `ready`, `not_ready`, or null while unknown. */
  readiness?: 'ready' | 'not_ready' | null;
  /** Why it is not ready, in the cluster's words. */
  readiness_reason?: string | null;
  error: string | null;
  created_at: string;
  updated_at: string;
  [key: string]: unknown;
}

const DATES = ['created_at', 'updated_at', 'op_lease_until'];

/** A sentence's first word: "Swarm web has no manager". */
export const capitalized = (text: string) => text.charAt(0).toUpperCase() + text.slice(1);

export class ClusterStore extends StampedRepository<ClusterRecord> {
  constructor(store: Store, clock: Clock) {
    super(store, CLUSTERS, { dates: DATES }, clock);
  }
}

export class MemberStore extends StampedRepository<MemberRecord> {
  constructor(store: Store, clock: Clock) {
    super(store, CLUSTER_MEMBERS, { dates: DATES }, clock);
  }

  of(clusterId: string): Promise<MemberRecord[]> {
    return this.findAll({ cluster_id: clusterId });
  }
}
