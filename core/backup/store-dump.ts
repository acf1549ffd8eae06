import { createReadStream, createWriteStream } from 'node:fs';
import { once } from 'node:events';
import readline from 'node:readline';
import knexFactory, { type Knex } from 'knex';
import type { Dialect, Store } from '../db/store.js';
import { LEADER_LEASES_TABLE } from '../db/leadership.js';
import { NOTICES_TABLE } from '../db/notices.js';

/** The table that records which migrations made the schema. */
export const MIGRATIONS_TABLE = 'hangar_migrations';
/**
 * Rows that belong to the running processes of an installation, not to its state: leadership
 * leases (held by control planes that a restored one is not) and SQLite's notices between processes.
 */
const TRANSIENT_TABLES = new Set([LEADER_LEASES_TABLE, NOTICES_TABLE]);

/** The tables of the store's schema (without SQLite's own). */
export async function listTables(knex: Knex, dialect: Dialect): Promise<string[]> {
  if (dialect === 'sqlite') {
    const rows = (await knex.raw(`select name from sqlite_master where type = 'table' and name not like 'sqlite\\_%' escape '\\' order by name`)) as Array<{ name: string }>;
    return rows.map((r) => r.name);
  }
  const result = (await knex.raw(`select table_name as name from information_schema.tables where table_schema = current_schema() and table_type = 'BASE TABLE' order by table_name`)) as { rows: Array<{ name: string }> };
  return result.rows.map((r) => r.name);
}

/** Each table's foreign-key parents (the tables it references), within the schema. */
async function parentsOf(knex: Knex, dialect: Dialect, tables: string[]): Promise<Map<string, Set<string>>> {
  const parents = new Map(tables.map((t) => [t, new Set<string>()]));
  if (dialect === 'sqlite') {
    for (const table of tables) {
      const rows = (await knex.raw(`select "table" as parent from pragma_foreign_key_list(?)`, [table])) as Array<{ parent: string }>;
      for (const r of rows) if (r.parent !== table && parents.has(r.parent)) parents.get(table)!.add(r.parent);
    }
    return parents;
  }
  const result = (await knex.raw(
    `select tc.table_name as child, ccu.table_name as parent
       from information_schema.table_constraints tc
       join information_schema.constraint_column_usage ccu on ccu.constraint_name = tc.constraint_name and ccu.constraint_schema = tc.constraint_schema
      where tc.constraint_type = 'FOREIGN KEY' and tc.table_schema = current_schema()`,
  )) as { rows: Array<{ child: string; parent: string }> };
  for (const r of result.rows) if (r.child !== r.parent && parents.has(r.parent)) parents.get(r.child)?.add(r.parent);
  return parents;
}

/** The tables, each after every table it references: the order rows are loaded in (and the reverse, deleted). */
export async function tablesInLoadOrder(knex: Knex, dialect: Dialect): Promise<string[]> {
  const tables = await listTables(knex, dialect);
  const parents = await parentsOf(knex, dialect, tables);
  const ordered: string[] = [];
  const placed = new Set<string>();
  while (ordered.length < tables.length) {
    const next = tables.find((t) => !placed.has(t) && [...parents.get(t)!].every((p) => placed.has(p))) ?? tables.find((t) => !placed.has(t))!;
    ordered.push(next);
    placed.add(next);
  }
  return ordered;
}

/** Columns whose values are JSON documents (PostgreSQL answers them parsed; the export keeps them as text). */
async function jsonColumns(knex: Knex, table: string): Promise<string[]> {
  const info = (await knex(table).columnInfo()) as unknown as Record<string, { type: string }>;
  return Object.entries(info)
    .filter(([, c]) => c.type === 'json' || c.type === 'jsonb')
    .map(([name]) => name);
}

/** A table's primary-key columns, in key order (none: the table has no primary key). */
async function primaryKey(knex: Knex, dialect: Dialect, table: string): Promise<string[]> {
  if (dialect === 'sqlite') {
    const rows = (await knex.raw(`select name, pk from pragma_table_info(?) where pk > 0 order by pk`, [table])) as Array<{ name: string }>;
    return rows.map((r) => r.name);
  }
  const result = (await knex.raw(
    `select kcu.column_name as name
       from information_schema.table_constraints tc
       join information_schema.key_column_usage kcu on kcu.constraint_name = tc.constraint_name and kcu.constraint_schema = tc.constraint_schema and kcu.table_name = tc.table_name
      where tc.constraint_type = 'PRIMARY KEY' and tc.table_schema = current_schema() and tc.table_name = ?
      order by kcu.ordinal_position`,
    [table],
  )) as { rows: Array<{ name: string }> };
  return result.rows.map((r) => r.name);
}

/** Rows read per query: a table is paged through, never held whole. */
const PAGE_ROWS = 1000;

/**
 * A table's rows a page at a time: after the last key seen (keyset, on the primary key), or by
 * offset in a stable order where the table has none. Consistent when `knex` reads one snapshot (a
 * repeatable-read transaction, a SQLite copy).
 */
async function* pagedRows(knex: Knex, dialect: Dialect, table: string): AsyncGenerator<Record<string, unknown>> {
  const key = await primaryKey(knex, dialect, table);
  if (!key.length) {
    const columns = Object.keys((await knex(table).columnInfo()) as object);
    for (let offset = 0; ; offset += PAGE_ROWS) {
      const page = (await knex(table).select('*').orderBy(columns).limit(PAGE_ROWS).offset(offset)) as Array<Record<string, unknown>>;
      yield* page;
      if (page.length < PAGE_ROWS) return;
    }
  }
  const quoted = key.map((c) => `"${c.replace(/"/g, '""')}"`).join(', ');
  let after: unknown[] | null = null;
  for (;;) {
    const query = knex(table).select('*').orderBy(key).limit(PAGE_ROWS);
    if (after) query.whereRaw(`(${quoted}) > (${key.map(() => '?').join(', ')})`, after as never);
    const page = (await query) as Array<Record<string, unknown>>;
    yield* page;
    if (page.length < PAGE_ROWS) return;
    const last = page[page.length - 1]!;
    after = key.map((c) => last[c]);
  }
}

/** The migrations recorded in a store, in the order they were applied. */
export async function recordedMigrations(knex: Knex): Promise<Array<{ id: string; applied_at: string }>> {
  return (await knex(MIGRATIONS_TABLE).select('id', 'applied_at').orderBy('applied_at').orderBy('id')) as Array<{ id: string; applied_at: string }>;
}

/** A consistent copy of a SQLite store taken while it serves (`VACUUM INTO`: one read transaction). */
export async function snapshotSqlite(store: Store, file: string): Promise<Array<{ id: string; applied_at: string }>> {
  await store.knex.raw('vacuum into ?', [file]);
  const copy = openSqliteFile(file);
  try {
    return await recordedMigrations(copy);
  } finally {
    await copy.destroy();
  }
}

/** knex on a SQLite file other than the store (a snapshot). */
export function openSqliteFile(file: string): Knex {
  return knexFactory({ client: 'better-sqlite3', connection: { filename: file }, useNullAsDefault: true, pool: { min: 1, max: 1 } });
}

/**
 * A logical export of a PostgreSQL store: one JSON line per row, `{"t": table, "r": row}`, tables
 * in load order, all read in one repeatable-read transaction (one consistent snapshot while the
 * control plane serves), each table a page at a time. JSON columns are kept as their text.
 * Answers the recorded migrations.
 */
export async function exportTables(store: Store, file: string): Promise<Array<{ id: string; applied_at: string }>> {
  const out = createWriteStream(file, { mode: 0o600 });
  const closed = once(out, 'close');
  try {
    return await store.knex.transaction(
      async (trx) => {
        for (const table of await tablesInLoadOrder(trx, store.dialect)) {
          if (TRANSIENT_TABLES.has(table)) continue;
          const json = await jsonColumns(trx, table);
          for await (const row of pagedRows(trx, store.dialect, table)) {
            for (const c of json) if (row[c] !== null && row[c] !== undefined) row[c] = JSON.stringify(row[c]);
            if (!out.write(`${JSON.stringify({ t: table, r: row })}\n`)) await once(out, 'drain');
          }
        }
        return recordedMigrations(trx);
      },
      { isolationLevel: 'repeatable read', readOnly: true },
    );
  } finally {
    out.end();
    await closed;
  }
}

/** Rows of a store copy, table by table in load order: from a SQLite snapshot or a PostgreSQL export. */
export type RowSource = AsyncIterable<{ table: string; row: Record<string, unknown> }>;

export async function* rowsOfSqliteFile(file: string): RowSource {
  const knex = openSqliteFile(file);
  try {
    for (const table of await tablesInLoadOrder(knex, 'sqlite')) {
      if (TRANSIENT_TABLES.has(table)) continue;
      for await (const row of pagedRows(knex, 'sqlite', table)) yield { table, row };
    }
  } finally {
    await knex.destroy();
  }
}

export async function* rowsOfExport(file: string): RowSource {
  const lines = readline.createInterface({ input: createReadStream(file), crlfDelay: Infinity });
  for await (const line of lines) {
    if (!line) continue;
    const { t, r } = JSON.parse(line) as { t: string; r: Record<string, unknown> };
    yield { table: t, row: r };
  }
}

/**
 * Loads rows into a store whose schema the same migrations made (and that holds nothing else):
 * every table is emptied first (migrations may seed rows), then the rows go in, parents before
 * children, in batches; PostgreSQL's serial counters are moved past the loaded ids. Values are
 * carried across dialects: booleans, JSON text. Runs in one transaction: all or nothing.
 */
export async function loadRows(store: Store, rows: RowSource): Promise<Record<string, number>> {
  const counts: Record<string, number> = {};
  await store.knex.transaction(async (trx) => {
    const order = await tablesInLoadOrder(trx, store.dialect);
    for (const table of [...order].reverse()) await trx(table).delete();
    const columns = new Map<string, Record<string, { type: string }>>();
    let batch: Array<Record<string, unknown>> = [];
    let batchTable = '';
    const flush = async () => {
      if (batch.length) await trx.batchInsert(batchTable, batch as never, 200);
      batch = [];
    };
    for await (const { table, row } of rows) {
      if (table !== batchTable) {
        await flush();
        batchTable = table;
        if (!columns.has(table)) {
          if (!order.includes(table)) throw new Error(`the archive holds rows of table ${table}, which the restored schema does not have`);
          columns.set(table, (await trx(table).columnInfo()) as unknown as Record<string, { type: string }>);
        }
      }
      const info = columns.get(table)!;
      const value: Record<string, unknown> = {};
      for (const [name, v] of Object.entries(row)) {
        const type = info[name]?.type;
        if (!type) throw new Error(`the archive's table ${table} has a column ${name}, which the restored schema does not have`);
        if (type === 'boolean' && typeof v === 'number') value[name] = v !== 0;
        else if (typeof v === 'boolean' && store.dialect === 'sqlite') value[name] = v ? 1 : 0;
        else value[name] = v;
      }
      batch.push(value);
      counts[table] = (counts[table] ?? 0) + 1;
      if (batch.length >= 200) await flush();
    }
    await flush();
    if (store.dialect === 'postgres') {
      const serials = (await trx.raw(
        `select table_name as t, column_name as c from information_schema.columns where table_schema = current_schema() and column_default like 'nextval(%'`,
      )) as { rows: Array<{ t: string; c: string }> };
      for (const { t, c } of serials.rows) {
        await trx.raw(`select setval(pg_get_serial_sequence(?, ?), coalesce((select max("${c}") from "${t}"), 0) + 1, false)`, [t, c]);
      }
    }
  });
  return counts;
}
