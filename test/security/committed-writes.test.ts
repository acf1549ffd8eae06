import { expect } from 'chai';
import knexFactory from 'knex';
import { randomToken } from '../../core/ids.js';
import { describeEachDialect } from '../support/dialects.js';
import { startHangar, type TestHangar } from '../support/hangar.js';
import { bearer, bootstrapAdmin, GOOD_PASSWORD, type Credentials } from '../support/identity.js';
import { PG_URL } from '../support/requirements.js';

/**
 * Issue 26, finding 12: with connections terminated, writes committed, were answered 500 and had no
 * audit entry (the read-back and the audit insert ran on a dead connection after the commit). Now
 * the entry goes in with the write, in its transaction (core/db/write-scope.ts), a read is made
 * again on another connection when its own was lost, and an answer after a commit is never a 500.
 */
describeEachDialect('a write and its audit entry: one transaction, and no 500 once committed', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  const application = `hangar-${randomToken(8).toLowerCase()}`;

  before(async () => {
    // On PostgreSQL the control plane's connections carry a name of their own, for the test to terminate them.
    const overrides = dialect.name === 'postgres' ? { database: { url: `${PG_URL}${PG_URL.includes('?') ? '&' : '?'}application_name=${application}` } } : {};
    t = await startHangar(dialect, { plugins: ['system', 'iam', 'audit'], overrides });
    admin = await bootstrapAdmin(t);
  });
  after(() => t?.stop());

  const auditOf = async (requestId: string) => {
    const res = await t.request('GET', `/v1/audit?limit=1000`, { headers: bearer(admin.token) });
    return (res.json.data as Array<{ request_id: string; status: number; resource_id: string }>).filter((e) => e.request_id === requestId);
  };

  it('writes both or neither: when the audit entry cannot be written, the write does not happen either', async () => {
    const knex = t.hangar.services.db.knex;
    // The audit table refuses this one route's entries.
    if (dialect.name === 'postgres') {
      await knex.raw(`create function refuse_audit() returns trigger language plpgsql as $$ begin raise exception 'audit refused by the test'; end $$`);
      await knex.raw(`create trigger refuse_audit before insert on audit_log for each row when (NEW.route = '/v1/iam/users') execute function refuse_audit()`);
    } else {
      await knex.raw(`create trigger refuse_audit before insert on audit_log when NEW.route = '/v1/iam/users' begin select raise(abort, 'audit refused by the test'); end`);
    }
    try {
      const refused = await t.request('POST', '/v1/iam/users', { body: { username: 'unaudited', password: GOOD_PASSWORD }, headers: { ...bearer(admin.token), 'x-request-id': 'req-unaudited' } });
      expect(refused.status).to.equal(500);
      const users = await t.request('GET', '/v1/iam/users?limit=1000', { headers: bearer(admin.token) });
      expect((users.json.data as Array<{ username: string }>).map((u) => u.username)).not.to.include('unaudited');
    } finally {
      await knex.raw('drop trigger refuse_audit' + (dialect.name === 'postgres' ? ' on audit_log' : ''));
      if (dialect.name === 'postgres') await knex.raw('drop function refuse_audit()');
    }
    const created = await t.request('POST', '/v1/iam/users', { body: { username: 'audited', password: GOOD_PASSWORD }, headers: { ...bearer(admin.token), 'x-request-id': 'req-audited' } });
    expect(created.status).to.equal(201);
    // Written with the write as it went, then settled with the answer: what was created, 201.
    const entries = await auditOf('req-audited');
    expect(entries).to.have.length(1);
    expect(entries[0]).to.include({ status: 201, resource_id: created.json.data.id });
    expect(await auditOf('req-unaudited')).to.deep.equal([]);
    console.log('      committed writes: an audit entry that cannot be written takes its write with it (no user, a 500); written, both are there');
  });

  // Only PostgreSQL has connections an administrator terminates (SQLite's one connection is a file handle).
  if (dialect.name !== 'postgres') return;
  it('on PostgreSQL with its connections terminated again and again: every committed write has its entry and a success answer, never a 500', async function () {
    this.timeout(180_000);
    const user = (await t.request('POST', '/v1/iam/users', { body: { username: 'propertied', password: GOOD_PASSWORD }, headers: bearer(admin.token) })).json.data.id as string;
    const killer = knexFactory({ client: 'pg', connection: PG_URL, pool: { min: 1, max: 1 } });
    let writing = true;
    let terminated = 0;
    const terminate = (async () => {
      while (writing) {
        const res = await killer.raw('select count(pg_terminate_backend(pid)) as n from pg_stat_activity where application_name = ? and pid <> pg_backend_pid()', [application]);
        terminated += Number(res.rows[0].n);
        await new Promise((resolve) => setTimeout(resolve, 15));
      }
    })();
    const answers: Array<{ i: number; status: number; message?: string }> = [];
    try {
      for (let i = 0; i < 120; i++) {
        const res = await t.request('POST', `/v1/iam/users/${user}/properties`, {
          body: { name: `p-${i}`, value: String(i) },
          headers: { ...bearer(admin.token), 'x-request-id': `req-prop-${i}` },
        });
        answers.push({ i, status: res.status, message: res.json?.message });
      }
    } finally {
      writing = false;
      await terminate;
      await killer.destroy();
    }
    // Reads are made again on a fresh connection: what the store holds now.
    const properties = new Set(((await t.request('GET', `/v1/iam/users/${user}`, { headers: bearer(admin.token) })).json.data.properties as Array<{ name: string }>).map((p) => p.name));
    const audit = await t.request('GET', '/v1/audit?limit=1000', { headers: bearer(admin.token) });
    const audited = new Map((audit.json.data as Array<{ request_id: string; status: number }>).map((e) => [e.request_id, e.status]));
    const committed = answers.filter((a) => properties.has(`p-${a.i}`));
    for (const a of answers) {
      expect(a.status, `request ${a.i}: ${a.message}`).not.to.equal(500);
      if (properties.has(`p-${a.i}`)) {
        expect(audited.get(`req-prop-${a.i}`), `committed write ${a.i} has its entry`).to.equal(201);
        expect([201, 503], `committed write ${a.i}`).to.include(a.status);
        if (a.status === 503) expect(a.message).to.match(/^The change was saved/);
      } else {
        expect(a.status, `write ${a.i} not committed: ${a.message}`).to.not.equal(201);
      }
    }
    expect(terminated).to.be.greaterThan(0);
    const byStatus = answers.reduce<Record<number, number>>((n, a) => ({ ...n, [a.status]: (n[a.status] ?? 0) + 1 }), {});
    console.log(`      committed writes: 120 writes, ${terminated} connections terminated meanwhile; ${committed.length} committed, each with its entry; answers ${JSON.stringify(byStatus)}, no 500`);
  });
});
