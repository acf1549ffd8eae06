import { expect } from 'chai';
import { ManualClock } from '../../../core/clock.js';
import type { HttpResponse } from '../../../core/http/client.js';
import { RESET_REFUSED } from '../../../plugins/login/resets.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bootstrapAdmin, createUser, GOOD_PASSWORD } from '../../support/identity.js';

const PLUGINS = ['system', 'iam', 'login'];
const WRONG = 'Wrong-Password-97!';

/**
 * Small limits so that a test reaches them; two control planes share them through the store. Every
 * request here comes from one address (127.0.0.1): the limits per account are those of that
 * address (test/security/lockouts.test.ts has the attacks from several addresses).
 */
const LIMITS = {
  iam: { login_failures_per_account_and_address: { max: 3, window_seconds: 60 }, login_failures_per_address: { max: 8, window_seconds: 60 } },
  login: {
    identifier: 'username',
    reset_requests_per_account_and_address: { max: 2, window_seconds: 3600 },
    reset_requests_per_address: { max: 50, window_seconds: 3600 },
    reset_failures_per_address: { max: 4, window_seconds: 900 },
  },
};

const expect429 = (res: HttpResponse, what: RegExp) => {
  expect(res.status, res.text).to.equal(429);
  expect(res.json.error).to.equal('Too Many Requests');
  expect(res.json.message).to.match(what);
  const wait = Number(res.headers['retry-after']);
  expect(wait).to.be.greaterThan(0);
  return wait;
};

describeEachDialect('rate limits and lockouts, shared by two control planes on one store', (dialect) => {
  const clock = new ManualClock(Math.floor(Date.now() / 1000) * 1000);
  let a: TestHangar;
  let b: TestHangar;
  before(async () => {
    const storage = dialect.freshStorage();
    a = await startHangar(dialect, { plugins: PLUGINS, clock, storage, overrides: LIMITS });
    b = await startHangar(dialect, { plugins: PLUGINS, clock, storage, overrides: LIMITS });
    const admin = await bootstrapAdmin(a);
    for (const username of ['alice', 'bob', 'carol']) await createUser(a, admin, { username, email: `${username}@example.test` });
  });
  after(async () => {
    await a?.stop();
    await b?.stop();
  });
  // Each test starts with fresh windows.
  beforeEach(() => clock.advance(3_600_000));

  const controlLogin = (t: TestHangar, username: string, password: string) => t.request('POST', '/v1/iam/login', { body: { username, password } });
  const loginApi = (t: TestHangar, username: string, password: string) => t.request('POST', '/login', { listener: 'login', body: { username, password } });

  it('locks an account after its failed logins, on both control planes and both login routes, the right password too, until the window ends', async () => {
    expect((await controlLogin(a, 'alice', WRONG)).status).to.equal(401);
    expect((await loginApi(b, 'alice', WRONG)).status).to.equal(401);
    expect((await controlLogin(b, 'alice', WRONG)).status).to.equal(401);
    const wait = expect429(await controlLogin(a, 'alice', GOOD_PASSWORD), /^Too many failed logins; try again in \d+ s$/);
    expect(wait).to.be.at.most(60);
    expect429(await loginApi(b, 'alice', GOOD_PASSWORD), /failed logins/);
    // Another account from the same address is not locked by alice's failures.
    expect((await controlLogin(b, 'bob', GOOD_PASSWORD)).status).to.equal(200);
    clock.advance(wait * 1000);
    expect((await controlLogin(a, 'alice', GOOD_PASSWORD)).status).to.equal(200);
  });

  it('treats an unknown account like a known one, and a success clears the count', async () => {
    for (let i = 0; i < 3; i++) expect((await controlLogin(a, 'nobody', WRONG)).status).to.equal(401);
    expect429(await controlLogin(b, 'nobody', WRONG), /failed logins/);
    for (let i = 0; i < 2; i++) expect((await controlLogin(a, 'carol', WRONG)).status).to.equal(401);
    expect((await controlLogin(b, 'carol', GOOD_PASSWORD)).status).to.equal(200);
    for (let i = 0; i < 2; i++) expect((await controlLogin(a, 'carol', WRONG)).status).to.equal(401);
    expect((await controlLogin(a, 'carol', GOOD_PASSWORD)).status, 'two failures after a success are under the limit').to.equal(200);
  });

  it('refuses an address that failed too often, whatever account it tries', async () => {
    for (let i = 0; i < 8; i++) expect((await (i % 2 ? controlLogin : loginApi)(i % 2 ? a : b, `guess${i}`, WRONG)).status).to.equal(401);
    expect429(await controlLogin(a, 'bob', GOOD_PASSWORD), /failed logins/);
    expect429(await loginApi(b, 'carol', GOOD_PASSWORD), /failed logins/);
  });

  it('limits reset requests per email address, known or not (each one mails the owner and replaces the code)', async () => {
    for (const email of ['alice@example.test', 'stranger@example.test']) {
      for (let i = 0; i < 2; i++) {
        const res = await (i ? b : a).request('POST', '/login/resetrequest', { listener: 'login', body: { email } });
        expect(res.status, res.text).to.equal(200);
      }
      expect429(await a.request('POST', '/login/resetrequest', { listener: 'login', body: { email: email.toUpperCase() } }), /^Too many password reset requests/);
    }
  });

  it('answers a wrong code for a known address exactly as for an unknown one, and limits refused codes per address', async () => {
    const known = await a.request('POST', '/login/resetrequest', { listener: 'login', body: { email: 'bob@example.test' } });
    expect(known.status).to.equal(200);
    const pair = { token: 'x'.repeat(32), code: '123456' };
    const answers: HttpResponse[] = [];
    for (const email of ['bob@example.test', 'stranger@example.test', 'carol@example.test']) {
      answers.push(await (answers.length % 2 ? b : a).request('POST', '/login/confirmcode', { listener: 'login', body: { email, ...pair } }));
    }
    answers.push(await a.request('POST', '/login/resetpassword', { listener: 'login', body: { email: 'bob@example.test', ...pair, password: GOOD_PASSWORD } }));
    const shapes = answers.map((r) => ({ status: r.status, error: r.json.error, message: r.json.message, details: r.json.details }));
    expect(shapes).to.deep.equal(Array(4).fill({ status: 400, error: 'Bad Request', message: RESET_REFUSED, details: undefined }));
    expect429(await b.request('POST', '/login/confirmcode', { listener: 'login', body: { email: 'bob@example.test', ...pair } }), /^Too many refused reset codes/);
  });
});

describeEachDialect('client address behind a trusted proxy', (dialect) => {
  let t: TestHangar;
  before(async () => {
    t = await startHangar(dialect, {
      plugins: PLUGINS,
      overrides: { ...LIMITS, api: { trusted_proxies: ['127.0.0.1', '::1'] }, iam: { login_failures_per_address: { max: 2, window_seconds: 60 } } },
    });
    await bootstrapAdmin(t);
  });
  after(() => t?.stop());

  const from = (address: string, username: string) =>
    t.request('POST', '/v1/iam/login', { body: { username, password: WRONG }, headers: { 'x-forwarded-for': `198.51.100.1, ${address}` } });

  it('counts per forwarded client address, and logs it', async () => {
    expect((await from('203.0.113.7', 'u1')).status).to.equal(401);
    expect((await from('203.0.113.7', 'u2')).status).to.equal(401);
    expect((await from('203.0.113.7', 'u3')).status).to.equal(429);
    expect((await from('203.0.113.8', 'u4')).status, 'another client behind the same proxy').to.equal(401);
    const lines = t.logs.map((l) => JSON.parse(l)).filter((l) => l.msg === 'request' && l.path === '/v1/iam/login');
    expect(lines.map((l) => l.ip)).to.include.members(['203.0.113.7', '203.0.113.8']);
  });
});
