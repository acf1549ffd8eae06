import { expect } from 'chai';
import { describeEachDialect } from '../support/dialects.js';
import { waitFor } from '../support/agents.js';
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
      // (On a loaded machine a held body may reach its deadline, 408, before the last refusal is read: not one of these.)
      const refused = await settledCount(attack.map((h) => h.answer), 60, (r) => r.status === 'rejected' || r.value.status !== 408);
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

  it('past the total (api.unauthenticated_bodies_in_flight) every address is refused (503), also one that holds none', async function () {
    this.timeout(60_000);
    // Its own control plane: 6 slots in all, 4 per address, bodies not cut off while the test looks.
    const small = await startHangar(dialect, {
      plugins: ['system', 'iam'],
      overrides: { api: { unauthenticated_bodies_in_flight: 6, unauthenticated_bodies_per_address: 4, unauthenticated_body_timeout_ms: 60_000 } },
    });
    const mine: HalfSent[] = [];
    const slowFrom = (address: string) => {
      const h = halfSent(small.url, '/v1/iam/login', { ca: small.caPem, announced: 4096, sent: 100, localAddress: address });
      mine.push(h);
      return h;
    };
    const login = (address: string) => fromAddress(small.url, '/v1/iam/login', { ca: small.caPem, localAddress: address, body: { username: 'nobody', password: 'Wrong-Password-1!' } });
    try {
      // 4 from one address (its own few), 2 from another: the 6 of the total.
      const held = [...Array.from({ length: 4 }, () => slowFrom('127.0.0.2')), ...Array.from({ length: 2 }, () => slowFrom('127.0.0.3'))];
      await Promise.all(held.map((h) => h.started));
      // A third address, which holds no slot, is refused once the six are being received (until then it gets in: 401).
      const refused = await waitFor(
        async () => {
          const res = await login('127.0.0.4');
          expect(res.status, res.text).to.be.oneOf([401, 503]);
          return res.status === 503 ? res : null;
        },
        { timeoutMs: 30_000, intervalMs: 20, what: 'a body from a third address refused while six are held' },
      );
      expect(refused.headers['retry-after']).to.equal('1');
      expect(refused.json.message).to.contain('Too many requests without credentials are sending bodies');
      // While the total is taken, the addresses that hold slots are refused the same way.
      expect((await login('127.0.0.2')).status).to.equal(503);
      expect((await login('127.0.0.3')).status).to.equal(503);
      // 127.0.0.3's two end: the third address gets in, and 127.0.0.2, still holding its 4, gets its own 429.
      for (const h of held.slice(4)) h.destroy();
      await waitFor(async () => ((await login('127.0.0.4')).status === 401 ? true : null), { timeoutMs: 30_000, intervalMs: 20, what: 'a body from the third address accepted once two slots are free' });
      const own = await login('127.0.0.2');
      expect(own.status, own.text).to.equal(429);
      expect(own.json.message).to.contain('from your address');
      console.log('      slots: 4 slow bodies from 127.0.0.2 and 2 from 127.0.0.3 fill the total of 6 → 127.0.0.4, 127.0.0.2, 127.0.0.3 refused (503); with two freed, 127.0.0.4 gets in and 127.0.0.2 → 429 (its 4)');
    } finally {
      for (const h of mine) h.destroy();
      await small.stop();
    }
  });
});
