import { chmodSync, constants as fsConstants, copyFileSync, existsSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import YAML from 'yaml';
import type { HangarConfig } from '../../config/schema.js';
import { loadPlugins } from '../assembly.js';
import { configFromEnv, deepMerge, loadConfig } from '../config.js';
import { coreMigrations } from '../db/core-migrations.js';
import { runMigrations, type MigrationSet } from '../db/migrations.js';
import { LEADER_LEASES_TABLE } from '../db/leadership.js';
import type { Knex } from 'knex';
import { openStore, type Dialect } from '../db/store.js';
import type { Catalogue } from '../plugin.js';
import { requireSharedKeyring } from '../pki/keyring.js';
import { versionInfo } from '../version.js';
import { ArchiveError, entryFromBytes, entryFromFile, extractArchive, isPlainEntryName, writeArchive, type ArchiveEntry } from './archive.js';
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

/** The prefix of the (plaintext) staging directories of backups and restores, `<prefix><pid>-<random>`. */
export const STAGING_PREFIX = '.hangar-staging-';

/**
 * A new staging directory (0700) in `parent`, after removing those that runs which are no longer
 * alive left there (a crashed backup or restore: their plaintext copies of the store).
 */
export function makeStaging(parent: string): string {
  mkdirSync(parent, { recursive: true, mode: 0o700 });
  for (const name of readdirSync(parent)) {
    const match = name.startsWith(STAGING_PREFIX) ? /^(\d+)-/.exec(name.slice(STAGING_PREFIX.length)) : null;
    if (!match) continue;
    const pid = Number(match[1]);
    let alive = pid === process.pid;
    if (!alive) {
      try {
        process.kill(pid, 0);
        alive = true;
      } catch (err) {
        alive = (err as NodeJS.ErrnoException).code === 'EPERM';
      }
    }
    if (!alive) rmSync(path.join(parent, name), { recursive: true, force: true });
  }
  return mkdtempSync(path.join(parent, `${STAGING_PREFIX}${process.pid}-`));
}

/** Whether a data-dir file holds a key or secret: restored 0600 whatever its mode was. */
function isKeyFile(rel: string): boolean {
  return /(\.key|\.pem|secret|master-key|password|token)$/i.test(rel) || /(^|\/)(jwt-secret|keyring)/.test(rel);
}

/** The data dir's files that a backup carries, by path relative to it, and what it does not carry (symbolic links, sockets…). */
function dataFiles(config: HangarConfig): { files: string[]; notCarried: string[] } {
  const skip = new Set(sqliteFiles(config));
  const files: string[] = [];
  const notCarried: string[] = [];
  const walk = (dir: string, rel: string) => {
    for (const name of readdirSync(dir).sort()) {
      const full = path.join(dir, name);
      const relative = rel ? `${rel}/${name}` : name;
      if ((!rel && (SKIPPED_DATA.has(name) || name.startsWith(STAGING_PREFIX))) || skip.has(path.resolve(full)) || /\.\d+\.(new|old)$/.test(name)) continue;
      const stat = lstatSync(full);
      if (stat.isDirectory()) walk(full, relative);
      else if (stat.isFile()) files.push(relative);
      else notCarried.push(`${relative} (${stat.isSymbolicLink() ? 'a symbolic link' : 'not a regular file'})`);
    }
  };
  if (existsSync(config.data_dir)) walk(config.data_dir, '');
  return { files, notCarried };
}

/** Files the configuration names outside the data dir (not carried: the operator keeps them). */
function outsideDataDir(config: HangarConfig): string[] {
  const root = path.resolve(config.data_dir) + path.sep;
  return [
    ['api.tls_cert', config.api.tls_cert],
    ['api.tls_key', config.api.tls_key],
  ]
    .filter((e): e is [string, string] => typeof e[1] === 'string' && !path.resolve(config.data_dir, e[1]).startsWith(root))
    .map(([key, file]) => `${key} ${file} (outside the data dir)`);
}

export interface CreateOptions {
  config: HangarConfig;
  /** The configuration as the operator gave it (operatorConfiguration). */
  operatorConfig: Tree;
  passphrase: string;
  /** The archive to write. */
  file: string;
  /** Replace an archive already at `file`. */
  overwrite?: boolean;
  /** Where the plaintext copy of the store is staged: next to `file` unless given. */
  stagingParent?: string;
}

export interface CreateResult {
  file: string;
  bytes: number;
  manifest: Omit<Manifest, 'files'> & { files: number };
  /** What the backup does not carry and the operator must keep themselves: symbolic links in the data dir, TLS files outside it. */
  notCarried: string[];
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
  if (!options.overwrite && existsSync(options.file)) throw new ArchiveError(`${options.file} exists: give another --to, or --force to replace it`);
  const staging = makeStaging(options.stagingParent ?? path.dirname(path.resolve(options.file)));
  const store = await openStore(config);
  try {
    const hasSchema = (await listTables(store.knex, store.dialect)).includes(MIGRATIONS_TABLE);
    if (!hasSchema) throw new ArchiveError(`the store ${store.dialect === 'sqlite' ? `in ${config.data_dir}` : 'at database.url'} holds no hangar installation: nothing to back up`);
    const storeEntry = store.dialect === 'sqlite' ? STORE_SQLITE : STORE_ROWS;
    const storeFile = path.join(staging, path.basename(storeEntry));
    const migrations = store.dialect === 'sqlite' ? await snapshotSqlite(store, storeFile) : await exportTables(store, storeFile);
    const entries: ArchiveEntry[] = [await entryFromFile(storeEntry, storeFile)];
    const data = dataFiles(config);
    // Read once into memory (they are small): what is hashed is what is written.
    for (const rel of data.files) {
      const full = path.join(config.data_dir, rel);
      entries.push({ ...entryFromBytes(`${DATA_PREFIX}${rel}`, readFileSync(full)), mode: statSync(full).mode & 0o777 });
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
    return { file: options.file, bytes: statSync(options.file).size, manifest: { ...manifest, files: entries.length }, notCarried: [...data.notCarried.map((f) => `data dir: ${f}`), ...outsideDataDir(config)] };
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
  /** Replace them even while a control plane holds leadership leases there (it is serving). */
  forceWhileServing?: boolean;
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

/** The tables hangar's migrations (core and the loaded plugins) make: run into a scratch SQLite file. */
async function hangarTables(config: HangarConfig, sets: MigrationSet[], scratch: string): Promise<Set<string>> {
  const probe = await openStore({ ...config, data_dir: scratch, database: { ...config.database, url: null, sqlite_file: path.join(scratch, 'probe.db') } } as HangarConfig);
  try {
    await runMigrations(probe, sets);
    return new Set(await listTables(probe.knex, 'sqlite'));
  } finally {
    await probe.close();
  }
}

/** The leadership leases not run out in a store: a control plane serves it (`name held by holder`). */
async function liveLeases(knex: Knex): Promise<string[]> {
  if (!(await knex.schema.hasTable(LEADER_LEASES_TABLE))) return [];
  const rows = (await knex(LEADER_LEASES_TABLE).where('expires_ms', '>=', Date.now()).select('name', 'holder')) as Array<{ name: string; holder: string }>;
  return rows.map((r) => `${r.name} held by ${r.holder}`);
}

interface Occupancy {
  /** What is there (data-dir entries, tables): empty means nothing. */
  found: string[];
  /** PostgreSQL tables of the schema that are not hangar's (never dropped). */
  foreign: string[];
  /** Leases a serving control plane holds. */
  leases: string[];
  /** hangar's tables there (dropped by --force). */
  tables: string[];
}

/** What of the new installation is already there. */
async function occupied(config: HangarConfig, ownTables: Set<string>): Promise<Occupancy> {
  const out: Occupancy = { found: [], foreign: [], leases: [], tables: [] };
  if (existsSync(config.data_dir)) {
    const entries = readdirSync(config.data_dir).filter((n) => !SKIPPED_DATA.has(n));
    if (entries.length) out.found.push(`the data dir ${config.data_dir} holds ${entries.slice(0, 4).join(', ')}${entries.length > 4 ? ', …' : ''}`);
  }
  if (config.database.url) {
    const store = await openStore(config);
    try {
      const tables = await listTables(store.knex, store.dialect);
      if (tables.length) out.found.push(`the database${config.database.schema ? ` schema ${config.database.schema}` : ''} has ${tables.length} tables`);
      out.tables = tables.filter((t) => ownTables.has(t));
      out.foreign = tables.filter((t) => !ownTables.has(t));
      out.leases = await liveLeases(store.knex);
    } finally {
      await store.close();
    }
  } else {
    const [file] = sqliteFiles(config);
    if (existsSync(file!) && statSync(file!).size > 0) {
      if (!out.found.length) out.found.push(`the SQLite file ${file} exists`);
      const knex = openSqliteFile(file!);
      try {
        out.leases = await liveLeases(knex);
      } finally {
        await knex.destroy();
      }
    }
  }
  return out;
}

/** Empties the new installation's data dir (but what SKIPPED_DATA names) and drops hangar's tables (--force). */
async function clear(config: HangarConfig, tables: string[]): Promise<void> {
  if (existsSync(config.data_dir)) for (const name of readdirSync(config.data_dir)) if (!SKIPPED_DATA.has(name)) rmSync(path.join(config.data_dir, name), { recursive: true, force: true });
  for (const f of sqliteFiles(config)) rmSync(f, { force: true });
  if (config.database.url && tables.length) {
    const store = await openStore(config);
    try {
      for (const table of tables) await store.knex.raw(`drop table if exists "${table}" cascade`);
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
  const own = operatorConfiguration(options.configFile, options.env);
  // The data dir is the restore's own (--data-dir, its configuration, the default): the archive does not choose it.
  const dataDir = loadConfig({ env: { NODE_ENV: options.env.NODE_ENV }, overrides: own, dataDir: options.dataDir ?? (own.data_dir as string | undefined) }).data_dir;
  // The plaintext is staged next to the data dir (same disk, not a shared /tmp).
  const staging = makeStaging(path.dirname(dataDir));
  try {
    const manifest = (await extractArchive(options.file, options.passphrase, staging)) as unknown as Manifest;
    if (manifest.kind !== KIND) throw new ArchiveError(`${options.file} is not a hangar control-plane backup (its manifest says ${JSON.stringify(manifest.kind)})`);
    if (manifest.format > FORMAT) throw new ArchiveError(`${options.file} is in format ${manifest.format}, made by hangar ${manifest.hangar_version}; this hangar (${versionInfo.version}) reads format ${FORMAT}: restore it with hangar ${manifest.hangar_version} or later`);
    // The new installation's configuration: the archived one with the restore's own settings over it.
    const archived = (YAML.parse(readFileSync(path.join(staging, CONFIG_ENTRY), 'utf8')) as Tree | null) ?? {};
    delete archived.database;
    delete archived.data_dir;
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
    const config = loadConfig({ env: { NODE_ENV: options.env.NODE_ENV }, overrides: tree, dataDir });
    requireSharedKeyring(config.database.url ? 'postgres' : 'sqlite', config.secrets.master_key);
    const dialect: Dialect = config.database.url ? 'postgres' : 'sqlite';
    const sets = await migrationSets(config, options.catalogue);
    checkSchema(manifest, sets);

    const present = await occupied(config, dialect === 'postgres' ? await hangarTables(config, sets, path.join(staging, 'probe')) : new Set());
    if (present.found.length && !options.force) {
      throw new ArchiveError(`the new installation is not empty: ${present.found.join('; ')}. Restore into an empty data dir and database, or give --force to replace what is there`);
    }
    if (present.foreign.length) {
      throw new ArchiveError(
        `the database${config.database.schema ? ` schema ${config.database.schema}` : ''} has tables that are not hangar's: ${present.foreign.slice(0, 8).join(', ')}${present.foreign.length > 8 ? ', …' : ''} ` +
          '(neither core’s nor those of the plugins this configuration loads; add the plugin to plugins: if one made them). ' +
          'Restore into a schema of its own (database.schema, HANGAR_DATABASE__SCHEMA); --force drops only hangar’s tables and never these',
      );
    }
    if (present.leases.length && !options.forceWhileServing) {
      throw new ArchiveError(
        `a control plane is serving this installation (leadership ${present.leases.slice(0, 3).join(', ')}${present.leases.length > 3 ? ', …' : ''}): ` +
          'stop it first (its leases end when it stops, or within a minute of it dying), or give --force-while-serving to replace it under it',
      );
    }
    if (present.found.length) await clear(config, present.tables);
    mkdirSync(config.data_dir, { recursive: true, mode: 0o700 });
    chmodSync(config.data_dir, 0o700);

    // The data dir's files, with their modes.
    let files = 0;
    // Owner bits only (no setuid, nothing for group or others); keys and secrets 0600 whatever they were.
    const root = path.resolve(config.data_dir) + path.sep;
    const dataEntries = manifest.files.filter((e) => e.name.startsWith(DATA_PREFIX));
    // Checked before anything is written: inside the data dir, and not through a symbolic link left there (k3s/, lost+found).
    for (const f of dataEntries) {
      const rel = f.name.slice(DATA_PREFIX.length);
      const inside = isPlainEntryName(rel) && path.resolve(config.data_dir, rel).startsWith(root);
      const segments = rel.split('/');
      const link = segments.map((_, i) => path.join(config.data_dir, ...segments.slice(0, i + 1))).find((p) => lstatSync(p, { throwIfNoEntry: false })?.isSymbolicLink());
      if (!inside || link) throw new ArchiveError(`${options.file} is refused: its entry ${JSON.stringify(f.name)} would be written outside the data dir${link ? ` (through the symbolic link ${link})` : ''}`);
    }
    for (const f of dataEntries) {
      const rel = f.name.slice(DATA_PREFIX.length);
      const target = path.resolve(config.data_dir, rel);
      mkdirSync(path.dirname(target), { recursive: true, mode: 0o700 });
      copyFileSync(path.join(staging, f.name), target, fsConstants.COPYFILE_EXCL);
      const mode = typeof f.mode === 'number' ? (f.mode & 0o700) | 0o600 : 0o600;
      chmodSync(target, isKeyFile(rel) ? 0o600 : mode);
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
