import { expect } from 'chai';
import { ManualClock } from '../../core/clock.js';
import { waitFor } from '../support/agents.js';
import { describeEachDialect } from '../support/dialects.js';
import { startHangar, type TestHangar } from '../support/hangar.js';
import { bearer, bootstrapAdmin, GOOD_PASSWORD, type Credentials } from '../support/identity.js';
import { fromAddress } from '../support/wire.js';

const ATTACKER = '127.0.0.2';
const REQUESTS = 300;

/**
 * Issue 26, finding 8: every anonymous write was an audit entry with no limit; one client added
 * about 1 000 entries a second (1.4 GB an hour at 90 days' retention), and the full disk then broke
 * admin writes. Now, per source address and minute, the first refused anonymous write has an entry
 * of its own (and accepted ones up to audit.anonymous_entries_per_minute); the others are counted
 * into one entry per route and status, written when the minute is over, whose counts add up.
 */
describeEachDialect('the audit log under a flood of anonymous writes: counted per address and minute', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  // The minute the flood happens in stays the same until the test moves the clock on.
  const clock = new ManualClock(Math.floor(Date.now() / 60_000) * 60_000 + 1000);

  before(async () => {
    t = await startHangar(dialect, { plugins: ['system', 'iam', 'login', 'audit'], clock, overrides: { login: { port: 0 } } });
    admin = await bootstrapAdmin(t);
  });
  after(() => t?.stop());

  const entries = async (query: string) => {
    const res = await t.request('GET', `/v1/audit?limit=1000&${query}`, { headers: bearer(admin.token) });
    expect(res.status, res.text).to.equal(200);
    return res.json.data as Array<{ source_ip: string; status: number; count: number; request_id: string; route: string }>;
  };
  const fromAttacker = async () => (await entries('')).filter((e) => e.source_ip === ATTACKER);

  it(`turns ${REQUESTS} refused anonymous logins from one address into a few entries whose counts add up`, async function () {
    this.timeout(300_000);
    const statuses: number[] = [];
    for (let sent = 0; sent < REQUESTS; sent += 20) {
      const batch = await Promise.all(
        Array.from({ length: 20 }, (_, i) =>
          fromAddress(t.url, '/v1/iam/login', { ca: t.caPem, localAddress: ATTACKER, body: { username: `nobody-${sent + i}`, password: 'Wrong-password-1!' } }),
        ),
      );
      statuses.push(...batch.map((r) => r.status));
    }
    expect(statuses.every((s) => s === 401 || s === 429), [...new Set(statuses)].join(',')).to.equal(true);
    // Within the minute: the first refusal has its entry at once, the others are being counted.
    const during = await fromAttacker();
    expect(during.length).to.be.at.most(11);
    expect(during.length).to.be.at.least(1);

    // An admin's write is recorded on its own and at once, flood or not.
    const write = await t.request('POST', '/v1/iam/users', { body: { username: 'during-flood', password: GOOD_PASSWORD }, headers: { ...bearer(admin.token), 'x-request-id': 'req-flood-admin' } });
    expect(write.status).to.equal(201);
    expect((await entries('')).find((e) => e.request_id === 'req-flood-admin')).to.include({ status: 201, count: 1 });
    // Another address's first refusal has its own entry at once.
    await fromAddress(t.url, '/v1/iam/login', { ca: t.caPem, localAddress: '127.0.0.3', headers: { 'x-request-id': 'req-flood-other' }, body: { username: 'x', password: 'Wrong-password-1!' } });
    expect((await entries('')).find((e) => e.request_id === 'req-flood-other')).to.include({ source_ip: '127.0.0.3', count: 1 });

    // The minute is over: the counted entries are written (the loop runs every few seconds).
    clock.advance(60_000);
    const after = await waitFor(
      async () => {
        const rows = await fromAttacker();
        return rows.reduce((n, e) => n + e.count, 0) === REQUESTS ? rows : null;
      },
      { timeoutMs: 30_000, intervalMs: 500, what: 'the counted entries of the minute' },
    );
    const statusesCounted = new Set(after.filter((e) => e.count > 1).map((e) => e.status));
    expect(after.length).to.be.at.most(11 + statusesCounted.size);
    const lines = t.logs.filter((l) => l.includes('"msg":"audit"') && l.includes(ATTACKER));
    expect(lines.length).to.equal(after.length);
    console.log(`      audit flood: ${REQUESTS} refused anonymous logins from one address in a minute → ${after.length} entries (counts add up to ${REQUESTS}), ${lines.length} log lines`);
  });
});
