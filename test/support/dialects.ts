import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import knexFactory from 'knex';
import { loadConfig } from '../../core/config.js';
import type { HangarConfig } from '../../config/schema.js';
import { randomToken } from '../../core/ids.js';
import { PG_URL, postgresAvailable, requireService } from './requirements.js';

export type DialectName = 'sqlite' | 'postgres';
export const DIALECTS: DialectName[] = ['sqlite', 'postgres'];

/**
 * The master key of test control planes on PostgreSQL (start-up refuses PostgreSQL without one, see
 * core/pki/keyring.ts): a constant, so that control planes a test starts on one schema share it.
 */
export const TEST_MASTER_KEY = Buffer.alloc(32, 'hangar-test-master-key').toString('base64');

/** One dialect's test environment: fresh data dirs and, on PostgreSQL, fresh schemas, dropped afterwards. */
export class TestDialect {
  private readonly dirs: string[] = [];
  private readonly schemas: string[] = [];

  constructor(readonly name: DialectName) {}

  /** A new empty data dir (and PostgreSQL schema) for one control plane. */
  freshStorage(): { dataDir: string; schema: string | null } {
    const dataDir = mkdtempSync(path.join(os.tmpdir(), 'hangar-test-'));
    this.dirs.push(dataDir);
    let schema: string | null = null;
    if (this.name === 'postgres') {
      schema = `t_${randomToken(12)}`;
      this.schemas.push(schema);
    }
    return { dataDir, schema };
  }

  /** Configuration for a test control plane on this dialect (test env, random ports). */
  config(storage = this.freshStorage(), overrides: Record<string, unknown> = {}): HangarConfig {
    const database = this.name === 'postgres' ? { url: PG_URL, schema: storage.schema } : {};
    const secrets = this.name === 'postgres' ? { master_key: TEST_MASTER_KEY } : {};
    return loadConfig({
      env: { NODE_ENV: 'test' },
      dataDir: storage.dataDir,
      overrides: {
        ...overrides,
        database: { ...database, ...((overrides.database as object) ?? {}) },
        secrets: { ...secrets, ...((overrides.secrets as object) ?? {}) },
      },
    });
  }

  async cleanup(): Promise<void> {
    for (const dir of this.dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
    if (this.schemas.length) {
      const knex = knexFactory({ client: 'pg', connection: PG_URL, pool: { min: 0, max: 1 } });
      try {
        for (const schema of this.schemas.splice(0)) await knex.raw(`drop schema if exists "${schema}" cascade`);
      } finally {
        await knex.destroy();
      }
    }
  }
}

/** Declares the suite once per dialect; the PostgreSQL copy is skipped loudly when no server answers. */
export function describeEachDialect(title: string, body: (dialect: TestDialect) => void): void {
  for (const name of DIALECTS) {
    describe(`${title} [${name}]`, function () {
      const dialect = new TestDialect(name);
      before(async function () {
        if (name === 'postgres') {
          requireService(this, await postgresAvailable(), 'PostgreSQL (HANGAR_TEST_PG_URL, or run scripts/services.sh as root)');
        }
      });
      after(() => dialect.cleanup());
      body(dialect);
    });
  }
}
