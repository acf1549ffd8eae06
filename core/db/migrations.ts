import type { Knex } from 'knex';
import { ConfigError } from '../errors.js';
import { compareVersions, versionInfo } from '../version.js';
import type { Store } from './store.js';

/** One schema change. `id` is unique within its owner (core or a plugin) and never renamed. */
export interface Migration {
  id: string;
  up(knex: Knex, store: Store): Promise<void>;
}

/** A migration that only creates tables: each table's name and its columns, created in this order. */
export function createTables(id: string, tables: Record<string, (t: Knex.CreateTableBuilder) => void>): Migration {
  return {
    id,
    async up(knex) {
      for (const [table, build] of Object.entries(tables)) await knex.schema.createTable(table, build);
    },
  };
}

/** A migration that only changes one table's columns (most expand steps: a nullable column added). */
export function alterColumns(id: string, table: string, change: (t: Knex.AlterTableBuilder) => void): Migration {
  return {
    id,
    async up(knex) {
      await knex.schema.alterTable(table, change);
    },
  };
}

export interface MigrationSet {
  owner: string;
  migrations: Migration[];
}

const TABLE = 'hangar_migrations';
/** Any constant: serialises concurrent start-ups of several control planes on one PostgreSQL. */
const PG_LOCK_KEY = 0x68616e67;

/** Applies every migration not yet recorded, in order, all in one transaction (all or nothing). Safe to re-run. */
export async function runMigrations(store: Store, sets: MigrationSet[], release = versionInfo.version): Promise<string[]> {
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
    // Which release applied a migration, so that an older one can say which release it should be (expand only: older releases leave it empty).
    if (!(await trx.schema.hasColumn(TABLE, 'release'))) await trx.schema.alterTable(TABLE, (t) => t.string('release', 64).nullable());
    const done = new Set((await trx(TABLE).select('id')).map((r: { id: string }) => r.id));
    for (const set of sets) {
      for (const migration of set.migrations) {
        const id = `${set.owner}/${migration.id}`;
        if (done.has(id)) continue;
        await migration.up(trx, store);
        await trx(TABLE).insert({ id, applied_at: new Date().toISOString(), release });
        applied.push(id);
      }
    }
  });
  return applied;
}

/**
 * Refuses a store that a newer release migrated: one holding a migration of an owner this release
 * has (core or a loaded plugin) that this release does not know, recorded by a newer release or
 * numbered after every one of that owner this release has. Reads only; run before any migration.
 */
export async function refuseNewerStore(store: Store, sets: MigrationSet[], release = versionInfo.version): Promise<void> {
  const { knex } = store;
  if (!(await knex.schema.hasTable(TABLE))) return;
  const known = new Set(sets.flatMap((set) => set.migrations.map((m) => `${set.owner}/${m.id}`)));
  const owners = new Set(sets.map((set) => set.owner));
  const withRelease = await knex.schema.hasColumn(TABLE, 'release');
  const rows = (await knex(TABLE).select(withRelease ? ['id', 'release'] : ['id']).orderBy('id')) as Array<{ id: string; release?: string | null }>;
  // The newest id of each owner this release knows: a newer release only adds ids after it (a retired one, such as
  // the swarms plugin's before swarms became clusters, sorts before it or belongs to an owner that has none now).
  const newest = new Map<string, string>();
  for (const set of sets) for (const m of set.migrations) if (m.id > (newest.get(set.owner) ?? '')) newest.set(set.owner, m.id);
  const unknown = rows.filter((r) => {
    const [owner = '', id = ''] = r.id.split(/\/(.*)/s);
    if (!owners.has(owner) || known.has(r.id)) return false;
    return (r.release ? compareVersions(r.release, release) > 0 : false) || (newest.has(owner) && id > newest.get(owner)!);
  });
  if (!unknown.length) return;
  const releases = [...new Set(unknown.map((r) => r.release).filter((v): v is string => !!v))].sort((a, b) => compareVersions(b, a));
  const same = releases.length > 0 && compareVersions(releases[0]!, release) <= 0;
  const by = releases.length ? `hangar ${releases.join(', ')}${same ? ' (a newer build)' : ''}` : 'a newer hangar release (which did not record its version)';
  throw new ConfigError(
    `this store was migrated by ${by}, newer than this hangar ${release}: it holds migrations this release does not know (${unknown.map((r) => r.id).join(', ')}). ` +
      `Nothing was changed. Run ${releases.length ? `hangar ${releases[0]}` : 'the newer release'} or later on it, or, to go back to this release, restore the backup taken before the upgrade (hangar restore); see docs/upgrading.md`,
  );
}
