import type { Knex } from 'knex';
import type { Store } from './store.js';

/** One schema change. `id` is unique within its owner (core or a plugin) and never renamed. */
export interface Migration {
  id: string;
  up(knex: Knex, store: Store): Promise<void>;
}

export interface MigrationSet {
  owner: string;
  migrations: Migration[];
}

const TABLE = 'hangar_migrations';
/** Any constant: serialises concurrent start-ups of several control planes on one PostgreSQL. */
const PG_LOCK_KEY = 0x68616e67;

/** Applies every migration not yet recorded, in order, all in one transaction (all or nothing). Safe to re-run. */
export async function runMigrations(store: Store, sets: MigrationSet[]): Promise<string[]> {
  const { knex } = store;
  const applied: string[] = [];
  await knex.transaction(async (trx) => {
    if (store.dialect === 'postgres') await trx.raw('select pg_advisory_xact_lock(?)', [PG_LOCK_KEY]);
    if (!(await trx.schema.hasTable(TABLE))) {
      await trx.schema.createTable(TABLE, (t) => {
        t.string('id', 200).primary();
        t.string('applied_at', 40).notNullable();
      });
    }
    const done = new Set((await trx(TABLE).select('id')).map((r: { id: string }) => r.id));
    for (const set of sets) {
      for (const migration of set.migrations) {
        const id = `${set.owner}/${migration.id}`;
        if (done.has(id)) continue;
        await migration.up(trx, store);
        await trx(TABLE).insert({ id, applied_at: new Date().toISOString() });
        applied.push(id);
      }
    }
  });
  return applied;
}
