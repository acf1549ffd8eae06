import { expect } from 'chai';
import { describeEachDialect } from '../../support/dialects.js';
import type { TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, signed, type Credentials } from '../../support/identity.js';
import { ssoLogin, startHangarWithProvider, type TestProvider } from '../../support/oidc-provider.js';

/**
 * A user the provider takes out of its groups loses what hangar gave it at its next login attempt,
 * not later: its keys, sessions and managed memberships go and its role drops (default_role null);
 * and an SSO user's own API keys live no longer than a CLI login's, so one made before the removal
 * does not outlive it for long.
 */
describeEachDialect('single sign-on: a user removed at the provider', (dialect) => {
  let idp: TestProvider;
  let t: TestHangar;
  let admin: Credentials;

  before(async function () {
    this.timeout(30_000);
    ({ idp, t } = await startHangarWithProvider(dialect, {
      plugins: ['system', 'iam', 'projects', 'audit'],
      oidc: {
        roles: [{ group: 'ops', role: 'admin' }],
        default_role: null,
        projects: [{ group: 'ops', project: 'team-a', role: 'owner' }],
        cli_key_lifetime_hours: 12,
      },
    }));
    admin = await bootstrapAdmin(t);
    expect((await t.request('POST', '/v1/projects', { body: { name: 'team-a' }, headers: bearer(admin.token) })).status).to.equal(201);
  });
  after(async () => {
    await t?.stop();
    await idp?.stop();
  });

  it('takes away the keys, sessions, memberships and role of a user whose group the provider removed, at its next login, and gives them back when the group is back', async function () {
    this.timeout(30_000);
    idp.accounts.set('rick', { groups: ['ops'] });
    const first = await ssoLogin(t, 'rick');
    expect(first.res.status, first.res.text).to.equal(302);
    const session = first.session!;
    const me = await t.request('GET', '/v1/iam/session', { headers: { cookie: session } });
    expect(me.json.data.user.role).to.equal('admin');
    const id = me.json.data.user.id as string;
    const write = { cookie: session, 'x-csrf-token': me.json.data.csrf_token as string };

    // Its own key: capped at the SSO lifetime (a longer one is refused naming the limit; none asked: the cap).
    const tooLong = await t.request('POST', `/v1/iam/users/${id}/keys`, { body: { expires_in: '30d' }, headers: write });
    expect(tooLong.status, tooLong.text).to.equal(400);
    expect(tooLong.json.message).to.equal('Validation failed: body.expires_in: is later than the longest lifetime allowed here, 12 hours for a single sign-on user (iam.oidc.cli_key_lifetime_hours)');
    const made = await t.request('POST', `/v1/iam/users/${id}/keys`, { body: { description: 'mine' }, headers: write });
    expect(made.status, made.text).to.equal(201);
    const hours = (Date.parse(made.json.data.expires_at) - Date.now()) / 3600_000;
    expect(hours).to.be.within(11.9, 12);
    const key = { accessKeyId: made.json.data.access_key_id as string, secretAccessKey: made.json.data.secret_access_key as string };
    expect((await signed(t, key, 'GET', '/v1/iam/whoami')).json.data.role).to.equal('admin');
    const members = async () => ((await t.request('GET', '/v1/projects/team-a/members', { headers: bearer(admin.token) })).json.data as Array<{ username: string; role: string }>).filter((m) => m.username === 'rick');
    expect((await members()).map((m) => m.role)).to.deep.equal(['owner']);

    // Removed from ops at the provider: the next login is refused, and everything it held goes with it.
    idp.accounts.set('rick', { groups: [] });
    const refused = await ssoLogin(t, 'rick');
    expect(refused.res.status, refused.res.text).to.equal(403);
    expect(refused.session).to.equal(undefined);
    const oldSession = await t.request('GET', '/v1/iam/whoami', { headers: { cookie: session } });
    expect(oldSession.status, oldSession.text).to.equal(401);
    const oldKey = await signed(t, key, 'GET', '/v1/iam/whoami');
    expect(oldKey.status, oldKey.text).to.equal(401);
    const listed = (await t.request('GET', '/v1/iam/users', { headers: bearer(admin.token) })).json.data as Array<{ id: string; role: string; deleted_at: string | null }>;
    expect(listed.find((u) => u.id === id)).to.include({ role: 'user', deleted_at: null });
    expect((await t.request('GET', `/v1/iam/users/${id}/keys`, { headers: bearer(admin.token) })).json.data).to.deep.equal([]);
    expect(await members()).to.deep.equal([]);

    // Back in ops: the next login gives the role and the membership again.
    idp.accounts.set('rick', { groups: ['ops'] });
    const again = await ssoLogin(t, 'rick');
    expect(again.res.status, again.res.text).to.equal(302);
    expect((await t.request('GET', '/v1/iam/whoami', { headers: { cookie: again.session! } })).json.data.role).to.equal('admin');
    expect((await members()).map((m) => m.role)).to.deep.equal(['owner']);
  });

  it('caps a key an admin makes for an SSO user too, and leaves local users’ keys alone', async () => {
    const rick = ((await t.request('GET', '/v1/iam/users', { headers: bearer(admin.token) })).json.data as Array<{ id: string; username: string }>).find((u) => u.username === 'rick')!;
    const forRick = await t.request('POST', `/v1/iam/users/${rick.id}/keys`, { body: { expires_in: '13h' }, headers: bearer(admin.token) });
    expect(forRick.status).to.equal(400);
    expect(forRick.json.message).to.contain('iam.oidc.cli_key_lifetime_hours');
    const forAdmin = await t.request('POST', `/v1/iam/users/${admin.userId}/keys`, { body: {}, headers: bearer(admin.token) });
    expect(forAdmin.status, forAdmin.text).to.equal(201);
    expect(forAdmin.json.data.expires_at).to.equal(null);
  });
});
