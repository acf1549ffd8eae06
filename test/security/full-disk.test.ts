import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, rmSync, writeSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import knexFactory from 'knex';
import { randomToken } from '../../core/ids.js';
import { waitFor } from '../support/agents.js';
import { describeEachDialect } from '../support/dialects.js';
import { startHangar, type TestHangar } from '../support/hangar.js';
import { PG_URL } from '../support/requirements.js';
import { bearer, bootstrapAdmin, GOOD_PASSWORD, type Credentials } from '../support/identity.js';

/** Fills a file system: a file of zeros written until the system says there is no space left. */
function fill(dir: string): string {
  const file = path.join(dir, 'filler');
  const fd = openSync(file, 'w');
  const chunk = Buffer.alloc(16 * 1024);
  try {
    for (;;) writeSync(fd, chunk);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOSPC') throw err;
  } finally {
    closeSync(fd);
  }
  return file;
}

/**
 * Issue 26, finding 9: on a full disk, admin writes answered a bare 500 while /healthz said ok, the
 * log grew by 1.7 MB/s of the same SQL error, and a failed insert logged a user's email and
 * password hash (SQLite). Now such a write is a 507 saying why, /healthz reports the store
 * unwritable until a write goes through again, the condition is logged once per interval, and no
 * log line carries the values of a statement.
 */
describeEachDialect('a full disk under the store: 507 with the reason, /healthz says so, logged once, no values in the log', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  let mount: string;
  let tablespace: string | null = null;

  before(async function () {
    this.timeout(120_000);
    mount = mkdtempSync(path.join(os.tmpdir(), 'hangar-full-'));
    if (dialect.name === 'sqlite') {
      execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=6m', 'tmpfs', mount]);
      t = await startHangar(dialect, { plugins: ['system', 'iam', 'audit'], overrides: { database: { sqlite_file: path.join(mount, 'hangar.db') } } });
    } else {
      // The schema's tables in a tablespace on a small file system (PostgreSQL's own WAL stays where it is).
      const uid = execFileSync('id', ['-u', 'postgres']).toString().trim();
      execFileSync('mount', ['-t', 'tmpfs', '-o', `size=12m,uid=${uid},mode=0700`, 'tmpfs', mount]);
      tablespace = `full_${randomToken(8).toLowerCase()}`;
      const knex = knexFactory({ client: 'pg', connection: PG_URL, pool: { min: 0, max: 1 } });
      try {
        await knex.raw(`create tablespace ${tablespace} location '${mount}'`);
      } finally {
        await knex.destroy();
      }
      const url = `${PG_URL}${PG_URL.includes('?') ? '&' : '?'}options=${encodeURIComponent(`-c default_tablespace=${tablespace}`)}`;
      t = await startHangar(dialect, { plugins: ['system', 'iam', 'audit'], overrides: { database: { url } } });
    }
    admin = await bootstrapAdmin(t);
  });
  after(async () => {
    try {
      await t?.stop();
    } finally {
      await release();
    }
  });

  /** Drops the tablespace and unmounts the small file system, whatever happened. */
  async function release(): Promise<void> {
    if (tablespace) {
      // The schema goes first (the dialect's own clean-up runs before this hook and drops it).
      const knex = knexFactory({ client: 'pg', connection: PG_URL, pool: { min: 0, max: 1 } });
      try {
        await knex.raw(`drop tablespace if exists ${tablespace}`).catch(() => undefined);
      } finally {
        await knex.destroy();
      }
    }
    try {
      execFileSync('umount', [mount]);
    } catch {
      // not mounted
    }
    rmSync(mount, { recursive: true, force: true });
  }

  it('answers admin writes 507 with the reason, reports the store unwritable on /healthz, logs it once, and recovers once space is freed', async function () {
    this.timeout(180_000);
    const create = (n: number) =>
      t.request('POST', '/v1/iam/users', { body: { username: `full-${n}`, email: `full-disk-${n}@example.test`, password: GOOD_PASSWORD }, headers: bearer(admin.token) });
    expect((await create(0)).status).to.equal(201);
    expect((await t.request('GET', '/healthz')).status).to.equal(200);
    const filler = fill(mount);
    // Pages the store has already allocated may take a few more rows: write until it refuses.
    let n = 1;
    let refused = await create(n);
    while (refused.status === 201 && n < 2000) refused = await create(++n);
    expect(refused.status, refused.text).to.equal(507);
    expect(refused.json.error).to.equal('Insufficient Storage');
    expect(refused.json.message).to.contain('disk that holds it is full');
    const health = await t.request('GET', '/healthz');
    expect(health.status).to.equal(503);
    expect(health.json.message).to.match(/^The store cannot be written: /);
    // Many more refused writes: still one line about it in the interval.
    const more = await Promise.all(Array.from({ length: 40 }, (_, i) => create(10_000 + i)));
    expect(more.map((r) => r.status).every((s) => s === 507), more.map((r) => r.status).join(',')).to.equal(true);
    const lines = t.logs.map((l) => JSON.parse(l));
    const full = lines.filter((l) => String(l.msg).startsWith('store: its disk is full'));
    expect(full).to.have.length(1);
    expect(lines.filter((l) => l.msg === 'request failed' || l.msg === 'request observer failed')).to.deep.equal([]);
    // No statement with its values in any line: neither the emails nor the password hashes sent.
    const all = t.logs.join('\n');
    expect(all).not.to.match(/full-disk-\d+@example\.test/);
    expect(all).not.to.contain('scrypt');
    console.log(`      full disk: ${more.length + 1} admin writes answered 507, /healthz 503, ${full.length} log line about it, no values logged`);

    rmSync(filler);
    // /healthz tries a write at most once a second while the store refuses them.
    await waitFor(async () => (await t.request('GET', '/healthz')).status === 200, { timeoutMs: 20_000, intervalMs: 250, what: '/healthz to see the store take writes again' });
    expect((await create(20_000)).status).to.equal(201);
    expect(t.logs.some((l) => l.includes('store: writes succeed again'))).to.equal(true);
  });
});
