import { chmodSync, closeSync, existsSync, mkdirSync, openSync } from 'node:fs';
import path from 'node:path';
import knexFactory, { type Knex } from 'knex';
import type { HangarConfig } from '../../config/schema.js';
import { PageCursors } from './cursors.js';
import { ChangeFeed } from './changes.js';
import { StoreHealth } from './health.js';
import { Leadership } from './leadership.js';
import { Notices } from './notices.js';
import { PreparedReads } from './reads.js';
import { PreparedWrites } from './writes.js';
import { ScopedPgClient } from './pg-client.js';
import { ImmediateSqliteClient } from './sqlite-client.js';

export type Dialect = 'sqlite' | 'postgres';

/** The configured database: a knex instance plus what differs between dialects. */
export class Store {
  /** Signs page cursors; keyed from the root secret once the PKI is open. */
  readonly cursors = new PageCursors();
  /** Every write a Repository makes, announced (core/db/changes.ts). */
  readonly changes = new ChangeFeed();

  /** Notices between the processes sharing this store (core/db/notices.ts), for what they cache of it. */
  readonly notices: Notices;
  /** The hottest reads as statements prepared once (core/db/reads.ts). */
  readonly reads: PreparedReads;
  /** The hot writes as statements prepared once, the record read back with RETURNING (core/db/writes.ts). */
  readonly writes: PreparedWrites;
  /** Work that runs in one control plane at a time across those sharing this store (core/db/leadership.ts). */
  readonly leadership: Leadership;
  /** Whether the store takes writes, as failed statements tell (a full disk; core/db/health.ts). */
  readonly health = new StoreHealth();

  constructor(
    readonly knex: Knex,
    readonly dialect: Dialect,
    /** PostgreSQL schema holding hangar's tables, when one is configured. */
    readonly schema: string | null,
    /** The SQLite database file (SQLite only). */
    sqliteFile: string | null = null,
    /** This control plane's name in leadership leases (see Leadership.holderFor). */
    holder = Leadership.holderFor(process.cwd()),
  ) {
    this.notices = new Notices(knex, dialect, schema);
    this.reads = new PreparedReads(knex, dialect, sqliteFile);
    this.writes = new PreparedWrites(knex, dialect, (err) => this.health.noteError(err));
    this.leadership = new Leadership(this, holder);
    knex.on('query-error', (err: unknown) => this.health.noteError(err));
  }

  /** Cheap round-trip used by /healthz. */
  async ping(): Promise<void> {
    await this.knex.raw('select 1');
  }

  async close(): Promise<void> {
    await this.notices.close();
    this.reads.close();
    await this.knex.destroy();
  }
}

/** Makes `dir` (and any missing parent) and keeps it to its owner: mode 0700. */
export function privateDirectory(dir: string): void {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  chmodSync(dir, 0o700);
}

/**
 * The SQLite file and its WAL and shared-memory files, readable by their owner only (0600). The
 * database file is created 0600 before SQLite opens it: SQLite gives its -wal and -shm files the
 * mode of the database file.
 */
function privateSqliteFiles(file: string): void {
  if (!existsSync(file)) closeSync(openSync(file, 'a', 0o600));
  for (const f of [file, `${file}-wal`, `${file}-shm`]) if (existsSync(f)) chmodSync(f, 0o600);
}

export async function openStore(config: HangarConfig): Promise<Store> {
  // The data dir holds the CA key, generated secrets and the SQLite file: nobody else's business.
  privateDirectory(config.data_dir);
  const db = config.database;
  if (db.url) {
    const schema = db.schema ?? null;
    if (schema) {
      // The schema must exist before a pool with that search_path is useful.
      const bootstrap = knexFactory({ client: 'pg', connection: db.url, pool: { min: 0, max: 1 }, compileSqlOnError: false });
      try {
        await bootstrap.raw(`create schema if not exists "${schema}"`);
      } finally {
        await bootstrap.destroy();
      }
    }
    const knex = knexFactory({
      client: ScopedPgClient,
      connection: db.url,
      searchPath: schema ? [schema] : undefined,
      pool: { min: 0, max: db.pool_max },
      acquireConnectionTimeout: db.acquire_timeout_seconds * 1000,
      // A failed statement's message carries its SQL with placeholders, never the values (a password hash, an email).
      compileSqlOnError: false,
    });
    return new Store(knex, 'postgres', schema, null, Leadership.holderFor(config.data_dir));
  }
  const file = db.sqlite_file ?? path.join(config.data_dir, 'hangar.db');
  mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 });
  privateSqliteFiles(file);
  const knex = knexFactory({
    client: ImmediateSqliteClient,
    connection: { filename: file },
    useNullAsDefault: true,
    // A failed statement's message carries its SQL with placeholders, never the values (a password hash, an email).
    compileSqlOnError: false,
    pool: {
      min: 1,
      max: 1,
      afterCreate(conn: { pragma(sql: string): unknown }, done: (err: Error | null, conn: unknown) => void) {
        conn.pragma('journal_mode = WAL');
        conn.pragma('foreign_keys = ON');
        conn.pragma('busy_timeout = 5000');
        conn.pragma('synchronous = NORMAL');
        done(null, conn);
      },
    },
  });
  return new Store(knex, 'sqlite', null, file, Leadership.holderFor(config.data_dir));
}
