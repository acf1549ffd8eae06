import { expect } from 'chai';
import { spawnSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import path from 'node:path';
import { listTables } from '../../../core/backup/store-dump.js';
import { coreMigrations } from '../../../core/db/core-migrations.js';
import { runMigrations } from '../../../core/db/migrations.js';
import { openStore } from '../../../core/db/store.js';
import { versionInfo } from '../../../core/version.js';
import { describeEachDialect, TEST_MASTER_KEY } from '../../support/dialects.js';
import { PG_URL } from '../../support/requirements.js';

const BIN = path.resolve('bin/hangar.mjs');

/**
 * A store that a newer release migrated (a migration row this release does not know): `hangar serve`
 * refuses it, naming both versions and what to do, and writes nothing (not even the migrations of
 * the plugins the store has not seen yet).
 */
describeEachDialect('hangar serve on a store migrated by a newer release', (dialect) => {
  it('exits non-zero naming both versions and the unknown migration, and changes nothing', async function () {
    this.timeout(60_000);
    const storage = dialect.freshStorage();
    const config = dialect.config(storage);
    const db = await openStore(config);
    const snapshot = async () => ({
      tables: (await listTables(db.knex, db.dialect)).sort(),
      migrations: await db.knex('hangar_migrations').select('*').orderBy('id'),
    });
    let before: Awaited<ReturnType<typeof snapshot>>;
    try {
      await runMigrations(db, [coreMigrations]);
      await db.knex('hangar_migrations').insert({ id: 'core/999_from_the_future', applied_at: new Date().toISOString(), release: '99.1.0' });
      // A plugin this configuration does not load: its migrations are none of this release's business.
      await db.knex('hangar_migrations').insert({ id: 'someone-elses-plugin/001_things', applied_at: new Date().toISOString(), release: '99.1.0' });
      // A migration an older release applied and this one retired (the swarms plugin's, before swarms became clusters): not a newer store.
      await db.knex('hangar_migrations').insert({ id: 'swarms/001_swarms', applied_at: new Date().toISOString(), release: null });
      before = await snapshot();
    } finally {
      await db.close();
    }
    const files = readdirSync(storage.dataDir).sort();
    const env: NodeJS.ProcessEnv = { ...process.env, NODE_ENV: 'development', HANGAR_API__PORT: '0', HANGAR_LOGIN__PORT: '0', HANGAR_API__HOST: '127.0.0.1' };
    if (dialect.name === 'postgres') Object.assign(env, { HANGAR_DATABASE__URL: PG_URL, HANGAR_DATABASE__SCHEMA: storage.schema, HANGAR_SECRETS__MASTER_KEY: TEST_MASTER_KEY });
    const res = spawnSync(process.execPath, [BIN, 'serve', '--data-dir', storage.dataDir], { encoding: 'utf8', env, timeout: 50_000 });
    expect(res.status, res.stderr).to.not.equal(0);
    expect(res.status, res.stderr).to.not.equal(null);
    expect(res.stderr).to.contain('migrated by hangar 99.1.0');
    expect(res.stderr).to.contain(`newer than this hangar ${versionInfo.version}`);
    expect(res.stderr).to.contain('(core/999_from_the_future)');
    expect(res.stderr).to.match(/Run hangar 99\.1\.0 or later on it, or, .*restore the backup taken before the upgrade \(hangar restore\)/);
    expect(res.stdout + res.stderr).to.not.contain('hangar started');

    const after = await openStore(config);
    try {
      expect(await listTables(after.knex, after.dialect).then((t) => t.sort())).to.deep.equal(before.tables);
      expect(await after.knex('hangar_migrations').select('*').orderBy('id')).to.deep.equal(before.migrations);
    } finally {
      await after.close();
    }
    expect(readdirSync(storage.dataDir).sort(), 'no CA, keys or other files written').to.deep.equal(files);
  });
});
