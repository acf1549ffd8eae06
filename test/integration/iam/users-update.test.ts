import { expect } from 'chai';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, createUser, GOOD_PASSWORD, signed, type Credentials } from '../../support/identity.js';

const cookiePair = (setCookie: string | string[] | undefined) => String(Array.isArray(setCookie) ? setCookie[0] : setCookie).split(';')[0]!;

/**
 * Issue 26, identity gaps: a user could not be changed at all. PATCH /v1/iam/users/{id} changes
 * name, email (unique without case) and role — the role by admins only, your own name or email with
 * your current password —; a new role revokes the user's earlier tokens and sessions (the token
 * epoch, as a password change does); the last admin keeps its role. PATCH …/properties/{id} changes
 * a property.
 */
describeEachDialect('changing users: PATCH /v1/iam/users/{id} and its properties', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  const as = (creds: Pick<Credentials, 'token'>) => bearer(creds.token);
  const patch = (id: string, body: unknown, who: Pick<Credentials, 'token'>) => t.request('PATCH', `/v1/iam/users/${id}`, { body, headers: as(who) });
  const loginToken = async (username: string, password = GOOD_PASSWORD) => {
    const res = await t.request('POST', '/v1/iam/login', { body: { username, password } });
    expect(res.status, res.text).to.equal(200);
    return res.json.data.token as string;
  };

  before(async () => {
    t = await startHangar(dialect, {
      plugins: ['system', 'iam'],
      // Small, so that the test reaches it: confirmations of one's own password count as logins.
      overrides: { iam: { login_failures_per_account_and_address: { max: 3, window_seconds: 900 } } },
    });
    admin = await bootstrapAdmin(t);
  });
  after(() => t?.stop());

  it('an admin changes name, email and role; a new role revokes the tokens and sessions from before it, and keys follow the role', async () => {
    const bea = await createUser(t, admin, { username: 'bea', email: 'bea@example.test', name: 'Bea' });
    const session = await t.request('POST', '/v1/iam/session', { body: { username: 'bea', password: GOOD_PASSWORD } });
    const cookie = cookiePair(session.headers['set-cookie']);
    const renamed = await patch(bea.userId, { name: 'Beatrice', email: 'beatrice@example.test' }, admin);
    expect(renamed.status, renamed.text).to.equal(200);
    expect(renamed.json.data).to.include({ name: 'Beatrice', email: 'beatrice@example.test', role: 'user' });
    expect((await t.request('GET', `/v1/iam/users/${bea.userId}`, { headers: as(bea) })).status, 'no new role: her token still works').to.equal(200);

    const promoted = await patch(bea.userId, { role: 'admin' }, admin);
    expect(promoted.status, promoted.text).to.equal(200);
    expect(promoted.json.data.role).to.equal('admin');
    const old = await t.request('GET', `/v1/iam/users/${bea.userId}`, { headers: as(bea) });
    expect(old.status, 'the token from before the new role').to.equal(401);
    expect((await t.request('GET', '/v1/iam/session', { headers: { cookie } })).status, 'the session from before').to.equal(401);
    // Her API key acts with her role of the moment: now an admin's.
    expect((await signed(t, bea, 'GET', '/v1/iam/users?limit=1')).status).to.equal(200);
    const fresh = await loginToken('bea');
    expect((await t.request('GET', '/v1/iam/users?limit=1', { headers: bearer(fresh) })).status).to.equal(200);

    // Demoted again: her admin token stops working at once, and her key is a user's again.
    expect((await patch(bea.userId, { role: 'user' }, admin)).status).to.equal(200);
    expect((await t.request('GET', '/v1/iam/users?limit=1', { headers: bearer(fresh) })).status, 'a demoted admin’s token').to.equal(401);
    expect((await signed(t, bea, 'GET', '/v1/iam/users?limit=1')).status, 'her key, now a user’s').to.equal(403);
  });

  it('never demotes the last admin (409), and lets one of two go', async () => {
    const lone = await patch(admin.userId, { role: 'user' }, admin);
    expect(lone.status, lone.text).to.equal(409);
    expect(lone.json.message).to.contain('last admin');
    const second = await createUser(t, admin, { username: 'second-admin', role: 'admin' });
    const demoted = await patch(second.userId, { role: 'operator' }, admin);
    expect(demoted.status, demoted.text).to.equal(200);
    expect(demoted.json.data.role).to.equal('operator');
    // Two admins demoting each other at the same moment leave one.
    const third = await createUser(t, admin, { username: 'third-admin', role: 'admin' });
    const adminToken = await loginToken(admin.username);
    const [a, b] = await Promise.all([patch(third.userId, { role: 'user' }, { token: adminToken }), patch(admin.userId, { role: 'user' }, third)]);
    // One wins; the other is refused: 409 (the last admin), or 401 when the winner's change has
    // already revoked the loser's own token by the time it is checked.
    const statuses = [a.status, b.status];
    expect(statuses.filter((s) => s === 200), `${a.text} ${b.text}`).to.have.length(1);
    expect(statuses.find((s) => s !== 200)).to.be.oneOf([401, 409]);
    const admins = await t.hangar.store.knex('users').where({ role: 'admin' }).whereNull('deleted_at').count<{ n: number }[]>({ n: '*' });
    expect(Number(admins[0]!.n)).to.equal(1);
    // Put things back for the tests after this one.
    if (b.status === 200) {
      expect((await patch(admin.userId, { role: 'admin' }, { token: await loginToken('third-admin') })).status).to.equal(200);
      expect((await patch(third.userId, { role: 'user' }, { token: await loginToken(admin.username) })).status).to.equal(200);
    }
    admin = { ...admin, token: await loginToken(admin.username) };
  });

  it('a user changes its own name and email with its current password, never its role, never another user', async () => {
    const cleo = await createUser(t, admin, { username: 'cleo', email: 'cleo@example.test' });
    const dan = await createUser(t, admin, { username: 'dan', email: 'dan@example.test' });
    const missing = await patch(cleo.userId, { name: 'Cleo' }, cleo);
    expect(missing.status).to.equal(400);
    expect(missing.json.details).to.deep.equal([{ path: 'body.current_password', message: 'is required to change your own name or email' }]);
    const wrong = await patch(cleo.userId, { name: 'Cleo', current_password: 'Not-Her-Password-1!' }, cleo);
    expect(wrong.status).to.equal(403);
    expect(wrong.text).not.to.contain('Not-Her-Password-1!');
    const ok = await patch(cleo.userId, { name: 'Cleo', email: 'Cleo.New@example.test', current_password: GOOD_PASSWORD }, cleo);
    expect(ok.status, ok.text).to.equal(200);
    expect(ok.json.data).to.include({ name: 'Cleo', email: 'Cleo.New@example.test', role: 'user' });
    expect((await t.request('GET', `/v1/iam/users/${cleo.userId}`, { headers: as(cleo) })).status, 'a new name or email revokes nothing').to.equal(200);
    const role = await patch(cleo.userId, { role: 'admin', current_password: GOOD_PASSWORD }, cleo);
    expect(role.status).to.equal(403);
    expect(role.json.message).to.equal('Only an admin changes roles');
    expect((await patch(dan.userId, { name: 'Not Dan' }, cleo)).status, 'another user').to.equal(403);
    // An email another user has, in any case: 409, naming the field, not the address.
    const clash = await patch(cleo.userId, { email: 'DAN@example.test', current_password: GOOD_PASSWORD }, cleo);
    expect(clash.status).to.equal(409);
    expect(clash.json.message).to.contain('email address is already registered');
    expect(clash.text).not.to.contain('DAN@example.test');
    // Removing the email (null) is a change too.
    expect((await patch(dan.userId, { email: null }, admin)).json.data.email).to.equal(null);
  });

  it('counts wrong current passwords like failed logins (429 past the limit)', async () => {
    const eve = await createUser(t, admin, { username: 'eve' });
    const answers: number[] = [];
    for (let i = 0; i < 4; i++) answers.push((await patch(eve.userId, { name: 'x', current_password: `Wrong-Guess-${i}!` }, eve)).status);
    const right = await patch(eve.userId, { name: 'Eve', current_password: GOOD_PASSWORD }, eve);
    console.log(`      password confirmation: 4 wrong guesses through PATCH (limit 3) → ${answers.join(',')}; then the right one → ${right.status}`);
    expect(answers).to.deep.equal([403, 403, 403, 429]);
    expect(right.status).to.equal(429);
  });

  it('says what to fix for an empty or unknown change, and 404 for an unknown user', async () => {
    const fay = await createUser(t, admin, { username: 'fay' });
    const empty = await patch(fay.userId, {}, admin);
    expect(empty.status).to.equal(400);
    expect(empty.json.message).to.match(/^Validation failed: give name, email or role/);
    const unknown = await patch(fay.userId, { username: 'renamed' }, admin);
    expect(unknown.status).to.equal(400);
    expect(unknown.json.details[0]).to.include({ path: 'body.username', message: 'is not an allowed property' });
    expect((await patch(fay.userId, { role: 'Not A Role' }, admin)).status).to.equal(400);
    expect((await patch(fay.userId, { email: 'not-an-email' }, admin)).status).to.equal(400);
    expect((await patch('00000000-0000-4000-8000-000000000000', { name: 'x' }, admin)).status).to.equal(404);
  });

  it('changes a property: PATCH /v1/iam/users/{id}/properties/{propertyId}', async () => {
    const gus = await createUser(t, admin, { username: 'gus' });
    const added = await t.request('POST', `/v1/iam/users/${gus.userId}/properties`, { body: { name: 'team', value: 'ops' }, headers: as(gus) });
    const id = added.json.data.id;
    const changed = await t.request('PATCH', `/v1/iam/users/${gus.userId}/properties/${id}`, { body: { value: 'platform' }, headers: as(gus) });
    expect(changed.status, changed.text).to.equal(200);
    expect(changed.json.data).to.deep.equal({ id, name: 'team', value: 'platform' });
    const renamed = await t.request('PATCH', `/v1/iam/users/${gus.userId}/properties/${id}`, { body: { name: 'squad', value: null }, headers: as(admin) });
    expect(renamed.json.data).to.deep.equal({ id, name: 'squad', value: null });
    const user = await t.request('GET', `/v1/iam/users/${gus.userId}`, { headers: as(gus) });
    expect(user.json.data.properties).to.deep.equal([{ id, name: 'squad', value: null }]);
    expect((await t.request('PATCH', `/v1/iam/users/${gus.userId}/properties/999999`, { body: { value: 'x' }, headers: as(admin) })).status).to.equal(404);
    expect((await t.request('PATCH', `/v1/iam/users/${gus.userId}/properties/${id}`, { body: {}, headers: as(admin) })).status).to.equal(400);
    expect((await t.request('PATCH', `/v1/iam/users/${admin.userId}/properties/${id}`, { body: { value: 'x' }, headers: as(gus) })).status, 'another user’s').to.equal(403);
  });
});
