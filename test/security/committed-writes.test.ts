import { expect } from 'chai';
import knexFactory from 'knex';
import { randomToken } from '../../core/ids.js';
import { generateKeyPairSync } from 'node:crypto';
import { NODE_PLUGINS } from '../support/agents.js';
import { describeEachDialect } from '../support/dialects.js';
import { FIXTURE_PLUGIN, startHangar, type TestHangar } from '../support/hangar.js';
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
  it('on PostgreSQL with its connections terminated again and again: every committed write has its entry and is answered 201 or the 503 saying it was saved, never a 500', async function () {
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
        // Saved, or — the connection lost during its COMMIT — maybe saved: never "nothing was saved".
        if (a.status === 503) expect(a.message).to.match(/^The change was saved|it may have been saved/);
      } else {
        expect(a.status, `write ${a.i} not committed: ${a.message}`).to.not.equal(201);
        expect(a.message ?? '', `write ${a.i} not committed`).not.to.match(/^The change was saved/);
      }
    }
    expect(terminated).to.be.greaterThan(0);
    const byStatus = answers.reduce<Record<number, number>>((n, a) => ({ ...n, [a.status]: (n[a.status] ?? 0) + 1 }), {});
    console.log(`      committed writes: 120 writes, ${terminated} connections terminated meanwhile; ${committed.length} committed, each with its entry; answers ${JSON.stringify(byStatus)}, no 500`);
  });
});

/**
 * Review of issue 26: "committed" was too broad both ways. Any top-level transaction that committed
 * marked the request's change saved — a read-only one, a rate-limit counter's upsert — so a bug after
 * it answered 503 "The change was saved" though nothing had changed; and a connection lost during the
 * COMMIT itself answered "nothing was saved; send the request again", though nobody knows. Now only a
 * write to a table that is not bookkeeping makes a change committed, and a connection lost while a
 * change is being committed is the 503 that says it may have been saved.
 */
describeEachDialect('what a failure answers after a commit: saved, maybe saved, or nothing', (dialect) => {
  let t: TestHangar;
  before(async () => {
    t = await startHangar(dialect, { plugins: ['system', FIXTURE_PLUGIN] });
  });
  after(() => t?.stop());

  const thing = (id: string, label: string) => ({ id, label, active: true, created_at: new Date().toISOString() });
  const exists = async (id: string) => ((await t.request('GET', '/v1/probe/things?limit=1000')).json.data as Array<{ id: string }>).some((x) => x.id === id);

  it('a bug after counting an attempt or after a read-only transaction is a 500: nothing was saved', async () => {
    const answers: Record<string, { status: number; message: string }> = {};
    for (const step of ['count', 'read-transaction']) {
      const res = await t.request('POST', '/v1/probe/fail-after', { body: { step } });
      answers[step] = { status: res.status, message: res.json.message };
    }
    console.log(`      committed: a bug after a counter's upsert → ${answers.count!.status}, after a read-only transaction → ${answers['read-transaction']!.status}`);
    for (const [step, answer] of Object.entries(answers)) {
      expect(answer.status, `${step}: ${answer.message}`).to.equal(500);
      expect(answer.message).to.match(/^Internal error/);
    }
  });

  it('a bug after a change committed is the 503 saying it was saved, and the change is there', async () => {
    const res = await t.request('POST', '/v1/probe/fail-after', { body: { step: 'change', id: 'changed-then-failed' } });
    expect(res.status, res.text).to.equal(503);
    expect(res.json.message).to.match(/^The change was saved/);
    expect(await exists('changed-then-failed')).to.equal(true);
  });

  // Only PostgreSQL has a connection to lose during a COMMIT (SQLite's is a file handle).
  if (dialect.name !== 'postgres') return;
  it('on PostgreSQL, a connection lost during the COMMIT of a change is the 503 saying it may have been saved (read before retrying)', async () => {
    const knex = t.hangar.services.db.knex;
    // At its commit (a deferred constraint trigger), the transaction that inserts such a thing loses its connection.
    await knex.raw(`create function lose_connection_at_commit() returns trigger language plpgsql as $$
      begin
        if NEW.label = 'lose-at-commit' then perform pg_terminate_backend(pg_backend_pid()); perform pg_sleep(10); end if;
        return null;
      end $$`);
    await knex.raw(`create constraint trigger lose_connection_at_commit after insert on probe_things deferrable initially deferred for each row execute function lose_connection_at_commit()`);
    const answers: Record<string, { status: number; message: string; retryAfter: unknown }> = {};
    try {
      for (const [how, route] of [
        ['a transaction', '/v1/probe/things-in-transaction'],
        ['a statement on its own', '/v1/probe/things'],
      ] as const) {
        const res = await t.request('POST', route, { body: thing(`lost-${route.length}`, 'lose-at-commit') });
        answers[how] = { status: res.status, message: res.json.message, retryAfter: res.headers['retry-after'] };
      }
    } finally {
      // The pool may hand out a connection the trigger terminated before it noticed: once more on another.
      const again = async (sql: string) => knex.raw(sql).catch(() => knex.raw(sql));
      await again('drop trigger if exists lose_connection_at_commit on probe_things');
      await again('drop function if exists lose_connection_at_commit()');
    }
    console.log(`      committed: the connection lost at the commit of a change → ${Object.entries(answers).map(([how, a]) => `${how}: ${a.status}`).join('; ')}`);
    for (const [how, answer] of Object.entries(answers)) {
      expect(answer.status, `${how}: ${answer.message}`).to.equal(503);
      expect(answer.message, how).to.match(/it may have been saved\. Read the resource before sending the request again$/);
      expect(answer.retryAfter, how).to.equal(undefined);
    }
    // The control plane goes on with other connections.
    const after = await t.request('POST', '/v1/probe/things', { body: thing('after-the-loss', 'kept') });
    expect(after.status, after.text).to.equal(201);
  });
});

describeEachDialect('a store whose pool stays busy: 503 with Retry-After, nothing saved, never a 500', (dialect) => {
  // SQLite has one connection, shared by every request in turn: nothing waits for a pool there.
  if (dialect.name !== 'postgres') return;
  let t: TestHangar;
  let admin: Credentials;

  before(async () => {
    t = await startHangar(dialect, { plugins: ['system', 'iam', 'audit'], overrides: { database: { pool_max: 1, acquire_timeout_seconds: 1 } } });
    admin = await bootstrapAdmin(t);
  });
  after(() => t?.stop());

  it('answers a request that waited database.acquire_timeout_seconds for a connection 503 with Retry-After, and saves nothing', async () => {
    const client = t.hangar.services.db.knex.client as { acquireConnection(): Promise<unknown>; releaseConnection(c: unknown): Promise<void> };
    // Every connection of the pool (one) held, as a fleet's burst of joins would hold them all.
    const held = await client.acquireConnection();
    let read, write;
    try {
      read = await t.request('GET', '/v1/iam/users', { headers: bearer(admin.token) });
      write = await t.request('POST', '/v1/iam/users', { body: { username: 'queued', password: GOOD_PASSWORD }, headers: bearer(admin.token) });
    } finally {
      await client.releaseConnection(held);
    }
    for (const [what, res] of [['a read', read], ['a write', write]] as const) {
      expect(res.status, `${what}: ${res.text}`).to.equal(503);
      expect(res.headers['retry-after'], what).to.equal('2');
      expect(res.json.message, what).to.match(/^The store is busy .* nothing was saved; send the request again shortly$/);
    }
    const users = await t.request('GET', '/v1/iam/users?limit=1000', { headers: bearer(admin.token) });
    expect(users.status).to.equal(200);
    expect((users.json.data as Array<{ username: string }>).map((u) => u.username)).not.to.include('queued');
    console.log('      a busy pool: a read and a write that waited 1 s for a connection → 503, Retry-After: 2; then served');
  });
});

describeEachDialect('machines joining a control plane with one store connection', (dialect) => {
  if (dialect.name !== 'postgres') return;
  let t: TestHangar;
  let admin: Credentials;

  before(async () => {
    t = await startHangar(dialect, { plugins: NODE_PLUGINS, overrides: { database: { pool_max: 1, acquire_timeout_seconds: 20 } } });
    admin = await bootstrapAdmin(t);
  });
  after(() => t?.stop());

  // A join's transaction holds its connection; what it writes must not ask the pool for another (the
  // first write of a table read that table's columns from the pool: with every connection held by a
  // join, each waited for the others until the acquire timeout — 5 000 agents joining, ~2 500 failed).
  it('joins three machines at once: no statement of a join waits for a second connection', async () => {
    const key = () => generateKeyPairSync('ec', { namedCurve: 'P-256' }).publicKey.export({ type: 'spki', format: 'pem' }).toString();
    const tokens = await Promise.all([0, 1, 2].map(async () => (await t.request('POST', '/v1/nodes/token', { body: {}, headers: bearer(admin.token) })).json.data.token as string));
    const joins = await Promise.all(tokens.map((token, i) => t.request('POST', '/v1/nodes/join', { body: { token, hostname: `one-connection-${i}`, public_key: key() } })));
    expect(joins.map((j) => `${j.status} ${j.json.message ?? ''}`.trim())).to.deep.equal(['201', '201', '201']);
    const nodes = await t.request('GET', '/v1/nodes', { headers: bearer(admin.token) });
    expect((nodes.json.data as Array<{ hostname: string }>).map((n) => n.hostname).sort()).to.deep.equal(['one-connection-0', 'one-connection-1', 'one-connection-2']);
  });
});
