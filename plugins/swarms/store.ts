import type { Clock } from '../../core/clock.js';
import { StampedRepository } from '../../core/db/repository.js';
import type { Store } from '../../core/db/store.js';
import { conflict } from '../../core/errors.js';
import { SWARM_MEMBERS, SWARMS } from './migrations.js';

export type SwarmStatus = 'empty' | 'forming' | 'active' | 'deleting' | 'failed';

export interface SwarmRecord {
  id: string;
  name: string;
  status: SwarmStatus;
  manager_node_id: string | null;
  cluster_id: string | null;
  error: string | null;
  created_at: string;
  updated_at: string;
  [key: string]: unknown;
}

export interface MemberRecord {
  id: string;
  swarm_id: string;
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

const DATES = ['created_at', 'updated_at'];

export class SwarmStore extends StampedRepository<SwarmRecord> {
  constructor(store: Store, clock: Clock) {
    super(store, SWARMS, { dates: DATES }, clock);
  }

  /** By id, or by name (names are unique). */
  require(idOrName: string): Promise<SwarmRecord> {
    return this.requireByIdOrName(idOrName, 'swarm');
  }

  /** A swarm that takes new work: not being deleted. */
  async requireUsable(idOrName: string): Promise<SwarmRecord> {
    const swarm = await this.require(idOrName);
    if (swarm.status === 'deleting') throw conflict(`Swarm ${swarm.name} is being deleted`);
    return swarm;
  }

  /** A swarm with a manager, for work that runs on it. */
  async requireActive(idOrName: string): Promise<SwarmRecord & { manager_node_id: string }> {
    const swarm = await this.requireUsable(idOrName);
    if (!swarm.manager_node_id) throw conflict(`Swarm ${swarm.name} has no manager yet: join a node to it first (POST /v1/swarms/${swarm.id}/join)`);
    return swarm as SwarmRecord & { manager_node_id: string };
  }
}

export class MemberStore extends StampedRepository<MemberRecord> {
  constructor(store: Store, clock: Clock) {
    super(store, SWARM_MEMBERS, { dates: DATES }, clock);
  }

  of(swarmId: string): Promise<MemberRecord[]> {
    return this.findAll({ swarm_id: swarmId });
  }
}
