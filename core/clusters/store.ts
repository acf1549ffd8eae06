import type { Clock } from '../clock.js';
import { StampedRepository } from '../db/repository.js';
import type { Store } from '../db/store.js';
import { conflict, notFound } from '../errors.js';
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
  error: string | null;
  created_at: string;
  updated_at: string;
  [key: string]: unknown;
}

const DATES = ['created_at', 'updated_at', 'op_lease_until'];

/** Capitalised noun of a backend for messages: "Swarm web has no manager". */
export const nounOf = (cluster: Pick<ClusterRecord, 'backend'>) => (cluster.backend === 'swarm' ? 'Swarm' : 'Cluster');

export class ClusterStore extends StampedRepository<ClusterRecord> {
  constructor(store: Store, clock: Clock) {
    super(store, CLUSTERS, { dates: DATES }, clock);
  }

  /** By id, or by name (names are unique), of this backend when one is named; 404 ("No swarm x") otherwise. */
  async require(idOrName: string, backend?: string): Promise<ClusterRecord> {
    const found = await this.findByIdOrName(idOrName);
    if (!found || (backend && found.backend !== backend)) throw notFound(`No ${backend === 'swarm' ? 'swarm' : 'cluster'} ${idOrName}`);
    return found;
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

/** A cluster that takes new work: not being deleted. */
export function requireUsable(cluster: ClusterRecord): ClusterRecord {
  if (cluster.status === 'deleting') throw conflict(`${nounOf(cluster)} ${cluster.name} is being deleted`);
  return cluster;
}
