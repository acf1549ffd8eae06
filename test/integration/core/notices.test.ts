import { expect } from 'chai';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { NODE_PLUGINS, waitFor } from '../../support/agents.js';

/**
 * Control planes remember the caller's user and agent certificates between requests (core/cache.ts).
 * A change made on one control plane reaches what the other remembers through the store's notices
 * (core/db/notices.ts): NOTIFY on PostgreSQL, the notices table on SQLite. The caches keep entries
 * for 30 s (users) and 60 s (certificates) at most, so a refusal within a few seconds is the notice.
 */
describeEachDialect('what control planes remember of users and certificates, across control planes on one store', (dialect) => {
  let a: TestHangar;
  let b: TestHangar;
  let admin: { id: string; password: string; token: string };
  const NOTICE_DEADLINE_MS = 5000;

  before(async () => {
    const storage = dialect.freshStorage();
    a = await startHangar(dialect, { plugins: NODE_PLUGINS, storage });
    b = await startHangar(dialect, { plugins: NODE_PLUGINS, storage });
    const boot = await a.request('POST', '/v1/bootstrap', { body: {} });
    expect(boot.status).to.equal(201);
    const login = await a.request('POST', '/v1/iam/login', { body: { username: 'admin', password: boot.json.data.password } });
    admin = { id: boot.json.data.user_id, password: boot.json.data.password, token: login.json.data.token };
  });
  after(async () => {
    await a?.stop();
    await b?.stop();
  });

  const asAdmin = (_t: TestHangar, token = admin.token) => ({ headers: { authorization: `Bearer ${token}` } });

  it('a password changed on one control plane refuses the old token on the other, which had it in memory', async () => {
    const login = await a.request('POST', '/v1/iam/login', { body: { username: 'admin', password: admin.password } });
    const token = login.json.data.token as string;
    for (let i = 0; i < 3; i++) expect((await b.request('GET', `/v1/iam/users/${admin.id}`, asAdmin(b, token))).status).to.equal(200);
    const changed = await a.request('POST', `/v1/iam/users/${admin.id}/password`, { ...asAdmin(a, token), body: { password: 'Another-passw0rd!x', keep_api_keys: true, current_password: admin.password } });
    expect(changed.status, changed.text).to.equal(200);
    // On the control plane that made the change: at once.
    expect((await a.request('GET', `/v1/iam/users/${admin.id}`, asAdmin(a, token))).status).to.equal(401);
    const started = Date.now();
    const refused = await waitFor(async () => ((await b.request('GET', `/v1/iam/users/${admin.id}`, asAdmin(b, token))).status === 401 ? true : null), {
      timeoutMs: NOTICE_DEADLINE_MS,
      intervalMs: 50,
      what: 'the other control plane to refuse the old token',
    });
    expect(refused).to.equal(true);
    expect(Date.now() - started).to.be.below(NOTICE_DEADLINE_MS);
    const again = await b.request('POST', '/v1/iam/login', { body: { username: 'admin', password: 'Another-passw0rd!x' } });
    admin.token = again.json.data.token;
    admin.password = 'Another-passw0rd!x';
    expect((await b.request('GET', `/v1/iam/users/${admin.id}`, asAdmin(b))).status).to.equal(200);
  });

  it('a certificate revoked on one control plane is refused by the other, which had accepted it', async () => {
    const node = await a.request('POST', '/v1/nodes', { ...asAdmin(a), body: { name: 'remembered' } });
    expect(node.status, node.text).to.equal(201);
    const issued = await a.request('POST', `/v1/nodes/${node.json.data.id}/cert`, asAdmin(a));
    const credentials = { cert: issued.json.data.certificate, key: issued.json.data.private_key };
    const heartbeat = (t: TestHangar) => t.request('POST', '/v1/internal/heartbeat', { ...credentials, body: { hostname: 'remembered', architecture: 'amd64', agent_version: 'test' } });
    for (let i = 0; i < 3; i++) expect((await heartbeat(b)).status).to.equal(200);
    const revoked = await a.request('POST', `/v1/nodes/${node.json.data.id}/cert/revoke`, asAdmin(a));
    expect(revoked.json.data.revoked).to.equal(1);
    expect((await heartbeat(a)).status).to.equal(401);
    const refused = await waitFor(async () => ((await heartbeat(b)).status === 401 ? true : null), {
      timeoutMs: NOTICE_DEADLINE_MS,
      intervalMs: 50,
      what: 'the other control plane to refuse the revoked certificate',
    });
    expect(refused).to.equal(true);
  });
});
