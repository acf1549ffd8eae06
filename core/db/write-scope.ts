import { AsyncLocalStorage } from 'node:async_hooks';
import type { Knex } from 'knex';
import { PreparedTransaction } from './prepared-transaction.js';

/**
 * A request's writes, as the store sees them: a record that must be written with the request's
 * first committed write (the audit entry, plugins/audit), whether a change committed, and whether
 * one may have (its COMMIT's connection was lost).
 *
 * The request pipeline (core/http/koa-app.ts) runs a handler in a scope; the store's clients
 * (core/db/sqlite-client.ts, core/db/pg-client.ts) look the scope up as they work:
 * - the first top-level transaction that commits in the scope writes the record in that transaction,
 *   just before its COMMIT: both or neither;
 * - a write statement made outside a transaction (an insert, update or delete on its own) becomes a
 *   transaction of that statement and the record, while the record is still to be written;
 * - a change is committed when a top-level transaction (or a statement on its own) that wrote a
 *   table other than the bookkeeping ones ({@link bookkeepingTables}: rate-limit counters, the audit
 *   log) commits; a read-only transaction or a counter's upsert changes nothing the caller asked for;
 * - a read made outside a transaction that fails because its connection was lost is made again on
 *   another connection (once a write committed, a connection terminated under the read-back must not
 *   turn the answer into an error).
 * Work the handler started that goes on after it returned (a background job) is outside the scope.
 */
export class WriteScope {
  /** A change of the request committed: a write to a table that is not bookkeeping (with the record, when there was one to write). */
  committed = false;
  /**
   * A change of the request may have committed: the connection was lost during its COMMIT (or
   * under a change made as a statement on its own), so whether the store applied it is not known.
   */
  uncertain = false;
  /** The record went in with a committed write. */
  carried = false;
  private carrying = false;
  private closed = false;

  constructor(
    private readonly record: ((trx: Knex.Transaction) => Promise<void>) | null,
    /**
     * The same record written through prepared statements (core/db/writes.ts), when every part of
     * it can be: a write made on its own then opens its transaction without knex's.
     */
    private readonly preparedRecord: ((tx: PreparedTransaction) => Promise<void>) | null = null,
  ) {}

  /** Whether the record can go in a prepared transaction (core/db/writes.ts). */
  get recordsPrepared(): boolean {
    return this.preparedRecord !== null;
  }

  /** Whether a transaction starting its COMMIT now should write the record first. */
  wantsRecord(): boolean {
    return !this.closed && this.record !== null && !this.carried && !this.carrying;
  }

  /** Writes the record inside `trx` (its COMMIT follows); answers a function that settles what the COMMIT did. */
  async writeRecord(trx: Knex.Transaction | PreparedTransaction): Promise<(committed: boolean) => void> {
    this.carrying = true;
    try {
      if (trx instanceof PreparedTransaction) await this.preparedRecord!(trx);
      else await this.record!(trx);
    } catch (err) {
      this.carrying = false;
      throw err;
    }
    return (committed) => {
      this.carrying = false;
      if (committed) this.carried = true;
    };
  }

  /** A change of the scope committed. */
  noteCommitted(): void {
    if (!this.closed) this.committed = true;
  }

  /** The connection was lost while a change of the scope was being committed. */
  noteUncertain(): void {
    if (!this.closed) this.uncertain = true;
  }

  /** Whether the scope is still the handler's (work it left running sees no scope). */
  get open(): boolean {
    return !this.closed;
  }

  /** The handler is done: later work is not the request's. */
  close(): void {
    this.closed = true;
  }
}

const scopes = new AsyncLocalStorage<WriteScope>();
/** Write scopes open now (in this process). */
let opened = 0;

/**
 * Runs `fn` (a handler) in `scope`; the scope is closed once `fn` settles.
 *
 * On Node 20 an enabled AsyncLocalStorage makes every promise of the process pay an async hook,
 * reads included (left enabled, ~5-9 % more CPU per request for GETs, writes and a mix of both:
 * bench/write-scope-als.ts), so the storage is enabled only while a write scope is open and
 * disabled when the last one closes: reads that overlap no write pay nothing. Work a closed scope
 * left running finds no open scope either way (currentWriteScope).
 */
export async function inWriteScope<T>(scope: WriteScope, fn: () => T | Promise<T>): Promise<T> {
  opened++;
  try {
    return await scopes.run(scope, fn);
  } finally {
    scope.close();
    if (--opened === 0) scopes.disable();
  }
}

/** The open scope of the work running now, if any. */
export function currentWriteScope(): WriteScope | undefined {
  const scope = scopes.getStore();
  return scope?.open ? scope : undefined;
}

const WRITE_METHODS = new Set(['insert', 'update', 'del', 'delete', 'upsert', 'truncate']);
const WRITE_SQL = /^\s*(insert|update|delete|replace|merge|upsert)\b/i;
const WRITTEN_TABLE = /^\s*(?:insert\s+(?:or\s+\w+\s+)?into|replace\s+into|merge\s+into|update|delete\s+from)\s+((?:"[^"]+"|[\w$]+)(?:\s*\.\s*(?:"[^"]+"|[\w$]+))*)/i;

/**
 * Tables whose writes are the store's bookkeeping of a request, not a change it asked for: counters
 * of the rate limiter (core/ratelimit.ts), the audit log (plugins/audit). A transaction that wrote
 * only these does not make a request's change committed.
 */
export const bookkeepingTables = new Set<string>();

/** Declares tables whose writes are bookkeeping ({@link bookkeepingTables}). */
export function bookkeeping(...tables: string[]): void {
  for (const table of tables) bookkeepingTables.add(table.toLowerCase());
}

/** The table a write statement (a query builder or raw SQL) writes, without schema or quotes; null when it cannot be told. */
export function writtenTable(builder: unknown): string | null {
  const b = builder as { _single?: { table?: unknown }; sql?: unknown };
  let name: string | null = null;
  if (typeof b._single?.table === 'string') name = b._single.table.trim().split(/\s+/)[0]!;
  else if (typeof b.sql === 'string') name = WRITTEN_TABLE.exec(b.sql)?.[1] ?? null;
  if (!name) return null;
  return name.split('.').pop()!.trim().replace(/^"|"$/g, '').toLowerCase();
}

/** Whether a statement changes a table that is not bookkeeping (a change the request asked for); a write whose table cannot be told counts. */
export function isChange(builder: unknown): boolean {
  if (!isWriteStatement(builder)) return false;
  const table = writtenTable(builder);
  return table === null || !bookkeepingTables.has(table);
}

/** Whether a write to `table` is a change the request asked for (not bookkeeping): for statements that name their table (core/db/writes.ts). */
export function wasChange(table: string): boolean {
  return !bookkeepingTables.has(table.toLowerCase());
}

/** Whether a knex builder (a query builder or raw SQL) changes rows. */
export function isWriteStatement(builder: unknown): boolean {
  const b = builder as { _method?: string; sql?: unknown };
  if (typeof b._method === 'string') return WRITE_METHODS.has(b._method);
  return typeof b.sql === 'string' && WRITE_SQL.test(b.sql);
}

/** Whether a knex builder reads rows (what may be made again when its connection was lost). */
export function isReadStatement(builder: unknown): boolean {
  const b = builder as { _method?: string; sql?: unknown };
  if (typeof b._method === 'string') return b._method === 'select' || b._method === 'first' || b._method === 'pluck';
  return typeof b.sql === 'string' && /^\s*select\b/i.test(b.sql);
}

/**
 * Whether an error says the statement's connection was lost (terminated by the server or an
 * administrator, reset, closed): the statement may be made again on another connection.
 */
export function isConnectionLost(err: unknown): boolean {
  const e = err as { code?: unknown; message?: unknown } | null;
  const code = typeof e?.code === 'string' ? e.code : '';
  if (['57P01', '57P02', '57P03', '08000', '08003', '08006', 'ECONNRESET', 'EPIPE', 'ECONNREFUSED'].includes(code)) return true;
  return typeof e?.message === 'string' && /Connection terminated|not queryable|Connection ended|terminating connection/i.test(e.message);
}

/**
 * Whether a request waited for a connection of the store's pool longer than knex allows (every one
 * of `database.pool_max` in use all that time): nothing of that statement was sent.
 */
export function isPoolExhausted(err: unknown): boolean {
  const e = err as { name?: unknown; message?: unknown } | null;
  return e?.name === 'KnexTimeoutError' && typeof e.message === 'string' && /Timeout acquiring a connection/.test(e.message);
}

/**
 * Whether a statement (a COMMIT included) that failed so may have been applied all the same: its
 * connection was lost after it was sent. A connection refused, or one known dead before the
 * statement went out (node-postgres: "not queryable"), sent nothing.
 */
export function outcomeUnknown(err: unknown): boolean {
  if (!isConnectionLost(err)) return false;
  const e = err as { code?: unknown; message?: unknown } | null;
  if (e?.code === 'ECONNREFUSED') return false;
  return !(typeof e?.message === 'string' && /not queryable/i.test(e.message));
}

/**
 * The arguments of a mixin's base class constructor: knex's client and transaction classes, which
 * ship no types. TypeScript accepts a class built on a type parameter only when this is `any[]`
 * (TS2545: "A mixin class must have a constructor with a single rest parameter of type 'any[]'").
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- TS2545 requires any[] for a mixin's constructor (unknown[] is refused)
export type MixinArgs = any[];
/** A class of knex's (untyped) extended by a mixin here, seen as the members the mixin uses. */
export type MixinBase<I> = new (...args: MixinArgs) => I;

/** What the transaction mixin uses of knex's transaction class (a transaction is a promise of its outcome). */
export interface TransactionMembers extends PromiseLike<unknown> {
  commit(conn: unknown, value: unknown): Promise<unknown>;
  rollback(conn: unknown, error: unknown): Promise<unknown>;
}
type TransactionClass = MixinBase<TransactionMembers>;
/** What the client mixin uses of knex's client class. */
export type RunnerClient = { runner(builder: unknown): { run(): Promise<unknown> }; transacting?: boolean; transaction(container: (trx: unknown) => unknown): PromiseLike<unknown> };

/**
 * The clients of transactions (knex makes one per transaction, a savepoint's included) that made a
 * change ({@link isChange}) that is still theirs: a savepoint released hands it to its parent.
 */
const changed = new WeakSet<object>();

/** A change made in a transaction outside knex's runner (a prepared write, core/db/writes.ts): the transaction's, as a builder's would be. */
export function noteTransactionChange(trxClient: object): void {
  changed.add(trxClient);
}

/** What a transaction of knex holds that the scope reads. */
interface TransactionState {
  outerTx: TransactionState | null;
  trxClient: object | undefined;
  transactor: Knex.Transaction;
  /** Opened READ ONLY (a snapshot read: the control plane's backup): the record cannot go in it. */
  readOnly?: boolean;
  /** Its COMMIT was sent (a failure from now on may have left it committed). */
  committing?: boolean;
}

/**
 * A knex transaction class whose top-level COMMIT first writes the scope's record, and which tells
 * the scope when a change committed, or may have (the connection lost during the COMMIT).
 */
export function scopedTransaction<T extends TransactionClass>(Base: T): T {
  return class ScopedTransaction extends Base {
    constructor(...args: MixinArgs) {
      super(...args);
      const scope = currentWriteScope();
      const self = this as unknown as TransactionState;
      this.then(
        () => {
          if (!self.trxClient || !changed.has(self.trxClient)) return;
          // A savepoint released: its changes are its parent's now; the top level committed them.
          if (self.outerTx) {
            if (self.outerTx.trxClient) changed.add(self.outerTx.trxClient);
          } else scope?.noteCommitted();
        },
        (err) => {
          if (scope && !self.outerTx && self.committing && self.trxClient && changed.has(self.trxClient) && outcomeUnknown(err)) scope.noteUncertain();
        },
      );
    }

    async commit(conn: unknown, value: unknown): Promise<unknown> {
      const self = this as unknown as TransactionState;
      const scope = currentWriteScope();
      if (!scope || self.outerTx || self.readOnly || !scope.wantsRecord()) {
        self.committing = true;
        return super.commit(conn, value);
      }
      let settle: (committed: boolean) => void;
      try {
        settle = await scope.writeRecord(self.transactor);
      } catch (err) {
        return this.rollback(conn, err);
      }
      self.committing = true;
      this.then(
        () => settle(true),
        () => settle(false),
      );
      return super.commit(conn, value);
    }
  };
}

/**
 * A knex client class whose statements see the request's scope: a write outside a transaction
 * carries the scope's record in a transaction of its own, a change is noted on its transaction
 * (or, made on its own, on the scope), and a read outside one is made again when its connection
 * was lost.
 */
export function scopedClient<T extends MixinBase<RunnerClient>>(Base: T, retries = 2): T {
  return class ScopedClient extends Base {
    runner(builder: unknown): { run(): Promise<unknown> } {
      if (this.transacting) {
        // A transaction's client: a change it made is the transaction's, until it commits.
        const runner = super.runner(builder);
        if (isChange(builder)) {
          const first = runner.run.bind(runner);
          runner.run = () => first().then((result) => (changed.add(this), result));
        }
        return runner;
      }
      const scope = currentWriteScope();
      if (scope?.wantsRecord() && isWriteStatement(builder)) {
        const statement = builder as { transacting(trx: unknown): PromiseLike<unknown> };
        return { run: () => Promise.resolve(this.transaction((trx) => statement.transacting(trx))) };
      }
      const runner = super.runner(builder);
      const first = runner.run.bind(runner);
      if (isWriteStatement(builder)) {
        // A change made as a statement on its own commits when it succeeds; when its connection was
        // lost under it, whether it did is not known.
        if (scope && isChange(builder)) {
          runner.run = () =>
            first().then(
              (result) => (scope.noteCommitted(), result),
              (err: unknown) => {
                if (outcomeUnknown(err)) scope.noteUncertain();
                throw err;
              },
            );
        }
        return runner;
      }
      if (!isReadStatement(builder)) return runner;
      runner.run = async () => {
        try {
          return await first();
        } catch (err) {
          let last = err;
          for (let attempt = 0; attempt < retries && isConnectionLost(last); attempt++) {
            try {
              return await super.runner(builder).run();
            } catch (again) {
              last = again;
            }
          }
          throw last;
        }
      };
      return runner;
    }
  };
}
