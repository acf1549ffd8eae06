import { chmodSync, copyFileSync, existsSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import YAML from 'yaml';
import type { HangarConfig } from '../../config/schema.js';
import { loadPlugins } from '../app.js';
import { configFromEnv, deepMerge, loadConfig } from '../config.js';
import { coreMigrations } from '../db/core-migrations.js';
import { runMigrations, type MigrationSet } from '../db/migrations.js';
import { openStore, type Dialect } from '../db/store.js';
import type { Catalogue } from '../plugin.js';
import { requireSharedKeyring } from '../pki/keyring.js';
import { versionInfo } from '../version.js';
import { ArchiveError, entryFromBytes, entryFromFile, extractArchive, writeArchive, type ArchiveEntry } from './archive.js';
import { exportTables, listTables, loadRows, MIGRATIONS_TABLE, openSqliteFile, rowsOfExport, rowsOfSqliteFile, snapshotSqlite } from './store-dump.js';

/** What kind of file this is, in its manifest. */
const KIND = 'hangar-control-plane-backup';
const FORMAT = 1;
/** Entries of the archive. */
const STORE_SQLITE = 'store/hangar.sqlite';
const STORE_ROWS = 'store/rows.jsonl';
const CONFIG_ENTRY = 'config/operator.yaml';
const MASTER_KEY_ENTRY = 'secrets/master-key';
const DATA_PREFIX = 'data/';
/** The configuration a restore writes into the data dir, for `hangar serve --config`. */
export const RESTORED_CONFIG = 'restored-config.yaml';
/** Data-dir entries not carried: the SQLite files (the snapshot is) and k3s binaries the operator placed. */
const SKIPPED_DATA = new Set(['k3s', 'lost+found']);

type Tree = Record<string, unknown>;

export interface Manifest {
  kind: string;
  format: number;
  hangar_version: string;
  created_at: string;
  hostname: string;
  dialect: Dialect;
  /** Where the store's copy is: a SQLite snapshot or a row export. */
  store: { entry: string; format: 'sqlite' | 'rows' };
  /** The schema: the migrations that made it, in order. */
  schema: { migrations: string[] };
  /** Where the CA, the JWT secret and the sealing root are: data-dir files, or the store sealed with the master key. */
  keyring: 'files' | 'shared';
  files: Array<{ name: string; size: number; sha256: string; mode?: number }>;
}

/** The configuration an operator gave (their file and HANGAR_* variables), without the defaults. */
export function operatorConfiguration(file: string | undefined, env: Record<string, string | undefined>): Tree {
  const path_ = file ?? env.HANGAR_CONFIG;
  const fromFile = path_ && existsSync(path_) ? ((YAML.parse(readFileSync(path_, 'utf8')) as Tree | null) ?? {}) : {};
  const tree = deepMerge(fromFile, configFromEnv(env));
  for (const key of ['plugins', 'drivers']) if (typeof tree[key] === 'string') tree[key] = (tree[key] as string).split(',').map((s) => s.trim()).filter(Boolean);
  return tree;
}

function sqliteFiles(config: HangarConfig): string[] {
  const file = config.database.sqlite_file ?? path.join(config.data_dir, 'hangar.db');
  return ['', '-wal', '-shm', '-journal'].map((s) => path.resolve(file + s));
}

/** The data dir's files that a backup carries, by path relative to it. */
function dataFiles(config: HangarConfig): string[] {
  const skip = new Set(sqliteFiles(config));
  const out: string[] = [];
  const walk = (dir: string, rel: string) => {
    for (const name of readdirSync(dir).sort()) {
      const full = path.join(dir, name);
      const relative = rel ? `${rel}/${name}` : name;
      if ((!rel && SKIPPED_DATA.has(name)) || skip.has(path.resolve(full)) || /\.\d+\.(new|old)$/.test(name)) continue;
      const stat = lstatSync(full);
      if (stat.isDirectory()) walk(full, relative);
      else if (stat.isFile()) out.push(relative);
    }
  };
  if (existsSync(config.data_dir)) walk(config.data_dir, '');
  return out;
}

export interface CreateOptions {
  config: HangarConfig;
  /** The configuration as the operator gave it (operatorConfiguration). */
  operatorConfig: Tree;
  passphrase: string;
  /** The archive to write. */
  file: string;
}

export interface CreateResult {
  file: string;
  bytes: number;
  manifest: Omit<Manifest, 'files'> & { files: number };
}

/**
 * Writes a backup of the control plane: a consistent copy of the store (SQLite `VACUUM INTO`, or a
 * row export of PostgreSQL in one repeatable-read transaction), the data dir's files (CA, server
 * certificate and key, JWT secret…), the master key when one is set, and the operator's
 * configuration, encrypted under the passphrase. The control plane may be serving meanwhile.
 */
export async function createControlPlaneBackup(options: CreateOptions): Promise<CreateResult> {
  const { config } = options;
  const [sqliteFile] = sqliteFiles(config);
  // Opening a SQLite store that is not there would make an empty one: a wrong --data-dir says so instead.
  if (!config.database.url && !existsSync(sqliteFile!)) {
    throw new ArchiveError(`there is no hangar store at ${sqliteFile}: give the control plane's configuration (--config, --data-dir or HANGAR_* as for hangar serve)`);
  }
  const staging = mkdtempSync(path.join(os.tmpdir(), 'hangar-backup-'));
  const store = await openStore(config);
  try {
    const hasSchema = (await listTables(store.knex, store.dialect)).includes(MIGRATIONS_TABLE);
    if (!hasSchema) throw new ArchiveError(`the store ${store.dialect === 'sqlite' ? `in ${config.data_dir}` : 'at database.url'} holds no hangar installation: nothing to back up`);
    const storeEntry = store.dialect === 'sqlite' ? STORE_SQLITE : STORE_ROWS;
    const storeFile = path.join(staging, path.basename(storeEntry));
    const migrations = store.dialect === 'sqlite' ? await snapshotSqlite(store, storeFile) : await exportTables(store, storeFile);
    const entries: ArchiveEntry[] = [await entryFromFile(storeEntry, storeFile)];
    for (const rel of dataFiles(config)) {
      const full = path.join(config.data_dir, rel);
      entries.push({ ...(await entryFromFile(`${DATA_PREFIX}${rel}`, full)), mode: statSync(full).mode & 0o777 });
    }
    const operator = { ...options.operatorConfig };
    delete operator.data_dir;
    entries.push(entryFromBytes(CONFIG_ENTRY, Buffer.from(YAML.stringify(operator))));
    if (config.secrets.master_key) entries.push(entryFromBytes(MASTER_KEY_ENTRY, Buffer.from(config.secrets.master_key)));
    const manifest: Omit<Manifest, 'files'> = {
      kind: KIND,
      format: FORMAT,
      hangar_version: versionInfo.version,
      created_at: new Date().toISOString(),
      hostname: os.hostname(),
      dialect: store.dialect,
      store: { entry: storeEntry, format: store.dialect === 'sqlite' ? 'sqlite' : 'rows' },
      schema: { migrations: migrations.map((m) => m.id) },
      keyring: config.secrets.master_key ? 'shared' : 'files',
    };
    await writeArchive(options.file, options.passphrase, manifest as unknown as Record<string, unknown>, entries);
    return { file: options.file, bytes: statSync(options.file).size, manifest: { ...manifest, files: entries.length } };
  } finally {
    await store.close();
    rmSync(staging, { recursive: true, force: true });
  }
}

export interface RestoreOptions {
  file: string;
  passphrase: string;
  /** The restore's own configuration file and variables (database settings of the new installation, often nothing else). */
  configFile?: string;
  env: Record<string, string | undefined>;
  dataDir?: string;
  catalogue: Catalogue;
  /** Replace a store and data dir that are not empty. */
  force: boolean;
}

export interface RestoreResult {
  manifest: Manifest;
  dataDir: string;
  dialect: Dialect;
  configFile: string;
  rows: number | null;
  files: number;
}

/** The migration sets of this hangar for a configuration: core's, then each loaded plugin's, in start-up order. */
async function migrationSets(config: HangarConfig, catalogue: Catalogue): Promise<MigrationSet[]> {
  const plugins = await loadPlugins(config, catalogue);
  return [coreMigrations, ...plugins.filter((p) => p.migrations?.length).map((p) => ({ owner: p.name, migrations: p.migrations! }))];
}

/** Refuses an archive whose schema this hangar cannot restore: made by a newer hangar, or with tables of plugins not loaded. */
function checkSchema(manifest: Manifest, sets: MigrationSet[]): void {
  const known = new Map(sets.map((s) => [s.owner, new Set(s.migrations.map((m) => `${s.owner}/${m.id}`))]));
  const newer: string[] = [];
  const unloaded = new Set<string>();
  for (const id of manifest.schema.migrations) {
    const owner = id.split('/')[0]!;
    const ids = known.get(owner);
    if (!ids) unloaded.add(owner);
    else if (!ids.has(id)) newer.push(id);
  }
  if (newer.length) {
    throw new ArchiveError(
      `the archive was made by hangar ${manifest.hangar_version} with a newer schema than this hangar (${versionInfo.version}) knows ` +
        `(${newer.slice(0, 3).join(', ')}${newer.length > 3 ? ', …' : ''}): restore it with hangar ${manifest.hangar_version} or later`,
    );
  }
  if (unloaded.size) {
    throw new ArchiveError(`the archive's store has tables of ${[...unloaded].map((p) => `plugin ${p}`).join(', ')}, which this configuration does not load: add ${unloaded.size === 1 ? 'it' : 'them'} to plugins: (or HANGAR_PLUGINS)`);
  }
}

/** What of the new installation is already there (data-dir entries, tables): empty means nothing. */
async function occupied(config: HangarConfig): Promise<string[]> {
  const found: string[] = [];
  if (existsSync(config.data_dir)) {
    const entries = readdirSync(config.data_dir).filter((n) => !SKIPPED_DATA.has(n));
    if (entries.length) found.push(`the data dir ${config.data_dir} holds ${entries.slice(0, 4).join(', ')}${entries.length > 4 ? ', …' : ''}`);
  }
  if (config.database.url) {
    const store = await openStore(config);
    try {
      const tables = await listTables(store.knex, store.dialect);
      if (tables.length) found.push(`the database${config.database.schema ? ` schema ${config.database.schema}` : ''} has ${tables.length} tables`);
    } finally {
      await store.close();
    }
  } else {
    const [file] = sqliteFiles(config);
    if (existsSync(file!) && statSync(file!).size > 0 && !found.length) found.push(`the SQLite file ${file} exists`);
  }
  return found;
}

/** Empties the new installation's data dir (but what SKIPPED_DATA names) and drops its tables (--force). */
async function clear(config: HangarConfig): Promise<void> {
  if (existsSync(config.data_dir)) for (const name of readdirSync(config.data_dir)) if (!SKIPPED_DATA.has(name)) rmSync(path.join(config.data_dir, name), { recursive: true, force: true });
  for (const f of sqliteFiles(config)) rmSync(f, { force: true });
  if (config.database.url) {
    const store = await openStore(config);
    try {
      for (const table of await listTables(store.knex, store.dialect)) await store.knex.raw(`drop table if exists "${table}" cascade`);
    } finally {
      await store.close();
    }
  }
}

/**
 * Restores a control-plane backup into a new installation: an empty data dir and store (SQLite or
 * PostgreSQL, whichever the restore's configuration names; the archive's may be the other one).
 * Writes `<data dir>/restored-config.yaml`: the archived operator configuration with the restore's
 * own settings (its database, its data dir) over it, and the master key the store's secrets are
 * sealed with; `hangar serve --config <that file>` then starts the restored control plane.
 */
export async function restoreControlPlane(options: RestoreOptions): Promise<RestoreResult> {
  const staging = mkdtempSync(path.join(os.tmpdir(), 'hangar-restore-'));
  try {
    const manifest = (await extractArchive(options.file, options.passphrase, staging)) as unknown as Manifest;
    if (manifest.kind !== KIND) throw new ArchiveError(`${options.file} is not a hangar control-plane backup (its manifest says ${JSON.stringify(manifest.kind)})`);
    if (manifest.format > FORMAT) throw new ArchiveError(`${options.file} is in format ${manifest.format}, made by hangar ${manifest.hangar_version}; this hangar (${versionInfo.version}) reads format ${FORMAT}: restore it with hangar ${manifest.hangar_version} or later`);
    // The new installation's configuration: the archived one with the restore's own settings over it.
    const archived = (YAML.parse(readFileSync(path.join(staging, CONFIG_ENTRY), 'utf8')) as Tree | null) ?? {};
    delete archived.database;
    const own = operatorConfiguration(options.configFile, options.env);
    const tree = deepMerge(archived, own);
    const archivedKey = existsSync(path.join(staging, MASTER_KEY_ENTRY)) ? readFileSync(path.join(staging, MASTER_KEY_ENTRY), 'utf8') : null;
    const ownKey = (own.secrets as Tree | undefined)?.master_key as string | undefined;
    if (manifest.keyring === 'shared' && archivedKey) {
      if (ownKey && ownKey !== archivedKey) {
        throw new ArchiveError(
          'the archive’s CA, JWT secret and sealing key are sealed with the master key it was made with, and this restore sets another secrets.master_key: ' +
            'leave secrets.master_key (HANGAR_SECRETS__MASTER_KEY) unset for the restore (the archived one is written to the restored configuration), or set the same one',
        );
      }
      tree.secrets = { ...((tree.secrets as Tree) ?? {}), master_key: archivedKey };
    }
    const config = loadConfig({ env: { NODE_ENV: options.env.NODE_ENV }, overrides: tree, dataDir: options.dataDir ?? (own.data_dir as string | undefined) });
    requireSharedKeyring(config.database.url ? 'postgres' : 'sqlite', config.secrets.master_key);
    const dialect: Dialect = config.database.url ? 'postgres' : 'sqlite';
    const sets = await migrationSets(config, options.catalogue);
    checkSchema(manifest, sets);

    const present = await occupied(config);
    if (present.length && !options.force) {
      throw new ArchiveError(`the new installation is not empty: ${present.join('; ')}. Restore into an empty data dir and database, or give --force to replace what is there`);
    }
    if (present.length) await clear(config);
    mkdirSync(config.data_dir, { recursive: true, mode: 0o700 });
    chmodSync(config.data_dir, 0o700);

    // The data dir's files, with their modes.
    let files = 0;
    for (const f of manifest.files.filter((e) => e.name.startsWith(DATA_PREFIX))) {
      const target = path.join(config.data_dir, f.name.slice(DATA_PREFIX.length));
      mkdirSync(path.dirname(target), { recursive: true, mode: 0o700 });
      copyFileSync(path.join(staging, f.name), target);
      chmodSync(target, f.mode ?? 0o600);
      files++;
    }

    // The store.
    const storeCopy = path.join(staging, manifest.store.entry);
    let rows: number | null = null;
    if (manifest.store.format === 'sqlite' && dialect === 'sqlite') {
      const [target] = sqliteFiles(config);
      mkdirSync(path.dirname(target!), { recursive: true, mode: 0o700 });
      // Leadership leases and notices belong to the processes of the installation backed up.
      const copy = openSqliteFile(storeCopy);
      try {
        for (const table of ['leader_leases', 'store_notices']) if (await copy.schema.hasTable(table)) await copy(table).delete();
      } finally {
        await copy.destroy();
      }
      copyFileSync(storeCopy, target!);
      chmodSync(target!, 0o600);
    } else {
      const store = await openStore(config);
      try {
        const wanted = new Set(manifest.schema.migrations);
        // The archive's schema exactly: its migrations only (`hangar serve` applies newer ones at start).
        for (const set of sets) await runMigrations(store, [{ owner: set.owner, migrations: set.migrations.filter((m) => wanted.has(`${set.owner}/${m.id}`)) }]);
        const counts = await loadRows(store, manifest.store.format === 'sqlite' ? rowsOfSqliteFile(storeCopy) : rowsOfExport(storeCopy));
        rows = Object.values(counts).reduce((a, b) => a + b, 0);
      } finally {
        await store.close();
      }
    }

    const configFile = path.join(config.data_dir, RESTORED_CONFIG);
    const written: Tree = { ...tree, data_dir: config.data_dir };
    writeFileSync(configFile, `# Written by hangar restore from ${path.basename(options.file)} (made ${manifest.created_at} by hangar ${manifest.hangar_version} on ${manifest.hostname}).\n# Start the restored control plane with: hangar serve --config ${configFile}\n${YAML.stringify(written)}`, { mode: 0o600 });
    return { manifest, dataDir: config.data_dir, dialect, configFile, rows, files };
  } finally {
    rmSync(staging, { recursive: true, force: true });
  }
}
