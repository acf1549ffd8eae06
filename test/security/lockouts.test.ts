import { expect } from 'chai';
import { ManualClock } from '../../core/clock.js';
import { describeEachDialect } from '../support/dialects.js';
import { startHangar, type TestHangar } from '../support/hangar.js';
import { bearer, bootstrapAdmin, createUser, GOOD_PASSWORD, type Credentials } from '../support/identity.js';
import { TestSmtpServer } from '../support/smtp.js';
import { fromAddress, type WireAnswer } from '../support/wire.js';

const WRONG = 'Wrong-Password-97!';
const PER_PAIR = 10; // iam.login_failures_per_account_and_address (the default)
const PER_ACCOUNT = 25; // iam.login_failures_per_account (small here, to reach it from three addresses)
const RESETS_PER_PAIR = 5; // login.reset_requests_per_account_and_address (the default)
const RESETS_PER_ACCOUNT = 8; // login.reset_requests_per_account (small here)

/**
 * Issue 26, finding 7: lockouts as a weapon. Ten anonymous wrong passwords locked any named
 * account, the admin's too, for 15 minutes, renewable for ever; five reset requests blocked the
 * owner's own reset for an hour. Now failures count per account and client address (the attacker
 * locks out only itself), with a slower global back-off per account that refuses only addresses
 * that have failed on it, so the owner's right password from its own address logs in; an admin can
 * clear a lockout; reset requests count per email and address the same way, and a request never
 * takes a pending code away. Every request comes from a real loopback address of its own.
 */
describeEachDialect('lockouts cannot be turned against an account’s owner', (dialect) => {
  const smtp = new TestSmtpServer();
  const clock = new ManualClock(Math.floor(Date.now() / 1000) * 1000);
  let t: TestHangar;
  let admin: Credentials;
  let victim: Credentials;

  before(async () => {
    const smtpPort = await smtp.start();
    t = await startHangar(dialect, {
      plugins: ['system', 'iam', 'login'],
      clock,
      overrides: {
        mail: { host: '127.0.0.1', port: smtpPort, starttls: 'off' },
        iam: { login_failures_per_account: { max: PER_ACCOUNT, window_seconds: 3600 } },
        login: { port: 0, reset_requests_per_account: { max: RESETS_PER_ACCOUNT, window_seconds: 3600 } },
      },
    });
    admin = await bootstrapAdmin(t);
    victim = await createUser(t, admin, { username: 'victim', email: 'victim@example.test' });
  });
  after(async () => {
    await t?.stop();
    await smtp.stop();
  });
  // Each test starts with fresh windows.
  beforeEach(() => clock.advance(2 * 3600_000));

  const login = (address: string, username: string, password: string) =>
    fromAddress(t.url, '/v1/iam/login', { ca: t.caPem, body: { username, password }, localAddress: address });
  const resetRequest = (address: string, email: string) =>
    fromAddress(t.hangar.url('login'), '/login/resetrequest', { body: { email }, localAddress: address });
  const statuses = (answers: WireAnswer[]) => answers.map((a) => a.status);
  const count = (answers: WireAnswer[], status: number) => answers.filter((a) => a.status === status).length;
  async function guesses(address: string, username: string, n: number): Promise<WireAnswer[]> {
    const answers: WireAnswer[] = [];
    for (let i = 0; i < n; i++) answers.push(await login(address, username, `${WRONG}${i}`));
    return answers;
  }

  it('an attacker’s wrong passwords lock out the attacker’s address, not the admin at its own', async () => {
    const attack = await guesses('127.0.0.2', admin.username, PER_PAIR + 2);
    expect(statuses(attack)).to.deep.equal([...Array(PER_PAIR).fill(401), 429, 429]);
    const fromAttacker = await login('127.0.0.2', admin.username, GOOD_PASSWORD);
    expect(fromAttacker.status, 'the attacker’s address, even with the right password').to.equal(429);
    expect(fromAttacker.json.message).to.match(/^Too many failed logins; try again in \d+ s$/);
    const owner = await login('127.0.0.9', admin.username, GOOD_PASSWORD);
    console.log(`      lockout: ${PER_PAIR + 2} wrong passwords for the admin from 127.0.0.2 → ${count(attack, 401)} checked, ${count(attack, 429)} refused; the admin from 127.0.0.9 → ${owner.status}`);
    expect(owner.status, owner.text).to.equal(200);
    // Renewing it keeps only the attacker out: the owner logs in again after more attacks.
    await guesses('127.0.0.2', admin.username, 5);
    expect((await login('127.0.0.9', admin.username, GOOD_PASSWORD)).status).to.equal(200);
  });

  it('past the global back-off, addresses that failed are refused and one that never failed still logs in', async () => {
    const a = await guesses('127.0.0.3', 'victim', PER_PAIR);
    const b = await guesses('127.0.0.4', 'victim', PER_PAIR);
    const c = await guesses('127.0.0.5', 'victim', PER_PAIR);
    const checked = count(a, 401) + count(b, 401) + count(c, 401);
    expect(checked, 'failures counted on the account from three addresses').to.equal(PER_ACCOUNT);
    expect(statuses(c)).to.deep.equal([...Array(PER_ACCOUNT - 2 * PER_PAIR).fill(401), ...Array(3 * PER_PAIR - PER_ACCOUNT).fill(429)]);
    // A fourth attacker address gets one guess (it had never failed), then it is refused too.
    const d = await guesses('127.0.0.6', 'victim', 3);
    expect(statuses(d)).to.deep.equal([401, 429, 429]);
    // The owner, from its own address, with its password.
    const owner = await login('127.0.0.7', 'victim', GOOD_PASSWORD);
    const failedAddress = await login('127.0.0.5', 'victim', GOOD_PASSWORD);
    console.log(
      `      lockout: ${3 * PER_PAIR} wrong passwords from 3 addresses → ${checked} checked (global back-off ${PER_ACCOUNT}); a 4th address → ${statuses(d).join(', ')}; ` +
        `the owner from a clean address → ${owner.status}, from a failed one → ${failedAddress.status}`,
    );
    expect(owner.status, owner.text).to.equal(200);
    expect(failedAddress.status).to.equal(429);
  });

  it('an admin clears a lockout: DELETE /v1/iam/users/{id}/lockout (admins only)', async () => {
    await guesses('127.0.0.8', 'victim', PER_PAIR);
    expect((await login('127.0.0.8', 'victim', GOOD_PASSWORD)).status).to.equal(429);
    const asVictim = (await t.request('POST', '/v1/iam/login', { body: { username: 'victim', password: GOOD_PASSWORD } })).json.data.token;
    const asAdmin = (await t.request('POST', '/v1/iam/login', { body: { username: admin.username, password: GOOD_PASSWORD } })).json.data.token;
    const refused = await t.request('DELETE', `/v1/iam/users/${victim.userId}/lockout`, { headers: bearer(asVictim) });
    expect(refused.status).to.equal(403);
    expect((await t.request('DELETE', '/v1/iam/users/00000000-0000-4000-8000-000000000000/lockout', { headers: bearer(asAdmin) })).status).to.equal(404);
    const cleared = await t.request('DELETE', `/v1/iam/users/${victim.userId}/lockout`, { headers: bearer(asAdmin) });
    expect(cleared.status, cleared.text).to.equal(200);
    expect(cleared.json.data.cleared).to.be.at.least(1);
    const after = await login('127.0.0.8', 'victim', GOOD_PASSWORD);
    console.log(`      lockout: ${PER_PAIR} failures from 127.0.0.8 → 429; the admin cleared ${cleared.json.data.cleared} counter(s) → ${after.status}`);
    expect(after.status, after.text).to.equal(200);
  });

  it('reset requests from an attacker neither use up the owner’s own nor take its code away', async () => {
    const seen = smtp.messages.length;
    const attack: WireAnswer[] = [];
    for (let i = 0; i < RESETS_PER_PAIR + 1; i++) attack.push(await resetRequest('127.0.0.2', 'victim@example.test'));
    expect(statuses(attack)).to.deep.equal([...Array(RESETS_PER_PAIR).fill(200), 429]);
    const more: WireAnswer[] = [];
    for (let i = 0; i < RESETS_PER_PAIR; i++) more.push(await resetRequest('127.0.0.3', 'victim@example.test'));
    // The account's global count (8) is reached after 3 of the second address's: its 4th is refused.
    expect(count(more, 200)).to.equal(RESETS_PER_ACCOUNT - RESETS_PER_PAIR);
    const mailsOf = async (n: number) => {
      for (let i = 0; i < 100 && smtp.messages.length - seen < n; i++) await new Promise((resolve) => setTimeout(resolve, 100));
      return smtp.messages.slice(seen);
    };
    expect((await mailsOf(RESETS_PER_ACCOUNT)).length, 'a mail for each request answered 200').to.equal(RESETS_PER_ACCOUNT);
    // The owner's own request, from its address: answered and mailed.
    const own = await resetRequest('127.0.0.7', 'victim@example.test');
    expect(own.status, own.text).to.equal(200);
    const mails = await mailsOf(RESETS_PER_ACCOUNT + 1);
    expect(mails.length).to.equal(RESETS_PER_ACCOUNT + 1);
    const pairOf = (text: string) => ({ token: /token:\s*(\S+)/.exec(text)![1]!, code: /code:\s*(\d{6})/.exec(text)![1]! });
    const ownPair = pairOf(mails[RESETS_PER_ACCOUNT]!.text);
    // More requests from attackers after the owner's: refused, and they would not replace its code anyway.
    expect((await resetRequest('127.0.0.2', 'victim@example.test')).status).to.equal(429);
    const confirmed = await fromAddress(t.hangar.url('login'), '/login/confirmcode', { body: { email: 'victim@example.test', ...ownPair }, localAddress: '127.0.0.7' });
    console.log(
      `      reset requests: attacker 127.0.0.2 → ${statuses(attack).join(',')}; 127.0.0.3 → ${statuses(more).join(',')} (global ${RESETS_PER_ACCOUNT}); ` +
        `the owner from 127.0.0.7 → ${own.status}, its mailed code confirmed → ${confirmed.status}`,
    );
    expect(confirmed.status, confirmed.text).to.equal(200);
    // And an earlier, attacker-triggered mail's pair (in the owner's mailbox) works too: nothing was replaced.
    const first = pairOf(mails[0]!.text);
    expect((await fromAddress(t.hangar.url('login'), '/login/confirmcode', { body: { email: 'victim@example.test', ...first }, localAddress: '127.0.0.7' })).status).to.equal(200);
  });
});
