import { expect } from 'chai';
import { generateKeyPairSync } from 'node:crypto';
import { SignJWT, decodeJwt, importJWK } from 'jose';
import { describeEachDialect, TestDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, type Credentials } from '../../support/identity.js';
import { Browserish, cookiePair, SSO_BINDING_COOKIE, ssoLogin as logIn, startHangarWithProvider, type TestProvider } from '../../support/oidc-provider.js';

/**
 * Single sign-on against a real OpenID provider (the certified oidc-provider package, in this
 * process on loopback): the dashboard's authorization code flow with PKCE through hangar's own
 * routes, the provider's login page answered as a browser would; groups mapped to the
 * installation role and to project roles at every login; ID tokens wrong in one way each refused.
 */
describeEachDialect('single sign-on (OpenID Connect) against a real provider', (dialect) => {
  let idp: TestProvider;
  let t: TestHangar;
  let admin: Credentials;
  let callback: string;

  before(async function () {
    this.timeout(30_000);
    ({ idp, t } = await startHangarWithProvider(dialect, {
      plugins: ['system', 'iam', 'projects', 'audit'],
      oidc: {
        roles: [
          { group: 'ops', role: 'admin' },
          { group: 'audit', role: 'auditor' },
        ],
        projects: [
          { group: 'team-a-dev', project: 'team-a', role: 'deployer' },
          { group: 'team-a-leads', project: 'team-a', role: 'owner' },
        ],
      },
    }));
    callback = `${t.url}/v1/auth/oidc/callback`;
    admin = await bootstrapAdmin(t);
    const made = await t.request('POST', '/v1/projects', { body: { name: 'team-a' }, headers: bearer(admin.token) });
    expect(made.status, made.text).to.equal(201);
    expect((await t.request('POST', '/v1/projects', { body: { name: 'team-b' }, headers: bearer(admin.token) })).status).to.equal(201);
  });
  after(async () => {
    await t?.stop();
    await idp?.stop();
  });

  /** The whole dashboard login (start at hangar, log in at the provider's page, back to hangar's callback), checking what the start sent. */
  async function ssoLogin(login: string) {
    const login_ = await logIn(t, login);
    expect(String(login_.start.headers['set-cookie'])).to.match(new RegExp(`${SSO_BINDING_COOKIE}=[\\w-]+; Path=/; HttpOnly; Secure; SameSite=Lax; Max-Age=600`));
    const location = new URL(String(login_.start.headers.location));
    expect(location.origin).to.equal(idp.issuer);
    expect(location.searchParams.get('code_challenge_method')).to.equal('S256');
    expect(location.searchParams.get('redirect_uri')).to.equal(callback);
    expect(location.searchParams.get('nonce')).to.match(/^[\w-]{20,}$/);
    return login_;
  }

  /** An ID token of the provider's with its claims changed, re-signed (with the provider's own key unless `key`). */
  const resign = async (idToken: string, change: (claims: Record<string, unknown>) => void, key?: Record<string, unknown>) => {
    const claims = decodeJwt(idToken) as Record<string, unknown>;
    change(claims);
    const jwk = key ?? idp.signingJwk;
    return new SignJWT(claims as never).setProtectedHeader({ alg: 'RS256', kid: String(jwk.kid) }).sign(await importJWK(jwk as never, 'RS256'));
  };

  const whoami = async (cookie: string) => {
    const res = await t.request('GET', '/v1/iam/whoami', { headers: { cookie } });
    expect(res.status, res.text).to.equal(200);
    return res.json.data;
  };
  const projectRoles = async (cookie: string) =>
    Object.fromEntries(((await t.request('GET', '/v1/projects', { headers: { cookie } })).json.data as Array<{ name: string; role: string }>).map((p) => [p.name, p.role]));

  it('logs a user of the ops group in as an admin, with a dashboard session, and records it in the audit log', async function () {
    this.timeout(20_000);
    idp.accounts.set('olga', { groups: ['ops'], name: 'Olga Ops' });
    const { res, session } = await ssoLogin('olga');
    expect(res.status, res.text).to.equal(302);
    expect(res.headers.location).to.equal('/ui/');
    expect(String(res.headers['set-cookie'])).to.match(/hangar_session=[\w-]{43}; Path=\/; HttpOnly; Secure; SameSite=Strict/);
    const me = await whoami(session!);
    expect(me.user.username).to.equal('olga');
    expect(me.user.name).to.equal('Olga Ops');
    expect(me.role).to.equal('admin');
    expect(me.credential.kind).to.equal('session');
    const user = await t.request('GET', `/v1/iam/users/${me.user.id}`, { headers: bearer(admin.token) });
    expect(user.json.data.email, 'no address to reset a password by').to.equal(null);
    // No password logs an SSO user in.
    expect((await t.request('POST', '/v1/iam/login', { body: { username: 'olga', password: '!sso' } })).status).to.equal(401);
    const audit = await t.request('GET', '/v1/audit?limit=1000', { headers: bearer(admin.token) });
    const entry = (audit.json.data as any[]).find((e) => e.route === '/v1/auth/oidc/callback' && e.status === 302);
    expect(entry, JSON.stringify(audit.json.data.slice(-3))).to.include({ principal_id: me.user.id });
    expect(JSON.stringify(audit.json.data)).not.to.contain(idp.clientSecret);
    expect(t.logs.join('')).not.to.contain(idp.clientSecret);
  });

  it('gives a group mapped to a project role that role there and nothing else, and follows the groups at every login', async function () {
    this.timeout(30_000);
    idp.accounts.set('dana', { groups: ['team-a-dev', 'unmapped'] });
    const first = await ssoLogin('dana');
    expect(first.res.status, first.res.text).to.equal(302);
    expect((await whoami(first.session!)).role, 'default_role').to.equal('user');
    expect(await projectRoles(first.session!)).to.deep.equal({ 'team-a': 'deployer' });

    // Promoted at the provider: owner of team-a and auditor of the installation.
    idp.accounts.set('dana', { groups: ['team-a-dev', 'team-a-leads', 'audit'] });
    const second = await ssoLogin('dana');
    expect((await whoami(second.session!)).role).to.equal('auditor');
    const members = await t.request('GET', '/v1/projects/team-a/members', { headers: bearer(admin.token) });
    expect((members.json.data as any[]).find((m) => m.username === 'dana')?.role).to.equal('owner');
    // The earlier session ended with the role change.
    expect((await t.request('GET', '/v1/iam/whoami', { headers: { cookie: first.session! } })).status).to.equal(401);

    // Out of every group: back to user, and no longer a member of team-a.
    idp.accounts.set('dana', { groups: [] });
    const third = await ssoLogin('dana');
    expect((await whoami(third.session!)).role).to.equal('user');
    expect(await projectRoles(third.session!)).to.deep.equal({});
    const users = (await t.request('GET', '/v1/iam/users', { headers: bearer(admin.token) })).json.data as any[];
    expect(users.filter((u) => u.username === 'dana')).to.have.length(1);
  });

  it('takes the groups from userinfo when the ID token has none, and logs nobody in (502) when userinfo fails then', async function () {
    this.timeout(20_000);
    idp.accounts.set('uma', { groups: ['ops'] });
    idp.tamper = (tok) => resign(tok, (c) => delete c.groups);
    try {
      const first = await ssoLogin('uma');
      expect(first.res.status, first.res.text).to.equal(302);
      expect((await whoami(first.session!)).role, 'the groups as userinfo answered them').to.equal('admin');
      idp.failUserinfo = true;
      const failed = await ssoLogin('uma');
      expect(failed.res.status, failed.res.text).to.equal(502);
      expect(failed.res.json.message).to.match(/^The OpenID provider did not answer its userinfo request, where the groups \(groups\) come from; nobody was logged in/);
      expect(failed.res.headers['set-cookie'] ?? '').not.to.contain('hangar_session');
      expect((await whoami(first.session!)).role, 'not demoted for want of groups').to.equal('admin');
    } finally {
      idp.tamper = null;
      idp.failUserinfo = false;
    }
  });

  it('never hands a local user to an SSO login of the same name', async function () {
    this.timeout(20_000);
    const local = await t.request('POST', '/v1/iam/users', { body: { username: 'lars', password: 'Correct-Horse-97-Battery!', role: 'user' }, headers: bearer(admin.token) });
    expect(local.status).to.equal(201);
    idp.accounts.set('lars', { groups: ['ops'] });
    const { res } = await ssoLogin('lars');
    expect(res.status).to.equal(409);
    expect(res.json.message).to.contain('never takes over a local user');
    expect(res.headers['set-cookie'] ?? '').not.to.contain('hangar_session');
    expect((await t.request('GET', `/v1/iam/users/${local.json.data.id}`, { headers: bearer(admin.token) })).json.data.role).to.equal('user');
  });

  it('refuses a replayed state, a callback without the browser’s cookie, and a state it never issued', async function () {
    this.timeout(20_000);
    idp.accounts.set('rita', { groups: [] });
    const { res, pathAndQuery, binding } = await ssoLogin('rita');
    expect(res.status, res.text).to.equal(302);
    const replay = await t.request('GET', pathAndQuery, { headers: { cookie: binding } });
    expect(replay.status).to.equal(400);
    expect(replay.json.message).to.contain('used already or expired');

    // A callback URL sent to another browser (no binding cookie) logs nobody in.
    const start = await t.request('GET', '/v1/auth/oidc/start');
    const fresh = await new Browserish().logInAtProvider(String(start.headers.location), 'rita', callback);
    for (const cookie of [undefined, binding]) {
      const foreign = await t.request('GET', fresh.slice(t.url.length), cookie ? { headers: { cookie } } : {});
      expect(foreign.status).to.equal(400);
      expect(foreign.json.message).to.contain('another browser');
      expect(foreign.headers['set-cookie'] ?? '').not.to.contain('hangar_session');
    }
    // Whoever learnt the state burnt nothing: the browser that began the login finishes it.
    const own = await t.request('GET', fresh.slice(t.url.length), { headers: { cookie: cookiePair(start.headers['set-cookie'], SSO_BINDING_COOKIE)! } });
    expect(own.status, own.text).to.equal(302);
    expect(String(own.headers['set-cookie'])).to.contain('hangar_session=');
    const forged = await t.request('GET', '/v1/auth/oidc/callback?state=not-one-hangar-issued&code=x', { headers: { cookie: binding } });
    expect(forged.status).to.equal(400);
    expect(forged.json.message).to.contain('unknown');
    for (const r of [replay, forged]) expect(r.text).not.to.match(/code=|id_token|eyJ/);
  });

  describe('ID tokens wrong in one way each are refused, and nobody is created', () => {
    const cases: Array<[string, (token: string) => Promise<string>, RegExp]> = [
      ['forged (signed by another key under the provider’s key id)', (tok) => resign(tok, () => undefined, { ...generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey.export({ format: 'jwk' }), kid: 'test-signing-key' }), /signature/],
      ['expired', (tok) => resign(tok, (c) => ((c.exp = Math.floor(Date.now() / 1000) - 3600), (c.iat = Math.floor(Date.now() / 1000) - 7200))), /expired/],
      ['for another client (audience)', (tok) => resign(tok, (c) => ((c.aud = 'another-client'), (c.azp = 'another-client'))), /audience/],
      ['with another nonce', (tok) => resign(tok, (c) => (c.nonce = 'not-the-nonce-hangar-sent')), /nonce/],
    ];
    for (const [what, tamper, reason] of cases) {
      it(`refuses an ID token ${what}`, async function () {
        this.timeout(20_000);
        const login = `eve-${what.split(' ')[0]!.replace(/\W/g, '')}`.slice(0, 20);
        idp.accounts.set(login, { groups: ['ops'] });
        idp.tamper = tamper;
        try {
          const { res } = await ssoLogin(login);
          expect(res.status, res.text).to.equal(401);
          expect(res.json.message).to.match(reason);
          expect(res.json.message).to.contain('nobody was logged in');
          expect(res.headers['set-cookie'] ?? '').not.to.contain('hangar_session');
          expect(res.text).not.to.contain('eyJ');
        } finally {
          idp.tamper = null;
        }
        const users = (await t.request('GET', '/v1/iam/users', { headers: bearer(admin.token) })).json.data as any[];
        expect(users.map((u) => u.username)).not.to.include(login);
      });
    }
  });

  it('answers 404 on every SSO route when iam.oidc is not configured', async function () {
    this.timeout(20_000);
    const plain = await startHangar(dialect, { plugins: ['system', 'iam'] });
    try {
      expect((await plain.request('GET', '/v1/bootstrap')).json.data.sso).to.equal(false);
      for (const [method, p, body] of [['GET', '/v1/auth/oidc/start'], ['POST', '/v1/auth/oidc/device', {}], ['POST', '/v1/auth/oidc/device/token', { device_request: 'x' }]] as const) {
        const res = await plain.request(method, p, body ? { body } : {});
        expect(res.status, p).to.equal(404);
        expect(res.json.message).to.contain('iam.oidc');
      }
    } finally {
      await plain.stop();
    }
    expect((await t.request('GET', '/v1/bootstrap')).json.data.sso).to.equal(true);
  });
});

/** The configuration is checked at start, the same on either store: once. */
describe('single sign-on: a bad iam.oidc [sqlite]', () => {
  const dialect = new TestDialect('sqlite');
  after(() => dialect.cleanup());

  it('stops the start on a bad iam.oidc, naming the key', async () => {
    const base = { issuer: 'http://127.0.0.1:9/', client_id: 'c', client_secret_file: '/nonexistent/secret' };
    const refused = async (oidc: Record<string, unknown>) => {
      try {
        const started = await startHangar(dialect, { plugins: ['system', 'iam'], overrides: { iam: { oidc } } });
        await started.stop();
      } catch (err) {
        return (err as Error).message;
      }
      return 'started';
    };
    expect(await refused(base)).to.match(/iam\.oidc\.issuer must be an https URL.*allow_http/);
    expect(await refused({ ...base, allow_http: true })).to.match(/iam\.oidc\.client_secret_file: cannot read \/nonexistent\/secret: ENOENT/);
    expect(await refused({ ...base, issuer: 'not a url' })).to.contain('iam.oidc.issuer');
    expect(await refused({ ...base, allow_http: true, roles: [{ group: 'x', role: 'root' }] })).to.match(/^invalid configuration: iam\.oidc\.roles\W+0\W+role/);
  });
});
