import { createHash, randomUUID } from 'node:crypto';
import net from 'node:net';
import { expect } from 'chai';
import { ManualClock } from '../../../core/clock.js';
import type { HttpResponse } from '../../../core/http/client.js';
import { loadJwtSecret } from '../../../plugins/iam/secrets.js';
import { waitFor } from '../../support/agents.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, createUser, GOOD_PASSWORD, signed, type Credentials } from '../../support/identity.js';
import { TestSmtpServer, type ReceivedMail } from '../../support/smtp.js';
import { RESET_REFUSED } from '../../../plugins/login/resets.js';

const PLUGINS = ['system', 'iam', 'login'];
/** sha1('') in hex: what an imported user with an empty password would have stored. */
const SHA1_OF_EMPTY = 'da39a3ee5e6b4b0d3255bfef95601890afd80709';
const JWT_PATTERN = /eyJ[\w-]{8,}\.eyJ[\w-]{8,}\.[\w-]{16,}/;
const DEFAULT_FROM = 'noreply@localhost';
const DEFAULT_SUBJECT = 'Reset your hangar password';

interface Recorded {
  method: string;
  path: string;
  listener: string;
  status: number;
  text: string;
}

/** The claims of a JWT, read without verifying it (the server verified it when it answered). */
function claimsOf(token: string): Record<string, any> {
  return JSON.parse(Buffer.from(token.split('.')[1]!, 'base64url').toString('utf8'));
}

/** The token and code of a reset mail made from the default template. */
function resetPairOf(mail: ReceivedMail): { token: string; code: string } {
  const token = /^\s*token:\s*(\S+)\s*$/m.exec(mail.text)?.[1];
  const code = /^\s*code:\s*(\S+)\s*$/m.exec(mail.text)?.[1];
  expect(token, `a token in the mail:\n${mail.text}`).to.be.a('string');
  expect(code, `a code in the mail:\n${mail.text}`).to.match(/^\d{6}$/);
  return { token: token!, code: code! };
}

/** A six-digit code that is not `code`. */
const otherCode = (code: string) => String((Number(code) + 1) % 1_000_000).padStart(6, '0');

/** Whether `needle` occurs in `haystack` as a whole word (not inside a longer run of letters/digits). */
function occurs(haystack: string, needle: string): boolean {
  const escaped = needle.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  return new RegExp(`(?<![A-Za-z0-9])${escaped}(?![A-Za-z0-9])`).test(haystack);
}

/** Wraps t.request so every answer is kept, for the leak checks. */
function recordResponses(t: TestHangar, into: Recorded[]): void {
  const original = t.request.bind(t);
  t.request = (async (method: string, p: string, options: Parameters<TestHangar['request']>[2] = {}) => {
    const res = await original(method, p, options);
    into.push({ method, path: p, listener: options.listener ?? 'control', status: res.status, text: res.text });
    return res;
  }) as TestHangar['request'];
}

describeEachDialect('login API', (dialect) => {
  const smtp = new TestSmtpServer();
  let smtpPort = 0;
  let clock: ManualClock;
  let t: TestHangar;
  let admin: Credentials;
  let alice: Credentials;
  const responses: Recorded[] = [];
  /** Every reset token, code and password the tests used on `t`; none may reach a log line. */
  const secrets = new Set<string>([GOOD_PASSWORD]);
  /** Every JWT the login API issued on `t`. */
  const issuedTokens = new Set<string>();

  const call = <T = any>(method: string, p: string, body?: unknown, headers?: Record<string, string>): Promise<HttpResponse<T>> =>
    t.request<T>(method, p, { listener: 'login', body, headers });

  async function login(username: string, password: string) {
    const res = await call('POST', '/login', { username, password });
    if (res.status === 200) issuedTokens.add(res.json.token);
    return res;
  }

  async function loginToken(username: string, password: string): Promise<string> {
    const res = await login(username, password);
    expect(res.status, res.text).to.equal(200);
    return res.json.token;
  }

  /** Asks for a reset of `email` and returns the pair from the mail that arrives. */
  async function requestReset(email: string): Promise<{ token: string; code: string; mail: ReceivedMail }> {
    const seen = smtp.messages.length;
    const res = await call('POST', '/login/resetrequest', { email });
    expect(res.status, res.text).to.equal(200);
    const mail = await smtp.waitFor(email, seen);
    const pair = resetPairOf(mail);
    secrets.add(pair.token);
    secrets.add(pair.code);
    return { ...pair, mail };
  }

  before(async () => {
    smtpPort = await smtp.start();
    // Whole seconds, so "n seconds after issue" is exact against the integer iat/exp claims.
    clock = new ManualClock(Math.floor(Date.now() / 1000) * 1000);
    t = await startHangar(dialect, {
      plugins: PLUGINS,
      clock,
      // The rate limits have their own suite (rate-limits.test.ts); here they stay out of the way.
      overrides: {
        mail: { host: '127.0.0.1', port: smtpPort, starttls: 'off' },
        login: { identifier: 'email', reset_failures_per_address: { max: 1000, window_seconds: 900 } },
      },
    });
    recordResponses(t, responses);
    admin = await bootstrapAdmin(t);
    alice = await createUser(t, admin, { username: 'alice', role: 'user', email: 'alice@example.test', name: 'Alice' });
  });
  after(async () => {
    await t?.stop();
    await smtp.stop();
  });

  describe('POST /login', () => {
    it('answers {token, data: {userid, name, role}} for the right email and password, and the token opens protected routes', async () => {
      const res = await login('alice@example.test', GOOD_PASSWORD);
      expect(res.status, res.text).to.equal(200);
      expect(res.json).to.have.all.keys('token', 'data');
      expect(res.json.data).to.deep.equal({ userid: alice.userId, name: 'Alice', role: 'user' });
      // A token in the answer: no cache keeps it. (HSTS is the TLS-terminating proxy's to send.)
      expect(res.headers['cache-control']).to.equal('no-store');
      expect(res.headers['x-content-type-options']).to.equal('nosniff');
      const claims = claimsOf(res.json.token);
      expect(claims).to.include({ userid: alice.userId, name: 'Alice', role: 'user' });
      expect(claims.exp - claims.iat).to.equal(3600);
      expect(claims.iat).to.equal(Math.floor(clock.now().getTime() / 1000));

      const ping = await call('GET', '/sampleprotected/ping', undefined, bearer(res.json.token));
      expect(ping.status, ping.text).to.equal(200);
      expect(ping.json.data).to.deep.equal({ pong: true, userid: alice.userId });
    });

    it('compares the email case-insensitively, and does not take the username when the identifier is email', async () => {
      expect((await login('ALICE@Example.Test', GOOD_PASSWORD)).status).to.equal(200);
      const byName = await login('alice', GOOD_PASSWORD);
      expect(byName.status).to.equal(401);
    });

    it('gives the same 401 for an unknown user and for a wrong password', async () => {
      const unknown = await login('nobody@example.test', GOOD_PASSWORD);
      const wrong = await login('alice@example.test', `${GOOD_PASSWORD}x`);
      secrets.add(`${GOOD_PASSWORD}x`);
      for (const res of [unknown, wrong]) {
        expect(res.status).to.equal(401);
        expect(res.json.error).to.equal('Unauthorized');
        expect(res.json).to.not.have.property('token');
      }
      const { request_id: _a, ...unknownBody } = unknown.json;
      const { request_id: _b, ...wrongBody } = wrong.json;
      expect(unknownBody).to.deep.equal(wrongBody);
      expect(unknown.json.message).to.equal('Invalid credentials');
    });

    it('never authenticates an empty password, not even for a user whose stored hash is of the empty string', async () => {
      expect(createHash('sha1').update('').digest('hex')).to.equal(SHA1_OF_EMPTY);
      const userid = randomUUID();
      await t.hangar.store.knex('users').insert({
        userid,
        username: 'blank',
        email: 'blank@example.test',
        name: 'Blank',
        password: SHA1_OF_EMPTY,
        role: 'user',
        created_at: new Date().toISOString(),
      });
      const reference = await login('alice@example.test', 'wrong-password');
      for (const [who, password] of [
        ['blank@example.test', ''],
        ['alice@example.test', ''],
        ['nobody@example.test', ''],
      ] as const) {
        const res = await login(who, password);
        expect(res.status, `${who} with an empty password`).to.equal(401);
        expect(res.json).to.include({ error: 'Unauthorized', message: reference.json.message });
      }
      // Still the imported hash: nothing logged the user in and upgraded it.
      const row = await t.hangar.store.knex('users').where({ userid }).first('password');
      expect(row.password).to.equal(SHA1_OF_EMPTY);
    });

    it('logs in an imported user with a legacy SHA-1 hash and upgrades the stored hash', async () => {
      const legacyPassword = 'Legacy-Pass-42!';
      secrets.add(legacyPassword);
      const legacyHash = createHash('sha1').update(legacyPassword).digest('hex');
      secrets.add(legacyHash);
      const userid = randomUUID();
      await t.hangar.store.knex('users').insert({
        userid,
        username: 'legacy',
        email: 'legacy@example.test',
        password: legacyHash,
        role: 'user',
        created_at: new Date().toISOString(),
      });
      const res = await login('legacy@example.test', legacyPassword);
      expect(res.status, res.text).to.equal(200);
      expect(res.json.data).to.deep.equal({ userid, name: 'legacy', role: 'user' });
      const row = await t.hangar.store.knex('users').where({ userid }).first('password');
      expect(row.password).to.match(/^scrypt\$/);
      expect((await login('legacy@example.test', legacyPassword)).status).to.equal(200);
    });
  });

  describe('login by username (login.identifier: username)', () => {
    let t2: TestHangar;
    let admin2: Credentials;
    before(async () => {
      t2 = await startHangar(dialect, {
        plugins: PLUGINS,
        overrides: { mail: { host: '127.0.0.1', port: smtpPort, starttls: 'off' }, login: { identifier: 'username' } },
      });
      admin2 = await bootstrapAdmin(t2);
      await createUser(t2, admin2, { username: 'bob', role: 'user', email: 'bob@example.test' });
    });
    after(() => t2?.stop());

    it('takes the username, not the email, in the username field', async () => {
      const byUsername = await t2.request('POST', '/login', { listener: 'login', body: { username: 'bob', password: GOOD_PASSWORD } });
      expect(byUsername.status, byUsername.text).to.equal(200);
      expect(byUsername.json.data).to.include({ name: 'bob', role: 'user' });
      expect(claimsOf(byUsername.json.token).userid).to.equal(byUsername.json.data.userid);

      const byEmail = await t2.request('POST', '/login', { listener: 'login', body: { username: 'bob@example.test', password: GOOD_PASSWORD } });
      expect(byEmail.status).to.equal(401);
      // Usernames compare exactly.
      const otherCase = await t2.request('POST', '/login', { listener: 'login', body: { username: 'BOB', password: GOOD_PASSWORD } });
      expect(otherCase.status).to.equal(401);
      const adminLogin = await t2.request('POST', '/login', { listener: 'login', body: { username: admin2.username, password: GOOD_PASSWORD } });
      expect(adminLogin.status).to.equal(200);
      expect(adminLogin.json.data).to.include({ userid: admin2.userId, role: 'admin' });
    });
  });

  describe('schema failures', () => {
    async function rejects(p: string, body: unknown, detailPath: string, messagePart?: RegExp) {
      const res = await call('POST', p, body);
      expect(res.status, `${p} ${JSON.stringify(body)}: ${res.text}`).to.equal(400);
      expect(res.json.error).to.equal('Bad Request');
      expect(res.json.message).to.match(/^Validation failed:/);
      const detail = res.json.details.find((d: { path: string }) => d.path === detailPath);
      expect(detail, `a detail for ${detailPath} in ${JSON.stringify(res.json.details)}`).to.exist;
      if (messagePart) expect(detail.message).to.match(messagePart);
      return res.json;
    }

    it('POST /login: required fields, types, lengths, unknown properties', async () => {
      const missing = await rejects('/login', {}, 'body.username', /required/);
      expect(missing.details.map((d: { path: string }) => d.path).sort()).to.deep.equal(['body.password', 'body.username']);
      await rejects('/login', { username: 'alice@example.test', password: 12345 }, 'body.password', /string/);
      await rejects('/login', { username: 'a'.repeat(121), password: 'x' }, 'body.username', /120 characters/);
      await rejects('/login', { username: 'alice@example.test', password: 'x'.repeat(1025) }, 'body.password', /1024 characters/);
      await rejects('/login', { username: 'alice@example.test', password: 'x', remember: true }, 'body.remember', /not an allowed property/);
      // No body at all is an empty object, judged the same way.
      const empty = await call('POST', '/login');
      expect(empty.status).to.equal(400);
      expect(empty.json.message).to.match(/^Validation failed:/);
    });

    it('the reset endpoints: email format, token length, six-digit code, required password', async () => {
      await rejects('/login/resetrequest', { email: 'not-an-email' }, 'body.email', /email/);
      await rejects('/login/resetrequest', {}, 'body.email', /required/);
      const pair = { email: 'alice@example.test', token: 'tok', code: '123456' };
      await rejects('/login/confirmcode', { ...pair, code: '12345' }, 'body.code', /pattern/);
      await rejects('/login/confirmcode', { ...pair, code: '12345a' }, 'body.code', /pattern/);
      await rejects('/login/confirmcode', { ...pair, token: '' }, 'body.token');
      await rejects('/login/confirmcode', { ...pair, email: 'nope' }, 'body.email', /email/);
      await rejects('/login/resetpassword', pair, 'body.password', /required/);
      await rejects('/login/resetpassword', { ...pair, password: GOOD_PASSWORD, extra: 1 }, 'body.extra', /not an allowed property/);
    });

    it('a malformed JSON body is a 400 too, and nothing was sent', async () => {
      const seen = smtp.messages.length;
      const res = await t.request('POST', '/login/resetrequest', {
        listener: 'login',
        body: '{"email": "alice@example.test"',
        headers: { 'content-type': 'application/json' },
      });
      expect(res.status).to.equal(400);
      expect(res.json.error).to.equal('Bad Request');
      expect(res.json.message).to.match(/^Malformed JSON body/);
      await new Promise((resolve) => setTimeout(resolve, 200));
      expect(smtp.messages.length).to.equal(seen);
    });
  });

  describe('sample protected routes', () => {
    it('GET /sampleprotected/ping without a token: 401 Authentication required', async () => {
      const res = await call('GET', '/sampleprotected/ping');
      expect(res.status).to.equal(401);
      expect(res.json).to.include({ error: 'Unauthorized', message: 'Authentication required' });
    });

    it('refuses a token that is not valid', async () => {
      const token = await loginToken('alice@example.test', GOOD_PASSWORD);
      const [head, , sig] = token.split('.');
      const forged = `${head}.${Buffer.from(JSON.stringify({ ...claimsOf(token), role: 'admin' })).toString('base64url')}.${sig}`;
      for (const bad of ['garbage', forged]) {
        const res = await call('GET', '/sampleprotected/pingadm', undefined, bearer(bad));
        expect(res.status).to.equal(401);
        expect(res.json).to.include({ error: 'Unauthorized', message: 'The token is not valid' });
      }
    });

    it('GET /sampleprotected/pingadm: 403 for a user, 200 for an admin', async () => {
      const userToken = await loginToken('alice@example.test', GOOD_PASSWORD);
      const refused = await call('GET', '/sampleprotected/pingadm', undefined, bearer(userToken));
      expect(refused.status).to.equal(403);
      expect(refused.json).to.include({ error: 'Forbidden', message: 'Insufficient permissions: this needs iam:admin, and role user does not grant it' });

      const anonymous = await call('GET', '/sampleprotected/pingadm');
      expect(anonymous.status).to.equal(401);
      expect(anonymous.json).to.include({ error: 'Unauthorized', message: 'Authentication required' });

      const adminToken = await loginToken('admin@example.test', GOOD_PASSWORD);
      const ok = await call('GET', '/sampleprotected/pingadm', undefined, bearer(adminToken));
      expect(ok.status, ok.text).to.equal(200);
      expect(ok.json.data).to.deep.equal({ pong: true, userid: admin.userId, role: 'admin' });
    });
  });

  describe('password reset by email', () => {
    let carol: Credentials;
    let dave: Credentials;
    let erin: Credentials;
    let frank: Credentials;
    before(async () => {
      const adminToken = await loginToken('admin@example.test', GOOD_PASSWORD);
      const make = (username: string) => createUser(t, { ...admin, token: adminToken }, { username, role: 'user', email: `${username}@example.test` });
      carol = await make('carol');
      dave = await make('dave');
      erin = await make('erin');
      frank = await make('frank');
    });

    it('answers a known and an unknown address identically, and mails only the known one', async () => {
      const seen = smtp.messages.length;
      const unknown = await call('POST', '/login/resetrequest', { email: 'stranger@example.test' });
      const known = await call('POST', '/login/resetrequest', { email: 'carol@example.test' });
      expect(known.status).to.equal(200);
      expect(unknown.status).to.equal(known.status);
      expect(unknown.text).to.equal(known.text);
      expect(known.json.data.message).to.be.a('string').and.not.empty;
      const mail = await smtp.waitFor('carol@example.test', seen);
      const pair = resetPairOf(mail);
      secrets.add(pair.token);
      secrets.add(pair.code);
      await new Promise((resolve) => setTimeout(resolve, 300));
      expect(smtp.messages.slice(seen).flatMap((m) => m.to)).to.deep.equal(['carol@example.test']);
    });

    it('resets the password through the mailed token and code: confirm, then set a new one', async () => {
      const newPassword = 'Fresh-Start-58-Winter?';
      secrets.add(newPassword);
      const { token, code, mail } = await requestReset('carol@example.test');
      expect(mail.from).to.equal(DEFAULT_FROM);
      expect(mail.subject).to.equal(DEFAULT_SUBJECT);
      expect(mail.text).to.contain('Hello carol,');
      expect(mail.text).to.contain('within 10 minutes');

      const confirmed = await call('POST', '/login/confirmcode', { email: 'carol@example.test', token, code });
      expect(confirmed.status, confirmed.text).to.equal(200);
      expect(confirmed.json.data).to.deep.equal({ confirmed: true });

      const reset = await call('POST', '/login/resetpassword', { email: 'carol@example.test', token, code, password: newPassword });
      expect(reset.status, reset.text).to.equal(200);
      expect(reset.json.data).to.deep.equal({ reset: true, keys_deleted: 1 });
      // The reset revoked what carol had before it: her token and her API key.
      expect((await t.request('GET', `/v1/iam/users/${carol.userId}`, { headers: bearer(carol.token) })).status, 'the token from before').to.equal(401);
      expect((await signed(t, carol, 'GET', `/v1/iam/users/${carol.userId}`)).status, 'the key from before').to.equal(401);

      expect((await login('carol@example.test', GOOD_PASSWORD)).status, 'the old password').to.equal(401);
      const fresh = await login('carol@example.test', newPassword);
      expect(fresh.status, 'the new password').to.equal(200);
      expect(fresh.json.data.userid).to.equal(carol.userId);

      // The pair was used up.
      const again = await call('POST', '/login/resetpassword', { email: 'carol@example.test', token, code, password: 'Another-One-74-Spring!' });
      expect(again.status).to.equal(400);
      expect((await login('carol@example.test', newPassword)).status).to.equal(200);
    });

    it('refuses resetpassword before confirmcode, and leaves the password alone', async () => {
      const { token, code } = await requestReset('dave@example.test');
      const early = await call('POST', '/login/resetpassword', { email: 'dave@example.test', token, code, password: 'Never-Set-63-Autumn!' });
      expect(early.status).to.equal(400);
      expect(early.json.error).to.equal('Bad Request');
      expect(early.json.message).to.contain('/login/confirmcode');
      expect((await login('dave@example.test', 'Never-Set-63-Autumn!')).status).to.equal(401);
      const still = await login('dave@example.test', GOOD_PASSWORD);
      expect(still.status).to.equal(200);
      expect(still.json.data.userid).to.equal(dave.userId);
    });

    it('a pair does not work for another address', async () => {
      const { token, code } = await requestReset('dave@example.test');
      const res = await call('POST', '/login/confirmcode', { email: 'erin@example.test', token, code });
      expect(res.status).to.equal(400);
      const unknown = await call('POST', '/login/confirmcode', { email: 'stranger@example.test', token, code });
      expect(unknown.status).to.equal(400);
      // And the right address still works with it.
      const ok = await call('POST', '/login/confirmcode', { email: 'dave@example.test', token, code });
      expect(ok.status, ok.text).to.equal(200);
    });

    it('a pair mailed before the account’s email changed no longer works, not even at the new address (it ends)', async () => {
      const { token, code } = await requestReset('frank@example.test');
      const adminHeaders = bearer(await loginToken('admin@example.test', GOOD_PASSWORD));
      const moved = await t.request('PATCH', `/v1/iam/users/${frank.userId}`, { body: { email: 'frank.new@example.test' }, headers: adminHeaders });
      expect(moved.status, moved.text).to.equal(200);
      for (const email of ['frank.new@example.test', 'frank@example.test']) {
        const res = await call('POST', '/login/confirmcode', { email, token, code });
        expect(res.status, `${email}: ${res.text}`).to.equal(400);
      }
      // Back to the old address: the pair ended at its first refusal, it does not come back.
      const back = await t.request('PATCH', `/v1/iam/users/${frank.userId}`, { body: { email: 'frank@example.test' }, headers: adminHeaders });
      expect(back.status, back.text).to.equal(200);
      expect((await call('POST', '/login/confirmcode', { email: 'frank@example.test', token, code })).status).to.equal(400);
      // A pair mailed to the current address works.
      const fresh = await requestReset('frank@example.test');
      const ok = await call('POST', '/login/confirmcode', { email: 'frank@example.test', token: fresh.token, code: fresh.code });
      expect(ok.status, ok.text).to.equal(200);
    });

    it('a new resetrequest mails a new pair and leaves the earlier one usable (nobody’s request takes the owner’s code away)', async () => {
      const first = await requestReset('erin@example.test');
      const second = await requestReset('erin@example.test');
      expect(second.token).to.not.equal(first.token);
      const mixed = await call('POST', '/login/confirmcode', { email: 'erin@example.test', token: first.token, code: second.code });
      expect(mixed.status, 'one pair’s token with the other’s code').to.equal(400);
      const old = await call('POST', '/login/confirmcode', { email: 'erin@example.test', token: first.token, code: first.code });
      expect(old.status, old.text).to.equal(200);
      const current = await call('POST', '/login/confirmcode', { email: 'erin@example.test', token: second.token, code: second.code });
      expect(current.status, current.text).to.equal(200);
    });

    it('a wrong token burns nothing: only the mail’s reader, who has the token, can use up the code', async () => {
      const { token, code } = await requestReset('erin@example.test');
      for (let i = 0; i < 8; i++) {
        const res = await call('POST', '/login/confirmcode', { email: 'erin@example.test', token: `not-the-token-${i}`, code });
        expect(res.json.message).to.equal(RESET_REFUSED);
      }
      const ok = await call('POST', '/login/confirmcode', { email: 'erin@example.test', token, code });
      expect(ok.status, `the owner’s pair after 8 guesses without its token: ${ok.text}`).to.equal(200);
    });

    it('a pair expires after 10 minutes', async () => {
      const fresh = await requestReset('erin@example.test');
      clock.advance(599_000);
      const inTime = await call('POST', '/login/confirmcode', { email: 'erin@example.test', token: fresh.token, code: fresh.code });
      expect(inTime.status, `599 s after issue: ${inTime.text}`).to.equal(200);
      clock.advance(2_000);
      const late = await call('POST', '/login/resetpassword', { email: 'erin@example.test', token: fresh.token, code: fresh.code, password: 'Too-Late-36-Summer!' });
      expect(late.status, '601 s after issue').to.equal(400);
      expect(late.json.message).to.match(/expired/);

      const other = await requestReset('erin@example.test');
      clock.advance(601_000);
      const expired = await call('POST', '/login/confirmcode', { email: 'erin@example.test', token: other.token, code: other.code });
      expect(expired.status).to.equal(400);
      expect(expired.json.error).to.equal('Bad Request');
      expect(expired.json.message).to.match(/expired/);
      expect((await login('erin@example.test', 'Too-Late-36-Summer!')).status).to.equal(401);
      const still = await login('erin@example.test', GOOD_PASSWORD);
      expect(still.status).to.equal(200);
      expect(still.json.data.userid).to.equal(erin.userId);
    });

    it('five wrong codes burn the token; after that even the right code fails', async () => {
      const { token, code } = await requestReset('frank@example.test');
      const wrong = otherCode(code);
      const answers: string[] = [];
      for (let i = 0; i < 5; i++) {
        const res = await call('POST', '/login/confirmcode', { email: 'frank@example.test', token, code: wrong });
        expect(res.status).to.equal(400);
        answers.push(res.json.message);
      }
      // Every refusal reads the same: the answers tell nothing about the account or the count.
      expect(new Set(answers)).to.deep.equal(new Set([RESET_REFUSED]));

      const right = await call('POST', '/login/confirmcode', { email: 'frank@example.test', token, code });
      expect(right.status).to.equal(400);
      expect(right.json.message).to.equal(RESET_REFUSED);
      const reset = await call('POST', '/login/resetpassword', { email: 'frank@example.test', token, code, password: 'Burnt-Out-47-Winter!' });
      expect(reset.status).to.equal(400);
      expect((await login('frank@example.test', GOOD_PASSWORD)).status).to.equal(200);
    });

    it('wrong guesses sent at the same time cannot get past the five-attempt cap', async () => {
      const { token, code } = await requestReset('frank@example.test');
      const wrong = otherCode(code);
      const guess = () => call('POST', '/login/confirmcode', { email: 'frank@example.test', token, code: wrong });
      let answers: HttpResponse[];
      if (dialect.name === 'postgres') {
        // A busy database, made repeatable: a row lock held here delays every write to the pair
        // until all the guesses are in (plain reads are not blocked). Eight guesses fit in the pool.
        const knex = t.hangar.store.knex;
        const trx = await knex.transaction();
        let pending: Promise<HttpResponse[]> | undefined;
        try {
          await trx('password_reset_pairs').where({ userid: frank.userId }).forUpdate().first();
          pending = Promise.all(Array.from({ length: 8 }, guess));
          const deadline = Date.now() + 5000;
          while (Date.now() < deadline) {
            const waiting = await knex.raw(
              "select count(*)::int as n from pg_stat_activity where wait_event_type = 'Lock' and query ilike '%password_reset_pairs%'",
            );
            if (waiting.rows[0].n >= 8) break;
            await new Promise((resolve) => setTimeout(resolve, 50));
          }
        } finally {
          await trx.commit();
        }
        answers = await pending;
      } else {
        answers = await Promise.all(Array.from({ length: 20 }, guess));
      }
      expect(answers.every((a) => a.status === 400)).to.be.true;
      const right = await call('POST', '/login/confirmcode', { email: 'frank@example.test', token, code });
      expect(right.status, `the right code after ${answers.length} wrong ones: ${right.text}`).to.equal(400);
    });

    it('a weak new password is refused with every broken rule, and the reset can still be completed', async () => {
      const weak = 'abcpass';
      const strong = 'Second-Try-85-Harbor!';
      secrets.add(weak);
      secrets.add(strong);
      const { token, code } = await requestReset('frank@example.test');
      const confirm = await call('POST', '/login/confirmcode', { email: 'frank@example.test', token, code });
      expect(confirm.status, confirm.text).to.equal(200);

      const refused = await call('POST', '/login/resetpassword', { email: 'frank@example.test', token, code, password: weak });
      expect(refused.status).to.equal(400);
      expect(refused.json.error).to.equal('Bad Request');
      expect(refused.json.message).to.match(/^Password does not meet the policy/);
      const rules = refused.json.details.map((d: { path: string; message: string }) => `${d.path} ${d.message}`);
      expect(rules).to.have.members([
        'body.password must be at least 12 characters long',
        'body.password must contain at least 1 uppercase letter',
        'body.password must contain at least 1 number',
        'body.password must contain at least 1 symbol',
        'body.password must not contain sequential characters (like abc, 123 or 321)',
      ]);
      expect((await login('frank@example.test', weak)).status).to.equal(401);

      const done = await call('POST', '/login/resetpassword', { email: 'frank@example.test', token, code, password: strong });
      expect(done.status, done.text).to.equal(200);
      const fresh = await login('frank@example.test', strong);
      expect(fresh.status).to.equal(200);
      expect(fresh.json.data.userid).to.equal(frank.userId);
      expect((await login('frank@example.test', GOOD_PASSWORD)).status).to.equal(401);
    });
  });

  describe('POST /refreshtoken', () => {
    let gina: Credentials;
    before(async () => {
      const adminToken = await loginToken('admin@example.test', GOOD_PASSWORD);
      gina = await createUser(t, { ...admin, token: adminToken }, { username: 'gina', role: 'user', email: 'gina@example.test', name: 'Gina' });
    });

    it('needs a token', async () => {
      const res = await call('POST', '/refreshtoken');
      expect(res.status).to.equal(401);
      expect(res.json).to.include({ error: 'Unauthorized', message: 'Authentication required' });
    });

    it('refuses before the last 300 s, renews inside them with name and role re-read, refuses after expiry', async () => {
      const token = await loginToken('gina@example.test', GOOD_PASSWORD);
      const { iat, exp } = claimsOf(token);
      expect(exp - iat).to.equal(3600);
      const opensAt = new Date((exp - 300) * 1000).toISOString();

      clock.set((iat + 3600 - 301) * 1000);
      const early = await call('POST', '/refreshtoken', undefined, bearer(token));
      expect(early.status, early.text).to.equal(401);
      expect(early.json.error).to.equal('Unauthorized');
      expect(early.json.message).to.contain(opensAt);
      expect(early.json.message).to.contain('300 s');
      expect(early.json).to.not.have.property('token');

      await t.hangar.store.knex('users').where({ userid: gina.userId }).update({ role: 'auditor', name: 'Gina Renamed' });

      clock.set((iat + 3600 - 299) * 1000);
      const renewed = await call('POST', '/refreshtoken', undefined, bearer(token));
      expect(renewed.status, renewed.text).to.equal(200);
      issuedTokens.add(renewed.json.token);
      expect(renewed.json.data).to.deep.equal({ userid: gina.userId, name: 'Gina Renamed', role: 'auditor' });
      const claims = claimsOf(renewed.json.token);
      expect(claims).to.include({ userid: gina.userId, name: 'Gina Renamed', role: 'auditor' });
      expect(claims.iat).to.equal(iat + 3600 - 299);
      expect(claims.exp).to.equal(claims.iat + 3600);

      clock.set((exp + 1) * 1000);
      const expired = await call('POST', '/refreshtoken', undefined, bearer(token));
      expect(expired.status).to.equal(401);
      expect(expired.json).to.include({ error: 'Unauthorized', message: 'The token has expired' });
      // The renewed one outlives the old one.
      const ping = await call('GET', '/sampleprotected/ping', undefined, bearer(renewed.json.token));
      expect(ping.status, ping.text).to.equal(200);
      expect(ping.json.data.userid).to.equal(gina.userId);
    });
  });

  describe('no secret leaks', () => {
    it('no reset token, code, password, password hash or JWT secret in the logs; no token outside login answers', async () => {
      expect([...secrets].length, 'the flows above ran').to.be.greaterThan(10);
      expect(issuedTokens.size).to.be.greaterThan(5);
      const hashes: string[] = (await t.hangar.store.knex('users').select('password')).map((r: { password: string }) => r.password);
      expect(hashes.length).to.be.greaterThan(5);
      // The data dir's file (SQLite) or the store's sealed keyring (PostgreSQL, with the master key).
      const jwtSecret = (await loadJwtSecret(null, t.hangar.services.ca.keyring)).toString('base64');
      expect(jwtSecret.length).to.be.greaterThan(80);
      const jwtSecretBytes = Buffer.from(jwtSecret, 'base64');

      // The logs saw the flows (so the search below is not over nothing).
      const logText = t.logs.join('\n');
      expect(logText).to.contain('password reset mail sent');
      expect(logText).to.contain('password reset completed');
      expect(logText).to.contain('"/login/resetpassword"');
      expect(logText).to.contain('"/refreshtoken"');

      // Fields that are random or measured and could hold six digits in a row by chance.
      const scrubbed = t.logs.map((line) =>
        line.replace(/"(time|duration_ms|request_id)":("[^"]*"|[-0-9.e+]+)/g, '"$1":_'),
      );
      const forbidden: Array<[string, string]> = [
        ...[...secrets].map((s) => ['a reset secret or password', s] as [string, string]),
        ...hashes.map((h) => ['a password hash', h] as [string, string]),
        ...[...issuedTokens].map((tok) => ['an issued JWT', tok] as [string, string]),
        ['the JWT secret', jwtSecret],
        ['the JWT secret (hex)', jwtSecretBytes.toString('hex')],
        ['the JWT secret (base64url)', jwtSecretBytes.toString('base64url')],
      ];
      for (const line of scrubbed) {
        for (const [what, value] of forbidden) {
          expect(occurs(line, value), `${what} in the log line ${line}`).to.be.false;
        }
        expect(JWT_PATTERN.test(line), `a JWT in the log line ${line}`).to.be.false;
      }

      // Responses: JWTs only from the login answers; reset secrets, passwords and hashes never.
      expect(responses.length).to.be.greaterThan(50);
      const tokenAnswers = new Set(['login POST /login', 'login POST /refreshtoken', 'control POST /v1/iam/login']);
      for (const r of responses) {
        const where = `${r.listener} ${r.method} ${r.path}`;
        if (!tokenAnswers.has(where) || r.status !== 200) {
          expect(JWT_PATTERN.test(r.text), `a JWT in the answer to ${where}: ${r.text}`).to.be.false;
        }
        const body = r.text.replace(/"request_id":"[^"]*"/g, '');
        for (const [what, value] of forbidden) {
          if (what === 'an issued JWT') continue;
          expect(occurs(body, value), `${what} in the answer to ${where}: ${r.text}`).to.be.false;
        }
      }
    });
  });
});

describeEachDialect('login API: custom reset mail envelope', (dialect) => {
  const smtp = new TestSmtpServer();
  let t: TestHangar;
  before(async () => {
    const port = await smtp.start();
    t = await startHangar(dialect, {
      plugins: PLUGINS,
      overrides: {
        mail: { host: '127.0.0.1', port, starttls: 'off' },
        login: {
          identifier: 'email',
          MAIL_ENVELOPE: {
            from: 'Hangar Desk <desk@hangar.test>',
            subject: 'Your hangar reset code',
            template: 'Hi {{name}} ({{username}}),\n\ntoken: {{token}}\ncode: {{code}}\n\nvalid for {{expires_minutes}} minutes {{unknown}}\n',
          },
        },
      },
    });
    await bootstrapAdmin(t);
  });
  after(async () => {
    await t?.stop();
    await smtp.stop();
  });

  it('sends from the configured address with the configured subject and template, and the pair in it works', async () => {
    const res = await t.request('POST', '/login/resetrequest', { listener: 'login', body: { email: 'admin@example.test' } });
    expect(res.status).to.equal(200);
    const mail = await smtp.waitFor('admin@example.test');
    expect(mail.from).to.equal('desk@hangar.test');
    expect(mail.raw).to.match(/^From: Hangar Desk <desk@hangar\.test>\r?$/m);
    expect(mail.subject).to.equal('Your hangar reset code');
    expect(mail.text).to.contain('Hi Administrator (admin),');
    expect(mail.text).to.contain('valid for 10 minutes {{unknown}}');
    expect(mail.text).to.not.contain('someone asked to reset');
    const { token, code } = resetPairOf(mail);
    const confirmed = await t.request('POST', '/login/confirmcode', { listener: 'login', body: { email: 'admin@example.test', token, code } });
    expect(confirmed.status, confirmed.text).to.equal(200);
    const reset = await t.request('POST', '/login/resetpassword', {
      listener: 'login',
      body: { email: 'admin@example.test', token, code, password: 'Desk-Reset-39-Maple!' },
    });
    expect(reset.status, reset.text).to.equal(200);
    const login = await t.request('POST', '/login', { listener: 'login', body: { username: 'admin@example.test', password: 'Desk-Reset-39-Maple!' } });
    expect(login.status).to.equal(200);
    expect(login.json.data.role).to.equal('admin');
    for (const line of t.logs) {
      expect(occurs(line, token), `the reset token in ${line}`).to.be.false;
      expect(line).to.not.contain('Desk-Reset-39-Maple!');
    }
  });
});

describeEachDialect('login API: undeliverable reset mail', (dialect) => {
  let t: TestHangar;
  before(async () => {
    // A port nothing listens on: an SMTP server started and stopped again.
    const gone = new TestSmtpServer();
    const port = await gone.start();
    await gone.stop();
    t = await startHangar(dialect, {
      plugins: PLUGINS,
      overrides: { mail: { host: '127.0.0.1', port, starttls: 'off' }, login: { identifier: 'email' } },
    });
    await bootstrapAdmin(t);
  });
  after(() => t?.stop());

  it('answers as for any address, and logs the failure without token or code', async () => {
    const known = await t.request('POST', '/login/resetrequest', { listener: 'login', body: { email: 'admin@example.test' } });
    const unknown = await t.request('POST', '/login/resetrequest', { listener: 'login', body: { email: 'stranger@example.test' } });
    expect(known.status).to.equal(200);
    expect(known.text).to.equal(unknown.text);
    const deadline = Date.now() + 10_000;
    let failure: string | undefined;
    while (!failure && Date.now() < deadline) {
      failure = t.logs.find((line) => line.includes('password reset mail could not be sent'));
      if (!failure) await new Promise((resolve) => setTimeout(resolve, 100));
    }
    expect(failure, 'a log line about the failed mail').to.be.a('string');
    const entry = JSON.parse(failure!);
    expect(entry.level).to.equal('error');
    expect(Object.keys(entry).sort()).to.deep.equal(['err', 'level', 'msg', 'service', 'time', 'user_id']);
    expect(entry.err.message).to.match(/ECONNREFUSED/);
    expect(failure).to.not.match(/token|code/i);
  });
});

describeEachDialect('login API with the default configuration: the username field takes an email or a username', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  let bob: Credentials;
  const login = (username: string, password: string) => t.request('POST', '/login', { listener: 'login', body: { username, password } });
  before(async () => {
    t = await startHangar(dialect, { plugins: PLUGINS });
    admin = await bootstrapAdmin(t);
    bob = await createUser(t, admin, { username: 'bob', role: 'user', email: 'bob@example.test' });
  });
  after(() => t?.stop());

  it('logs in the bootstrap admin, who has no email, by username; a user by email (any case) or by username', async () => {
    const adminLogin = await login(admin.username, admin.password);
    expect(adminLogin.status, adminLogin.text).to.equal(200);
    expect(adminLogin.json.data).to.include({ userid: admin.userId, role: 'admin' });
    for (const identifier of ['bob@example.test', 'BOB@example.TEST', 'bob']) {
      const res = await login(identifier, GOOD_PASSWORD);
      expect(res.status, `${identifier}: ${res.text}`).to.equal(200);
      expect(res.json.data.userid).to.equal(bob.userId);
    }
    expect((await login('Bob', GOOD_PASSWORD)).status, 'usernames compare exactly').to.equal(401);
    expect((await login('bob', `${GOOD_PASSWORD}x`)).status).to.equal(401);
  });
});

describeEachDialect('login API: a mail server that does not answer is reported at start-up', (dialect) => {
  it('logs a warning naming mail.host when nothing answers there, and none when an SMTP server does', async function () {
    this.timeout(30_000);
    const closed = await new Promise<number>((resolve) => {
      const probe = net.createServer().listen(0, '127.0.0.1', () => {
        const { port } = probe.address() as net.AddressInfo;
        probe.close(() => resolve(port));
      });
    });
    const smtp = new TestSmtpServer();
    const smtpPort = await smtp.start();
    const down = await startHangar(dialect, { plugins: PLUGINS, overrides: { mail: { host: '127.0.0.1', port: closed, starttls: 'off' } } });
    const up = await startHangar(dialect, { plugins: PLUGINS, overrides: { mail: { host: '127.0.0.1', port: smtpPort, starttls: 'off' } } });
    try {
      const warning = `mail: 127.0.0.1:${closed} does not answer, so password reset mails cannot be sent`;
      await waitFor(() => down.logs.some((line) => line.includes(warning)), { timeoutMs: 15_000, what: 'the mail warning' });
      await new Promise((resolve) => setTimeout(resolve, 1000));
      expect(up.logs.filter((line) => line.includes('does not answer, so password reset mails'))).to.deep.equal([]);
    } finally {
      await down.stop();
      await up.stop();
      await smtp.stop();
    }
  });
});
