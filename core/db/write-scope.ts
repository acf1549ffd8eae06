import { AsyncLocalStorage } from 'node:async_hooks';
import type { Knex } from 'knex';

/**
 * A request's writes, as the store sees them: a record that must be written with the request's
 * first committed write (the audit entry, plugins/audit) and whether a write committed.
 *
 * The request pipeline (core/http/koa-app.ts) runs a handler in a scope; the store's clients
 * (core/db/sqlite-client.ts, core/db/pg-client.ts) look the scope up as they work:
 * - the first top-level transaction that commits in the scope writes the record in that transaction,
 *   just before its COMMIT: both or neither;
 * - a write statement made outside a transaction (an insert, update or delete on its own) becomes a
 *   transaction of that statement and the record, while the record is still to be written;
 * - a read made outside a transaction that fails because its connection was lost is made again on
 *   another connection (once a write committed, a connection terminated under the read-back must not
 *   turn the answer into an error).
 * Work the handler started that goes on after it returned (a background job) is outside the scope.
 */
export class WriteScope {
  /** A write of the request committed (with the record, when there was one to write). */
  committed = false;
  /** The record went in with a committed write. */
  carried = false;
  private carrying = false;
  private closed = false;

  constructor(private readonly record: ((trx: Knex.Transaction) => Promise<void>) | null) {}

  /** Whether a transaction starting its COMMIT now should write the record first. */
  wantsRecord(): boolean {
    return !this.closed && this.record !== null && !this.carried && !this.carrying;
  }

  /** Writes the record inside `trx` (its COMMIT follows); answers a function that settles what the COMMIT did. */
  async writeRecord(trx: Knex.Transaction): Promise<(committed: boolean) => void> {
    this.carrying = true;
    try {
      await this.record!(trx);
    } catch (err) {
      this.carrying = false;
      throw err;
    }
    return (committed) => {
      this.carrying = false;
      if (committed) this.carried = true;
    };
  }

  /** A transaction of the scope committed. */
  noteCommitted(): void {
    if (!this.closed) this.committed = true;
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

/** Runs `fn` (a handler) in `scope`; the scope is closed once `fn` settles. */
export async function inWriteScope<T>(scope: WriteScope, fn: () => T | Promise<T>): Promise<T> {
  try {
    return await scopes.run(scope, fn);
  } finally {
    scope.close();
  }
}

/** The open scope of the work running now, if any. */
export function currentWriteScope(): WriteScope | undefined {
  const scope = scopes.getStore();
  return scope?.open ? scope : undefined;
}

const WRITE_METHODS = new Set(['insert', 'update', 'del', 'delete', 'upsert', 'truncate']);
const WRITE_SQL = /^\s*(insert|update|delete|replace|merge|upsert)\b/i;

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

type TransactionClass = new (...args: any[]) => {
  commit(conn: unknown, value: unknown): Promise<unknown>;
  rollback(conn: unknown, error: unknown): Promise<unknown>;
  then(onResolve: (v: unknown) => unknown, onReject: (e: unknown) => unknown): Promise<unknown>;
};
type RunnerClient = { runner(builder: unknown): { run(): Promise<unknown> }; transacting?: boolean; transaction(container: (trx: any) => unknown): PromiseLike<unknown> };

/**
 * A knex transaction class whose top-level COMMIT first writes the scope's record, and which tells
 * the scope when it committed.
 */
export function scopedTransaction<T extends TransactionClass>(Base: T): T {
  return class ScopedTransaction extends Base {
    constructor(...args: any[]) {
      super(...args);
      const scope = currentWriteScope();
      const self = this as unknown as { outerTx: unknown };
      if (scope && !self.outerTx) {
        this.then(
          () => scope.noteCommitted(),
          () => undefined,
        );
      }
    }

    async commit(conn: unknown, value: unknown): Promise<unknown> {
      const self = this as unknown as { outerTx: unknown; transactor: Knex.Transaction };
      const scope = currentWriteScope();
      if (!scope || self.outerTx || !scope.wantsRecord()) return super.commit(conn, value);
      let settle: (committed: boolean) => void;
      try {
        settle = await scope.writeRecord(self.transactor);
      } catch (err) {
        return this.rollback(conn, err);
      }
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
 * carries the scope's record in a transaction of its own, and a read outside one is made again when
 * its connection was lost.
 */
export function scopedClient<T extends new (...args: any[]) => RunnerClient>(Base: T, retries = 2): T {
  return class ScopedClient extends Base {
    runner(builder: unknown): { run(): Promise<unknown> } {
      if (this.transacting) return super.runner(builder);
      const scope = currentWriteScope();
      if (scope?.wantsRecord() && isWriteStatement(builder)) {
        const statement = builder as { transacting(trx: unknown): PromiseLike<unknown> };
        return { run: () => Promise.resolve(this.transaction((trx) => statement.transacting(trx))) };
      }
      const runner = super.runner(builder);
      const first = runner.run.bind(runner);
      if (isWriteStatement(builder)) {
        // A statement on its own commits when it succeeds.
        if (scope) runner.run = () => first().then((result) => (scope.noteCommitted(), result));
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
