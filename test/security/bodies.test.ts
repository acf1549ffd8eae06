import { expect } from 'chai';
import { signRequest } from '../../core/auth/hmac.js';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import type { ControlPlane } from '../support/control-plane.js';
import { describeEachDialect } from '../support/dialects.js';
import { bearer, bootstrapAdmin, createUser, type Credentials } from '../support/identity.js';
import { halfSent, type WireAnswer } from '../support/wire.js';
import { rssMb, serveOwnProcess, settledCount } from './support.js';

const MB = 1024 * 1024;

/**
 * Issue 26, finding 4: any principal, role `user` included, could hold 300 half-sent 1 MB bodies at
 * once (the server's RSS went from 82 to 397 MB and stayed there). Now a principal has
 * api.bodies_per_principal bodies in flight (429 past it), everyone together api.bodies_in_flight
 * (503), and a body must arrive within api.body_timeout_ms (408).
 */
describeEachDialect('bodies of callers with credentials: a few at once per principal, a total, a deadline', (dialect) => {
  let cp: ControlPlane;
  let ca: string;
  let admin: Credentials;
  let user: Credentials;
  let other: Credentials;

  before(async function () {
    this.timeout(120_000);
    cp = await serveOwnProcess(dialect, 'bodies', {
      HANGAR_PLUGINS: 'system,iam',
      HANGAR_API__BODY_TIMEOUT_MS: '15000', // the held bodies stay held while 300 TLS connections are answered on a busy machine
      HANGAR_API__BODIES_IN_FLIGHT: '12',
    });
    ca = readFileSync(path.join(cp.dataDir, 'pki', 'ca.crt'), 'utf8');
    admin = await bootstrapAdmin(cp.client);
    user = await createUser(cp.client, admin, { username: 'slowpoke', role: 'user' });
    other = await createUser(cp.client, admin, { username: 'bystander', role: 'user' });
  });
  after(() => {
    cp?.child.kill('SIGTERM');
  });

  const propertiesOf = (who: Credentials) => `/v1/iam/users/${who.userId}/properties`;
  const halfBody = (who: Credentials) => halfSent(cp.url, propertiesOf(who), { ca, headers: bearer(who.token), announced: MB, sent: MB / 2 });

  it('holds 8 half-sent 1 MB bodies of one user and refuses the other 292 at once (429); memory stays bounded', async function () {
    this.timeout(180_000);
    const before = rssMb(cp.child.pid!);
    const bodies = Array.from({ length: 300 }, () => halfBody(user));
    try {
      const answers = bodies.map((b) => b.answer);
      // The refusals: a 429, or the close that comes with it first for a client still writing its half.
      // (On a loaded machine a held body may reach its deadline, 408, before the last refusal is read: not one of these.)
      const refused = (await settledCount(answers, 292, (r) => r.status === 'rejected' || r.value.status !== 408)).map((r) => (r.status === 'fulfilled' ? r.value : null));
      const during = rssMb(cp.child.pid!);
      expect(refused.every((a) => a === null || a.status === 429), JSON.stringify(refused.find((a) => a && a.status !== 429))).to.equal(true);
      const first = refused.find((a) => a !== null)!;
      expect(first.headers['retry-after']).to.equal('1');
      expect(first.json.message).to.contain('8 at once');
      // Another user is not held up by them.
      const bystander = await cp.client.request('POST', propertiesOf(other), { body: { name: 'team', value: 'ops' }, headers: bearer(other.token) });
      expect(bystander.status, bystander.text).to.equal(201);
      // The held ones end with the body deadline (408), and their slots come back.
      const held = (await Promise.allSettled(answers)).map((r) => (r.status === 'fulfilled' ? r.value.status : 'reset'));
      expect(held.filter((s) => s === 408)).to.have.length(8);
      const after = await cp.client.request('POST', propertiesOf(user), { body: { name: 'again', value: '1' }, headers: bearer(user.token) });
      expect(after.status, after.text).to.equal(201);
      const resets = refused.filter((a) => a === null).length;
      console.log(`      bodies: 300 half-sent 1 MB bodies by one user, 8 accepted at once, 292 refused (429${resets ? `; ${resets} saw the close first` : ''}), RSS ${before.toFixed(0)} → ${during.toFixed(0)} MB`);
      // 8 bodies of 512 kB, 300 TLS connections and slack: far below the 150 MB the bodies would take.
      expect(during - before).to.be.lessThan(80);
    } finally {
      for (const b of bodies) b.destroy();
    }
  });

  it('a user’s API keys share its slots: 12 half-sent signed bodies over 3 keys hold 8, the other 4 are refused (429)', async function () {
    this.timeout(60_000);
    // Before, a signed body was counted against its access key: 16 keys × 8 slots took all of api.bodies_in_flight.
    const keys: Array<{ accessKeyId: string; secretAccessKey: string }> = [user];
    for (let i = 0; i < 2; i++) {
      const key = await cp.client.request('POST', `/v1/iam/users/${user.userId}/keys`, { body: {}, headers: bearer(admin.token) });
      expect(key.status, key.text).to.equal(201);
      keys.push({ accessKeyId: key.json.data.access_key_id, secretAccessKey: key.json.data.secret_access_key });
    }
    const target = propertiesOf(user);
    const bodies = keys.flatMap((key) =>
      Array.from({ length: 4 }, () => halfSent(cp.url, target, { ca, headers: signRequest(key, { method: 'POST', pathAndQuery: target, body: '{}' }), announced: 64 * 1024, sent: 1024 })),
    );
    try {
      const answers = bodies.map((b) => b.answer);
      const refused = (await settledCount(answers, 4, (r) => r.status === 'rejected' || r.value.status !== 408)).map((r) => (r.status === 'fulfilled' ? r.value.status : 'reset'));
      console.log(`      bodies: 12 half-sent signed bodies of one user over 3 API keys (bound api.bodies_per_principal = 8) → 4 refused: ${refused.join(',')}`);
      expect(refused.every((s) => s === 429 || s === 'reset'), refused.join(',')).to.equal(true);
      expect(refused.filter((s) => s === 429).length, 'at least one refusal read whole').to.be.greaterThan(0);
      // The 8 held ones end at the body deadline.
      const held = (await Promise.allSettled(answers)).map((r) => (r.status === 'fulfilled' ? r.value.status : 'reset'));
      expect(held.filter((s) => s === 408)).to.have.length(8);
    } finally {
      for (const b of bodies) b.destroy();
    }
  });

  it('past the total (api.bodies_in_flight) everyone gets 503 with Retry-After, until bodies end', async function () {
    this.timeout(60_000);
    const mine = Array.from({ length: 8 }, () => halfBody(user));
    const theirs = Array.from({ length: 4 }, () => halfBody(other));
    try {
      await Promise.all([...mine, ...theirs].map((b) => b.started));
      // 12 bodies in flight: the total. One more, from a third principal, is refused.
      let extra: WireAnswer | undefined;
      for (let attempt = 0; attempt < 50 && extra?.status !== 503; attempt++) {
        const probe = halfSent(cp.url, propertiesOf(admin), { ca, headers: bearer(admin.token), announced: 64, sent: 64 });
        extra = await probe.answer.catch(() => undefined);
        if (extra?.status !== 503) await new Promise((resolve) => setTimeout(resolve, 100)); // the 12 are still on their way
      }
      expect(extra?.status).to.equal(503);
      expect(extra?.headers['retry-after']).to.equal('1');
      expect(extra?.json.message).to.contain('Too many requests are sending bodies');
      console.log('      bodies: 12 bodies in flight (the total), a 13th from another principal refused with 503 and Retry-After');
    } finally {
      for (const b of [...mine, ...theirs]) b.destroy();
    }
  });
});
