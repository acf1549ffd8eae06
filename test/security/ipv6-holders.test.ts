import { expect } from 'chai';
import https from 'node:https';
import { signRequest } from '../../core/auth/hmac.js';
import { describeEachDialect } from '../support/dialects.js';
import { startHangar, type TestHangar } from '../support/hangar.js';
import { bearer, bootstrapAdmin, createUser, type Credentials } from '../support/identity.js';
import { TestSmtpServer } from '../support/smtp.js';

const GUESSES_PER_PAIR = 3; // iam.login_failures_per_account_and_address, small here
const SIGNATURE_FAILURES = 3; // iam.signature_failures_per_address
const RESETS_PER_PAIR = 2; // login.reset_requests_per_account_and_address
const STREAMS_PER_ADDRESS = 2; // events.streams_per_address

/** Addresses of one IPv6 /64 (2001:db8:7:1::/64), each spelled its own way. */
const ONE_64 = ['2001:db8:7:1::1', '2001:db8:7:1::2', '2001:0db8:0007:0001:0:0:0:3', '2001:db8:7:1:ffff::4', '2001:db8:7:1:1:2:3:4', '2001:db8:7:1::a', '2001:db8:7:1::b', '2001:db8:7:1::c'];
/** An address of another /64. */
const ANOTHER_64 = '2001:db8:7:2::1';

/**
 * Review of issue 26: per-address limits counted each IPv6 address alone, except the body slots and
 * the audit flood, so from one /64 (2^64 addresses, what one machine or one customer of a provider
 * usually has) password guesses, failed signatures, reset mails and event streams were unbounded.
 * Now every address is counted as its holder (core/addresses.ts), in the rate limiter and in the
 * event streams' count. The addresses are presented as a trusted proxy on loopback forwards them
 * (api.trusted_proxies, X-Forwarded-For).
 */
describeEachDialect('IPv6: the addresses of one /64 are limited as one client', (dialect) => {
  const smtp = new TestSmtpServer();
  let t: TestHangar;
  let admin: Credentials;
  let victim: Credentials;
  const streams: Array<{ close(): void }> = [];

  before(async () => {
    const smtpPort = await smtp.start();
    t = await startHangar(dialect, {
      plugins: ['system', 'iam', 'login', 'events'],
      overrides: {
        api: { trusted_proxies: ['127.0.0.1'] },
        mail: { host: '127.0.0.1', port: smtpPort, starttls: 'off' },
        iam: {
          login_failures_per_account_and_address: { max: GUESSES_PER_PAIR, window_seconds: 900 },
          signature_failures_per_address: { max: SIGNATURE_FAILURES, window_seconds: 900 },
        },
        login: { port: 0, reset_requests_per_account_and_address: { max: RESETS_PER_PAIR, window_seconds: 3600 } },
        events: { streams_per_address: STREAMS_PER_ADDRESS },
      },
    });
    admin = await bootstrapAdmin(t);
    victim = await createUser(t, admin, { username: 'victim', email: 'victim@example.test' });
  });
  after(async () => {
    for (const s of streams) s.close();
    await t?.stop();
    await smtp.stop();
  });

  const from = (address: string) => ({ 'x-forwarded-for': address });

  it('password guesses from many addresses of one /64 count as one address’s', async () => {
    const answers: number[] = [];
    for (const address of ONE_64) {
      answers.push((await t.request('POST', '/v1/iam/login', { body: { username: 'victim', password: `Wrong-Guess-${address}` }, headers: from(address) })).status);
    }
    const elsewhere = await t.request('POST', '/v1/iam/login', { body: { username: 'victim', password: 'Wrong-Guess-elsewhere' }, headers: from(ANOTHER_64) });
    console.log(`      ipv6: ${ONE_64.length} wrong passwords from ${ONE_64.length} addresses of one /64 (bound ${GUESSES_PER_PAIR}) → ${answers.join(',')}; from another /64 → ${elsewhere.status}`);
    expect(answers).to.deep.equal([...Array(GUESSES_PER_PAIR).fill(401), ...Array(ONE_64.length - GUESSES_PER_PAIR).fill(429)]);
    expect(elsewhere.status).to.equal(401);
  });

  it('failed signatures from many addresses of one /64 count as one address’s', async () => {
    const path = `/v1/iam/users/${victim.userId}`;
    const answers: number[] = [];
    for (const address of ONE_64) {
      const headers = signRequest({ accessKeyId: victim.accessKeyId, secretAccessKey: 'not-the-secret' }, { method: 'GET', pathAndQuery: path });
      answers.push((await t.request('GET', path, { headers: { ...headers, ...from(address) } })).status);
    }
    console.log(`      ipv6: ${ONE_64.length} bad signatures from one /64 (bound ${SIGNATURE_FAILURES}) → ${answers.join(',')}`);
    expect(answers).to.deep.equal([...Array(SIGNATURE_FAILURES).fill(401), ...Array(ONE_64.length - SIGNATURE_FAILURES).fill(429)]);
  });

  it('reset requests from many addresses of one /64 count as one address’s', async () => {
    const answers: number[] = [];
    for (const address of ONE_64.slice(0, RESETS_PER_PAIR + 3)) {
      answers.push((await t.request('POST', '/login/resetrequest', { listener: 'login', body: { email: 'victim@example.test' }, headers: from(address) })).status);
    }
    console.log(`      ipv6: ${answers.length} reset requests for one email from one /64 (bound ${RESETS_PER_PAIR}) → ${answers.join(',')}`);
    expect(answers).to.deep.equal([...Array(RESETS_PER_PAIR).fill(200), 429, 429, 429]);
  });

  it('event streams from many addresses of one /64 count as one address’s', async () => {
    const statuses: number[] = [];
    for (const address of ONE_64.slice(0, STREAMS_PER_ADDRESS + 2)) {
      const s = await openStream(t, { ...bearer(admin.token), ...from(address) });
      streams.push(s);
      statuses.push(s.status);
    }
    const elsewhere = await openStream(t, { ...bearer(admin.token), ...from(ANOTHER_64) });
    streams.push(elsewhere);
    console.log(`      ipv6: ${statuses.length} event streams from one /64 (bound ${STREAMS_PER_ADDRESS}) → ${statuses.join(',')}; from another /64 → ${elsewhere.status}`);
    expect(statuses).to.deep.equal([...Array(STREAMS_PER_ADDRESS).fill(200), 429, 429]);
    expect(elsewhere.status).to.equal(200);
  });
});

/** Opens GET /v1/events/stream and answers its status once the head arrives; an open stream stays open until closed. */
function openStream(t: TestHangar, headers: Record<string, string>): Promise<{ status: number; close(): void }> {
  return new Promise((resolve, reject) => {
    const req = https.request(`${t.url}/v1/events/stream`, { ca: t.caPem, agent: false, headers: { accept: 'text/event-stream', ...headers } }, (res) => {
      res.resume();
      resolve({ status: res.statusCode!, close: () => req.destroy() });
    });
    req.on('error', reject);
    req.end();
  });
}
