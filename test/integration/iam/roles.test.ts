import { expect } from 'chai';
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, createUser, GOOD_PASSWORD, signed, type Credentials } from '../../support/identity.js';
import { hangarCli, TempDirs } from '../runner/support.js';

/**
 * Installation roles as an operator meets them: the auditor (reads everything, changes nothing,
 * given through the user admin API) and GET /v1/iam/whoami (`hangar whoami`) for each kind of
 * credential (docs/tenancy.md).
 */
describeEachDialect('installation roles: the auditor, and whoami', (dialect) => {
  const temp = new TempDirs();
  let t: TestHangar;
  let admin: Credentials;
  let auditor: Credentials;
  let user: Credentials;

  before(async function () {
    this.timeout(60_000);
    t = await startHangar(dialect, { plugins: ['system', 'iam', 'nodes', 'agent-internal', 'ssh-profiles', 'secrets', 'events', 'audit', 'notifications', 'metrics'] });
    admin = await bootstrapAdmin(t);
    auditor = await createUser(t, admin, { username: 'audrey', role: 'auditor', email: 'audrey@example.test' });
    user = await createUser(t, admin, { username: 'ulla' });
  });
  after(async () => {
    await t?.stop();
    temp.cleanup();
  });

  const refusal = (permission: string, role = 'auditor') => ({ error: 'Forbidden', message: `Insufficient permissions: this needs ${permission}, and role ${role} does not grant it` });

  describe('the auditor', () => {
    it('is a role the user admin API gives, on creation or by a change (which ends the earlier tokens, as any role change)', async () => {
      const got = await t.request('GET', `/v1/iam/users/${auditor.userId}`, { headers: bearer(admin.token) });
      expect(got.json.data).to.include({ username: 'audrey', role: 'auditor' });
      const later = await createUser(t, admin, { username: 'later' });
      const changed = await t.request('PATCH', `/v1/iam/users/${later.userId}`, { body: { role: 'auditor' }, headers: bearer(admin.token) });
      expect(changed.status, changed.text).to.equal(200);
      expect((await t.request('GET', '/v1/iam/users', { headers: bearer(later.token) })).status, 'the token from before the change').to.equal(401);
      const login = await t.request('POST', '/v1/iam/login', { body: { username: 'later', password: GOOD_PASSWORD } });
      expect((await t.request('GET', '/v1/iam/users', { headers: bearer(login.json.data.token) })).status).to.equal(200);
    });

    it('reads what only admins read: users, keys, the audit log, SSH profiles, notification channels, a node’s scans', async () => {
      await t.request('POST', '/v1/ssh-profiles', { body: { name: 'deploy', password: 'hunter2-hunter2' }, headers: bearer(admin.token) });
      for (const p of ['/v1/iam/users', `/v1/iam/users/${admin.userId}/keys`, '/v1/audit', '/v1/ssh-profiles', '/v1/notifications/channels', '/v1/nodes', '/v1/secrets']) {
        const res = await t.request('GET', p, { headers: bearer(auditor.token) });
        expect(res.status, `${p}: ${res.text}`).to.equal(200);
        expect(res.text, 'no secret in what it reads').not.to.contain('hunter2');
      }
      // The same reads refused to a user: what a user may read did not change.
      expect((await t.request('GET', '/v1/audit', { headers: bearer(user.token) })).json).to.deep.include(refusal('audit:read', 'user'));
    });

    it('changes nothing: each write is a 403 naming the permission, by token and by API key, and nothing is made', async () => {
      const writes: Array<[string, string, unknown, string]> = [
        ['POST', '/v1/nodes', { name: 'n1' }, 'nodes:write'],
        ['POST', '/v1/iam/users', { username: 'mallory', password: GOOD_PASSWORD }, 'iam:admin'],
        ['DELETE', `/v1/iam/users/${user.userId}`, undefined, 'iam:admin'],
        ['POST', '/v1/secrets', { name: 's1', value: 'x' }, 'secrets:write'],
        ['POST', '/v1/ssh-profiles', { name: 'p2' }, 'ssh-profiles:write'],
        ['POST', '/v1/notifications/channels', { name: 'c', kind: 'webhook', url: 'https://example.test/' }, 'notifications:write'],
      ];
      for (const [method, p, body, permission] of writes) {
        const byToken = await t.request(method, p, { body, headers: bearer(auditor.token) });
        expect(byToken.status, `${method} ${p}`).to.equal(403);
        expect(byToken.json).to.include(refusal(permission));
        const byKey = await signed(t, auditor, method, p, { body });
        expect(byKey.status, `${method} ${p} signed`).to.equal(403);
        expect(byKey.json).to.include(refusal(permission));
      }
      const nodes = await t.request('GET', '/v1/nodes', { headers: bearer(admin.token) });
      expect(nodes.json.data).to.deep.equal([]);
      expect((await t.request('GET', `/v1/iam/users/${user.userId}`, { headers: bearer(admin.token) })).json.data.deleted_at).to.equal(null);
      // The scrape token's metrics:read is not an auditor's (nor an admin's).
      expect((await t.request('GET', '/metrics', { headers: bearer(auditor.token) })).json).to.include(refusal('metrics:read'));
    });

    it('manages its own account (password, keys) but not its own role', async () => {
      const key = await t.request('POST', `/v1/iam/users/${auditor.userId}/keys`, { body: { description: 'audit script' }, headers: bearer(auditor.token) });
      expect(key.status, key.text).to.equal(201);
      const role = await t.request('PATCH', `/v1/iam/users/${auditor.userId}`, { body: { role: 'admin' }, headers: bearer(auditor.token) });
      expect(role.status).to.equal(403);
      expect(role.json.message).to.equal('Only an admin changes roles');
    });

    it('sees the events only admins saw (an SSH profile’s change); a user still does not', async () => {
      const created = await t.request('POST', '/v1/ssh-profiles', { body: { name: 'evented' }, headers: bearer(admin.token) });
      const id = created.json.data.id as string;
      const seen = async (who: Credentials) =>
        ((await t.request('GET', '/v1/events?types=resource.changed', { headers: bearer(who.token) })).json.data as Array<{ data: { id: string } }>).some((e) => e.data.id === id);
      expect(await seen(admin)).to.equal(true);
      expect(await seen(auditor)).to.equal(true);
      expect(await seen(user)).to.equal(false);
    });
  });

  describe('GET /v1/iam/whoami', () => {
    it('answers a JWT’s user, role, permissions and expiry', async () => {
      const res = await t.request('GET', '/v1/iam/whoami', { headers: bearer(auditor.token) });
      expect(res.status, res.text).to.equal(200);
      const me = res.json.data;
      expect(me.user).to.deep.equal({ id: auditor.userId, username: 'audrey', name: 'audrey', email: 'audrey@example.test' });
      expect(me.role).to.equal('auditor');
      expect(me.role_about).to.match(/changes nothing/);
      expect(me.credential.kind).to.equal('jwt');
      const claims = JSON.parse(Buffer.from(auditor.token.split('.')[1]!, 'base64url').toString());
      expect(me.credential.expires_at).to.equal(new Date(claims.exp * 1000).toISOString());
      expect(me.permissions).to.include.members(['nodes:read', 'iam:read', 'audit:read', 'services:logs', 'account:write']);
      expect(me.permissions.filter((p: string) => /:(write|admin|deploy|restore|backup|credentials)$/.test(p) && !p.startsWith('account:'))).to.deep.equal([]);
    });

    it('answers an API key’s access key id and no expiry, and never its secret', async () => {
      const res = await signed(t, admin, 'GET', '/v1/iam/whoami');
      expect(res.status, res.text).to.equal(200);
      expect(res.json.data.credential).to.deep.equal({
        kind: 'api_key',
        expires_at: null,
        access_key_id: admin.accessKeyId,
        key_description: 'bootstrap',
        scope: 'installation',
        project_id: null,
        project_name: null,
        key_role: null,
        limited: false,
        source_networks: [],
      });
      expect(res.json.data.role).to.equal('admin');
      expect(res.json.data.permissions).to.include.members(['nodes:write', 'iam:admin', 'services:deploy']).and.not.include('metrics:read');
      expect(res.text).not.to.contain(admin.secretAccessKey);
    });

    it('answers a dashboard session', async () => {
      const login = await t.request('POST', '/v1/iam/session', { body: { username: 'ulla', password: GOOD_PASSWORD } });
      expect(login.status, login.text).to.equal(201);
      const cookie = String(login.headers['set-cookie']).split(';')[0]!;
      const res = await t.request('GET', '/v1/iam/whoami', { headers: { cookie } });
      expect(res.status, res.text).to.equal(200);
      expect(res.json.data.credential).to.deep.equal({ kind: 'session', expires_at: login.json.data.expires_at });
      // A user holds what it held before roles had permissions: the reads open to anyone signed in.
      expect(res.json.data.permissions).to.include.members(['nodes:read', 'secrets:read-metadata', 'account:read']).and.not.include.members(['nodes:write', 'iam:read', 'audit:read']);
    });

    it('refuses a caller without credentials (401)', async () => {
      expect((await t.request('GET', '/v1/iam/whoami')).status).to.equal(401);
    });

    it('is `hangar whoami`, signed with the configured key', async function () {
      this.timeout(60_000);
      const dir = temp.make('hangar-whoami-');
      const ca = path.join(dir, 'ca.pem');
      writeFileSync(ca, t.caPem);
      const env = { XDG_CONFIG_HOME: dir, HANGAR_API_URL: t.url, HANGAR_ACCESS_KEY: auditor.accessKeyId, HANGAR_SECRET_KEY: auditor.secretAccessKey, HANGAR_CA_FILE: ca };
      const text = await hangarCli(['whoami'], { env, timeoutMs: 30_000 });
      expect(text.code, text.stderr).to.equal(0);
      expect(text.stdout).to.contain(`user:        audrey (${auditor.userId}) <audrey@example.test>`);
      expect(text.stdout).to.match(/^role: +auditor: /m);
      expect(text.stdout).to.contain(`credential:  api_key ${auditor.accessKeyId}, does not expire`);
      expect(text.stdout).to.match(/^permissions: .*\baudit:read\b/m);
      const json = await hangarCli(['whoami', '--json'], { env, timeoutMs: 30_000 });
      expect(JSON.parse(json.stdout)).to.include({ role: 'auditor' });
    });
  });
});
