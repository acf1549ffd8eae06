import type { Knex } from 'knex';
import type { Row } from './repository.js';
import type { Dialect } from './store.js';
import { PreparedTransaction } from './prepared-transaction.js';
import { pgNamedStatement } from './reads.js';
import { currentWriteScope, noteTransactionChange, outcomeUnknown, wasChange, type WriteScope } from './write-scope.js';

type SqliteStatement = { reader: boolean; all(...params: unknown[]): Row[]; run(...params: unknown[]): { changes: number } };
type SqliteConnection = { prepare(sql: string): SqliteStatement };
type PgConnection = { query(config: { name: string; text: string; values: unknown[] }): Promise<{ rows: Row[]; rowCount: number | null }> };
type PoolClient = { acquireConnection(): Promise<unknown>; releaseConnection(connection: unknown): Promise<void> | void };

/** What a write statement answers: the rows of its RETURNING clause (none without one), and how many rows it changed. */
export interface Written {
  rows: Row[];
  count: number;
}

/** A write waiting for its group's transaction (SQLite, core/db/writes.ts `grouped`). */
interface QueuedWrite {
  table: string;
  sql: string;
  params: unknown[];
  scope: WriteScope | undefined;
  withRecord: boolean;
  resolve(written: Written): void;
  reject(err: unknown): void;
}

/** Statements kept per connection; past this many texts a statement is prepared for its one use (a guard: texts come from code). */
const MAX_STATEMENTS = 1000;

/**
 * The hot writes (a repository's insert, update, delete; the audit entry), as statements prepared
 * once per connection and kept, with `RETURNING` instead of a read after the write: knex builds
 * and the driver prepares every query anew, which was most of what a write cost. SQL text uses `?`
 * placeholders and double-quoted identifiers; its text is its key, so only texts made from code
 * (table and column names, never values) come here.
 *
 * A statement runs where knex's own would, with the same request bookkeeping (core/db/write-scope.ts):
 * - in `trx` when given, on its connection (SQLite's one writer, PostgreSQL's connection of the
 *   transaction), and counted as the transaction's change when it writes a table that is not
 *   bookkeeping;
 * - outside a transaction, while the request's write scope still has its record (the audit entry)
 *   to write: in a transaction of its own (knex's, whose COMMIT writes the record first);
 * - otherwise on a connection of knex's pool, on its own; a change that succeeded marks the
 *   request's change committed, one whose connection was lost under it "uncertain".
 * A failed statement is reported to the store's health (full disk) as knex's are.
 */
export class PreparedWrites {
  private readonly sqlite = new WeakMap<object, Map<string, SqliteStatement>>();
  private readonly pgTexts = new Map<string, { name: string; text: string }>();
  /** Each table's RETURNING columns, once read (see `returning`). */
  private readonly returned = new Map<string, string>();
  /** SQLite: the writes of this turn of the event loop, to be committed together (see `grouped`). */
  private queued: QueuedWrite[] | null = null;

  constructor(
    private readonly knex: Knex,
    private readonly dialect: Dialect,
    private readonly onError: (err: unknown) => void,
  ) {}

  /**
   * What a write of `table` answers in its RETURNING clause: `*` on SQLite; on PostgreSQL the
   * table's columns as this process first saw them, named. A prepared statement whose result would
   * change is refused by PostgreSQL ("cached plan must not change result type"), so `returning *`
   * would fail every write of a table to which another control plane (a newer release, upgraded
   * one at a time: docs/upgrading.md) added a column while this one serves.
   */
  returning(table: string, trx?: Knex.Transaction | PreparedTransaction): Promise<string> {
    if (this.dialect === 'sqlite') return Promise.resolve('*');
    const known = this.returned.get(table);
    if (known !== undefined) return Promise.resolve(known);
    // Read on the caller's transaction when there is one: from the pool, a transaction holding its
    // connection would wait for a second, and a burst of them (a fleet joining a control plane that
    // had not written the table yet) waited for each other until the pool's acquire timeout.
    const sql = 'select column_name from information_schema.columns where table_schema = current_schema() and table_name = $1 order by ordinal_position';
    const read: Promise<{ rows: Array<{ column_name: string }> }> =
      trx instanceof PreparedTransaction
        ? (trx.connection as { query(text: string, values: unknown[]): Promise<{ rows: Array<{ column_name: string }> }> }).query(sql, [table])
        : (trx ?? this.knex).raw(sql.replace('$1', '?'), [table]);
    return read.then((result) => {
      const columns = result.rows.length ? result.rows.map((r) => quoted(r.column_name)).join(', ') : '*';
      this.returned.set(table, columns);
      return columns;
    });
  }

  /** Runs a write statement (`insert`, `update`, `delete`, with or without `returning`) that writes `table`. */
  async run(table: string, sql: string, params: unknown[], trx?: Knex.Transaction | PreparedTransaction): Promise<Written> {
    if (trx instanceof PreparedTransaction) {
      if (trx.completed) throw new Error('Transaction query already complete');
      const written = await this.execute(trx.connection, sql, params);
      if (wasChange(table)) trx.changed = true;
      return written;
    }
    if (trx) {
      if (trx.isCompleted()) throw new Error('Transaction query already complete');
      const client = trx.client as unknown as PoolClient;
      const written = await this.execute(await client.acquireConnection(), sql, params);
      if (wasChange(table)) noteTransactionChange(client);
      return written;
    }
    const scope = currentWriteScope();
    if (scope?.wantsRecord()) {
      if (!scope.recordsPrepared) return this.knex.transaction((t) => this.run(table, sql, params, t));
      if (this.dialect === 'sqlite') return this.grouped(table, sql, params, scope, true);
      return this.withRecord(scope, table, sql, params);
    }
    if (this.dialect === 'sqlite') return this.grouped(table, sql, params, scope, false);
    const client = this.knex.client as unknown as PoolClient;
    const connection = await client.acquireConnection();
    try {
      const written = await this.execute(connection, sql, params);
      if (scope && wasChange(table) && written.count > 0) scope.noteCommitted();
      return written;
    } catch (err) {
      if (scope && wasChange(table) && outcomeUnknown(err)) scope.noteUncertain();
      throw err;
    } finally {
      await client.releaseConnection(connection);
    }
  }

  /**
   * SQLite: the write joins the writes queued in this turn of the event loop, committed together in
   * one transaction (a group commit: one `BEGIN IMMEDIATE` … `COMMIT` for all). SQLite takes one
   * writer at a time, so writes sent at once wait for each other anyway; what a COMMIT costs (the
   * WAL's pages written, the lock taken and let go) is paid once for the group. Each write keeps its
   * own outcome: when one fails (a unique name taken…), the group is rolled back and each write made
   * again in a transaction of its own, so the others are answered as if alone; a failed COMMIT of a
   * group fails them all. With `withRecord`, the scope's record (the audit entry) goes in
   * with the write, unless the write changed no row (then the record is written after the answer,
   * as for a request that wrote nothing).
   */
  private grouped(table: string, sql: string, params: unknown[], scope: WriteScope | undefined, withRecord: boolean): Promise<Written> {
    return new Promise<Written>((resolve, reject) => {
      if (!this.queued) {
        this.queued = [];
        setImmediate(() => {
          const writes = this.queued!;
          this.queued = null;
          this.commitGroup(writes).catch((err: unknown) => {
            for (const write of writes) write.reject(err);
          });
        });
      }
      this.queued.push({ table, sql, params, scope, withRecord, resolve, reject });
    });
  }

  private async commitGroup(writes: QueuedWrite[]): Promise<void> {
    const client = this.knex.client as unknown as PoolClient;
    let connection: unknown;
    try {
      connection = await client.acquireConnection();
    } catch (err) {
      for (const write of writes) write.reject(err);
      return;
    }
    let answered: boolean;
    try {
      answered = await this.commitTogether(connection, writes);
    } finally {
      await client.releaseConnection(connection);
    }
    // A write of the group failed, so nothing of it was committed: each is made in a transaction of its own.
    if (!answered) for (const write of writes) await this.commitGroup([write]);
  }

  /**
   * `writes` (each with its record) in one transaction. Answers false when a write of several failed:
   * the transaction was rolled back and no write answered, to be made one by one (without a
   * savepoint each, which would cost every write two statements more for what seldom happens).
   */
  private async commitTogether(connection: unknown, writes: QueuedWrite[]): Promise<boolean> {
    const done: Array<{ write: QueuedWrite; written: Written; changed: boolean; settle: ((committed: boolean) => void) | null }> = [];
    let committing = false;
    try {
      await this.control(connection, 'BEGIN IMMEDIATE');
      for (const write of writes) {
        const tx = new PreparedTransaction(connection);
        const written = await this.run(write.table, write.sql, write.params, tx);
        const settle = write.withRecord && written.count > 0 && write.scope?.wantsRecord() ? await write.scope.writeRecord(tx) : null;
        done.push({ write, written, changed: tx.changed && written.count > 0, settle });
      }
      committing = true;
      await this.control(connection, 'COMMIT');
    } catch (err) {
      await this.control(connection, 'ROLLBACK').catch(() => undefined);
      for (const { write, changed, settle } of done) {
        settle?.(false);
        if (committing && changed && outcomeUnknown(err)) write.scope?.noteUncertain();
      }
      if (writes.length > 1 && !committing) return false;
      for (const write of writes) write.reject(err);
      return true;
    }
    for (const { write, written, changed, settle } of done) {
      settle?.(true);
      if (changed) write.scope?.noteCommitted();
      write.resolve(written);
    }
    return true;
  }

  /**
   * The statement and the scope's record (the audit entry) in one transaction of their own, opened
   * on a pooled connection without knex (what knex's transaction and the scope's COMMIT hook do,
   * core/db/write-scope.ts, for a fraction of the work): BEGIN (IMMEDIATE on SQLite), the statement,
   * the record, COMMIT. A COMMIT whose connection was lost may have applied the change: the scope
   * hears so.
   */
  private async withRecord(scope: WriteScope, table: string, sql: string, params: unknown[]): Promise<Written> {
    const client = this.knex.client as unknown as PoolClient;
    const connection = await client.acquireConnection();
    const tx = new PreparedTransaction(connection);
    let settle: ((committed: boolean) => void) | null = null;
    let committing = false;
    try {
      await this.control(connection, this.dialect === 'sqlite' ? 'BEGIN IMMEDIATE' : 'BEGIN');
      const written = await this.run(table, sql, params, tx);
      // A write that changed no row carries no record: the request's record is written after its answer.
      if (written.count > 0) settle = await scope.writeRecord(tx);
      committing = true;
      tx.completed = true;
      await this.control(connection, 'COMMIT');
      settle?.(true);
      if (tx.changed && written.count > 0) scope.noteCommitted();
      return written;
    } catch (err) {
      if (committing && tx.changed && outcomeUnknown(err)) scope.noteUncertain();
      settle?.(false);
      tx.completed = true;
      await this.control(connection, 'ROLLBACK').catch(() => undefined);
      throw err;
    } finally {
      await client.releaseConnection(connection);
    }
  }

  /** BEGIN, COMMIT, ROLLBACK: prepared once on SQLite, PostgreSQL's simple protocol (no parameters, nothing to prepare). */
  private async control(connection: unknown, sql: string): Promise<void> {
    try {
      if (this.dialect === 'sqlite') this.sqliteStatement(connection as SqliteConnection, sql).run();
      else await (connection as { query(text: string): Promise<unknown> }).query(sql);
    } catch (err) {
      this.onError(err);
      throw err;
    }
  }

  private async execute(connection: unknown, sql: string, params: unknown[]): Promise<Written> {
    try {
      if (this.dialect === 'sqlite') {
        const statement = this.sqliteStatement(connection as SqliteConnection, sql);
        const values = params.map(sqliteValue);
        if (statement.reader) {
          const rows = statement.all(...values);
          return { rows, count: rows.length };
        }
        return { rows: [], count: statement.run(...values).changes };
      }
      const result = await (connection as PgConnection).query({ ...this.pgStatement(sql), values: params });
      return { rows: result.rows ?? [], count: result.rowCount ?? 0 };
    } catch (err) {
      this.onError(err);
      throw err;
    }
  }

  private sqliteStatement(connection: SqliteConnection, sql: string): SqliteStatement {
    let statements = this.sqlite.get(connection);
    if (!statements) this.sqlite.set(connection, (statements = new Map()));
    let statement = statements.get(sql);
    if (!statement) {
      statement = connection.prepare(sql);
      if (statements.size < MAX_STATEMENTS) statements.set(sql, statement);
    }
    return statement;
  }

  private pgStatement(sql: string): { name: string; text: string } {
    return pgNamedStatement(this.pgTexts, sql, 'hangar_w_', MAX_STATEMENTS);
  }
}

/** A double-quoted SQL identifier. */
export function quoted(name: string): string {
  return `"${name.replace(/"/g, '""')}"`;
}

/** What knex's SQLite client binds for a value: booleans as 1 and 0, dates as milliseconds. */
function sqliteValue(value: unknown): unknown {
  if (typeof value === 'boolean') return value ? 1 : 0;
  if (value instanceof Date) return value.valueOf();
  return value;
}
