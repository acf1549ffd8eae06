import { expect } from 'chai';
import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { httpRequest } from '../../../core/http/client.js';
import { loadJwtSecret } from '../../../plugins/iam/secrets.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, createUser, GOOD_PASSWORD, signed, type Credentials } from '../../support/identity.js';
import { skipLoudly } from '../../support/requirements.js';

const PLUGINS = ['system', 'iam', 'login'];

/** A non-loopback address of this machine, to call the API as a remote client would. */
function externalAddress(): string | null {
  for (const list of Object.values(os.networkInterfaces())) {
    for (const a of list ?? []) if (a.family === 'IPv4' && !a.internal) return a.address;
  }
  return null;
}

describeEachDialect('IAM: bootstrap', (dialect) => {
  it('creates the first admin once from loopback, returning a connection config, then answers 409', async () => {
    const t = await startHangar(dialect, { plugins: PLUGINS });
    try {
      const res = await t.request('POST', '/v1/bootstrap', { body: {} });
      expect(res.status).to.equal(201);
      const data = res.json.data;
      expect(data).to.include.keys('username', 'password', 'access_key_id', 'secret_access_key', 'api_url', 'ca_pem', 'user_id');
      expect(data.username).to.equal('admin');
      expect(data.api_url).to.equal(t.url);
      expect(data.ca_pem).to.equal(t.caPem);
      // The generated password meets the policy and works.
      const login = await t.request('POST', '/v1/iam/login', { body: { username: 'admin', password: data.password } });
      expect(login.status).to.equal(200);
      expect(login.json.data.user.role).to.equal('admin');
      // The key pair works too.
      const me = await signed(t, { accessKeyId: data.access_key_id, secretAccessKey: data.secret_access_key }, 'GET', `/v1/iam/users/${data.user_id}`);
      expect(me.status).to.equal(200);

      const again = await t.request('POST', '/v1/bootstrap', { body: {} });
      expect(again.status).to.equal(409);
      expect(again.json.error).to.equal('Conflict');
      expect(existsSync(path.join(t.hangar.services.config.data_dir, 'bootstrap-secret')), 'the one-time secret is gone').to.equal(false);
    } finally {
      await t.stop();
    }
  });

  it('keeps one admin when two admins delete each other at the same moment, and never reopens bootstrap', async () => {
    const t = await startHangar(dialect, { plugins: PLUGINS });
    try {
      let survivor = await bootstrapAdmin(t);
      for (let round = 0; round < 6; round++) {
        const other = await createUser(t, survivor, { username: `admin${round}`, role: 'admin' });
        const [a, b] = await Promise.all([
          t.request('DELETE', `/v1/iam/users/${other.userId}`, { headers: bearer(survivor.token) }),
          t.request('DELETE', `/v1/iam/users/${survivor.userId}`, { headers: bearer(other.token) }),
        ]);
        // One delete wins; the other is refused (409, the last admin) or finds its caller gone (401).
        expect([a.status, b.status].filter((s) => s === 200), `round ${round}: ${a.text} / ${b.text}`).to.have.length(1);
        expect([a.status, b.status].filter((s) => s !== 200)[0]).to.be.oneOf([401, 409]);
        if (b.status === 200) survivor = other;
      }
      const live = await t.hangar.store.knex('users').where({ role: 'admin' }).whereNull('deleted_at');
      expect(live.map((u: { userid: string }) => u.userid)).to.deep.equal([survivor.userId]);
      // Even with no admin left at all (removed behind the API's back), bootstrap stays closed.
      await t.hangar.store.knex('users').update({ deleted_at: new Date().toISOString() });
      const again = await t.request('POST', '/v1/bootstrap', { body: { username: 'newroot', password: GOOD_PASSWORD } });
      expect(again.status).to.equal(409);
      expect(again.json.message).to.contain('already bootstrapped');
    } finally {
      await t.stop();
    }
  });

  it('enforces the password policy on a chosen bootstrap password', async () => {
    const t = await startHangar(dialect, { plugins: PLUGINS });
    try {
      const res = await t.request('POST', '/v1/bootstrap', { body: { password: 'weak' } });
      expect(res.status).to.equal(400);
      expect(res.json.message).to.contain('at least 12 characters');
      expect(res.json.message).to.contain('uppercase');
      const ok = await t.request('POST', '/v1/bootstrap', { body: { username: 'root', password: GOOD_PASSWORD } });
      expect(ok.status).to.equal(201);
      expect(ok.json.data).not.to.have.property('password');
    } finally {
      await t.stop();
    }
  });

  it('refuses a remote caller without the bootstrap secret, and accepts it with the secret', async function () {
    const address = externalAddress();
    if (!address) skipLoudly(this, 'a non-loopback IPv4 address on this machine, to call the API as a remote client');
    const t = await startHangar(dialect, { plugins: PLUGINS, overrides: { api: { host: '0.0.0.0' } } });
    try {
      const url = `https://${address}:${t.hangar.listeners.get('control')!.port}/v1/bootstrap`;
      const remote = await httpRequest(url, { method: 'POST', body: {}, ca: t.caPem });
      expect(remote.status).to.equal(403);
      expect(remote.json.message).to.contain('X-Bootstrap-Secret');
      const wrong = await httpRequest(url, { method: 'POST', body: {}, ca: t.caPem, headers: { 'x-bootstrap-secret': 'guess' } });
      expect(wrong.status).to.equal(403);
      const secret = readFileSync(path.join(t.hangar.services.config.data_dir, 'bootstrap-secret'), 'utf8').trim();
      const statOk = (await import('node:fs')).statSync(path.join(t.hangar.services.config.data_dir, 'bootstrap-secret')).mode & 0o777;
      expect(statOk).to.equal(0o600);
      const ok = await httpRequest(url, { method: 'POST', body: {}, ca: t.caPem, headers: { 'x-bootstrap-secret': secret } });
      expect(ok.status).to.equal(201);
    } finally {
      await t.stop();
    }
  });
});

describeEachDialect('IAM: users, roles, keys and HMAC', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  let alice: Credentials;
  before(async () => {
    t = await startHangar(dialect, { plugins: PLUGINS });
    admin = await bootstrapAdmin(t);
    alice = await createUser(t, admin, { username: 'alice', email: 'alice@example.test', name: 'Alice' });
  });
  after(() => t?.stop());

  it('logs in on the control API and uses the JWT; wrong password and unknown user get the same 401', async () => {
    const ok = await t.request('POST', '/v1/iam/login', { body: { username: 'alice', password: GOOD_PASSWORD } });
    expect(ok.status).to.equal(200);
    expect(ok.json.data).to.include.keys('token', 'expires_at', 'token_type', 'user');
    const payload = JSON.parse(Buffer.from(ok.json.data.token.split('.')[1], 'base64url').toString());
    expect(payload).to.include({ userid: alice.userId, name: 'Alice', role: 'user' });
    expect(payload.exp - payload.iat).to.equal(3600);
    expect(JSON.parse(Buffer.from(ok.json.data.token.split('.')[0], 'base64url').toString()).alg).to.equal('HS512');
    const wrong = await t.request('POST', '/v1/iam/login', { body: { username: 'alice', password: 'Wrong-Password-97!' } });
    const unknown = await t.request('POST', '/v1/iam/login', { body: { username: 'nobody', password: 'Wrong-Password-97!' } });
    expect(wrong.status).to.equal(401);
    expect(unknown.status).to.equal(401);
    expect(wrong.json.message).to.equal(unknown.json.message);
    const empty = await t.request('POST', '/v1/iam/login', { body: { username: 'alice', password: '' } });
    expect(empty.status).to.equal(401);
  });

  it('refuses tampered, foreign-algorithm and foreign-issuer tokens', async () => {
    const [h, p, s] = alice.token.split('.');
    const elevated = Buffer.from(JSON.stringify({ ...JSON.parse(Buffer.from(p!, 'base64url').toString()), role: 'admin' })).toString('base64url');
    const tampered = await t.request('GET', '/v1/iam/users', { headers: bearer(`${h}.${elevated}.${s}`) });
    expect(tampered.status).to.equal(401);
    const none = `${Buffer.from('{"alg":"none","typ":"JWT"}').toString('base64url')}.${elevated}.`;
    expect((await t.request('GET', '/v1/iam/users', { headers: bearer(none) })).status).to.equal(401);
  });

  it('creates, lists, gets users with properties; user-role callers may only read themselves', async () => {
    const created = await t.request('POST', '/v1/iam/users', {
      headers: bearer(admin.token),
      body: { username: 'bob', email: 'bob@example.test', password: GOOD_PASSWORD, role: 'user', properties: [{ name: 'mfa', value: 'off' }, { name: 'picture', value: 'https://x/p.png' }] },
    });
    expect(created.status).to.equal(201);
    expect(created.json.data).not.to.have.property('password');
    expect(created.json.data.properties.map((p: { name: string }) => p.name)).to.deep.equal(['mfa', 'picture']);
    const added = await t.request('POST', `/v1/iam/users/${created.json.data.id}/properties`, { headers: bearer(admin.token), body: { name: 'mfa', value: 'totp' } });
    expect(added.status).to.equal(201);
    // The schema allows a null value, and so does the API.
    const empty = await t.request('POST', `/v1/iam/users/${created.json.data.id}/properties`, { headers: bearer(admin.token), body: { name: 'nickname', value: null } });
    expect(empty.status, empty.text).to.equal(201);
    expect(empty.json.data).to.include({ name: 'nickname', value: null });
    const got = await t.request('GET', `/v1/iam/users/${created.json.data.id}`, { headers: bearer(admin.token) });
    expect(got.json.data.properties.filter((p: { name: string }) => p.name === 'mfa')).to.have.length(2);

    const dup = await t.request('POST', '/v1/iam/users', { headers: bearer(admin.token), body: { username: 'bob', password: GOOD_PASSWORD } });
    expect(dup.status).to.equal(409);
    const dupEmail = await t.request('POST', '/v1/iam/users', { headers: bearer(admin.token), body: { username: 'bob2', email: 'bob@example.test', password: GOOD_PASSWORD } });
    expect(dupEmail.status).to.equal(409);

    const list = await t.request('GET', '/v1/iam/users?limit=2', { headers: bearer(admin.token) });
    expect(list.json.data).to.have.length(2);
    expect(list.json.next_cursor).to.be.a('string');

    expect((await t.request('GET', '/v1/iam/users', { headers: bearer(alice.token) })).status).to.equal(403);
    expect((await t.request('GET', `/v1/iam/users/${alice.userId}`, { headers: bearer(alice.token) })).status).to.equal(200);
    expect((await t.request('GET', `/v1/iam/users/${admin.userId}`, { headers: bearer(alice.token) })).status).to.equal(403);
    expect((await t.request('GET', '/v1/iam/users/00000000-0000-4000-8000-000000000000', { headers: bearer(admin.token) })).status).to.equal(404);
  });

  it('enforces length limits with a 400 naming the field', async () => {
    const res = await t.request('POST', '/v1/iam/users', {
      headers: bearer(admin.token),
      body: { username: 'u'.repeat(21), email: `${'e'.repeat(116)}@x.io`, name: 'n'.repeat(51), role: 'r'.repeat(51), password: GOOD_PASSWORD, properties: [{ name: 'p'.repeat(51), value: 'v'.repeat(251) }] },
    });
    expect(res.status).to.equal(400);
    const paths = res.json.details.map((d: { path: string }) => d.path);
    expect(paths).to.include.members(['body.username', 'body.email', 'body.name', 'body.role', 'body.properties[0].name', 'body.properties[0].value']);
  });

  it('sets passwords: admin for anyone, a user for itself with its current password, policy enforced listing every broken rule', async () => {
    const weak = await t.request('POST', `/v1/iam/users/${alice.userId}/password`, { headers: bearer(alice.token), body: { password: 'abc aaa', current_password: GOOD_PASSWORD } });
    expect(weak.status).to.equal(400);
    for (const rule of ['12 characters', 'uppercase', 'number', 'symbol', 'whitespace', 'sequential', 'repeated']) expect(weak.json.message).to.contain(rule);
    // A token alone (a stolen one) does not change its user's password.
    const tokenOnly = await t.request('POST', `/v1/iam/users/${alice.userId}/password`, { headers: bearer(alice.token), body: { password: 'Alice-New-Pass-58!' } });
    expect(tokenOnly.status).to.equal(400);
    expect(tokenOnly.json.message).to.equal('Validation failed: body.current_password is required to change your own password');
    const wrong = await t.request('POST', `/v1/iam/users/${alice.userId}/password`, { headers: bearer(alice.token), body: { password: 'Alice-New-Pass-58!', current_password: 'Not-Her-Pass-11!' } });
    expect(wrong.status).to.equal(403);
    expect(wrong.json.message).to.equal('The current password is wrong');
    expect((await t.request('POST', '/v1/iam/login', { body: { username: 'alice', password: GOOD_PASSWORD } })).status, 'unchanged').to.equal(200);
    const self = await t.request('POST', `/v1/iam/users/${alice.userId}/password`, { headers: bearer(alice.token), body: { password: 'Alice-New-Pass-58!', keep_api_keys: true, current_password: GOOD_PASSWORD } });
    expect(self.status).to.equal(200);
    expect(self.json.data).to.deep.equal({ updated: true, keys_deleted: 0 });
    const relogin = await t.request('POST', '/v1/iam/login', { body: { username: 'alice', password: 'Alice-New-Pass-58!' } });
    expect(relogin.status).to.equal(200);
    const other = await t.request('POST', `/v1/iam/users/${admin.userId}/password`, { headers: bearer(relogin.json.data.token), body: { password: 'Alice-New-Pass-58!' } });
    expect(other.status).to.equal(403);
    const byAdmin = await t.request('POST', `/v1/iam/users/${alice.userId}/password`, { headers: bearer(admin.token), body: { password: GOOD_PASSWORD, keep_api_keys: true } });
    expect(byAdmin.status).to.equal(200);
    alice.token = (await t.request('POST', '/v1/iam/login', { body: { username: 'alice', password: GOOD_PASSWORD } })).json.data.token;
  });

  it('a new password revokes the tokens issued before it, and the API keys unless kept', async () => {
    const dora = await createUser(t, admin, { username: 'dora' });
    const self = (token: string) => t.request('GET', `/v1/iam/users/${dora.userId}`, { headers: bearer(token) });
    expect((await self(dora.token)).status).to.equal(200);

    const kept = await t.request('POST', `/v1/iam/users/${dora.userId}/password`, { headers: bearer(dora.token), body: { password: 'Dora-Second-Pass-64!', keep_api_keys: true, current_password: dora.password } });
    expect(kept.status).to.equal(200);
    const stale = await self(dora.token);
    expect(stale.status, 'the token from before the change').to.equal(401);
    expect(stale.json.message).to.equal('The token was issued before the user’s password or role changed; log in again');
    expect((await signed(t, dora, 'GET', `/v1/iam/users/${dora.userId}`)).status, 'the kept key').to.equal(200);
    const fresh = (await t.request('POST', '/v1/iam/login', { body: { username: 'dora', password: 'Dora-Second-Pass-64!' } })).json.data.token;
    expect((await self(fresh)).status).to.equal(200);

    const byAdmin = await t.request('POST', `/v1/iam/users/${dora.userId}/password`, { headers: bearer(admin.token), body: { password: 'Dora-Third-Pass-75!' } });
    expect(byAdmin.json.data).to.deep.equal({ updated: true, keys_deleted: 1 });
    expect((await self(fresh)).status, 'the token from before the second change').to.equal(401);
    expect((await signed(t, dora, 'GET', `/v1/iam/users/${dora.userId}`)).status, 'the key, not kept').to.equal(401);
    const keys = await t.request('GET', `/v1/iam/users/${dora.userId}/keys`, { headers: bearer(admin.token) });
    expect(keys.json.data).to.deep.equal([]);
    // The admin's own token was not touched.
    expect((await t.request('GET', '/v1/iam/users?limit=1', { headers: bearer(admin.token) })).status).to.equal(200);
  });

  it('accepts HMAC-signed requests and records when a key was last used', async () => {
    const res = await signed(t, admin, 'GET', '/v1/iam/users?limit=5');
    expect(res.status).to.equal(200);
    const withBody = await signed(t, admin, 'POST', `/v1/iam/users/${alice.userId}/properties`, { body: { name: 'team', value: 'ops' } });
    expect(withBody.status).to.equal(201);
    const keys = await t.request('GET', `/v1/iam/users/${admin.userId}/keys`, { headers: bearer(admin.token) });
    expect(keys.json.data[0].last_used_at).to.be.a('string');
    expect(JSON.stringify(keys.json)).not.to.contain(admin.secretAccessKey);
  });

  it('refuses a wrong signature, a changed body, a stale timestamp and a replay', async () => {
    const wrongSecret = await signed(t, { ...admin, secretAccessKey: 'not-the-secret' }, 'GET', '/v1/iam/users');
    expect(wrongSecret.status).to.equal(401);
    expect(wrongSecret.json.message).to.contain('The access key or the signature is not valid');

    const { signRequest } = await import('../../../core/auth/hmac.js');
    const headers = signRequest({ accessKeyId: admin.accessKeyId, secretAccessKey: admin.secretAccessKey }, { method: 'POST', pathAndQuery: `/v1/iam/users/${alice.userId}/properties`, body: '{"name":"a","value":"1"}' });
    const changed = await t.request('POST', `/v1/iam/users/${alice.userId}/properties`, { body: '{"name":"a","value":"2"}', headers: { ...headers, 'content-type': 'application/json' } });
    expect(changed.status).to.equal(401);

    const stale = await signed(t, admin, 'GET', '/v1/iam/users', { timestamp: Math.floor(Date.now() / 1000) - 301 });
    expect(stale.status).to.equal(401);
    expect(stale.json.message).to.contain('±300 s');
    const future = await signed(t, admin, 'GET', '/v1/iam/users', { timestamp: Math.floor(Date.now() / 1000) + 301 });
    expect(future.status).to.equal(401);

    const once = { timestamp: Math.floor(Date.now() / 1000), nonce: 'fixed-nonce-1' };
    expect((await signed(t, admin, 'GET', '/v1/iam/users', once)).status).to.equal(200);
    const replay = await signed(t, admin, 'GET', '/v1/iam/users', once);
    expect(replay.status).to.equal(401);
    expect(replay.json.message).to.contain('already been used');

    const missing = await t.request('GET', '/v1/iam/users', { headers: { 'x-access-key': admin.accessKeyId } });
    expect(missing.status).to.equal(401);
  });

  it('gives a JWT to an HMAC-signed caller at /v1/iam/token, and only to one', async () => {
    const res = await signed(t, alice, 'POST', '/v1/iam/token');
    expect(res.status).to.equal(200);
    const use = await t.request('GET', `/v1/iam/users/${alice.userId}`, { headers: bearer(res.json.data.token) });
    expect(use.status).to.equal(200);
    const viaJwt = await t.request('POST', '/v1/iam/token', { headers: bearer(alice.token) });
    expect(viaJwt.status).to.equal(401);
  });

  it('stops accepting a deleted key at once', async () => {
    const key = await t.request('POST', `/v1/iam/users/${alice.userId}/keys`, { headers: bearer(alice.token), body: { description: 'laptop' } });
    expect(key.status).to.equal(201);
    const creds = { accessKeyId: key.json.data.access_key_id, secretAccessKey: key.json.data.secret_access_key };
    expect((await signed(t, creds, 'GET', `/v1/iam/users/${alice.userId}`)).status).to.equal(200);
    const del = await t.request('DELETE', `/v1/iam/users/${alice.userId}/keys/${key.json.data.id}`, { headers: bearer(alice.token) });
    expect(del.status).to.equal(200);
    const after = await signed(t, creds, 'GET', `/v1/iam/users/${alice.userId}`);
    expect(after.status).to.equal(401);
    expect((await t.request('DELETE', `/v1/iam/users/${alice.userId}/keys/${key.json.data.id}`, { headers: bearer(alice.token) })).status).to.equal(404);
  });

  it('stores API secrets encrypted, not in clear', async () => {
    const rows = await t.hangar.store.knex('api_keys').select('secret_sealed');
    for (const row of rows) {
      expect(row.secret_sealed).to.match(/^v1:/);
      expect(row.secret_sealed).not.to.contain(admin.secretAccessKey);
    }
  });

  it('locks a soft-deleted user out: no login, its token and keys stop working', async () => {
    const carol = await createUser(t, admin, { username: 'carol' });
    expect((await t.request('GET', `/v1/iam/users/${carol.userId}`, { headers: bearer(carol.token) })).status).to.equal(200);
    const del = await t.request('DELETE', `/v1/iam/users/${carol.userId}`, { headers: bearer(admin.token) });
    expect(del.status).to.equal(200);
    expect(del.json.data.deleted_at).to.be.a('string');
    expect((await t.request('POST', '/v1/iam/login', { body: { username: 'carol', password: GOOD_PASSWORD } })).status).to.equal(401);
    expect((await t.request('GET', `/v1/iam/users/${carol.userId}`, { headers: bearer(carol.token) })).status).to.equal(401);
    expect((await signed(t, carol, 'GET', `/v1/iam/users/${carol.userId}`)).status).to.equal(401);
    expect((await t.request('GET', `/v1/iam/users/${carol.userId}`, { headers: bearer(admin.token) })).status).to.equal(404);
    const lastAdmin = await t.request('DELETE', `/v1/iam/users/${admin.userId}`, { headers: bearer(admin.token) });
    expect(lastAdmin.status).to.equal(409);
  });

  it('frees a deleted user’s username and email for a new user; live users still conflict (409)', async () => {
    const first = await createUser(t, admin, { username: 'reused-name', email: 'reused@example.test' });
    expect((await t.request('POST', '/v1/iam/users', { body: { username: 'reused-name', password: GOOD_PASSWORD }, headers: bearer(admin.token) })).status).to.equal(409);
    expect((await t.request('DELETE', `/v1/iam/users/${first.userId}`, { headers: bearer(admin.token) })).status).to.equal(200);
    const again = await t.request('POST', '/v1/iam/users', { body: { username: 'reused-name', email: 'reused@example.test', password: GOOD_PASSWORD }, headers: bearer(admin.token) });
    expect(again.status, again.text).to.equal(201);
    expect(again.json.data.user_id ?? again.json.data.userid).not.to.equal(first.userId);
    const login = await t.request('POST', '/v1/iam/login', { body: { username: 'reused-name', password: GOOD_PASSWORD } });
    expect(login.status, login.text).to.equal(200);
    const twice = await t.request('POST', '/v1/iam/users', { body: { username: 'reused-name', email: 'other@example.test', password: GOOD_PASSWORD }, headers: bearer(admin.token) });
    expect(twice.status).to.equal(409);
    const sameEmail = await t.request('POST', '/v1/iam/users', { body: { username: 'reused-name2', email: 'reused@example.test', password: GOOD_PASSWORD }, headers: bearer(admin.token) });
    expect(sameEmail.status).to.equal(409);
    // The store itself refuses a second live row (the partial unique index), not only the check before it.
    const direct = await t.hangar.store
      .knex('users')
      .insert({ userid: '99999999-2222-4333-8444-555555555555', username: 'reused-name', password: 'x', role: 'user', created_at: new Date().toISOString() })
      .then(() => 'inserted', (err: Error) => err.message);
    expect(direct).to.match(/unique/i);
  });

  it('verifies imported SHA-1 hashes and upgrades them to scrypt on login', async () => {
    const legacyPassword = 'Legacy-Php-Pass-47!';
    await t.hangar.store.knex('users').insert({
      userid: '11111111-2222-4333-8444-555555555555',
      username: 'legacy',
      email: 'legacy@example.test',
      password: createHash('sha1').update(legacyPassword).digest('hex'),
      role: 'user',
      created_at: new Date().toISOString(),
    });
    expect((await t.request('POST', '/v1/iam/login', { body: { username: 'legacy', password: 'wrong' } })).status).to.equal(401);
    const stillSha1 = await t.hangar.store.knex('users').where({ username: 'legacy' }).first('password');
    expect(stillSha1.password).to.match(/^[0-9a-f]{40}$/);
    expect((await t.request('POST', '/v1/iam/login', { body: { username: 'legacy', password: legacyPassword } })).status).to.equal(200);
    const upgraded = await t.hangar.store.knex('users').where({ username: 'legacy' }).first('password');
    expect(upgraded.password).to.match(/^scrypt\$/);
    expect((await t.request('POST', '/v1/iam/login', { body: { username: 'legacy', password: legacyPassword } })).status).to.equal(200);
  });

  it('keeps every secret out of responses and logs', async () => {
    const hashes = (await t.hangar.store.knex('users').select('password')).map((r: { password: string }) => r.password);
    // The data dir's file (SQLite) or the store's sealed keyring (PostgreSQL, with the master key).
    const jwtSecret = (await loadJwtSecret(null, t.hangar.services.ca.keyring)).toString('base64');
    const logs = t.logs.join('\n');
    for (const secret of [GOOD_PASSWORD, admin.secretAccessKey, alice.secretAccessKey, jwtSecret, admin.token, ...hashes]) {
      expect(logs).not.to.contain(secret);
    }
    const listing = await t.request('GET', '/v1/iam/users?limit=1000', { headers: bearer(admin.token) });
    for (const hash of hashes) expect(listing.text).not.to.contain(hash);
    expect(listing.text).not.to.contain('"password"');
  });
});
