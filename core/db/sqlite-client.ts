import type { Knex } from 'knex';
import { scopedClient, scopedTransaction, type MixinBase, type RunnerClient, type TransactionMembers } from './write-scope.js';
// knex's better-sqlite3 client, except that a transaction takes SQLite's write lock when it begins
// (BEGIN IMMEDIATE) instead of at its first write. Several processes write one SQLite file: the
// workers of a control plane (api.workers) and the runner's tools. A deferred transaction that read
// before another process committed cannot take the lock afterwards (SQLITE_BUSY at once, no wait);
// an immediate one waits its turn (busy_timeout), so transactions run one after the other across
// processes, as they do within one.
// @ts-expect-error knex ships no types for its dialect modules
import BetterSqlite3ClientModule from 'knex/lib/dialects/better-sqlite3/index.js';
// @ts-expect-error knex ships no types for its dialect modules
import SqliteTransactionModule from 'knex/lib/dialects/sqlite3/execution/sqlite-transaction.js';

/** What is used here and by the write scope's mixin of knex's SQLite transaction class. */
interface SqliteTransactionMembers extends TransactionMembers {
  query(connection: unknown, sql: string): Promise<unknown>;
}
const SqliteTransaction = SqliteTransactionModule as MixinBase<SqliteTransactionMembers>;
const BetterSqlite3Client = BetterSqlite3ClientModule as MixinBase<RunnerClient>;

class ImmediateTransaction extends SqliteTransaction {
  begin(connection: unknown): Promise<unknown> {
    return this.query(connection, 'BEGIN IMMEDIATE;');
  }
}

// The audit entry of a request goes in with its first committed write (core/db/write-scope.ts).
const ScopedImmediateTransaction = scopedTransaction(ImmediateTransaction);

class ImmediateClient extends BetterSqlite3Client {
  transaction(...args: unknown[]): ImmediateTransaction {
    return new ScopedImmediateTransaction(this, ...args);
  }
}

export const ImmediateSqliteClient = scopedClient(ImmediateClient) as unknown as typeof Knex.Client;
