import { expect } from 'chai';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { exportTables, rowsOfExport, rowsOfSqliteFile, snapshotSqlite } from '../../../core/backup/store-dump.js';
import { openStore } from '../../../core/db/store.js';
import { describeEachDialect } from '../../support/dialects.js';

/** The store's copy is read a page at a time (core/backup/store-dump.ts): every row once, whatever the key. */
describeEachDialect('control-plane backup: the store copied page by page', (dialect) => {
  let work: string;
  before(() => {
    work = mkdtempSync(path.join(os.tmpdir(), 'hangar-store-dump-unit-'));
  });
  after(() => rmSync(work, { recursive: true, force: true }));

  it('yields every row exactly once across pages: a single key, a composite key, no key', async function () {
    this.timeout(60_000);
    const store = await openStore(dialect.config());
    const file = path.join(work, `copy-${dialect.name}`);
    try {
      const { knex } = store;
      await knex.schema.createTable('hangar_migrations', (t) => {
        t.string('id').primary();
        t.string('applied_at');
      });
      await knex('hangar_migrations').insert({ id: 'core/001', applied_at: new Date().toISOString() });
      await knex.schema.createTable('single', (t) => {
        t.string('id').primary();
        t.integer('n');
      });
      await knex.schema.createTable('composite', (t) => {
        t.string('a');
        t.integer('b');
        t.primary(['a', 'b']);
      });
      await knex.schema.createTable('keyless', (t) => {
        t.integer('n');
      });
      await knex.batchInsert('single', Array.from({ length: 2345 }, (_, i) => ({ id: `id-${i}`, n: i })), 500);
      await knex.batchInsert('composite', Array.from({ length: 2100 }, (_, i) => ({ a: `k${i % 3}`, b: i })), 500);
      // Equal rows must each still come once.
      await knex.batchInsert('keyless', Array.from({ length: 1500 }, (_, i) => ({ n: i % 700 })), 500);
      if (dialect.name === 'sqlite') await snapshotSqlite(store, file);
      else await exportTables(store, file);
    } finally {
      await store.close();
    }
    const seen: Record<string, string[]> = { single: [], composite: [], keyless: [], hangar_migrations: [] };
    for await (const { table, row } of dialect.name === 'sqlite' ? rowsOfSqliteFile(file) : rowsOfExport(file)) seen[table]!.push(JSON.stringify(row));
    expect(seen.single).to.have.length(2345);
    expect(new Set(seen.single).size).to.equal(2345);
    expect(seen.composite).to.have.length(2100);
    expect(new Set(seen.composite).size).to.equal(2100);
    expect(seen.keyless).to.have.length(1500);
    expect(seen.keyless.filter((r) => r === JSON.stringify({ n: 5 }))).to.have.length(3);
  });
});
