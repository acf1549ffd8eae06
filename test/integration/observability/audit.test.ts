import { expect } from 'chai';
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { ManualClock } from '../../../core/clock.js';
import { FakeAgent, waitFor } from '../../support/agents.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, createUser, GOOD_PASSWORD, type Credentials } from '../../support/identity.js';
import { hangarCli, TempDirs } from '../runner/support.js';

const PLUGINS = ['system', 'iam', 'login', 'audit', 'nodes', 'agent-internal'];

describeEachDialect('the audit log', (dialect) => {
  const temp = new TempDirs();
  let t: TestHangar;
  let admin: Credentials;
  let user: Credentials;
  const audit = async (query = '', creds: Credentials = admin) => {
    const res = await t.request('GET', `/v1/audit${query}`, { headers: bearer(creds.token) });
    expect(res.status, res.text).to.equal(200);
    return res.json as { data: any[]; next_cursor: string | null };
  };
  const entryFor = async (requestId: string) => (await audit()).data.find((e) => e.request_id === requestId);

  before(async () => {
    t = await startHangar(dialect, { plugins: PLUGINS, overrides: { login: { port: 0 } } });
    admin = await bootstrapAdmin(t);
    user = await createUser(t, admin, { username: 'auditee', role: 'user', email: 'auditee@example.test' });
  });
  after(async () => {
    await t?.stop();
    temp.cleanup();
  });

  it('records a write through the HTTP API: route template, resource, principal, address, status, request id — before the answer', async () => {
    const res = await t.request('POST', '/v1/nodes', { body: { name: 'audited-node' }, headers: { ...bearer(admin.token), 'x-request-id': 'req-audit-http-1', 'user-agent': 'curl/8.0' } });
    expect(res.status).to.equal(201);
    // No waiting: the entry is written before the caller gets its answer.
    const entry = await entryFor('req-audit-http-1');
    expect(entry).to.include({
      listener: 'control',
      method: 'POST',
      route: '/v1/nodes',
      resource_id: res.json.data.id,
      principal_id: admin.userId,
      principal_name: 'Administrator',
      auth_method: 'jwt',
      status: 201,
      user_agent: 'curl/8.0',
    });
    expect(entry.source_ip).to.match(/127\.0\.0\.1$/);
    expect(Date.now() - Date.parse(entry.created_at)).to.be.within(0, 60_000);

    const cordon = await t.request('POST', `/v1/nodes/${res.json.data.id}/cordon`, { headers: { ...bearer(admin.token), 'x-request-id': 'req-audit-http-2' } });
    expect(cordon.status).to.equal(200);
    expect(await entryFor('req-audit-http-2')).to.include({ route: '/v1/nodes/{id}/cordon', resource_id: res.json.data.id, status: 200 });
  });

  it('records refused writes with their status, anonymous ones without a principal, and writes on the login API', async () => {
    await t.request('POST', '/v1/nodes/node-nosuch0000/cordon', { headers: { ...bearer(admin.token), 'x-request-id': 'req-audit-404' } });
    expect(await entryFor('req-audit-404')).to.include({ route: '/v1/nodes/{id}/cordon', resource_id: 'node-nosuch0000', status: 404, principal_id: admin.userId });
    await t.request('DELETE', '/v1/nodes/node-nosuch0000', { headers: { 'x-request-id': 'req-audit-401' } });
    expect(await entryFor('req-audit-401')).to.include({ status: 401, principal_id: null, auth_method: null, route: '/v1/nodes/{id}' });
    await t.request('POST', '/v1/nodes', { body: { name: 'x' }, headers: { ...bearer(user.token), 'x-request-id': 'req-audit-403' } });
    expect(await entryFor('req-audit-403')).to.include({ status: 403, principal_id: user.userId });
    const login = await t.request('POST', '/login', { listener: 'login', body: { username: 'auditee@example.test', password: 'Wrong-password-123!' }, headers: { 'x-request-id': 'req-audit-login' } });
    expect(login.status).to.equal(401);
    expect(await entryFor('req-audit-login')).to.include({ listener: 'login', method: 'POST', route: '/login', status: 401, principal_id: null });
  });

  it('leaves out reads, unknown paths and agents’ traffic', async () => {
    await t.request('GET', '/v1/nodes', { headers: { ...bearer(admin.token), 'x-request-id': 'req-audit-read' } });
    await t.request('POST', '/v1/no/such/route', { headers: { ...bearer(admin.token), 'x-request-id': 'req-audit-nowhere' } });
    const node = await t.request('POST', '/v1/nodes', { body: { name: 'agent-node' }, headers: bearer(admin.token) });
    const agent = await FakeAgent.forNode(t, node.json.data.id);
    expect((await agent.request('POST', '/v1/internal/heartbeat', { body: { hostname: 'h', architecture: 'amd64', agent_version: '0.0.0' }, headers: { 'x-request-id': 'req-audit-agent' } })).status).to.equal(200);
    const ids = (await audit('?limit=1000')).data.map((e) => e.request_id);
    expect(ids).not.to.include.members(['req-audit-read']);
    expect(ids).not.to.include('req-audit-nowhere');
    expect(ids).not.to.include('req-audit-agent');
  });

  it('never stores a body or a secret: passwords and once-shown key secrets stay out of the table and the log', async () => {
    const key = await t.request('POST', `/v1/iam/users/${user.userId}/keys`, { body: { description: 'for the audit test' }, headers: { ...bearer(admin.token), 'x-request-id': 'req-audit-key' } });
    expect(key.status).to.equal(201);
    const secret = key.json.data.secret_access_key as string;
    const entry = await entryFor('req-audit-key');
    expect(entry).to.include({ route: '/v1/iam/users/{id}/keys', resource_id: key.json.data.id, status: 201 });
    await t.request('POST', '/v1/iam/login', { body: { username: admin.username, password: GOOD_PASSWORD } });
    const everything = JSON.stringify((await audit('?limit=1000')).data);
    expect(everything).not.to.contain(secret);
    expect(everything).not.to.contain(GOOD_PASSWORD);
    expect(everything).not.to.contain('for the audit test');
    const lines = t.logs.filter((l) => JSON.parse(l).msg === 'audit');
    expect(lines.length).to.be.greaterThan(5);
    expect(lines.join('\n')).not.to.contain(secret).and.not.to.contain(GOOD_PASSWORD);
    expect(JSON.parse(lines.find((l) => l.includes('req-audit-key'))!).entry).to.include({ route: '/v1/iam/users/{id}/keys', status: 201 });
  });

  it('records a write from the CLI (hangar endpoint, HMAC-signed) with the CLI as its client', async function () {
    this.timeout(90_000); // two CLI processes, each loading the sources
    const bootstrap = { api_url: t.url, access_key_id: admin.accessKeyId, secret_access_key: admin.secretAccessKey, ca_pem: t.caPem };
    const file = path.join(temp.make(), 'connection.json');
    writeFileSync(file, JSON.stringify(bootstrap));
    const home = temp.make('hangar-home-');
    const env = { XDG_CONFIG_HOME: home, HANGAR_API_URL: undefined, HANGAR_ACCESS_KEY: undefined, HANGAR_SECRET_KEY: undefined, HANGAR_CA_FILE: undefined };
    expect((await hangarCli(['configure', '--from', file], { env })).code).to.equal(0);
    const res = await hangarCli(['endpoint', 'POST', '/v1/nodes', '--body', '{"name":"from-the-cli"}', '--header', 'X-Request-Id: req-audit-cli'], { env });
    expect(res.code, res.stderr).to.equal(0);
    const created = JSON.parse(res.stdout.slice(res.stdout.indexOf('{')));
    expect(await entryFor('req-audit-cli')).to.include({ route: '/v1/nodes', resource_id: created.data.id, auth_method: 'hmac', principal_id: admin.userId, status: 201 });
    expect((await entryFor('req-audit-cli')).user_agent).to.match(/^hangar-cli\//);
  });

  it('filters by principal, resource, route, method and outcome, and pages newest first with a cursor', async () => {
    const byUser = await audit(`?principal=${user.userId}`);
    expect(byUser.data.length).to.be.greaterThan(0);
    expect(byUser.data.every((e) => e.principal_id === user.userId)).to.equal(true);
    expect((await audit('?principal=auditee')).data.map((e) => e.id)).to.deep.equal(byUser.data.map((e) => e.id));
    const failures = await audit('?outcome=failure');
    expect(failures.data.every((e) => e.status >= 400)).to.equal(true);
    expect((await audit('?method=DELETE')).data.every((e) => e.method === 'DELETE')).to.equal(true);
    expect((await audit(`?route=${encodeURIComponent('/v1/nodes/{id}/cordon')}`)).data.map((e) => e.status).sort()).to.deep.equal([200, 404]);
    expect((await audit('?resource=node-nosuch0000')).data.map((e) => e.request_id).sort()).to.deep.equal(['req-audit-401', 'req-audit-404']);
    const all = (await audit('?limit=1000')).data;
    const paged: number[] = [];
    let cursor: string | null = '';
    while (cursor !== null) {
      const page: { data: any[]; next_cursor: string | null } = await audit(`?limit=3${cursor ? `&cursor=${cursor}` : ''}`);
      paged.push(...page.data.map((e) => e.id));
      cursor = page.next_cursor;
    }
    expect(paged).to.deep.equal(all.map((e) => e.id));
    expect(paged).to.deep.equal([...paged].sort((a, b) => b - a));
    const first = all[all.length - 1]!;
    const since = await audit(`?since=${encodeURIComponent(all[1]!.created_at)}`);
    expect(since.data.every((e) => e.created_at >= all[1]!.created_at)).to.equal(true);
    expect((await audit(`?until=${encodeURIComponent(first.created_at)}`)).data).to.deep.equal([]);
  });

  it('an entry is settled by its own row: a later request with the same X-Request-Id (an anonymous failed login) leaves it as it was', async () => {
    // Review of issue 26: an entry whose answer matched what it was written with stayed pending, and
    // settling chose rows by the request id, which clients choose: the login's 401 rewrote the admin's entry.
    const node = await t.request('POST', '/v1/nodes', { body: { name: 'reused-id-node' }, headers: bearer(admin.token) });
    const cordon = await t.request('POST', `/v1/nodes/${node.json.data.id}/cordon`, { headers: { ...bearer(admin.token), 'x-request-id': 'req-reused' } });
    expect(cordon.status).to.equal(200);
    const before = (await audit('?limit=1000')).data.filter((e) => e.request_id === 'req-reused');
    expect(before).to.have.length(1);
    const login = await t.request('POST', '/v1/iam/login', { body: { username: 'auditee', password: 'Wrong-password-123!' }, headers: { 'x-request-id': 'req-reused' } });
    expect(login.status).to.equal(401);
    const after = (await audit('?limit=1000')).data.filter((e) => e.request_id === 'req-reused');
    expect(after).to.have.length(2);
    const [loginEntry, cordonEntry] = after;
    expect(cordonEntry).to.deep.equal(before[0]);
    expect(cordonEntry).to.include({ route: '/v1/nodes/{id}/cordon', status: 200, principal_id: admin.userId, auth_method: 'jwt', resource_id: node.json.data.id });
    expect(loginEntry).to.include({ route: '/v1/iam/login', status: 401, principal_id: null });
  });

  it('two requests at once with one X-Request-Id keep their own entries', async () => {
    const node = await t.request('POST', '/v1/nodes', { body: { name: 'concurrent-id-node' }, headers: bearer(admin.token) });
    const id = node.json.data.id as string;
    const headers = { 'x-request-id': 'req-shared-at-once' };
    const answers = await Promise.all([
      t.request('POST', `/v1/nodes/${id}/cordon`, { headers: { ...bearer(admin.token), ...headers } }),
      t.request('POST', `/v1/nodes/${id}/cordon`, { headers: { ...bearer(user.token), ...headers } }),
      t.request('POST', '/v1/iam/login', { body: { username: 'auditee', password: 'Wrong-password-456!' }, headers }),
      t.request('POST', '/v1/nodes', { body: { name: 'concurrent-created' }, headers: { ...bearer(admin.token), ...headers } }),
    ]);
    expect(answers.map((a) => a.status)).to.deep.equal([200, 403, 401, 201]);
    const entries = (await audit('?limit=1000')).data.filter((e) => e.request_id === 'req-shared-at-once');
    const summary = entries.map((e) => `${e.route} ${e.status} ${e.principal_id ?? 'anonymous'} ${e.resource_id}`).sort();
    expect(summary).to.deep.equal(
      [
        `/v1/iam/login 401 anonymous null`,
        `/v1/nodes 201 ${admin.userId} ${answers[3]!.json.data.id}`,
        `/v1/nodes/{id}/cordon 200 ${admin.userId} ${id}`,
        `/v1/nodes/{id}/cordon 403 ${user.userId} ${id}`,
      ].sort(),
    );
  });

  it('leaves no entry pending once its answer is known, and the table refuses to change a settled entry or what a pending one is about', async () => {
    const knex = t.hangar.services.db.knex;
    const pending = await knex('audit_log').where({ pending: true }).count({ n: '*' });
    expect(Number(pending[0]!.n), 'entries still pending after their answers').to.equal(0);
    const settled = (await knex('audit_log').whereNotNull('principal_id').orderBy('id').first('id'))!.id;
    const refusal = async (change: () => Promise<unknown>) => {
      try {
        await change();
        return null;
      } catch (err) {
        return (err as Error).message;
      }
    };
    // A settled entry: no change at all, its mark set again included.
    expect(await refusal(() => knex('audit_log').where({ id: settled }).update({ status: 200 }))).to.contain('append-only');
    expect(await refusal(() => knex('audit_log').where({ id: settled }).update({ pending: true }))).to.contain('append-only');
    // A pending one (as a write's transaction leaves it until the answer): its outcome may be settled once, not what it is about.
    const [row] = await knex('audit_log').insert(
      { created_at: new Date().toISOString(), listener: 'control', method: 'POST', route: '/v1/nodes', source_ip: '127.0.0.1', status: 201, request_id: 'req-pending-by-hand', count: 1, pending: true },
      ['id'],
    );
    const id = Number((row as { id: number }).id);
    expect(await refusal(() => knex('audit_log').where({ id }).update({ route: '/v1/iam/users', pending: false }))).to.contain('append-only');
    expect(await refusal(() => knex('audit_log').where({ id }).update({ request_id: 'req-other', pending: false }))).to.contain('append-only');
    expect(await refusal(() => knex('audit_log').where({ id }).update({ status: 409, pending: false }))).to.equal(null);
    expect(await refusal(() => knex('audit_log').where({ id }).update({ status: 201 }))).to.contain('append-only');
  });

  it('is for admins only, answers bad filters with 400, and cannot be rewritten', async () => {
    expect((await t.request('GET', '/v1/audit', { headers: bearer(user.token) })).status).to.equal(403);
    const bad = await t.request('GET', '/v1/audit?since=yesterday', { headers: bearer(admin.token) });
    expect(bad.status).to.equal(400);
    expect(bad.json.message).to.contain('since');
    let refused: Error | null = null;
    try {
      await t.hangar.services.db.knex('audit_log').update({ status: 200 });
    } catch (err) {
      refused = err as Error;
    }
    expect(refused?.message).to.contain('append-only');
  });
});

describeEachDialect('audit log retention', (dialect) => {
  it('deletes entries older than audit.retention_days, on its own schedule', async function () {
    this.timeout(30_000);
    const clock = new ManualClock(Date.now());
    const t = await startHangar(dialect, { plugins: ['system', 'iam', 'audit'], clock, overrides: { audit: { retention_days: 2, prune_interval_seconds: 1 } } });
    try {
      const old = await bootstrapAdmin(t);
      await t.request('POST', '/v1/iam/users', { body: { username: 'early', password: GOOD_PASSWORD }, headers: bearer(old.token) });
      clock.advance(3 * 86_400_000);
      const admin = await bootstrapAdminLogin(t, old);
      await t.request('POST', '/v1/iam/users', { body: { username: 'late', password: GOOD_PASSWORD }, headers: bearer(admin) });
      const entries = await waitFor(
        async () => {
          const data = (await t.request('GET', '/v1/audit', { headers: bearer(admin) })).json.data as any[];
          return data.every((e) => Date.parse(e.created_at) >= clock.now().getTime() - 2 * 86_400_000) ? data : null;
        },
        { timeoutMs: 10_000, what: 'old entries to be pruned' },
      );
      expect(entries.map((e) => e.route)).to.deep.equal(['/v1/iam/users', '/v1/iam/login']);
      expect(t.logs.some((l) => l.includes('audit: entries past their retention deleted'))).to.equal(true);
    } finally {
      await t.stop();
    }
  });
});

/** A fresh token for the bootstrap admin (its first one expired when the clock moved). */
async function bootstrapAdminLogin(t: TestHangar, admin: Credentials): Promise<string> {
  const res = await t.request('POST', '/v1/iam/login', { body: { username: admin.username, password: admin.password } });
  return res.json.data.token;
}

describeEachDialect('audit entries left pending by a stopped process', (dialect) => {
  it('are closed as written at the next start once they are older than any answer takes; a recent one is left to its answer', async function () {
    this.timeout(60_000);
    const storage = dialect.freshStorage();
    const first = await startHangar(dialect, { plugins: ['system', 'iam', 'audit'], storage });
    const knex = first.hangar.services.db.knex;
    const pendingEntry = (requestId: string, at: Date) => ({
      created_at: at.toISOString(), listener: 'control', method: 'POST', route: '/v1/iam/users', source_ip: '127.0.0.1', status: 201, request_id: requestId, count: 1, pending: true,
    });
    // As a process that crashed between a write's commit and its answer leaves them.
    await knex('audit_log').insert([pendingEntry('req-crashed', new Date(Date.now() - 3600_000)), pendingEntry('req-in-flight', new Date())]);
    await first.stop();
    const second = await startHangar(dialect, { plugins: ['system', 'iam', 'audit'], storage });
    try {
      const rows = await second.hangar.services.db.knex('audit_log').whereIn('request_id', ['req-crashed', 'req-in-flight']).orderBy('request_id').select('request_id', 'pending', 'status');
      expect(rows.map((r) => [r.request_id, Boolean(r.pending), Number(r.status)])).to.deep.equal([
        ['req-crashed', false, 201],
        ['req-in-flight', true, 201],
      ]);
      expect(second.logs.some((l) => l.includes('audit: entries whose answer never came'))).to.equal(true);
    } finally {
      await second.stop();
    }
  });
});
