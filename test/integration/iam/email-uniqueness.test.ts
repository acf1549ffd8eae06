import { expect } from 'chai';
import { randomUUID } from 'node:crypto';
import { scryptHasher } from '../../../core/auth/passwords.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, createUser, GOOD_PASSWORD } from '../../support/identity.js';

const PLUGINS = ['system', 'iam', 'login'];

/**
 * Issue 26, identity gaps: emails differing only in case made two accounts, while login and reset
 * match an email without case (which of the two would a reset mail?). Emails are now unique among
 * live users without case: a unique index on lower(email) on both dialects (iam migration 005), a
 * 409 on create and change. Users that already shared an email when the migration ran are kept,
 * never guessed between: the control plane names them in a warning at every start, a login or reset
 * by that email finds no one (they log in by username), and the index is made once they are told apart.
 */
describeEachDialect('emails are unique without regard to case', (dialect) => {
  let t: TestHangar;
  let token: string;
  const storage = () => storageOf!;
  let storageOf: { dataDir: string; schema: string | null } | undefined;
  before(async () => {
    storageOf = dialect.freshStorage();
    t = await startHangar(dialect, { plugins: PLUGINS, storage: storage(), overrides: { login: { port: 0 } } });
    token = (await bootstrapAdmin(t)).token;
  });
  after(() => t?.stop());

  const create = (username: string, email: string) => t.request('POST', '/v1/iam/users', { body: { username, email, password: GOOD_PASSWORD }, headers: bearer(token) });

  it('refuses a second user whose email differs only in case (409, naming the field, not the address)', async () => {
    expect((await create('ann', 'Ann.Smith@Example.test')).status).to.equal(201);
    for (const email of ['ann.smith@example.test', 'ANN.SMITH@EXAMPLE.TEST']) {
      const res = await create(`ann-${email.length}-${email[0]}`, email);
      expect(res.status, res.text).to.equal(409);
      expect(res.json.message).to.equal('The email address is already registered to another user (emails are compared without case)');
      expect(res.text).not.to.contain(email);
    }
    // The store refuses it too (the index on lower(email)), not only the check before the insert.
    const direct = await t.hangar.store
      .knex('users')
      .insert({ userid: randomUUID(), username: 'sneaky', email: 'ANN.smith@example.TEST', password: 'x', role: 'user', created_at: new Date().toISOString() })
      .then(() => 'inserted', (err: Error) => err.message);
    expect(direct).to.match(/unique/i);
    // Two creates at the same moment: one wins.
    const [a, b] = await Promise.all([create('race-1', 'Race@example.test'), create('race-2', 'rACE@example.test')]);
    expect([a.status, b.status].sort()).to.deep.equal([201, 409]);
  });

  it('keeps users that already shared an email, names them at start, finds no one by it, and enforces uniqueness once they are told apart', async () => {
    // What an install had before migration 005: the case-sensitive index, and two users whose emails differ only in case.
    const knex = t.hangar.store.knex;
    await knex.raw('drop index users_email_lower_unique');
    await knex.raw('create unique index users_email_unique on users (email) where deleted_at is null');
    const hash = await scryptHasher.hash(GOOD_PASSWORD);
    const [first, second] = [randomUUID(), randomUUID()];
    await knex('users').insert([
      { userid: first, username: 'twin-a', email: 'Twin@example.test', password: hash, role: 'user', created_at: new Date(Date.now() - 1000).toISOString() },
      { userid: second, username: 'twin-b', email: 'twin@EXAMPLE.test', password: hash, role: 'user', created_at: new Date().toISOString() },
    ]);
    await knex('hangar_migrations').where({ id: 'iam/005_emails_unique_without_case' }).delete();
    await t.stop();

    t = await startHangar(dialect, { plugins: PLUGINS, storage: storage(), overrides: { login: { port: 0 } } });
    const warning = t.logs.map((l) => JSON.parse(l)).find((l) => l.level === 'warn' && String(l.msg).startsWith('iam: 1 email address(es) belong to several live users'));
    expect(warning, 'a warning naming them').to.exist;
    expect(warning.msg).to.contain('twin-a and twin-b');
    expect(warning.clashes).to.deep.equal([[{ userid: first, username: 'twin-a' }, { userid: second, username: 'twin-b' }]]);
    expect(JSON.stringify(warning)).not.to.contain('Twin@example.test');

    // Neither is logged in by the shared email (which one would it be?); each by its username.
    const byEmail = await t.request('POST', '/login', { listener: 'login', body: { username: 'twin@example.test', password: GOOD_PASSWORD } });
    expect(byEmail.status).to.equal(401);
    for (const username of ['twin-a', 'twin-b']) expect((await t.request('POST', '/v1/iam/login', { body: { username, password: GOOD_PASSWORD } })).status).to.equal(200);
    // A third user with it is still refused (the check compares without case while the index waits).
    token = (await t.request('POST', '/v1/iam/login', { body: { username: 'admin', password: GOOD_PASSWORD } })).json.data.token;
    expect((await create('twin-c', 'TWIN@example.test')).status).to.equal(409);

    // The admin tells them apart: the index is made at once.
    const fixed = await t.request('PATCH', `/v1/iam/users/${second}`, { body: { email: 'twin.b@example.test' }, headers: bearer(token) });
    expect(fixed.status, fixed.text).to.equal(200);
    const direct = await t.hangar.store
      .knex('users')
      .insert({ userid: randomUUID(), username: 'late', email: 'TWIN@example.test', password: 'x', role: 'user', created_at: new Date().toISOString() })
      .then(() => 'inserted', (err: Error) => err.message);
    expect(direct, 'the index on lower(email) exists now').to.match(/unique/i);
    const login = await t.request('POST', '/login', { listener: 'login', body: { username: 'twin@example.test', password: GOOD_PASSWORD } });
    expect(login.status, login.text).to.equal(200);
    expect(login.json.data.userid).to.equal(first);
    console.log('      emails: 2 users sharing an email kept and named at start; the index on lower(email) made once one was changed');
  });

  it('lets a deleted user’s email, in any case, go to a new user', async () => {
    const gone = await createUser(t, { token } as never, { username: 'leaver', email: 'Leaver@example.test' });
    expect((await t.request('DELETE', `/v1/iam/users/${gone.userId}`, { headers: bearer(token) })).status).to.equal(200);
    expect((await create('joiner', 'leaver@EXAMPLE.test')).status).to.equal(201);
  });
});
