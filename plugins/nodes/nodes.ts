import type { Knex } from 'knex';
import type { Clock } from '../../core/clock.js';
import { Repository, type Page } from '../../core/db/repository.js';
import type { Store } from '../../core/db/store.js';
import { lockForTransaction } from '../../core/db/locks.js';
import { conflict, notFound } from '../../core/errors.js';
import type { OverlayState } from '../../core/overlay.js';
import { NODES } from './migrations.js';

export type Connection = 'pending' | 'online' | 'offline' | 'stopped';
export type Availability = 'active' | 'cordoned' | 'drained';
export type NodeStatus = 'pending' | 'ready' | 'offline' | 'needs_reboot' | 'cordoned' | 'drained' | 'removing';

export interface NodeRecord {
  id: string;
  name: string;
  hostname: string | null;
  ip_address: string | null;
  interface: string | null;
  architecture: string | null;
  gpu_overcommit_factor: number;
  connection: Connection;
  availability: Availability;
  /** nodeStatus() of the row, kept in step by NodeStore (lists filter by it in SQL). */
  status: NodeStatus;
  reboot_required: boolean;
  removing: boolean;
  is_control_plane: boolean;
  overlay_ip: string | null;
  wg_public_key: string | null;
  wg_port: number | null;
  /** The overlay as the agent last reported it; null before an agent that reports it heartbeats. */
  overlay: OverlayState | null;
  agent_version: string | null;
  last_heartbeat_at: string | null;
  resources: Record<string, unknown> | null;
  facts: Record<string, unknown> | null;
  created_at: string;
  updated_at: string;
  [key: string]: unknown;
}

/** The columns a node's status derives from: a write of any of them writes `status` too. */
const STATUS_INPUTS = ['removing', 'connection', 'reboot_required', 'availability'] as const;

/** What a node row holds in those columns when an insert does not say (the table's defaults). */
const STATUS_DEFAULTS = { removing: false, connection: 'pending', reboot_required: false, availability: 'active' } as const;

/**
 * One status from the node's facts, most pressing first: being removed, unreachable, waiting for a
 * reboot, taken out of scheduling, then pending (never heard from) or ready.
 */
export function nodeStatus(n: Pick<NodeRecord, 'removing' | 'connection' | 'reboot_required' | 'availability'>): NodeStatus {
  if (n.removing) return 'removing';
  if (n.connection === 'offline' || n.connection === 'stopped') return 'offline';
  if (n.reboot_required) return 'needs_reboot';
  if (n.availability !== 'active') return n.availability;
  return n.connection === 'pending' ? 'pending' : 'ready';
}

/**
 * A node as the API shows it; `runtimeFacts` are the facts the loaded backends' agents report of
 * the runtime each needs (`docker`, `k3s`: core/clusters/backend.ts NodeFact), null until reported.
 */
export function nodeView(n: NodeRecord, runtimeFacts: readonly string[]) {
  const facts = n.facts ?? {};
  return {
    id: n.id,
    name: n.name,
    hostname: n.hostname,
    ip_address: n.ip_address,
    interface: n.interface,
    architecture: n.architecture,
    gpu_overcommit_factor: n.gpu_overcommit_factor,
    status: nodeStatus(n),
    availability: n.availability,
    agent_running: n.connection === 'online',
    overlay_ip: n.overlay_ip,
    overlay: n.overlay ?? null,
    agent_version: n.agent_version,
    last_heartbeat_at: n.last_heartbeat_at,
    resources: n.resources,
    os: facts.os ?? null,
    kernel: facts.kernel ?? null,
    ...Object.fromEntries(runtimeFacts.map((name) => [name, facts[name] ?? null])),
    gpus: facts.gpus ?? [],
    restic: facts.restic ?? null,
    nfs: facts.nfs ?? null,
    pending_updates: facts.pending_updates ?? null,
    reboot_required: n.reboot_required,
    is_control_plane: n.is_control_plane,
    created_at: n.created_at,
    updated_at: n.updated_at,
  };
}

export class NodeStore extends Repository<NodeRecord> {
  constructor(
    store: Store,
    private readonly clock: Clock,
  ) {
    super(store, NODES, {
      json: ['resources', 'facts', 'overlay'],
      bool: ['reboot_required', 'removing', 'is_control_plane'],
      dates: ['last_heartbeat_at', 'created_at', 'updated_at'],
    });
  }

  async require(id: string): Promise<NodeRecord> {
    const node = await this.get(id);
    if (!node) throw notFound(`No node ${id}`);
    return node;
  }

  /** A node that can still take work: 404 when unknown, 409 while it is being removed. */
  async requireLive(id: string): Promise<NodeRecord> {
    const node = await this.require(id);
    if (node.removing) throw conflict(`Node ${id} is being removed`);
    return node;
  }

  /**
   * The live node at an address, or one inserted with `values` when there is none: one request at
   * a time per address, so that two at once find (or make) the same node.
   */
  async atAddress(ipAddress: string, values: Partial<NodeRecord>): Promise<{ node: NodeRecord; made: boolean }> {
    return this.knex.transaction(async (trx) => {
      await lockForTransaction(trx, this.store.dialect, `nodes:address:${ipAddress}`);
      const found = (await this.findAll({ ip_address: ipAddress, removing: false }, trx))[0];
      if (found) return { node: found, made: false };
      return { node: await this.insert({ ...values, ip_address: ipAddress }, trx), made: true };
    });
  }

  /** Inserts a node; its status is derived from what it is inserted with. */
  override async insert(values: Partial<NodeRecord>, trx?: Knex.Transaction): Promise<NodeRecord> {
    return super.insert({ ...values, status: nodeStatus({ ...STATUS_DEFAULTS, ...defined(values) }) }, trx);
  }

  /**
   * Writes a patch and stamps `updated_at` (the row must exist). A patch of a column the status
   * derives from writes the status too, from the row as it is at that moment (read under a row lock,
   * in one transaction): two changes at once — a drain and an offline verdict — leave the status
   * both make, never the one either saw before the other.
   */
  async change(id: string, patch: Partial<NodeRecord>, trx?: Knex.Transaction): Promise<NodeRecord> {
    const stamped = { ...patch, updated_at: this.clock.now().toISOString() };
    if (!STATUS_INPUTS.some((column) => patch[column] !== undefined)) return (await this.update(id, stamped, trx))!;
    const write = async (t: Knex.Transaction) => {
      const row = await this.query(t).where({ id }).forUpdate().first(...STATUS_INPUTS);
      const status = row ? nodeStatus({ ...this.decode(row), ...defined(patch) }) : undefined;
      return (await this.update(id, { ...stamped, status }, t))!;
    };
    return trx ? write(trx) : this.knex.transaction(write);
  }

  /** Locks the node's row until `trx` ends (PostgreSQL; SQLite runs one writer at a time): what depends on a node, written one at a time. */
  async lock(id: string, trx: Knex.Transaction): Promise<void> {
    await this.query(trx).where({ id }).forUpdate().first('id');
  }

  /**
   * Sets the availability only while the record still says `expected` (read under a row lock, in
   * one transaction): an observation of the cluster never overwrites a change made meanwhile. Null
   * when it said something else (or is gone).
   */
  async changeAvailabilityIf(id: string, expected: Availability, availability: Availability): Promise<NodeRecord | null> {
    return this.knex.transaction(async (t) => {
      const row = await this.query(t).where({ id }).forUpdate().first('availability');
      if (!row || row.availability !== expected) return null;
      return this.change(id, { availability }, t);
    });
  }

  /** A page of the nodes whose status is one of `statuses`, in the order of every node list (a filter in SQL, on an index). */
  async pageByStatus(statuses: NodeStatus[], options: { limit?: number; cursor?: string | null }): Promise<Page<NodeRecord>> {
    return this.page({ ...options, where: (q) => q.whereIn('status', statuses) });
  }
}

/** The properties of `values` that are set (a patch may carry `undefined` for "leave it"). */
function defined<T extends object>(values: T): Partial<T> {
  return Object.fromEntries(Object.entries(values).filter(([, v]) => v !== undefined)) as Partial<T>;
}
