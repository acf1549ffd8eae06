import { expect } from 'chai';
import { ManualClock } from '../../../core/clock.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, createUser, GOOD_PASSWORD, type Credentials } from '../../support/identity.js';

/** The cookie pair (name=value) of a Set-Cookie header. */
const cookiePair = (setCookie: string | string[] | undefined) => String(Array.isArray(setCookie) ? setCookie[0] : setCookie).split(';')[0]!;

describeEachDialect('dashboard sessions (cookie + CSRF) and the first-run check', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  const clock = new ManualClock(Date.now());
  const login = async (username: string, password: string) => {
    const res = await t.request('POST', '/v1/iam/session', { body: { username, password } });
    expect(res.status, res.text).to.equal(201);
    return { cookie: cookiePair(res.headers['set-cookie']), csrf: res.json.data.csrf_token as string, res };
  };

  before(async () => {
    t = await startHangar(dialect, { plugins: ['system', 'iam', 'nodes'], clock, overrides: { iam: { session_lifetime_seconds: 3600 } } });
  });
  after(() => t?.stop());

  it('says whether hangar is bootstrapped, and refuses a bootstrap posted by another site', async () => {
    const before = await t.request('GET', '/v1/bootstrap');
    expect(before.json.data).to.deep.equal({ bootstrapped: false, from_loopback: true, sso: false });
    const foreign = await t.request('POST', '/v1/bootstrap', { body: {}, headers: { origin: 'https://evil.example' } });
    expect(foreign.status).to.equal(403);
    expect(foreign.json.message).to.contain('own dashboard only');
    expect(foreign.text, 'the Origin sent is not repeated').not.to.contain('evil.example');
    admin = await bootstrapAdmin(t);
    expect((await t.request('GET', '/v1/bootstrap')).json.data.bootstrapped).to.equal(true);
  });

  it('logs in with an HttpOnly, Secure, SameSite=Strict cookie whose value is stored only hashed', async () => {
    const { res, cookie, csrf } = await login(admin.username, admin.password);
    const header = String(res.headers['set-cookie']);
    expect(header).to.match(/^hangar_session=[\w-]{43}; Path=\/; HttpOnly; Secure; SameSite=Strict; Max-Age=3600$/);
    expect(res.json.data.user.username).to.equal(admin.username);
    expect(csrf).to.match(/^[\w-]{43}$/);
    const stored = JSON.stringify(await t.hangar.services.db.knex('iam_sessions').select());
    expect(stored).not.to.contain(cookie.split('=')[1]);
    const me = await t.request('GET', '/v1/iam/session', { headers: { cookie } });
    expect(me.status).to.equal(200);
    expect(me.json.data).to.include({ csrf_token: csrf });
    expect((await t.request('GET', '/v1/nodes', { headers: { cookie } })).status).to.equal(200);
    expect((await t.request('POST', '/v1/iam/session', { body: { username: admin.username, password: 'Wrong-horse-77-battery!' } })).status).to.equal(401);
  });

  it('needs the CSRF token on writes, and the page’s own origin when the browser names one', async () => {
    const { cookie, csrf } = await login(admin.username, admin.password);
    const bare = await t.request('POST', '/v1/nodes', { body: { name: 'no-csrf' }, headers: { cookie } });
    expect(bare.status).to.equal(401);
    expect(bare.json.message).to.contain('X-CSRF-Token');
    expect((await t.request('POST', '/v1/nodes', { body: { name: 'bad-csrf' }, headers: { cookie, 'x-csrf-token': 'x'.repeat(43) } })).status).to.equal(401);
    const other = await login(admin.username, admin.password);
    expect((await t.request('POST', '/v1/nodes', { body: { name: 'csrf-of-another-session' }, headers: { cookie, 'x-csrf-token': other.csrf } })).status).to.equal(401);
    const foreign = await t.request('POST', '/v1/nodes', { body: { name: 'foreign' }, headers: { cookie, 'x-csrf-token': csrf, origin: 'https://evil.example' } });
    expect(foreign.status).to.equal(401);
    expect(foreign.json.message).to.contain('origin');
    expect(foreign.text, 'the Origin sent is not repeated').not.to.contain('evil.example');
    const origin = t.url;
    const ok = await t.request('POST', '/v1/nodes', { body: { name: 'with-csrf' }, headers: { cookie, 'x-csrf-token': csrf, origin } });
    expect(ok.status, ok.text).to.equal(201);
    const list = (await t.request('GET', '/v1/nodes', { headers: bearer(admin.token) })).json.data.map((n: any) => n.name);
    expect(list).to.include('with-csrf').and.not.include.members(['no-csrf', 'bad-csrf', 'foreign', 'csrf-of-another-session']);
  });

  it('ends at logout, at expiry, and when the password changes; a user session gets a user’s rights', async () => {
    const a = await login(admin.username, admin.password);
    const out = await t.request('DELETE', '/v1/iam/session', { headers: { cookie: a.cookie, 'x-csrf-token': a.csrf } });
    expect(out.status).to.equal(200);
    expect(String(out.headers['set-cookie'])).to.match(/^hangar_session=; .*Max-Age=0$/);
    expect((await t.request('GET', '/v1/nodes', { headers: { cookie: a.cookie } })).status).to.equal(401);

    const b = await login(admin.username, admin.password);
    clock.advance(3601_000);
    const expired = await t.request('GET', '/v1/nodes', { headers: { cookie: b.cookie } });
    expect(expired.status).to.equal(401);
    expect(expired.json.message).to.contain('expired');

    const token = (await t.request('POST', '/v1/iam/login', { body: { username: admin.username, password: admin.password } })).json.data.token;
    const user = await createUser(t, { ...admin, token }, { username: 'dash-user', role: 'user' });
    const c = await login('dash-user', GOOD_PASSWORD);
    expect((await t.request('POST', '/v1/nodes', { body: { name: 'by-user' }, headers: { cookie: c.cookie, 'x-csrf-token': c.csrf } })).status).to.equal(403);
    const changed = await t.request('POST', `/v1/iam/users/${user.userId}/password`, { body: { password: 'Another-Horse-98-Staple!', current_password: admin.password }, headers: bearer(token) });
    expect(changed.status, changed.text).to.equal(200);
    expect((await t.request('GET', '/v1/nodes', { headers: { cookie: c.cookie } })).status).to.equal(401);
  });
});
