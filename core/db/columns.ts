import type { Knex } from 'knex';

/**
 * The columns every table read through a Repository (core/db/repository.ts) has, for migrations:
 * its key and its times, declared once. Each helper adds exactly the columns it names, in the
 * order given, so a migration that uses one makes the schema it made before.
 */
type TableBuilder = Knex.CreateTableBuilder | Knex.AlterTableBuilder;

/** The record's key: a prefixed id (core/ids.ts newId), at most 64 characters. */
export function recordId(t: TableBuilder): void {
  t.string('id', 64).primary();
}

/** A resource's key and its name, unique in the table (a DNS label: at most 63 characters). */
export function namedRecord(t: TableBuilder): void {
  recordId(t);
  t.string('name', 63).notNullable().unique();
}

/**
 * When the record was made and last changed (Repository.insert and change set them); `paged` adds
 * the (created_at, id) index Repository.page reads its pages in.
 */
export function recordTimes(t: TableBuilder, { paged = false }: { paged?: boolean } = {}): void {
  t.timestamp('created_at', { useTz: true }).notNullable();
  t.timestamp('updated_at', { useTz: true }).notNullable();
  if (paged) t.index(['created_at', 'id']);
}
