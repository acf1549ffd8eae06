import type { Static } from '@sinclair/typebox';
import type { HangarConfig } from '../../config/schema.js';
import type { Store } from '../db/store.js';
import { HttpError, conflict } from '../errors.js';
import type { Logger } from '../log.js';
import { BundleLogs, WorkloadLogs } from '../orchestrator.js';
import { callPayload, type DriverCall, type PayloadOf, type ResultOf, type TaskKind } from '../tasks/kinds.js';
import { TASKS } from '../tasks/migrations.js';
import { consumesReadOnce, taskView, type Task, type TaskQueue } from '../tasks/queue.js';
import type { BackendRegistry } from './backend-registry.js';
import type { ClusterRecord, ClusterStore, MemberStore } from './store.js';

/** An orchestrator call the agent could not carry out; the message is the agent's reason. */
export class OrchestratorError extends Error {
  constructor(
    readonly method: string,
    reason: string,
    /** True when no agent took the task at all (offline, or refusing it): another manager may. */
    readonly unreachable = false,
  ) {
    super(reason);
  }
}

/** An orchestrator failure as an HTTP answer: the runtime refused what was asked (409), with its reason. */
export function asHttpError(err: unknown, what: string): Error {
  if (err instanceof OrchestratorError) return new HttpError(409, `${what} failed: ${err.message}`);
  return err as Error;
}

export interface CallOptions {
  timeoutMs?: number;
  subject?: string;
  /** Give up (unreachable) when no agent has taken the task after this long. */
  pickupTimeoutMs?: number;
  /** Told the task once it is queued (a request that answers 202 hands its id over). */
  onQueued?: (task: Task) => void;
  /**
   * Asked once the outcome is known: true keeps the task (read once: `tasks.take` deletes it),
   * for a caller that answered 202 with it; by default the task is deleted then.
   */
  keep?: () => boolean;
}

export interface CallsDeps {
  config: HangarConfig;
  db: Store;
  tasks: TaskQueue;
  log: Logger;
  shutdown: AbortSignal;
  clusters: ClusterStore;
  members: MemberStore;
  registry: BackendRegistry;
  /** The settings calls read when they are made (they may be tuned until start-up ends). */
  settings(): { callTimeoutMs: number; pickupTimeoutMs: number };
}

/**
 * Typed tasks routed to the right agent: one node's, or a cluster's manager, failing over to
 * another manager when it does not take the task; and reads (logs) queued for a 202 and read once.
 */
export class ClusterCalls {
  constructor(private readonly deps: CallsDeps) {}

  /**
   * Runs one task on a node's agent and waits for its outcome; throws OrchestratorError with the
   * agent's reason, when no result came in time, or (unreachable) when no agent took it within
   * `pickupTimeoutMs`.
   */
  async runTask<K extends TaskKind>(nodeId: string, kind: K, payload: PayloadOf<K>, options: CallOptions = {}): Promise<ResultOf<K>> {
    const what = (kind as unknown as Partial<DriverCall>).method ?? kind.name;
    let task;
    try {
      task = await this.deps.tasks.enqueue({ nodeId, kind, payload, subject: options.subject, readOnce: options.keep !== undefined });
    } catch (err) {
      // The node's agent cannot run it (too old): another manager may.
      if (err instanceof HttpError && err.status === 409) throw new OrchestratorError(what, err.message, true);
      throw err;
    }
    options.onQueued?.(task);
    const timeoutMs = options.timeoutMs ?? this.deps.settings().callTimeoutMs;
    const signal = this.deps.shutdown;
    if (options.pickupTimeoutMs !== undefined) {
      const picked = await this.deps.tasks.settle(task.id, { timeoutMs: Math.min(options.pickupTimeoutMs, timeoutMs), signal, until: ['leased', 'completed', 'failed'] });
      if (picked.status === 'pending') {
        await this.deps.db.knex(TASKS).where({ id: task.id, status: 'pending' }).delete();
        throw new OrchestratorError(what, `the agent on node ${nodeId} did not take the task within ${Math.round(options.pickupTimeoutMs / 1000)} s (is it online?)`, true);
      }
    }
    const done = await this.deps.tasks.settle(task.id, { timeoutMs, signal });
    // The payload may hold secret values; nothing needs the task once its outcome is known (unless
    // a caller answered 202 with it: then it is read once). A call nobody waits for any more must
    // not run later either: a still-pending one is withdrawn.
    if (done.status === 'pending' || (done.status !== 'leased' && !options.keep?.())) await this.deps.db.knex(TASKS).where({ id: task.id }).delete();
    if (done.status === 'completed') return done.result as ResultOf<K>;
    if (done.status === 'failed') throw new OrchestratorError(what, done.error ?? 'the agent reported a failure');
    throw new OrchestratorError(what, `no result from the agent on node ${nodeId} within ${Math.round(timeoutMs / 1000)} s (is it online?)`, done.status === 'pending');
  }

  /** Runs a driver call of `backend` on a node's agent (the payload is the backend plus the call's input). */
  call<C extends DriverCall>(nodeId: string, call: C, input: Static<C['input']>, options: CallOptions & { backend: string }): Promise<Static<C['result']>> {
    const { backend, ...rest } = options;
    return this.runTask(nodeId, call, callPayload(call, backend, input), rest);
  }

  /** The nodes asked for a cluster's orchestrator calls: its manager, then its other active managers. */
  async managersOf(cluster: ClusterRecord): Promise<string[]> {
    const others = (await this.deps.members.of(cluster.id)).filter((m) => m.role === 'manager' && m.status === 'active' && m.node_id !== cluster.manager_node_id).map((m) => m.node_id);
    return [...(cluster.manager_node_id ? [cluster.manager_node_id] : []), ...others];
  }

  /** The context core adds to a call about a cluster (only the parts the call takes). */
  private async context(cluster: ClusterRecord, call: DriverCall): Promise<Record<string, unknown>> {
    const takes = call.input.properties as Record<string, unknown>;
    const context: Record<string, unknown> = {};
    if ('cluster_nodes' in takes) {
      context.cluster_nodes = Object.fromEntries((await this.deps.members.of(cluster.id)).filter((m) => m.runtime_node_id).map((m) => [m.node_id, m.runtime_node_id]));
    }
    if ('settings' in takes) context.settings = this.deps.registry.get(cluster.backend).settings(this.deps.config);
    return context;
  }

  /**
   * Runs a driver call on the cluster's manager. When that manager's agent does not take the task
   * (offline, too old) and the cluster has other managers, the next one is asked, and the one that
   * answers becomes the cluster's manager.
   */
  async callOn<C extends DriverCall>(cluster: ClusterRecord, call: C, input: Static<C['input']>, options: Omit<CallOptions, 'pickupTimeoutMs'> = {}): Promise<Static<C['result']>> {
    const candidates = await this.managersOf(cluster);
    if (!candidates.length) throw conflict(`${this.deps.registry.named(cluster)} has no manager`);
    input = { ...(await this.context(cluster, call)), ...input };
    for (const [i, nodeId] of candidates.entries()) {
      const last = i === candidates.length - 1;
      try {
        const pickupTimeoutMs = last ? undefined : this.deps.settings().pickupTimeoutMs;
        const result = await this.call(nodeId, call, input, { ...options, backend: cluster.backend, subject: options.subject ?? cluster.id, pickupTimeoutMs });
        if (nodeId !== cluster.manager_node_id) {
          this.deps.log.info({ cluster_id: cluster.id, from: cluster.manager_node_id, to: nodeId }, 'another manager answered; it manages the cluster now');
          await this.deps.clusters.change(cluster.id, { manager_node_id: nodeId });
        }
        return result;
      } catch (err) {
        if (last || !(err instanceof OrchestratorError) || !err.unreachable) throw err;
        this.deps.log.warn({ cluster_id: cluster.id, node_id: nodeId, error: err.message }, 'a manager did not take a call; asking the next');
      }
    }
    throw new Error('unreachable');
  }

  /** Queues a read (logs) on the cluster's manager as a read-once task about `subject`; the task view for a 202. */
  async queueRead<C extends DriverCall>(cluster: ClusterRecord, call: C, input: Static<C['input']>, subject: string) {
    if (!cluster.manager_node_id) throw conflict(`${this.deps.registry.named(cluster)} has no manager`);
    return taskView(await this.deps.tasks.enqueue({ nodeId: cluster.manager_node_id, kind: call, payload: callPayload(call, cluster.backend, input), readOnce: true, subject }));
  }

  /** A queued read's state, and its result once done (read once: a second read is a 404; an auditor's read leaves it). */
  async takeRead(taskId: string, subject: string, kinds: readonly TaskKind[], reader: { role: string } | null) {
    return taskView(await this.deps.tasks.take(taskId, { subject, kind: kinds.map((k) => k.name), consume: consumesReadOnce(reader) }));
  }

  /** Queues a log read of a workload or a bundle on the cluster's manager (`lines` last lines, or everything after `since`). */
  queueLogs(cluster: ClusterRecord, call: typeof WorkloadLogs | typeof BundleLogs, name: string, options: { lines?: number; since?: string }, subject: string, placement: { namespace?: string; confined?: boolean } = {}) {
    const range = options.since ? { since: new Date(options.since).toISOString() } : { lines: options.lines ?? 100 };
    return this.queueRead(cluster, call, { name, ...placement, ...range }, subject);
  }

  /** A log read's state, and its lines once done (read once). */
  async readLogs(taskId: string, subject: string, reader: { role: string } | null): Promise<Record<string, unknown>> {
    const { result, ...rest } = (await this.takeRead(taskId, subject, [WorkloadLogs, BundleLogs], reader)) as ReturnType<typeof taskView> & { result?: { lines?: string[] } };
    return { ...rest, ...(result ? { lines: result.lines ?? [] } : {}) };
  }
}
