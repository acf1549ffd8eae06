import { createHash } from 'node:crypto';
import type { Knex } from 'knex';
import type { Row } from './repository.js';
import type { Dialect } from './store.js';

type RawStatement = { raw(on: boolean): RawStatement; columns(): { name: string }[]; all(...params: unknown[]): unknown[][] };
type Statement = { all(...params: unknown[]): Row[] };
type SqliteDatabase = { prepare(sql: string): RawStatement; pragma(sql: string): unknown; close(): void };
type PgConnection = { query(config: { name: string; text: string; values: unknown[] }): Promise<{ rows: Row[] }> };

/** Most ids one read of rows by id names (PostgreSQL, `byId`). */
const MAX_IDS = 500;

/** Callers waiting for rows by id (PostgreSQL, `byId`): id → its callers. */
type IdReads = Map<string, Array<{ resolve(row: Row | undefined): void; reject(err: unknown): void }>>;

/**
 * The hottest reads (a page of a list, a record by id), outside any transaction, as statements
 * prepared once and kept: knex builds and the driver prepares every query anew, which is most of
 * what a list costs. SQL text uses `?` placeholders and double-quoted identifiers; a statement's
 * text is its key, so only a fixed set of texts should come here (not one per value).
 *
 * SQLite: a second connection to the same file, read-only (`query_only`), that sees every
 * committed write (WAL). PostgreSQL: a named prepared statement on a connection of knex's pool
 * (with the schema's search_path), prepared once per connection.
 */
export class PreparedReads {
  private sqlite: SqliteDatabase | null = null;
  private readonly statements = new Map<string, Statement>();
  private readonly pgTexts = new Map<string, { name: string; text: string }>();
  /** PostgreSQL: the rows by id asked for in this turn of the event loop, by the SQL that reads them together (see `byId`). */
  private readonly idReads = new Map<string, IdReads>();
  /** PostgreSQL: how many reads by id of each table (by the SQL that reads them together) are out. */
  private readonly idReadsOut = new Map<string, number>();

  constructor(
    private readonly knex: Knex,
    private readonly dialect: Dialect,
    /** Without a file (a store opened some other way) SQLite reads go through knex, unprepared. */
    private readonly sqliteFile: string | null,
  ) {}

  async all(sql: string, params: unknown[]): Promise<Row[]> {
    if (this.dialect === 'sqlite') {
      if (!this.sqliteFile) return (await this.knex.raw(sql, params as Knex.RawBinding[])) as Row[];
      return this.sqliteStatement(sql).all(...params.map(sqliteValue));
    }
    const statement = this.pgStatement(sql);
    const client = this.knex.client as { acquireConnection(): Promise<PgConnection>; releaseConnection(c: PgConnection): Promise<void> };
    const connection = await client.acquireConnection();
    try {
      return (await connection.query({ ...statement, values: params })).rows;
    } catch (err) {
      // `select *` prepared before another control plane (a newer release) added a column: PostgreSQL
      // refuses to run it ("cached plan must not change result type"); prepared anew under a new name.
      if ((err as { code?: string }).code !== PG_CACHED_PLAN_CHANGED) throw err;
      return (await connection.query({ ...renamePgStatement(this.pgTexts, sql, statement), values: params })).rows;
    } finally {
      await client.releaseConnection(connection);
    }
  }

  /**
   * The row whose `"id"` is `id`: `one` reads it (`… where "id" = ? limit 1`), `any` reads several
   * (`… where "id" = any(?)`). On PostgreSQL a read of a table none of whose reads by id is out is sent
   * at once; while one is out, the ids asked for in this turn of the event loop are read together, in
   * one statement at the turn's end: a wave of the fleet's heartbeats (each reads its node) takes a
   * connection of the pool for each turn, not one for each heartbeat, and the API's requests do not
   * queue behind them. A read is sent after its caller asked, so it sees every write committed before.
   * SQLite reads on its own connection, at once.
   */
  byId(one: string, any: string, id: string): Promise<Row | undefined> {
    if (this.dialect === 'sqlite') return this.all(one, [id]).then((rows) => rows[0]);
    if (!this.idReadsOut.get(any)) return this.readOne(any, one, id);
    let reads = this.idReads.get(any);
    if (!reads) {
      const turn: IdReads = (reads = new Map());
      this.idReads.set(any, turn);
      setImmediate(() => {
        this.idReads.delete(any);
        void this.readIds(any, turn);
      });
    }
    const waiting = reads;
    return new Promise((resolve, reject) => {
      const callers = waiting.get(id);
      if (callers) callers.push({ resolve, reject });
      else waiting.set(id, [{ resolve, reject }]);
    });
  }

  /** One read by id, sent at once (see `byId`). */
  private readOne(any: string, one: string, id: string): Promise<Row | undefined> {
    return this.countedOut(any, () => this.all(one, [id])).then((rows) => rows[0]);
  }

  /** Runs `read`, counted among the reads by id of `any` that are out while it is. */
  private async countedOut<T>(any: string, read: () => Promise<T>): Promise<T> {
    this.idReadsOut.set(any, (this.idReadsOut.get(any) ?? 0) + 1);
    try {
      return await read();
    } finally {
      this.idReadsOut.set(any, this.idReadsOut.get(any)! - 1);
    }
  }

  /** Reads the rows of one turn's `byId` callers, MAX_IDS at a time, and answers each. */
  private async readIds(any: string, reads: IdReads): Promise<void> {
    const ids = [...reads.keys()];
    const chunks = Array.from({ length: Math.ceil(ids.length / MAX_IDS) }, (_, i) => ids.slice(i * MAX_IDS, (i + 1) * MAX_IDS));
    await Promise.all(
      chunks.map(async (chunk) => {
        try {
          const rows = new Map((await this.countedOut(any, () => this.all(any, [chunk]))).map((row) => [String(row.id), row]));
          // Callers of one id get a row each (its JSON columns come parsed: none shares nested objects with another).
          for (const id of chunk) reads.get(id)!.forEach((caller, i) => caller.resolve(i === 0 ? rows.get(id) : structuredClone(rows.get(id))));
        } catch (err) {
          for (const id of chunk) for (const caller of reads.get(id)!) caller.reject(err);
        }
      }),
    );
  }

  /**
   * Rows come from SQLite as arrays and become objects through a constructor made for the
   * statement's columns: one object shape for every row, a third cheaper than the driver's objects.
   */
  private sqliteStatement(sql: string): Statement {
    let statement = this.statements.get(sql);
    if (!statement) {
      this.sqlite ??= this.openSqlite();
      const raw = this.sqlite.prepare(sql).raw(true);
      const columns = raw.columns().map((c) => c.name);
      // The function body holds the statement's column names (JSON-quoted) and nothing else.
      const row = new Function('r', `return {${columns.map((c, i) => `${JSON.stringify(c)}: r[${i}]`).join(', ')}};`) as (values: unknown[]) => Row;
      statement = { all: (...params) => raw.all(...params).map(row) };
      this.statements.set(sql, statement);
    }
    return statement;
  }

  private openSqlite(): SqliteDatabase {
    // better-sqlite3, as knex loaded it.
    const Database = (this.knex.client as { driver: new (file: string, options: object) => SqliteDatabase }).driver;
    const db = new Database(this.sqliteFile!, { fileMustExist: true });
    db.pragma('busy_timeout = 5000');
    db.pragma('query_only = ON');
    return db;
  }

  private pgStatement(sql: string): { name: string; text: string } {
    return pgNamedStatement(this.pgTexts, sql, 'hangar_');
  }

  close(): void {
    this.sqlite?.close();
    this.sqlite = null;
    this.statements.clear();
  }
}

/** better-sqlite3 binds numbers, strings, bigints, buffers and null; booleans are 1 and 0 in SQLite. */
function sqliteValue(value: unknown): unknown {
  if (typeof value === 'boolean') return value ? 1 : 0;
  if (value instanceof Date) return value.toISOString();
  return value;
}

/** PostgreSQL's feature_not_supported, as it refuses a prepared statement whose result type a schema change altered. */
export const PG_CACHED_PLAN_CHANGED = '0A000';

/** `statement` of `sql` under a new name (its old one stays prepared, unused, on the connections that have it). */
export function renamePgStatement(cache: Map<string, { name: string; text: string }>, sql: string, statement: { name: string; text: string }): { name: string; text: string } {
  const renamed = { name: `${statement.name.replace(/_r\d+$/, '')}_r${Date.now().toString(36)}`, text: statement.text };
  if (cache.has(sql)) cache.set(sql, renamed);
  return renamed;
}

/**
 * The PostgreSQL named statement of `sql` (its `?` placeholders numbered `$1`, `$2`…; its name a hash
 * of the text after `prefix`), kept in `cache` while it holds fewer than `max` texts.
 */
export function pgNamedStatement(cache: Map<string, { name: string; text: string }>, sql: string, prefix: string, max = Infinity): { name: string; text: string } {
  let statement = cache.get(sql);
  if (!statement) {
    let n = 0;
    statement = { name: `${prefix}${createHash('sha1').update(sql).digest('hex').slice(0, 20)}`, text: sql.replace(/\?/g, () => `$${++n}`) };
    if (cache.size < max) cache.set(sql, statement);
  }
  return statement;
}
