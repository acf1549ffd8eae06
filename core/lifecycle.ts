import type { Knex } from 'knex';
import type { Clock } from './clock.js';
import type { StampedRepository } from './db/repository.js';
import { defineTopic, notice, type EventBus } from './events.js';
import { randomToken } from './ids.js';
import type { BackgroundJobs } from './jobs.js';
import type { Logger } from './log.js';

/**
 * One lifecycle kit for every resource that changes in the background (instances, services,
 * object stores, load balancers, volumes, cluster members…):
 *
 * - a declared table of operations per resource kind: the statuses each may start from, the status
 *   while it runs, whether a second request joins a running one or takes the record from it;
 * - an **operation lease** on the record (`op`, `op_id`, `op_lease_until`): exactly one process
 *   works on a resource at a time; the one that runs the operation renews the lease, and a lease
 *   that expires (its process died) is taken over by any control plane sharing the store;
 * - `op_rev`, which every change of what the record asks for increments: an operation settles only
 *   the revision it worked on, so a change made while it ran makes it work again;
 * - a pure `reconcile(record, observed)`, applied by observations only to records no operation
 *   holds, so that an observation never overwrites a running operation.
 */
/** The statuses of a resource that something went wrong, announced on {@link ResourceTroubled} when a record enters one. */
export const TROUBLED_STATUSES: ReadonlySet<string> = new Set(['failed', 'rolled_back', 'paused']);

/**
 * A resource of a lifecycle entered a status of {@link TROUBLED_STATUSES}: an operation failed, or
 * an observation found it failed, rolled back or its rollout paused. Published once, by the process whose write made
 * the change; its durable listeners (the notification) write in the transaction of that change.
 */
export interface Trouble {
  noun: string;
  id: string;
  name: string | null;
  from: string | null;
  to: string;
  reason: string | null;
}
export const ResourceTroubled = defineTopic<Trouble>('resource.troubled');

/** The columns of an operation lease (core/clusters/migrations.ts `leaseColumns`). */
export interface LeaseFields {
  /** The operation working on the record now, or null. */
  op: string | null;
  op_id: string | null;
  op_lease_until: string | null;
  /** Counts changes of what the record asks for. */
  op_rev: number;
}

export interface LeasedRecord extends LeaseFields {
  id: string;
  name: string;
  /** Records without a status (secrets) use operations that start from any (`'*'`) and keep it. */
  status?: string;
  [key: string]: unknown;
}

/** The date columns a repository of leased records decodes (add them to its codec). */
export const LEASE_DATES = ['op_lease_until'] as const;

/** What an operation's work returns when it removed the record itself. */
export const REMOVED = Symbol('removed');

export interface OperationContext {
  /** This run's lease id. */
  opId: string;
  /** Aborts when another operation takes the record over, or the control plane shuts down. */
  signal: AbortSignal;
  /**
   * When a request joined while this operation ran, it works again on the new revision: this is
   * what its earlier pass answered (and did to the runtime) but could not record. Null on a first pass.
   */
  unrecorded: Partial<LeasedRecord> | null;
}

export interface Operation<R extends LeasedRecord> {
  /** The statuses it may start from (`'*'`: any). */
  from: readonly string[] | '*';
  /** The record's status while it runs (left as it is when not given). */
  during?: string;
  /** A request for it while it already runs joins the running one (which then works again on the new revision). */
  joins?: boolean;
  /** It takes the record from any other running operation (removals). */
  preempts?: boolean;
  /** The background job's name in the log, e.g. `terminate instance web`. */
  label(record: R): string;
  /** The work. Answers the patch that settles the record, or REMOVED when the record is gone. */
  run(record: R, ctx: OperationContext): Promise<Partial<R> | typeof REMOVED>;
  /** The patch that records a failure (a status and a reason). */
  failed(record: R, err: Error): Partial<R>;
}

export interface LifecycleDef<R extends LeasedRecord, O> {
  /** The noun in resume lines: `instance web: deploying`. */
  noun: string;
  /** The operations, in the order a take-over restarts them. */
  operations: Record<string, Operation<R>>;
  /** What an observation of the runtime changes in a record no operation holds (null: nothing). Pure. */
  reconcile?(record: R, observed: O): Partial<R> | null;
  /**
   * Whether the record's lease is the time it waits for before it runs again (a reaction that failed),
   * not a process at work: a start that takes every operation over leaves it until then.
   */
  waitsForLease?(record: R): boolean;
}

export function defineLifecycle<R extends LeasedRecord, O = never>(def: LifecycleDef<R, O>): LifecycleDef<R, O> {
  return def;
}

/**
 * The fields of `patch` whose values differ from the record's (JSON-compared), or null when none
 * does: what an observation would actually change.
 */
export function changes<R extends Record<string, unknown>>(record: R, patch: Partial<R> | null): Partial<R> | null {
  if (!patch) return null;
  const out: Partial<R> = {};
  for (const [key, value] of Object.entries(patch)) {
    if (JSON.stringify(record[key] ?? null) !== JSON.stringify(value ?? null)) (out as Record<string, unknown>)[key] = value;
  }
  return Object.keys(out).length ? out : null;
}

export interface LifecycleEnv {
  knex: Knex;
  clock: Clock;
  log: Logger;
  jobs: BackgroundJobs;
  shutdown: AbortSignal;
  leaseMs: number;
  /** Where {@link ResourceTroubled} is published (none: not announced). */
  bus?: EventBus;
}

const LONG_AGO = '1970-01-01T00:00:00.000Z';

/** The lifecycle of one resource kind over its repository. */
export class Lifecycle<R extends LeasedRecord, O = never> {
  constructor(
    readonly repo: StampedRepository<R>,
    readonly def: LifecycleDef<R, O>,
    private readonly env: LifecycleEnv,
  ) {}

  private get now(): string {
    return this.env.clock.now().toISOString();
  }

  private leaseUntil(): string {
    return new Date(this.env.clock.now().getTime() + this.env.leaseMs).toISOString();
  }

  /** What {@link ResourceTroubled} says of `patch` written over `before`: null unless it enters a troubled status. */
  private troubleOf(before: R, patch: Partial<R>): Trouble | null {
    const to = patch.status;
    if (typeof to !== 'string' || to === before.status || !TROUBLED_STATUSES.has(to)) return null;
    const fields = { ...before, ...patch } as Record<string, unknown>;
    const reason = [fields.reason, fields.error].find((v): v is string => typeof v === 'string' && v !== '') ?? null;
    const name = typeof fields.name === 'string' ? fields.name : null;
    return { noun: this.def.noun, id: before.id, name, from: before.status ?? null, to, reason };
  }

  /**
   * Writes `patch` over `before` by `write` (a guarded update answering how many rows it changed).
   * When the record enters a troubled status, in one transaction with what the durable listeners of
   * {@link ResourceTroubled} keep of it (its notification; a loss is logged and the record written
   * alone), and announced on the bus once written.
   */
  private async write(before: R, patch: Partial<R>, write: (q: Knex.QueryBuilder) => Promise<number>): Promise<number> {
    const trouble = this.troubleOf(before, patch);
    const bus = this.env.bus;
    if (!trouble || !bus) return write(this.repo.query());
    const written = await bus.keepWith(this.env.knex, [notice(ResourceTroubled, trouble)], (trx) => write(this.repo.query(trx)), { log: this.env.log, wanted: (n) => n > 0 });
    if (written) bus.publish(ResourceTroubled, trouble);
    return written;
  }

  private operation(op: string): Operation<R> {
    const found = this.def.operations[op];
    if (!found) throw new Error(`${this.def.noun}: no operation ${op}`);
    return found;
  }

  /**
   * Begins `op` on the record with `patch` (what the request changes), in one statement: when no
   * live operation holds it and its status allows `op`; or, for an operation that joins, when the
   * same operation runs (then only the patch is written and the revision counted). Answers the
   * record and whether this call now runs the operation, or null when it may not begin.
   */
  async begin(id: string, op: string, patch: Partial<R> = {}): Promise<{ record: R; run: boolean } | null> {
    const operation = this.operation(op);
    const now = this.now;
    const rev = this.env.knex.raw('op_rev + 1');
    if (operation.joins) {
      const joined = await this.repo
        .query()
        .where({ id, op })
        .whereNotNull('op_id')
        .where('op_lease_until', '>=', now)
        .update({ ...this.repo.codec.encode({ ...patch, updated_at: now }), op_rev: rev });
      if (joined) {
        const record = (await this.repo.get(id))!;
        this.repo.changed(id, 'update', record);
        return { record, run: false };
      }
    }
    const opId = `op-${randomToken(12)}`;
    const query = this.repo.query().where({ id });
    if (operation.from !== '*') query.whereIn('status', [...operation.from]);
    if (!operation.preempts) query.where((q) => q.whereNull('op_id').orWhere('op_lease_until', '<', now));
    const claimed = await query.update({
      ...this.repo.codec.encode({ ...patch, ...(operation.during ? { status: operation.during } : {}), op, op_id: opId, op_lease_until: this.leaseUntil(), updated_at: now }),
      op_rev: rev,
    });
    if (!claimed) return null;
    const record = (await this.repo.get(id))!;
    this.repo.changed(id, 'update', record);
    return { record, run: true };
  }

  /**
   * Begins `op` and runs it in the background; answers the record as it stands after the begin
   * (the 202's body). `refused` gives the 409 when the operation may not begin.
   */
  async start(id: string, op: string, patch: Partial<R>, refused: (current: R | null) => Error, label?: string): Promise<R> {
    const begun = await this.trigger(id, op, patch, label);
    if (!begun) throw refused(await this.repo.get(id));
    return begun;
  }

  /** Begins `op` and runs it in the background when it may begin (or joins it); null when it may not. */
  async trigger(id: string, op: string, patch: Partial<R> = {}, label?: string): Promise<R | null> {
    const begun = await this.begin(id, op, patch);
    if (begun?.run) this.launch(begun.record, op, label);
    return begun?.record ?? null;
  }

  /**
   * Begins `op` and runs it now, answering once it has settled (its error is thrown). A request
   * that joined a running operation waits for that one. Null when the operation may not begin.
   */
  async runNow(id: string, op: string, patch: Partial<R> = {}, work?: Operation<R>['run']): Promise<R | null> {
    const begun = await this.begin(id, op, patch);
    if (!begun) return null;
    if (begun.run) {
      await this.execute(begun.record, op, work);
      return this.repo.get(id);
    }
    for (;;) {
      await new Promise((resolve) => setTimeout(resolve, 200));
      const current = await this.repo.get(id);
      if (!current || current.op !== op || this.env.shutdown.aborted) return current;
    }
  }

  /**
   * Runs an operation this process wrote on the record itself with `opId` and a live lease (a
   * reaction's row, written in the transaction of the change it reacts to); false when the record is
   * gone or another process has taken the operation over meanwhile.
   */
  async runHeld(id: string, opId: string): Promise<boolean> {
    const record = await this.repo.get(id);
    if (!record?.op || record.op_id !== opId) return false;
    this.launch(record, record.op);
    return true;
  }

  private launch(record: R, op: string, label?: string): void {
    const operation = this.operation(op);
    this.env.jobs.run(label ?? operation.label(record), () => this.execute(record, op), () => undefined);
  }

  /** Runs an operation the caller holds the lease of: renews it, settles the record, records a failure. */
  private async execute(claimed: R, op: string, work?: Operation<R>['run']): Promise<void> {
    const operation = work ? { ...this.operation(op), run: work } : this.operation(op);
    const opId = claimed.op_id!;
    const lost = new AbortController();
    const signal = AbortSignal.any([lost.signal, this.env.shutdown]);
    const renew = setInterval(() => {
      this.repo
        .query()
        .where({ id: claimed.id, op_id: opId })
        .update(this.repo.codec.encode({ op_lease_until: this.leaseUntil() }))
        .then((held) => held || lost.abort())
        .catch((err: Error) => this.env.log.warn({ id: claimed.id, error: err.message }, 'renewing an operation lease failed'));
    }, Math.max(200, Math.floor(this.env.leaseMs / 3)));
    renew.unref();
    let record = claimed;
    let unrecorded: Partial<R> | null = null;
    try {
      for (;;) {
        const result = await operation.run(record, { opId, signal, unrecorded });
        if (result === REMOVED) return;
        const settled = await this.write(record, result, async (q) =>
          q.where({ id: record.id, op_id: opId, op_rev: record.op_rev }).update(this.repo.codec.encode({ ...result, op: null, op_id: null, op_lease_until: null, updated_at: this.now })),
        );
        if (settled) {
          this.repo.changed(record.id, 'update', record);
          return;
        }
        const current = await this.repo.get(record.id);
        // Gone, or taken over: nothing of this run is recorded.
        if (!current || current.op_id !== opId) return;
        // Changed while it ran (a request joined): work again on what the record asks for now.
        record = current;
        unrecorded = { ...(unrecorded ?? {}), ...(result as Partial<R>) } as Partial<R>;
      }
    } catch (err) {
      if (this.env.shutdown.aborted) {
        // Cut short by the shutdown: the lease is handed over at once (the next start, or another control plane, takes it).
        await this.repo.query().where({ id: record.id, op_id: opId }).update({ op_lease_until: LONG_AGO }).catch(() => undefined);
        throw err;
      }
      const current = await this.repo.get(record.id);
      if (current?.op_id === opId) {
        const failure = operation.failed(current, err as Error);
        await this.write(current, failure, async (q) => q.where({ id: record.id, op_id: opId }).update(this.repo.codec.encode({ ...failure, op: null, op_id: null, op_lease_until: null, updated_at: this.now })));
        this.repo.changed(record.id, 'update', current);
      }
      throw err;
    } finally {
      clearInterval(renew);
    }
  }

  /**
   * Applies an observation: what `reconcile` changes in a record no operation holds, at the
   * revision it was read at. The caller reads the record before it asks the backend: an operation
   * that held it then leaves it alone, one begun since moved its revision (the write finds nothing).
   * Answers the record after, or null when nothing was written.
   */
  async observe(record: R, observed: O): Promise<R | null> {
    if (!this.def.reconcile || record.op_id) return null;
    const patch = changes(record, this.def.reconcile(record, observed));
    if (!patch) return null;
    const written = await this.write(record, patch, async (q) => q.where({ id: record.id, op_rev: record.op_rev }).whereNull('op_id').update(this.repo.codec.encode({ ...patch, updated_at: this.now })));
    if (!written) return null;
    this.repo.changed(record.id, 'update', record);
    return this.repo.get(record.id);
  }

  /**
   * Takes over every operation whose lease has expired (its process stopped or died) and runs it
   * again; with `everything`, every operation at all (a start on SQLite served by one process, which owns it)
   * but those waiting for their lease to run out before they run again ({@link LifecycleDef.waitsForLease}).
   * Answers one line per record: `instance web: deploying`.
   */
  async takeOver(options: { everything?: boolean } = {}): Promise<string[]> {
    const now = this.now;
    const query = this.repo.query().whereNotNull('op_id');
    if (!options.everything) query.where('op_lease_until', '<', now);
    const order = Object.keys(this.def.operations);
    const rows = ((await query.orderBy('id')) as Record<string, unknown>[]).map(this.repo.decode);
    rows.sort((a, b) => order.indexOf(a.op!) - order.indexOf(b.op!));
    const lines: string[] = [];
    for (const stale of rows) {
      if (!this.def.operations[stale.op!]) continue;
      if (this.def.waitsForLease?.(stale) && Date.parse(String(stale.op_lease_until)) >= Date.parse(now)) continue;
      const opId = `op-${randomToken(12)}`;
      const claimed = await this.repo
        .query()
        .where({ id: stale.id, op_id: stale.op_id })
        .update(this.repo.codec.encode({ op_id: opId, op_lease_until: this.leaseUntil() }));
      if (!claimed) continue;
      const record = (await this.repo.get(stale.id))!;
      this.env.log.info({ id: record.id, op: record.op, previous: stale.op_id }, 'took over an operation whose lease had expired');
      this.launch(record, record.op!);
      lines.push(`${this.def.noun} ${record.name}: ${record.status ?? record.op}`);
    }
    return lines;
  }
}

