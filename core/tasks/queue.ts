import { randomUUID } from 'node:crypto';
import type { Knex } from 'knex';
import type { Clock } from '../clock.js';
import type { SecretBox } from '../crypto.js';
import { RowCodec, type Row } from '../db/repository.js';
import type { Store } from '../db/store.js';
import { conflict, notFound } from '../errors.js';
import { defineTopic, notice, type EventBus } from '../events.js';
import { newId } from '../ids.js';
import type { Logger } from '../log.js';
import { cannotRun, type AgentCapabilities, type PayloadOf, type ResultOf, type TaskKind, type TaskKindRegistry } from './kinds.js';
import { AGENT_CAPABILITIES, TASKS } from './migrations.js';

export type TaskStatus = 'pending' | 'leased' | 'completed' | 'failed';

export interface Task {
  id: string;
  node_id: string;
  kind: string;
  payload: Record<string, unknown> | null;
  status: TaskStatus;
  attempts: number;
  max_attempts: number;
  read_once: boolean;
  lease_expires_at: string | null;
  result: unknown;
  error: string | null;
  /** What the task is about (a resource id), so result endpoints can check it belongs to them. */
  subject: string | null;
  /** What its agent last said of its progress while it ran (a backup's `bytes_done` of `bytes_total`); null when it said nothing. */
  progress?: Record<string, unknown> | null;
  created_at: string;
  updated_at: string;
  completed_at: string | null;
}

/** A task was queued, leased by its agent, completed or failed (its record as it is then). */
export const TaskQueued = defineTopic<Task>('task.queued');
export const TaskLeased = defineTopic<Task>('task.leased');
export const TaskCompleted = defineTopic<Task>('task.completed');
export const TaskFailed = defineTopic<Task>('task.failed');

interface EnqueueOptions {
  nodeId: string;
  maxAttempts?: number;
  readOnce?: boolean;
  subject?: string;
  /** Drop this node's not-yet-leased tasks of the same kind first (the new one supersedes them). */
  replacePending?: boolean;
  /**
   * A write that must commit with the task or not at all: run in the transaction that inserts it
   * (the task's id given), before the node is woken. One that throws rolls the task back, and
   * enqueue throws that error. Only queries through `trx` (on SQLite a read beside it waits for it).
   */
  within?: (trx: Knex.Transaction, taskId: string) => Promise<void>;
}

/** A task to queue: its kind's declaration types the payload at compile time (and its schema checks it when queued). */
export interface EnqueueInput<K extends TaskKind = TaskKind> extends EnqueueOptions {
  kind: K;
  payload: PayloadOf<K>;
}

/**
 * A task queued by its kind's name, untyped: for what knows no kind declaration at compile time (a
 * third party's driver loaded by module path, the runner's terminal). The payload is checked
 * against the registered kind's schema when queued, as a typed one is.
 */
export interface NamedEnqueueInput extends EnqueueOptions {
  kind: string;
  payload?: Record<string, unknown>;
}

/**
 * The result of a completed task of `kind`, typed by the kind's result schema (which the agent's
 * report was checked against, {@link TaskQueue.report}); undefined for a task of another kind or
 * one not completed.
 */
export function resultOf<K extends TaskKind>(task: Pick<Task, 'kind' | 'status' | 'result'>, kind: K): ResultOf<K> | undefined {
  return isTaskOf(task, kind) && task.status === 'completed' ? (task.result as ResultOf<K>) : undefined;
}

/** Whether a task is of `kind` (its name on the wire). */
export function isTaskOf(task: Pick<Task, 'kind'>, kind: TaskKind): boolean {
  return task.kind === kind.name;
}

export interface TaskQueueOptions {
  /** How long an agent holds a task before it returns to pending. */
  leaseMs: number;
  /** Most tasks handed to one agent per poll. */
  batch: number;
  /** Heartbeats renew a held task's lease until this long after it was queued (a hung task still ends). */
  maxHoldMs?: number;
  /** Told of every long-poll look at a node's queue: whether it asked the store, or knew it empty. */
  onPollLook?: (queried: boolean) => void;
}

/** The longest a node's queue is taken to be empty without looking again (a backstop: wake-ups end it sooner). */
const IDLE_TRUST_MS = 5 * 60_000;

/** Store notices on this topic wake a node's long-polls (key: the node id) in every control plane. */
const WAKE_TOPIC = 'tasks.wake';
/** Notice: a node's agent capabilities were written (the key: the node id, a space, the writing queue's id). */
const CAPABILITIES_TOPIC = 'tasks.capabilities';

const codec = new RowCodec({ json: ['payload', 'result', 'progress'], bool: ['read_once'], dates: ['lease_expires_at', 'created_at', 'updated_at', 'completed_at'] });

/** A payload or result as the tasks table stores it: its JSON sealed (what an older version left is plain). */
interface SealedJson {
  $sealed: string;
}
const isSealed = (value: unknown): value is SealedJson =>
  typeof value === 'object' && value !== null && typeof (value as SealedJson).$sealed === 'string' && Object.keys(value).length === 1;

/** What an API answers about a task: no payload (it may hold secrets), the result when there is one. */
export function taskView(task: Task) {
  return {
    task_id: task.id,
    kind: task.kind,
    node_id: task.node_id,
    status: task.status,
    attempts: task.attempts,
    created_at: task.created_at,
    completed_at: task.completed_at,
    ...(task.status === 'completed' ? { result: task.result } : {}),
    ...(task.error ? { error: task.error } : {}),
    ...(task.progress ? { progress: task.progress } : {}),
  };
}

/**
 * Whether this reader's read of a finished read-once result consumes it. An auditor reads everything
 * and changes nothing: its read leaves the result for the caller that queued it (the id of another's
 * task reaches an auditor through the event stream).
 */
export function consumesReadOnce(reader: { role: string } | null | undefined): boolean {
  return reader?.role !== 'auditor';
}

/** A payload that does not match its kind's schema: a bug in the caller, never the user's input. */
export class TaskPayloadError extends Error {}

/**
 * The durable task queue: pending → leased (one agent, lease deadline) → completed | failed.
 * Expired leases go back to pending until attempts run out. Agents wait for work by long-poll;
 * wake-ups cross processes as store notices on PostgreSQL (LISTEN/NOTIFY, core/db/notices.ts,
 * whose listening connection reconnects after an error and then wakes every poll to look again),
 * between the workers of one control plane through its primary process (api.workers), and stay
 * in-process on SQLite otherwise.
 *
 * Every task is of a registered kind: its payload is checked when it is queued, the agent's
 * answer when it is reported, and a node whose agent (as its last heartbeat said) cannot run the
 * kind is refused with a 409 before anything is queued.
 */
export class TaskQueue {
  private readonly waiters = new Map<string, Set<() => void>>();
  /**
   * Nodes whose queue a long-poll found empty, and when. Every way a task becomes pending for a
   * node wakes it (enqueue, an expired lease), and a wake-up drops the node from here, so a
   * re-poll of an idle node (every agent, every poll_wait_seconds) needs no query. Trusted on
   * PostgreSQL only while the wake-up listener is connected (a wake-up may be missed otherwise).
   */
  private readonly idle = new Map<string, number>();
  private unsubscribe: (() => void) | null = null;
  /** What was last written per node, so that a heartbeat saying the same again writes nothing. */
  private readonly knownCapabilities = new Map<string, string>();
  /** Names this queue's capability writes in their notices, so that it skips its own (PostgreSQL echoes them back). */
  private readonly writer = randomUUID();

  /** The longest an agent may go between two heartbeats: they renew its tasks' leases, at least twice per lease. */
  get heartbeatCeilingMs(): number {
    return this.options.leaseMs / 2;
  }

  constructor(
    private readonly store: Store,
    private readonly clock: Clock,
    private readonly events: EventBus,
    /**
     * Seals payloads and results at rest: they may carry secret values (a swarm secret's data, a
     * join token), which must not sit in the store, its WAL or a backup in clear. Agents get them
     * in clear, over their mutual-TLS connection, and hold no key.
     */
    private readonly box: SecretBox,
    readonly options: TaskQueueOptions,
    /** The task kinds this control plane queues (plugins and backends register theirs at setup). */
    readonly kinds: TaskKindRegistry,
    private readonly log: Logger,
  ) {}

  private seal(value: unknown): SealedJson | null {
    return value === null || value === undefined ? null : { $sealed: this.box.seal(JSON.stringify(value)) };
  }

  private open(value: unknown): unknown {
    return isSealed(value) ? JSON.parse(this.box.openString(value.$sealed)) : value;
  }

  private decode(row: Row): Task {
    const task = codec.decode<Task>(row);
    return { ...task, payload: this.open(task.payload) as Task['payload'], result: this.open(task.result) };
  }

  private get knex(): Knex {
    return this.store.knex;
  }

  /**
   * Hears wake-ups from other control planes (PostgreSQL), workers (api.workers) and the runner's
   * tools (a script, the terminal; on SQLite by a row read within a quarter second); the store's
   * notices must be started first.
   * A `null` notice (the listening connection was lost, so some may have been missed) wakes every
   * poll held here: each looks at the store again.
   */
  start(): void {
    if (this.unsubscribe) return;
    const wakes = this.store.notices.subscribe(WAKE_TOPIC, (nodeId) => (nodeId === null ? this.wakeAll() : this.wakeLocal(nodeId)));
    const writes = this.store.notices.subscribe(CAPABILITIES_TOPIC, (written) => {
      if (written === null) return this.knownCapabilities.clear();
      const [nodeId, writer] = written.split(' ');
      if (writer !== this.writer) this.knownCapabilities.delete(nodeId!);
    });
    this.unsubscribe = () => {
      wakes();
      writes();
    };
  }

  async close(): Promise<void> {
    this.unsubscribe?.();
    this.unsubscribe = null;
    this.wakeAll();
  }

  private wakeAll(): void {
    this.idle.clear();
    const sets = [...this.waiters.values()];
    this.waiters.clear();
    for (const set of sets) for (const wake of set) wake();
  }

  private wakeLocal(nodeId: string): void {
    this.idle.delete(nodeId);
    const set = this.waiters.get(nodeId);
    if (!set) return;
    this.waiters.delete(nodeId);
    for (const wake of set) wake();
  }

  private async wake(nodeId: string): Promise<void> {
    // The notice reaches this process at once, and every other control plane by NOTIFY (PostgreSQL),
    // the other workers through the primary process (api.workers), the control plane a tool of the
    // runner shares SQLite with by a row. One control plane alone on SQLite wakes its own polls.
    if (this.othersMustHear) await this.store.notices.publish(WAKE_TOPIC, nodeId);
    else this.wakeLocal(nodeId);
  }

  /** Whether what this queue writes must be told to other processes serving the store. */
  private get othersMustHear(): boolean {
    return this.store.notices.reachesServers || !this.store.notices.serving;
  }

  /**
   * Records what a node's agent said it can run (a heartbeat); writes only when it changed. A write
   * is announced, so that another control plane (or worker) that remembers what it wrote before
   * writes again when the agent goes back to that.
   */
  async recordCapabilities(nodeId: string, capabilities: AgentCapabilities): Promise<void> {
    const row = { version: capabilities.version, kinds: capabilities.kinds ? JSON.stringify(capabilities.kinds) : null, backends: JSON.stringify(capabilities.backends) };
    const key = JSON.stringify(row);
    if (this.knownCapabilities.get(nodeId) === key) return;
    await this.knex(AGENT_CAPABILITIES)
      .insert({ node_id: nodeId, ...row, updated_at: this.clock.now().toISOString() })
      .onConflict('node_id')
      .merge();
    if (this.othersMustHear) await this.store.notices.publish(CAPABILITIES_TOPIC, `${nodeId} ${this.writer}`);
    this.knownCapabilities.set(nodeId, key);
  }

  /** What a node's agent last said it can run, or null before its first heartbeat. */
  async capabilities(nodeId: string): Promise<AgentCapabilities | null> {
    const row = await this.knex(AGENT_CAPABILITIES).where({ node_id: nodeId }).first();
    if (!row) return null;
    return { version: row.version, kinds: row.kinds ? JSON.parse(row.kinds) : null, backends: JSON.parse(row.backends) };
  }

  /** Forgets a node's capabilities (the node is gone). */
  async forgetCapabilities(nodeId: string): Promise<void> {
    this.knownCapabilities.delete(nodeId);
    await this.knex(AGENT_CAPABILITIES).where({ node_id: nodeId }).delete();
  }

  /**
   * A 409 unless the node's agent can run every one of these kinds, as far as its heartbeats tell:
   * for work that will queue them later (in the background), so that the request is refused now.
   */
  async requireCapable(nodeId: string, kinds: readonly TaskKind[], payload?: Record<string, unknown>): Promise<void> {
    const capabilities = await this.capabilities(nodeId);
    for (const kind of kinds) {
      const refusal = cannotRun(kind, capabilities, payload);
      if (refusal) throw conflict(`Node ${nodeId} cannot run this (${kind.name}): ${refusal}`);
    }
  }

  /** Queues a task of a declared kind for a node's agent; its payload is typed by the kind. */
  enqueue<K extends TaskKind>(input: EnqueueInput<K>): Promise<Task> {
    // A name is still taken at run time (what the runner's terminal types), as enqueueNamed does.
    const { kind, payload } = input as EnqueueOptions & { kind: TaskKind | string; payload?: unknown };
    return this.queue(typeof kind === 'string' ? this.kinds.require(kind) : kind, payload, input);
  }

  /** Queues a task by its kind's name (the untyped path: {@link NamedEnqueueInput}). */
  enqueueNamed(input: NamedEnqueueInput): Promise<Task> {
    return this.queue(this.kinds.require(input.kind), input.payload, input);
  }

  private async queue(kind: TaskKind, given: unknown, input: EnqueueOptions): Promise<Task> {
    const invalid = this.kinds.checkPayload(kind, given ?? {});
    if (invalid) throw new TaskPayloadError(`a ${kind.name} task for node ${input.nodeId} was built wrong: ${invalid}`);
    const payload = given as Record<string, unknown> | undefined;
    await this.requireCapable(input.nodeId, [kind], payload);
    const now = this.clock.now().toISOString();
    const row = {
      id: newId('task'),
      node_id: input.nodeId,
      kind: kind.name,
      payload: this.seal(payload),
      status: 'pending',
      attempts: 0,
      max_attempts: input.maxAttempts ?? 3,
      read_once: input.readOnce ?? false,
      subject: input.subject ?? null,
      created_at: now,
      updated_at: now,
    };
    const insert = async (q: Knex | Knex.Transaction) => {
      if (input.replacePending) await q(TASKS).where({ node_id: input.nodeId, kind: kind.name, status: 'pending' }).delete();
      await q(TASKS).insert(codec.encode(row));
    };
    const { within } = input;
    if (within)
      await this.knex.transaction(async (trx) => {
        await insert(trx);
        await within(trx, row.id);
      });
    else await insert(this.knex);
    await this.wake(input.nodeId);
    const queued = (await this.get(row.id))!;
    this.events.publish(TaskQueued, queued);
    return queued;
  }

  async get(id: string): Promise<Task | null> {
    const row = await this.knex(TASKS).where({ id }).first();
    return row ? this.decode(row) : null;
  }

  /** Whether this node's queue is known to be empty: found so, and no wake-up for it since. */
  private knownIdle(nodeId: string): boolean {
    const since = this.idle.get(nodeId);
    if (since === undefined) return false;
    if ((this.store.dialect === 'postgres' && !this.store.notices.listening) || Date.now() - since > IDLE_TRUST_MS) {
      this.idle.delete(nodeId);
      return false;
    }
    return true;
  }

  /** Long-polls held open by this process right now. */
  get openPolls(): number {
    let n = 0;
    for (const set of this.waiters.values()) n += set.size;
    return n;
  }

  /** Claims up to `batch` pending tasks of a node (announced as `task.leased`); concurrent pollers never get the same task. */
  async lease(nodeId: string): Promise<Task[]> {
    const leased = await this.refuseUnknownFields(nodeId, await this.claim(nodeId));
    for (const task of leased) this.events.publish(TaskLeased, task);
    return leased;
  }

  /**
   * Tasks of kinds with fields added later are judged again when their agent takes them: it may
   * have gone back to an older executable since they were queued (an update rolled back). One it
   * would misapply fails with the reason instead of being handed out.
   */
  private async refuseUnknownFields(nodeId: string, leased: Task[]): Promise<Task[]> {
    const judged = leased.filter((task) => this.kinds.get(task.kind)?.fieldsSince);
    if (!judged.length) return leased;
    const capabilities = await this.capabilities(nodeId);
    const refused = new Set<string>();
    for (const task of judged) {
      const refusal = cannotRun(this.kinds.get(task.kind)!, capabilities, task.payload as Record<string, unknown>);
      if (!refusal) continue;
      refused.add(task.id);
      await this.report(task.id, nodeId, { ok: false, error: `Node ${nodeId} cannot run this (${task.kind}): ${refusal}` });
    }
    return leased.filter((task) => !refused.has(task.id));
  }

  private async claim(nodeId: string): Promise<Task[]> {
    const now = this.clock.now();
    const until = new Date(now.getTime() + this.options.leaseMs).toISOString();
    const stamp = now.toISOString();
    if (this.store.dialect === 'postgres') {
      const result = await this.knex.raw(
        `update ${TASKS} set status = 'leased', attempts = attempts + 1, lease_expires_at = ?, updated_at = ?
         where id in (select id from ${TASKS} where node_id = ? and status = 'pending'
                      order by created_at, id limit ? for update skip locked)
         returning *`,
        [until, stamp, nodeId, this.options.batch],
      );
      return (result.rows as Row[]).map((r) => this.decode(r)).sort((a, b) => a.created_at.localeCompare(b.created_at));
    }
    return this.knex.transaction(async (trx) => {
      const ids: string[] = (
        await trx(TASKS).where({ node_id: nodeId, status: 'pending' }).orderBy([{ column: 'created_at' }, { column: 'id' }]).limit(this.options.batch).select('id')
      ).map((r: { id: string }) => r.id);
      if (!ids.length) return [];
      await trx(TASKS)
        .whereIn('id', ids)
        .update({ status: 'leased', lease_expires_at: until, updated_at: stamp, attempts: trx.raw('attempts + 1') });
      const rows: Row[] = await trx(TASKS).whereIn('id', ids).orderBy([{ column: 'created_at' }, { column: 'id' }]);
      return rows.map((r) => this.decode(r));
    });
  }

  /**
   * Renews the leases of tasks a node's agent still holds (running, or waiting their turn behind
   * a slow one), so that none returns to pending and runs twice. Other nodes' tasks and tasks no
   * longer leased are left alone, and so is a task queued more than `maxHoldMs` ago: a hung one
   * still expires, and fails once its attempts are used up. Answers how many were renewed.
   */
  async renewLeases(nodeId: string, taskIds: string[]): Promise<number> {
    if (!taskIds.length) return 0;
    const now = this.clock.now();
    const until = new Date(now.getTime() + this.options.leaseMs).toISOString();
    const queuedAfter = new Date(now.getTime() - (this.options.maxHoldMs ?? 3_600_000)).toISOString();
    return this.knex(TASKS)
      .where({ node_id: nodeId, status: 'leased' })
      .whereIn('id', taskIds)
      .where('created_at', '>', queuedAfter)
      .update({ lease_expires_at: until, updated_at: now.toISOString() });
  }

  /**
   * Records what a node's agent says of a task it runs (its progress: plain numbers and words, never
   * a secret; kept unsealed). Only while the task is leased by that node: answers whether it was.
   */
  async reportProgress(taskId: string, nodeId: string, progress: Record<string, unknown>): Promise<boolean> {
    const updated = await this.knex(TASKS)
      .where({ id: taskId, node_id: nodeId, status: 'leased' })
      .update({ progress: JSON.stringify(progress), updated_at: this.clock.now().toISOString() });
    return updated > 0;
  }

  /**
   * Leases tasks for a node, waiting up to `waitMs` for one to be queued. Returns as soon as there
   * is work, with an empty list at the deadline, or when `signal` aborts.
   */
  async poll(nodeId: string, waitMs: number, signal: AbortSignal): Promise<Task[]> {
    const deadline = Date.now() + waitMs;
    for (let round = 0; ; round++) {
      let woken = false;
      let wake!: () => void;
      const wakeUp = new Promise<void>((resolve) => {
        wake = () => {
          woken = true;
          resolve();
        };
      });
      // Register before looking, so a task queued in between still wakes us.
      const set = this.waiters.get(nodeId) ?? new Set();
      set.add(wake);
      this.waiters.set(nodeId, set);
      try {
        // After a wake-up (a later round), always look: it may have come in while the store was asked.
        const skip = round === 0 && this.knownIdle(nodeId);
        this.options.onPollLook?.(!skip);
        const tasks = skip ? [] : await this.lease(nodeId);
        // Empty, and no wake-up while asking (this round's waiter was registered before): idle.
        if (!skip && !tasks.length && !woken) this.idle.set(nodeId, Date.now());
        const remaining = deadline - Date.now();
        if (tasks.length || remaining <= 0 || signal.aborted) return tasks;
        let timer: NodeJS.Timeout | undefined;
        const onAbort = () => wake();
        signal.addEventListener('abort', onAbort, { once: true });
        await Promise.race([wakeUp, new Promise<void>((resolve) => (timer = setTimeout(resolve, remaining)))]);
        clearTimeout(timer);
        signal.removeEventListener('abort', onAbort);
        if (!woken) return [];
      } finally {
        set.delete(wake);
        if (!set.size && this.waiters.get(nodeId) === set) this.waiters.delete(nodeId);
      }
    }
  }

  /**
   * Records an agent's report. A result for a task no longer this node's, or already reported, is a
   * 409. A result that does not match its kind's schema makes the task fail, saying what is wrong.
   */
  async report(taskId: string, nodeId: string, reported: { ok: boolean; output?: unknown; error?: string }): Promise<Task> {
    const task = await this.get(taskId);
    if (!task || task.node_id !== nodeId) throw notFound(`No task ${taskId} for node ${nodeId}`);
    let outcome = reported;
    const kind = this.kinds.get(task.kind);
    const malformed = outcome.ok && kind ? this.kinds.checkResult(kind, outcome.output ?? null) : null;
    if (malformed) {
      this.log.warn({ task_id: taskId, kind: task.kind, node_id: nodeId, problem: malformed }, 'an agent answered a malformed result');
      outcome = { ok: false, error: `the agent on node ${nodeId} answered a malformed ${task.kind} result: ${malformed}` };
    }
    const now = this.clock.now().toISOString();
    const settled = {
      status: outcome.ok ? 'completed' : 'failed',
      result: outcome.output ?? null,
      error: outcome.ok ? null : (outcome.error ?? 'the agent reported a failure without a reason'),
      lease_expires_at: null,
      updated_at: now,
      completed_at: now,
    } as const;
    const write = async (k: Knex | Knex.Transaction = this.knex): Promise<number> =>
      k(TASKS)
        .where({ id: taskId })
        .whereIn('status', ['leased', 'pending'])
        .update(codec.encode({ ...settled, result: this.seal(outcome.output) }));
    // A failure's durable listeners (its notification) write in the transaction that records it.
    const updated = outcome.ok ? await write() : await this.keepFailure({ ...task, ...settled }, write);
    if (!updated) throw conflict(`Task ${taskId} is already ${task.status}`);
    const done = (await this.get(taskId))!;
    this.events.publish(outcome.ok ? TaskCompleted : TaskFailed, done);
    return done;
  }

  /**
   * Settles a task as failed by `write` (a guarded update answering how many rows it changed), in one
   * transaction with what the durable listeners of {@link TaskFailed} keep of `failed` (its
   * notification); when that cannot be written, the task is settled alone and the loss logged.
   */
  private keepFailure(failed: Task, write: (k?: Knex.Transaction) => Promise<number>): Promise<number> {
    return this.events.keepWith(this.knex, [notice(TaskFailed, failed)], write, { log: this.log, wanted: (changed) => changed > 0 });
  }

  /** Returns expired leases to pending, or fails tasks that used up their attempts. */
  async expireLeases(): Promise<{ retried: number; failed: number }> {
    const now = this.clock.now().toISOString();
    const expired: Row[] = await this.knex(TASKS).where({ status: 'leased' }).where('lease_expires_at', '<', now).select('*');
    let retried = 0;
    let failed = 0;
    for (const row of expired.map((r) => this.decode(r))) {
      const exhausted = row.attempts >= row.max_attempts;
      const patch = exhausted
        ? ({ status: 'failed', error: `no result after ${row.attempts} attempt(s): the agent's lease expired each time`, updated_at: now, completed_at: now, lease_expires_at: null } as const)
        : ({ status: 'pending', updated_at: now, lease_expires_at: null } as const);
      const write = async (k: Knex | Knex.Transaction = this.knex): Promise<number> => k(TASKS).where({ id: row.id, status: 'leased' }).where('lease_expires_at', '<', now).update(patch);
      const changed = exhausted ? await this.keepFailure({ ...row, ...patch }, write) : await write();
      if (!changed) continue;
      if (exhausted) {
        failed++;
        this.events.publish(TaskFailed, (await this.get(row.id))!);
      } else {
        retried++;
        await this.wake(row.node_id);
      }
    }
    return { retried, failed };
  }

  /**
   * The task's state for a result endpoint. A finished read-once task is deleted as it is handed
   * over, so a second read is a 404 — unless `consume` is false: a reader who changes nothing (an
   * auditor, {@link consumesReadOnce}) sees the result and leaves it to whoever asked for it.
   */
  async take(taskId: string, check: { nodeId?: string; kind?: string | string[]; subject?: string; consume?: boolean } = {}): Promise<Task> {
    const missing = notFound(`No task ${taskId} (results of this kind can be read once)`);
    return this.knex.transaction(async (trx) => {
      const row = await trx(TASKS).where({ id: taskId }).first();
      const task = row ? this.decode(row) : null;
      if (!task) throw missing;
      if ((check.nodeId && task.node_id !== check.nodeId) || (check.kind && ![check.kind].flat().includes(task.kind)) || (check.subject && task.subject !== check.subject)) {
        throw missing;
      }
      if (task.read_once && check.consume !== false && (task.status === 'completed' || task.status === 'failed')) {
        const deleted = await trx(TASKS).where({ id: taskId }).delete();
        if (!deleted) throw missing;
      }
      return task;
    });
  }

  /**
   * Waits until a task completes or fails and returns it. Wakes on this process's report at once
   * and re-reads the store every `recheckMs` (a report may land on another control plane).
   * At the deadline, or when `signal` aborts, returns the task as it stands.
   */
  async settle(taskId: string, options: { timeoutMs: number; signal?: AbortSignal; recheckMs?: number; until?: TaskStatus[] }): Promise<Task> {
    const deadline = Date.now() + options.timeoutMs;
    const until = options.until ?? ['completed', 'failed'];
    // The task as its report announced it here: a read-once task whose caller read (and so deleted) it
    // the moment it finished is known by its announcement.
    let announced: Task | null = null;
    for (;;) {
      const task = (await this.get(taskId)) ?? announced;
      if (!task) throw notFound(`No task ${taskId}`);
      const remaining = deadline - Date.now();
      if (until.includes(task.status) || remaining <= 0 || options.signal?.aborted) return task;
      await new Promise<void>((resolve) => {
        const done = () => {
          clearTimeout(timer);
          unsubscribeOk();
          unsubscribeFailed();
          options.signal?.removeEventListener('abort', done);
          resolve();
        };
        const mine = (task: Task) => {
          if (task.id !== taskId) return;
          announced = task;
          done();
        };
        const unsubscribeOk = this.events.subscribe(TaskCompleted, mine);
        const unsubscribeFailed = this.events.subscribe(TaskFailed, mine);
        const timer = setTimeout(done, Math.min(remaining, options.recheckMs ?? 2000));
        options.signal?.addEventListener('abort', done, { once: true });
      });
    }
  }

  /** Fails every unfinished task of a node (it is being removed). */
  async cancelForNode(nodeId: string, reason: string): Promise<number> {
    const now = this.clock.now().toISOString();
    return this.knex(TASKS).where({ node_id: nodeId }).whereIn('status', ['pending', 'leased']).update({ status: 'failed', error: reason, updated_at: now, completed_at: now });
  }

  async countOpen(nodeId: string): Promise<number> {
    const [row] = await this.knex(TASKS).where({ node_id: nodeId }).whereIn('status', ['pending', 'leased']).count<{ n: number }[]>({ n: '*' });
    return Number(row?.n ?? 0);
  }
}
