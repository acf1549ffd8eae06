import type { Clock } from '../../core/clock.js';
import { StampedRepository } from '../../core/db/repository.js';
import type { Store } from '../../core/db/store.js';
import type { HealthSpec, PortSpec, RolloutSpec } from '../../core/orchestrator.js';
import { LEASE_DATES, type LeaseFields } from '../../core/lifecycle.js';
import { INSTANCES } from './migrations.js';

export interface InstanceRecord extends LeaseFields {
  id: string;
  name: string;
  cluster_id: string;
  runtime_name: string;
  image: string;
  type: string;
  replicas: number;
  desired: 'running' | 'stopped';
  status: 'deploying' | 'running' | 'stopped' | 'drifted' | 'failed' | 'rolling_out' | 'rolled_back' | 'paused' | 'terminating';
  reason: string | null;
  domain: string | null;
  http_port: number | null;
  ports: PortSpec[];
  env: Record<string, string>;
  command: string[] | null;
  platform: string | null;
  gpu: number;
  volumes: Array<{ volume_id: string; name: string; path: string }>;
  /** Its declared health check (null: none; the image's own HEALTHCHECK counts on a swarm). */
  health?: HealthSpec | null;
  /** How its updates roll out (null: the driver's defaults). */
  rollout?: RolloutSpec | null;
  placement: Array<{ node_id: string | null; runtime_node_id: string | null; state: string }> | null;
  running: number | null;
  observed_at: string | null;
  created_at: string;
  updated_at: string;
  [key: string]: unknown;
}

/** What an instance's revisions keep of it: what the operator asked it to run (not its replica count or whether it runs). */
export interface InstanceSpec {
  image: string;
  type: string;
  /** `host:container/protocol`, as requests give them. */
  ports: string[];
  http_port: number | null;
  env: Record<string, string>;
  command: string[] | null;
  platform: string | null;
  gpu: number;
  volumes: InstanceRecord['volumes'];
  health: HealthSpec | null;
  rollout: RolloutSpec | null;
}

export const portText = (p: PortSpec) => `${p.published}:${p.target}/${p.protocol ?? 'tcp'}`;

/** An instance's spec, as its revisions keep it. */
export function instanceSpec(i: Pick<InstanceRecord, Exclude<keyof InstanceSpec, 'health' | 'rollout'> | 'health' | 'rollout' | 'ports'>): InstanceSpec {
  return {
    image: i.image,
    type: i.type,
    ports: i.ports.map(portText),
    http_port: i.http_port ?? null,
    env: i.env,
    command: i.command ?? null,
    platform: i.platform ?? null,
    gpu: i.gpu ?? 0,
    volumes: i.volumes,
    health: i.health ?? null,
    rollout: i.rollout ?? null,
  };
}

export class InstanceStore extends StampedRepository<InstanceRecord> {
  constructor(store: Store, clock: Clock) {
    super(store, INSTANCES, { json: ['ports', 'env', 'command', 'volumes', 'placement', 'health', 'rollout'], dates: ['observed_at', 'created_at', 'updated_at', ...LEASE_DATES] }, clock);
  }

  /** An instance by name when exactly one cluster has one of that name. */
  async byName(name: string): Promise<InstanceRecord | null> {
    const rows = await this.query().where({ name }).limit(2);
    return rows.length === 1 ? this.decode(rows[0]) : null;
  }
}
