import type { Knex } from 'knex';
import type { Clock } from '../clock.js';
import { conflict, notFound, type HttpError } from '../errors.js';
import type { PageCursors } from './cursors.js';
import type { RecordChange } from './changes.js';
import type { Store } from './store.js';
import { quoted } from './writes.js';

/** How a table's columns differ between dialects; everything not named passes through as is. */
export interface Codec {
  json?: readonly string[];
  bool?: readonly string[];
  dates?: readonly string[];
}

export type Row = Record<string, unknown>;

export const DEFAULT_PAGE_LIMIT = 100;
export const MAX_PAGE_LIMIT = 1000;

export interface Page<T> {
  items: T[];
  next_cursor: string | null;
}

/** Converts between what the application holds and what either dialect stores. */
export class RowCodec {
  constructor(private readonly codec: Codec) {}

  encode(values: Row): Row {
    const out: Row = {};
    for (const [k, v] of Object.entries(values)) {
      if (v === undefined) continue;
      if (this.codec.json?.includes(k)) out[k] = v === null ? null : JSON.stringify(v);
      else if (v instanceof Date) out[k] = v.toISOString();
      else if (typeof v === 'boolean') out[k] = v;
      else out[k] = v;
    }
    return out;
  }

  decode<T>(row: Row): T {
    const out: Row = { ...row };
    for (const k of this.codec.json ?? []) {
      if (typeof out[k] === 'string') out[k] = JSON.parse(out[k] as string);
    }
    for (const k of this.codec.bool ?? []) {
      if (out[k] !== null && out[k] !== undefined) out[k] = Boolean(out[k]);
    }
    for (const k of this.codec.dates ?? []) {
      const v = out[k];
      if (v instanceof Date) out[k] = v.toISOString();
      else if (typeof v === 'number') out[k] = new Date(v).toISOString();
    }
    return out as T;
  }
}

/**
 * Keyset pagination over `query`, ordered by `keys` ascending (the last key must be unique).
 * Returns at most `limit` items and a cursor for the next page when there is one.
 */
export async function paginate<T>(
  query: Knex.QueryBuilder,
  options: {
    keys: string[];
    limit?: number;
    cursor?: string | null;
    decode: (row: Row) => T;
    /** The store's cursor signer and the list's name: a cursor is accepted only by the list that issued it. */
    cursors: PageCursors;
    list: string;
  },
): Promise<Page<T>> {
  const limit = pageLimit(options.limit);
  const { keys, cursors, list } = options;
  if (options.cursor) {
    const after = cursors.decode(list, options.cursor, keys.length);
    // (k1, k2, …) > (v1, v2, …) written out so both dialects use the indexes.
    query.where((outer) => {
      keys.forEach((_, i) => {
        outer.orWhere((inner) => {
          for (let j = 0; j < i; j++) inner.where(keys[j]!, after[j] as Knex.Value);
          inner.where(keys[i]!, '>', after[i] as Knex.Value);
        });
      });
    });
  }
  for (const key of keys) query.orderBy(key, 'asc');
  return pageOf(await query.limit(limit + 1), limit, keys, options.decode, cursors, list);
}

function pageLimit(requested: number | undefined): number {
  return Math.min(Math.max(requested ?? DEFAULT_PAGE_LIMIT, 1), MAX_PAGE_LIMIT);
}

/** `limit` items of the `limit + 1` rows read, and the cursor after the last one when there are more. */
function pageOf<T>(rows: Row[], limit: number, keys: string[], decode: (row: Row) => T, cursors: PageCursors, list: string): Page<T> {
  const items = rows.slice(0, limit).map(decode);
  const last = rows.length > limit ? rows[limit - 1]! : null;
  return { items, next_cursor: last ? cursors.encode(list, keys.map((k) => normaliseKey(last[k]))) : null };
}

function normaliseKey(v: unknown): unknown {
  return v instanceof Date ? v.toISOString() : v;
}

const PAGE_KEYS = ['created_at', 'id'];

/**
 * A key with a NUL character names no row: no id or name hangar stores holds one, and PostgreSQL's
 * text cannot (it refuses the query: `invalid byte sequence for encoding "UTF8": 0x00`).
 */
function namesNoRow(value: unknown): boolean {
  return typeof value === 'string' && value.includes('\0');
}

/** A table with a string primary key `id`: the repository every plugin starts from. */
export class Repository<T extends Row> {
  readonly codec: RowCodec;

  constructor(
    protected readonly store: Store,
    readonly table: string,
    codec: Codec = {},
  ) {
    this.codec = new RowCodec(codec);
  }

  protected get knex(): Knex {
    return this.store.knex;
  }

  query(trx?: Knex.Transaction): Knex.QueryBuilder {
    return (trx ?? this.knex)(this.table);
  }

  decode = (row: Row): T => this.codec.decode<T>(row);

  /** Announces a write on the store's change feed (writes made outside the repository's own methods call it too: core/lifecycle.ts). */
  changed(id: string, op: RecordChange['op'], row?: Readonly<Record<string, unknown>>): void {
    this.store.changes.notify({ table: this.table, id, op, ...(row ? { row } : {}) });
  }

  /** Runs a write; a unique-constraint violation (a concurrent create of the same name…) becomes a 409. */
  protected async write<R>(values: Row, run: () => Promise<R>): Promise<R> {
    try {
      return await run();
    } catch (err) {
      throw uniqueViolationConflict(err, this.table, values) ?? err;
    }
  }

  /** Inserts a row and answers it as stored (RETURNING: defaults included), in one prepared statement. */
  async insert(values: Partial<T>, trx?: Knex.Transaction): Promise<T> {
    const encoded = this.codec.encode(values);
    const columns = Object.keys(encoded);
    const sql = `insert into ${this.quotedTable} (${columns.map(quoted).join(', ')}) values (${columns.map(() => '?').join(', ')}) returning ${await this.store.writes.returning(this.table, trx)}`;
    const { rows } = await this.write(values, () => this.store.writes.run(this.table, sql, Object.values(encoded), trx));
    this.changed(values.id as string, 'insert', rows[0]);
    return this.decode(rows[0]!);
  }

  async get(id: string, trx?: Knex.Transaction): Promise<T | null> {
    if (namesNoRow(id)) return null;
    const row = trx ? await this.query(trx).where({ id }).first() : await this.store.reads.byId(this.sql.byId, this.sql.byIds, id);
    return row ? this.decode(row) : null;
  }

  async findOne(where: Row, trx?: Knex.Transaction): Promise<T | null> {
    if (Object.values(where).some(namesNoRow)) return null;
    const row = await this.query(trx).where(this.codec.encode(where)).first();
    return row ? this.decode(row) : null;
  }

  /** By id, or else by `name` (for tables whose names are unique). */
  async findByIdOrName(idOrName: string): Promise<T | null> {
    return (await this.get(idOrName)) ?? (await this.findOne({ name: idOrName }));
  }

  /** {@link findByIdOrName}, or a 404 "No <noun> <idOrName>". */
  async requireByIdOrName(idOrName: string, noun: string): Promise<T> {
    const found = await this.findByIdOrName(idOrName);
    if (!found) throw notFound(`No ${noun} ${idOrName}`);
    return found;
  }

  async findAll(where: Row = {}, trx?: Knex.Transaction): Promise<T[]> {
    if (Object.values(where).some(namesNoRow)) return [];
    const rows: Row[] = await this.query(trx).where(this.codec.encode(where)).orderBy('id');
    return rows.map(this.decode);
  }

  /** Updates the row and answers it as it is after (RETURNING), in one prepared statement; null when there is no such row. */
  async update(id: string, patch: Partial<T>, trx?: Knex.Transaction): Promise<T | null> {
    return this.updateWhere(id, this.codec.encode(patch), '', [], trx);
  }

  /**
   * `update … set <values> where id = ? <and condition> returning <columns>` as a prepared statement: the row
   * after, or null when none matched. Nothing to set reads the row instead.
   */
  protected async updateWhere(id: string, values: Row, condition: string, conditionParams: unknown[], trx?: Knex.Transaction): Promise<T | null> {
    const columns = Object.keys(values);
    if (!columns.length) return this.get(id, trx);
    const sql = `update ${this.quotedTable} set ${columns.map((c) => `${quoted(c)} = ?`).join(', ')} where "id" = ?${condition} returning ${await this.store.writes.returning(this.table, trx)}`;
    const { rows } = await this.write(values, () => this.store.writes.run(this.table, sql, [...Object.values(values), id, ...conditionParams], trx));
    if (!rows.length) return null;
    this.changed(id, 'update', rows[0]);
    return this.decode(rows[0]!);
  }

  async remove(id: string, trx?: Knex.Transaction): Promise<boolean> {
    return this.removeIf(id, {}, trx);
  }

  /** Deletes the row when it still has the values of `held` (a lease id: `{ op_id }`); false when it is gone or they changed. */
  async removeIf(id: string, held: Row, trx?: Knex.Transaction): Promise<boolean> {
    const values = this.codec.encode(held);
    const condition = Object.keys(values).map((c) => ` and ${quoted(c)} = ?`).join('');
    const sql = `delete from ${this.quotedTable} where "id" = ?${condition} returning ${await this.store.writes.returning(this.table, trx)}`;
    const { rows } = await this.store.writes.run(this.table, sql, [id, ...Object.values(values)], trx);
    if (rows.length) this.changed(id, 'delete', rows[0]);
    return rows.length > 0;
  }

  private get quotedTable(): string {
    const value = quoted(this.table);
    Object.defineProperty(this, 'quotedTable', { value });
    return value;
  }

  /** A page ordered by creation time then id. */
  async page(options: { where?: (q: Knex.QueryBuilder) => void; limit?: number; cursor?: string | null } = {}): Promise<Page<T>> {
    if (!options.where) return this.plainPage(options.limit, options.cursor);
    const query = this.query();
    options.where(query);
    return paginate(query, { keys: PAGE_KEYS, limit: options.limit, cursor: options.cursor, decode: this.decode, cursors: this.store.cursors, list: this.table });
  }

  /** The unfiltered list (every resource's GET): the same keyset page as paginate(), as prepared statements. */
  private async plainPage(requested: number | undefined, cursor: string | null | undefined): Promise<Page<T>> {
    const limit = pageLimit(requested);
    const rows = cursor
      ? await this.store.reads.all(this.sql.pageAfter, [...this.store.cursors.decode(this.table, cursor, 2).flatMap((v, i) => (i === 0 ? [v, v] : [v])), limit + 1])
      : await this.store.reads.all(this.sql.page, [limit + 1]);
    return pageOf(rows, limit, PAGE_KEYS, this.decode, this.store.cursors, this.table);
  }

  /** The SQL texts of the prepared reads. */
  private get sql() {
    const table = this.quotedTable;
    const value = {
      byId: `select * from ${table} where "id" = ? limit 1`,
      byIds: `select * from ${table} where "id" = any(?)`,
      page: `select * from ${table} order by "created_at" asc, "id" asc limit ?`,
      // (created_at, id) > (?, ?), written out so both dialects use the index.
      pageAfter: `select * from ${table} where ("created_at" > ? or ("created_at" = ? and "id" > ?)) order by "created_at" asc, "id" asc limit ?`,
    };
    Object.defineProperty(this, 'sql', { value });
    return value;
  }

  /** The cursor of the page that starts after `row` (for lists filtered after reading). */
  cursorAfter(row: T): string {
    return this.store.cursors.encode(this.table, PAGE_KEYS.map((k) => normaliseKey(row[k])));
  }
}

/** A repository whose rows carry `updated_at`: `change` writes a patch and stamps that column. */
export class StampedRepository<T extends Row> extends Repository<T> {
  constructor(
    store: Store,
    table: string,
    codec: Codec,
    private readonly clock: Clock,
  ) {
    super(store, table, codec);
  }

  /** Updates the row and returns it (the row must exist). */
  async change(id: string, patch: Partial<T>, trx?: Knex.Transaction): Promise<T> {
    return (await this.update(id, { ...patch, updated_at: this.clock.now().toISOString() }, trx))!;
  }

  /**
   * Updates the row only while its `status` is one of `statuses` (or, with `{ not }`, none of
   * them); the row after, or null when the guard did not hold. One statement: no lost updates.
   */
  async changeIf(id: string, statuses: string[] | { not: string[] }, patch: Partial<T>, trx?: Knex.Transaction): Promise<T | null> {
    const list = Array.isArray(statuses) ? statuses : statuses.not;
    // `not in ()` holds for every row, `in ()` for none (what knex's whereIn / whereNotIn of nothing do).
    const condition = list.length ? ` and "status" ${Array.isArray(statuses) ? 'in' : 'not in'} (${list.map(() => '?').join(', ')})` : Array.isArray(statuses) ? ' and 1 = 0' : '';
    return this.updateWhere(id, this.codec.encode({ ...patch, updated_at: this.clock.now().toISOString() }), condition, list, trx);
  }
}

/** Whether a write failed on a unique constraint (either dialect): a concurrent insert of the same key. */
export function isUniqueViolation(err: unknown): boolean {
  const e = err as { code?: string; message?: string };
  return e?.code === '23505' || e?.code === 'SQLITE_CONSTRAINT_UNIQUE' || e?.code === 'SQLITE_CONSTRAINT_PRIMARYKEY' || /UNIQUE constraint failed/.test(e?.message ?? '');
}

/** The columns a unique violation names: PostgreSQL's `Key (a, b)=(…)`, SQLite's `UNIQUE constraint failed: t.a, t.b`. */
function violatedColumns(err: unknown): string[] {
  const e = err as { detail?: string; message?: string };
  const pg = /^Key \(([^)]+)\)=/.exec(e?.detail ?? '');
  if (pg) return pg[1]!.split(',').map((c) => c.trim().replace(/^"|"$/g, ''));
  const sqlite = /UNIQUE constraint failed: ([\w., ]+)/.exec(e?.message ?? '');
  if (sqlite) return sqlite[1]!.split(',').map((c) => c.trim().split('.').pop()!);
  return [];
}

/**
 * The 409 for a write that hit a unique constraint (two callers creating the same name at the same
 * moment: the check before the insert passed for both), naming the field that is taken — never the
 * value, which the client sent (an email, a name) —; null for any other error. Repositories apply it
 * to their writes, and the HTTP layer to whatever else reaches it.
 */
export function uniqueViolationConflict(err: unknown, table?: string, _values?: Row): HttpError | null {
  if (!isUniqueViolation(err)) return null;
  const taken = violatedColumns(err).join(', ');
  return conflict(`${taken ? `The ${taken} given` : 'A unique value'} is already taken${table ? ` (${table})` : ''}; choose another`);
}
