import { expect } from 'chai';
import type { HttpResponse } from '../../core/http/client.js';
import { describeEachDialect } from '../support/dialects.js';
import { startHangar, type TestHangar } from '../support/hangar.js';
import { bootstrapAdmin, createUser, GOOD_PASSWORD, type Credentials } from '../support/identity.js';

const WRONG = 'Wrong-Password-97!';
const PARALLEL = 30;
/** The default of iam.login_failures_per_account_and_address. */
const LIMIT = 10;

const tally = (answers: HttpResponse[]) => {
  const counts: Record<number, number> = {};
  for (const a of answers) counts[a.status] = (counts[a.status] ?? 0) + 1;
  return counts;
};

/**
 * Issue 26, finding 6: the per-account lockout was checked before the password hash and counted
 * after it, so guesses sent together all passed the check while the others were hashing: 26–27 of
 * 30 were checked in one window instead of 10. Now each attempt takes its place in the counter (one
 * atomic statement in the store) before the hash, and gives it back only when the password was
 * right. And (finding 14) the account is the user, however it is named: its email and its username
 * share one count, on both login routes.
 */
describeEachDialect('login lockout: a place is taken before the hash, so parallel guesses cannot pass the limit', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  before(async () => {
    // The default limits; the login API takes an email or a username (its default).
    t = await startHangar(dialect, { plugins: ['system', 'iam', 'login'], overrides: { login: { port: 0 } } });
    admin = await bootstrapAdmin(t);
    await createUser(t, admin, { username: 'victim', email: 'victim@example.test' });
  });
  after(() => t?.stop());

  it(`${PARALLEL} wrong guesses sent at once, by username and by email on both login routes: exactly ${LIMIT} are checked, the rest refused`, async () => {
    const guess = (i: number) =>
      i % 3 === 0
        ? t.request('POST', '/v1/iam/login', { body: { username: 'victim', password: `${WRONG}${i}` } })
        : i % 3 === 1
          ? t.request('POST', '/login', { listener: 'login', body: { username: 'victim@example.test', password: `${WRONG}${i}` } })
          : t.request('POST', '/login', { listener: 'login', body: { username: 'VICTIM@example.test', password: `${WRONG}${i}` } });
    const answers = await Promise.all(Array.from({ length: PARALLEL }, (_, i) => guess(i)));
    const counts = tally(answers);
    console.log(`      lockout: ${PARALLEL} parallel wrong guesses (username and email), ${counts[401] ?? 0} checked (401), ${counts[429] ?? 0} refused (429); limit ${LIMIT}`);
    expect(counts, JSON.stringify(counts)).to.deep.equal({ 401: LIMIT, 429: PARALLEL - LIMIT });
    for (const refused of answers.filter((a) => a.status === 429)) {
      expect(refused.json.message).to.match(/^Too many failed logins; try again in \d+ s$/);
      expect(Number(refused.headers['retry-after'])).to.be.greaterThan(0);
    }
    // From this address the account stays refused, the right password too, by either name.
    expect((await t.request('POST', '/v1/iam/login', { body: { username: 'victim', password: GOOD_PASSWORD } })).status).to.equal(429);
    expect((await t.request('POST', '/login', { listener: 'login', body: { username: 'victim@example.test', password: GOOD_PASSWORD } })).status).to.equal(429);
  });

  it('right passwords sent at once give their places back: none of them counts as a failure', async () => {
    const other = await createUser(t, admin, { username: 'busy', email: 'busy@example.test' });
    const answers = await Promise.all(Array.from({ length: LIMIT }, () => t.request('POST', '/v1/iam/login', { body: { username: other.username, password: GOOD_PASSWORD } })));
    const counts = tally(answers);
    // While the ten are being checked each holds a place; done, they hold none: a few failures later still fit.
    for (let i = 0; i < LIMIT - 1; i++) expect((await t.request('POST', '/v1/iam/login', { body: { username: other.username, password: WRONG } })).status).to.equal(401);
    const ok = await t.request('POST', '/v1/iam/login', { body: { username: other.username, password: GOOD_PASSWORD } });
    console.log(`      lockout: ${LIMIT} parallel right passwords ${JSON.stringify(counts)}, then ${LIMIT - 1} failures and the right password: ${ok.status}`);
    expect(counts).to.deep.equal({ 200: LIMIT });
    expect(ok.status, ok.text).to.equal(200);
  });
});
