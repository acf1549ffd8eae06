import { expect } from 'chai';
import { describeEachDialect } from '../support/dialects.js';
import { startHangar, type TestHangar } from '../support/hangar.js';
import { GOOD_PASSWORD } from '../support/identity.js';
import { fromAddress, halfSent, type HalfSent } from '../support/wire.js';
import { settledCount } from './support.js';

/**
 * Issue 26, finding 5: 64 body slots for callers without credentials per listener, shared by
 * everyone: 64 slow connections from one client made login, join and bootstrap answer 503 for
 * everyone (renewable every 10 s). Now one address (an IPv6 /64) has
 * api.unauthenticated_bodies_per_address of them (4), and only then does the total count.
 */
/** The attacker's address: another loopback address, so that the operator's 127.0.0.1 is another client. */
const ATTACKER = '127.0.0.2';

describeEachDialect('body slots of callers without credentials: a few per address first, then the total', (dialect) => {
  let t: TestHangar;
  let loginUrl: string;
  const held: HalfSent[] = [];

  before(async () => {
    t = await startHangar(dialect, { plugins: ['system', 'iam', 'login'], overrides: { login: { port: 0 } } });
    loginUrl = t.hangar.url('login');
  });
  after(async () => {
    for (const h of held) h.destroy();
    await t?.stop();
  });

  const slow = (base: string, target: string) => {
    const h = halfSent(base, target, { ca: t.caPem, announced: 4096, sent: 100, localAddress: ATTACKER });
    held.push(h);
    return h;
  };

  it('64 slow bodies from one address hold 4 slots per listener; bootstrap and logins from another address go through', async function () {
    this.timeout(60_000);
    const control = Array.from({ length: 64 }, () => slow(t.url, '/v1/iam/login'));
    const login = Array.from({ length: 64 }, () => slow(loginUrl, '/login'));
    for (const attack of [control, login]) {
      const refused = await settledCount(attack.map((h) => h.answer), 60);
      const statuses = refused.map((r) => (r.status === 'fulfilled' ? r.value.status : 'reset'));
      expect(statuses.every((s) => s === 429), statuses.join(',')).to.equal(true);
      const first = (refused[0] as PromiseFulfilledResult<{ headers: Record<string, unknown>; json: any }>).value;
      expect(first.headers['retry-after']).to.equal('1');
      expect(first.json.message).to.contain('from your address');
    }
    // The operator on this machine (127.0.0.1) claims the installation and logs in on both listeners.
    const other = { ca: t.caPem, localAddress: '127.0.0.1' };
    const claimed = await fromAddress(t.url, '/v1/bootstrap', { ...other, body: { password: GOOD_PASSWORD, email: 'admin@example.test' } });
    expect(claimed.status, claimed.text).to.equal(201);
    const username = claimed.json.data.username as string;
    const viaControl = await fromAddress(t.url, '/v1/iam/login', { ...other, body: { username, password: GOOD_PASSWORD } });
    expect(viaControl.status, viaControl.text).to.equal(200);
    const viaLogin = await fromAddress(loginUrl, '/login', { ...other, body: { username, password: GOOD_PASSWORD } });
    expect(viaLogin.status, viaLogin.text).to.equal(200);
    console.log('      slots: 64 slow bodies from one address on each listener, 4 held per listener, 60 refused (429); bootstrap and both logins from another address answered');
    // The attacker's own next body is refused while its 4 are held, and welcome once they end.
    const again = await fromAddress(t.url, '/v1/iam/login', { ca: t.caPem, localAddress: ATTACKER, body: { username, password: GOOD_PASSWORD } });
    expect(again.status).to.equal(429);
    for (const h of held.splice(0)) h.destroy();
    let after = again;
    while (after.status === 429) {
      // The server notices the closed connections and gives the slots back.
      after = await fromAddress(t.url, '/v1/iam/login', { ca: t.caPem, localAddress: ATTACKER, body: { username, password: GOOD_PASSWORD } });
    }
    expect(after.status, after.text).to.equal(200);
  });
});
