import type { Knex } from 'knex';
import type { Clock } from '../../core/clock.js';
import { StampedRepository } from '../../core/db/repository.js';
import type { Store } from '../../core/db/store.js';
import { Repository } from '../../core/db/repository.js';
import { BACKUP_RUNS, BACKUP_SCHEDULES, BACKUP_TARGETS, CONTROL_PLANE_ARCHIVES } from './migrations.js';
import type { HookRun, HookSpec } from './hooks.js';

export interface TargetRecord {
  id: string;
  name: string;
  /** s3: a bucket (and prefix); local: a folder (`path`) of a node (`node_id`), its S3 fields '' (migration 012). */
  kind: 's3' | 'local';
  node_id?: string | null;
  path?: string | null;
  endpoint: string;
  bucket: string;
  prefix: string;
  region: string;
  access_key_id: string;
  secret_sealed: string;
  password_sealed: string;
  /** The project it belongs to (null: made before projects, read as the `default` project's). */
  project_id?: string | null;
  checked_at: string;
  created_at: string;
  updated_at: string;
  [key: string]: unknown;
}

/**
 * Why a local target cannot serve a volume whose data is on `nodeId` (null: it can, or the target is
 * S3's): restic runs on the agent of the node holding the volume's folder, and a local target's
 * repository is a folder of its own node, which no other node reaches.
 */
export function localTargetRefusal(target: TargetRecord, nodeId: string, what: string): string | null {
  if (target.kind !== 'local' || target.node_id === nodeId) return null;
  return `Backup target ${target.name} is a folder of node ${target.node_id}, and ${what} is on node ${nodeId}: a local target serves only the volumes of its own node (their backups and restores run there); use a target on node ${nodeId} or an S3 target`;
}

/** `forgotten`: a backup whose snapshot a schedule's retention removed (restic forget --prune). */
/** `stopping`: a run stopping the volume's workloads before its task is queued (held by lease_until). */
export type RunStatus = 'stopping' | 'running' | 'succeeded' | 'failed' | 'forgotten';

export interface RunRecord {
  id: string;
  operation: 'backup' | 'restore';
  volume_id: string;
  target_id: string;
  node_id: string;
  task_id: string | null;
  status: RunStatus;
  error: string | null;
  snapshot_id: string | null;
  source_id: string | null;
  schedule_id?: string | null;
  bytes: number | null;
  bytes_added: number | null;
  files: number | null;
  duration_seconds: number | null;
  /** A backup asked to be verified by a restore drill after it (migration 005). */
  verify?: boolean;
  /** The drill's outcome: true (restorable), false (verify_error says why), null (not verified, or not yet). */
  verified?: boolean | null;
  verified_at?: string | null;
  verify_error?: string | null;
  /** A backup's consistency (migration 009): `live`, or `stop` (its workloads stopped for the snapshot). */
  consistency?: 'live' | 'stop' | null;
  /** A restore with stop_workloads, or a backup with consistency stop: the workloads it stopped and brought back (migration 006). */
  workloads?: StoppedWorkload[] | null;
  workloads_stopped_at?: string | null;
  workloads_started_at?: string | null;
  gap_seconds?: number | null;
  /** While `stopping`: until when the control plane stopping the workloads holds the run (migration 007). */
  lease_until?: string | null;
  /** A backup's pre and post commands and their outcomes (migration 011). */
  pre?: HookRun | null;
  post?: HookRun | null;
  /** A running backup with commands: which task it waits for, `pre`, `backup` or `post` (null: a run without commands). */
  phase?: 'pre' | 'backup' | 'post' | null;
  started_at: string;
  finished_at: string | null;
  created_at: string;
  updated_at: string;
  [key: string]: unknown;
}

export class TargetStore extends StampedRepository<TargetRecord> {
  constructor(store: Store, clock: Clock) {
    super(store, BACKUP_TARGETS, { dates: ['checked_at', 'created_at', 'updated_at'] }, clock);
  }
}

/** A workload a restore stopped: what it was, and the replicas it is brought back to. */
export interface StoppedWorkload {
  type: string;
  id: string;
  name: string;
  replicas: number;
  /** Brought back (or given up on: `error` says why); a run is done bringing back when every one is. */
  back?: boolean;
  error?: string;
}

export class RunStore extends StampedRepository<RunRecord> {
  constructor(
    store: Store,
    private readonly runClock: Clock,
  ) {
    super(
      store,
      BACKUP_RUNS,
      { json: ['workloads', 'pre', 'post'], bool: ['verify', 'verified'], dates: ['started_at', 'finished_at', 'verified_at', 'workloads_stopped_at', 'workloads_started_at', 'lease_until', 'created_at', 'updated_at'] },
      runClock,
    );
  }

  /**
   * Gives a run its task in the transaction that queues it, while the run is `from` (a `stopping`
   * run not taken over meanwhile): the run after, or null (then the task is rolled back).
   */
  attachTask(id: string, from: RunStatus, patch: Partial<RunRecord>, trx: Knex.Transaction): Promise<RunRecord | null> {
    return this.updateWhere(id, this.codec.encode({ ...patch, updated_at: this.runClock.now().toISOString() }), ` and "status" = ?`, [from], trx);
  }

  /**
   * Changes a `running` run still waiting for the task `taskId` (none of the other processes that
   * follow it got there first): the run after, or null. With `trx`, in the transaction queueing its
   * next task.
   */
  changeWhileOn(id: string, taskId: string, patch: Partial<RunRecord>, trx?: Knex.Transaction): Promise<RunRecord | null> {
    return this.updateWhere(id, this.codec.encode({ ...patch, updated_at: this.runClock.now().toISOString() }), ` and "status" = ? and "task_id" = ?`, ['running', taskId], trx);
  }

  /** Fails a `running` run that never got its task (its control plane stopped between recording it and queueing the task): the run after, or null. */
  abandonUnqueued(id: string, patch: Partial<RunRecord>, trx?: Knex.Transaction): Promise<RunRecord | null> {
    return this.updateWhere(id, this.codec.encode({ ...patch, updated_at: this.runClock.now().toISOString() }), ` and "status" = ? and "task_id" is null`, ['running'], trx);
  }

  /** Takes a `stopping` run over once its lease has run out (the control plane stopping its workloads is gone): the run after, or null. */
  takeOverStopping(id: string, patch: Partial<RunRecord>): Promise<RunRecord | null> {
    const now = this.runClock.now().toISOString();
    return this.updateWhere(id, this.codec.encode({ ...patch, updated_at: now }), ` and "status" = ? and ("lease_until" is null or "lease_until" < ?)`, ['stopping', now]);
  }
}

export interface ScheduleRecord {
  id: string;
  name: string;
  target_id: string;
  /** Its target's project (null: made before projects, read as the `default` project's). */
  project_id?: string | null;
  volume_ids: string[];
  /** Key → value: the volumes carrying every one of these tags at each run (null: none by tag). */
  volume_tags: Record<string, string> | null;
  /** One of the two: an interval, or a cron expression (UTC). */
  every_seconds: number | null;
  cron: string | null;
  keep_last: number | null;
  keep_daily: number | null;
  keep_weekly: number | null;
  keep_monthly: number | null;
  /** Each backup it takes is verified by a restore drill (migration 005). */
  verify?: boolean;
  /** Its backups' consistency (migration 009). */
  consistency?: 'live' | 'stop';
  /** Commands run before and after each of its backups (migration 011). */
  pre?: HookSpec | null;
  post?: HookSpec | null;
  next_run_at: string;
  last_run_at: string | null;
  created_at: string;
  updated_at: string;
  [key: string]: unknown;
}

export class ScheduleStore extends StampedRepository<ScheduleRecord> {
  constructor(store: Store, clock: Clock) {
    super(store, BACKUP_SCHEDULES, { json: ['volume_ids', 'volume_tags', 'pre', 'post'], bool: ['verify'], dates: ['next_run_at', 'last_run_at', 'created_at', 'updated_at'] }, clock);
  }
}

/** A control-plane archive this installation uploaded (migration 008): what its schedule and keep_last believe. */
export interface ArchiveRecord {
  id: string;
  target_id: string;
  key: string;
  bytes: number;
  etag: string | null;
  made_at: string;
  created_at: string;
  [key: string]: unknown;
}

export class ArchiveStore extends Repository<ArchiveRecord> {
  constructor(store: Store) {
    super(store, CONTROL_PLANE_ARCHIVES, { dates: ['made_at', 'created_at'] });
  }

  /** A target's recorded archives, oldest first. */
  async ofTarget(targetId: string): Promise<ArchiveRecord[]> {
    return (await this.query().where({ target_id: targetId }).orderBy([{ column: 'made_at' }, { column: 'id' }])).map((r: Record<string, unknown>) => ({ ...this.decode(r), bytes: Number(r.bytes) }));
  }
}
