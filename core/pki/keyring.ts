import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type { Knex } from 'knex';
import { deriveKey, SecretBox } from '../crypto.js';
import { ConfigError } from '../errors.js';
import type { Migration } from '../db/migrations.js';
import type { Dialect, Store } from '../db/store.js';

/** The store's table of control-plane secrets, each sealed with the master key. */
export const KEYRING_TABLE = 'keyring';

export const keyringMigration: Migration = {
  id: '005_keyring',
  async up(knex: Knex) {
    await knex.schema.createTable(KEYRING_TABLE, (t) => {
      t.string('name', 100).primary();
      t.text('sealed').notNullable();
      t.string('created_at', 40).notNullable();
    });
  },
};

/** The smallest master key: 32 bytes once base64-decoded. */
const MASTER_KEY_BYTES = 32;

/** The configuration keys that name the master key, for messages. */
export const MASTER_KEY_SETTING = 'secrets.master_key (HANGAR_SECRETS__MASTER_KEY)';

/** One secret the control plane needs: named parts, each with the data-dir file it lives in without a master key. */
export interface KeyringItem {
  /** Its name in the keyring table. */
  name: string;
  /** Each part's file, relative to the data dir (also where an older install kept it). */
  files: string[];
  /** Makes a new value (one string per file) for a fresh install. */
  generate(): Promise<string[]>;
}

interface Logger {
  info(obj: object, msg: string): void;
}

/**
 * Where the control plane's own secrets live (the JWT secret, the CA, the sealing root).
 *
 * - **Without a master key** (a control plane on SQLite, its workers included): files in the data
 *   dir, readable by their owner only, generated at first start (by the first worker alone).
 * - **With `secrets.master_key`**: rows of the store's `keyring` table, sealed with AES-256-GCM under
 *   a key derived from the master key, so every control plane on the same database (and with the
 *   same master key) uses the same ones. A value missing from the table is taken from the data
 *   dir's files when an older install left them there (nothing is lost moving to a master key), or
 *   generated; the first control plane to store it wins and every other one reads that.
 *
 * PostgreSQL is meant for several control planes, so it needs the master key
 * ({@link requireSharedKeyring}).
 */
export class Keyring {
  private readonly box: SecretBox | null;
  /** The master key itself, once decoded (null without one). */
  readonly masterKey: Buffer | null;

  constructor(
    private readonly store: Store,
    private readonly dataDir: string,
    masterKey: string | null | undefined,
    private readonly log?: Logger,
  ) {
    this.masterKey = masterKey ? decodeMasterKey(masterKey) : null;
    this.box = this.masterKey ? new SecretBox(deriveKey(this.masterKey, 'keyring')) : null;
  }

  /** True when the secrets are shared through the store (a master key is configured). */
  get shared(): boolean {
    return this.box !== null;
  }

  /** The item's value: from the store (shared) or the data dir, made at first use. */
  async obtain(item: KeyringItem): Promise<string[]> {
    if (!this.box) return this.fromFiles(item) ?? this.toFiles(item, await item.generate());
    const stored = await this.read(item.name);
    if (stored) return stored;
    const legacy = this.fromFiles(item);
    const value = legacy ?? (await item.generate());
    await this.store
      .knex(KEYRING_TABLE)
      .insert({ name: item.name, sealed: this.box.seal(JSON.stringify(value)), created_at: new Date().toISOString() })
      .onConflict('name')
      .ignore();
    // Another control plane starting at the same moment may have stored its own first: use the stored one.
    const winner = (await this.read(item.name))!;
    if (legacy && JSON.stringify(winner) === JSON.stringify(legacy)) {
      this.log?.info({ item: item.name, files: item.files }, 'moved a secret from the data dir into the store (sealed with the master key); the files are no longer read');
    }
    return winner;
  }

  /** A value only the shared keyring holds (no file fallback): the sealing root. Null without a master key. */
  async obtainShared(name: string, generate: () => Promise<string[]>): Promise<string[] | null> {
    return this.box ? this.obtain({ name, files: [], generate }) : null;
  }

  private async read(name: string): Promise<string[] | null> {
    const row = await this.store.knex(KEYRING_TABLE).where({ name }).first('sealed');
    if (!row) return null;
    try {
      return JSON.parse(this.box!.openString(row.sealed as string)) as string[];
    } catch {
      throw new ConfigError(
        `${MASTER_KEY_SETTING} does not open the secrets stored in the database (keyring item "${name}"): ` +
          `every control plane on this database must be given the same master key`,
      );
    }
  }

  private fromFiles(item: KeyringItem): string[] | null {
    if (!item.files.length) return null;
    const files = item.files.map((f) => path.join(this.dataDir, f));
    return files.every((f) => existsSync(f)) ? files.map((f) => readFileSync(f, 'utf8')) : null;
  }

  private toFiles(item: KeyringItem, value: string[]): string[] {
    item.files.forEach((f, i) => writeFileSync(path.join(this.dataDir, f), value[i]!, { mode: 0o600 }));
    return value;
  }
}

/** Refuses to start a control plane on PostgreSQL (which several share) without the master key they share secrets with. */
export function requireSharedKeyring(dialect: Dialect, masterKey: string | null | undefined): void {
  if (dialect === 'postgres' && !masterKey) {
    throw new ConfigError(
      `database.url names PostgreSQL, which control planes share: set ${MASTER_KEY_SETTING} to the same base64 key ` +
        `(32+ bytes, e.g. \`openssl rand -base64 32\`) on every control plane, so that they share the JWT secret, the CA ` +
        `and the sealing key through the database (see docs/high-availability.md)`,
    );
  }
}

function decodeMasterKey(value: string): Buffer {
  const key = Buffer.from(value.trim(), 'base64');
  if (!/^[A-Za-z0-9+/_-]+={0,2}$/.test(value.trim()) || key.length < MASTER_KEY_BYTES) {
    throw new ConfigError(`${MASTER_KEY_SETTING} must be base64 that decodes to at least ${MASTER_KEY_BYTES} bytes (e.g. \`openssl rand -base64 32\`)`);
  }
  return key;
}
