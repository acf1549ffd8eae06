import { expect } from 'chai';
import https from 'node:https';
import { signRequest } from '../../core/auth/hmac.js';
import { describeEachDialect } from '../support/dialects.js';
import { startHangar, type TestHangar } from '../support/hangar.js';
import { bearer, bootstrapAdmin, createUser, signed, type Credentials } from '../support/identity.js';

const LIMIT = 6; // iam.signature_failures_per_address, small here

/** A signed GET sent from a chosen loopback address. */
function signedFrom(t: TestHangar, address: string, creds: { accessKeyId: string; secretAccessKey: string }, path: string): Promise<{ status: number; json: any; text: string }> {
  const headers = signRequest(creds, { method: 'GET', pathAndQuery: path });
  return new Promise((resolve, reject) => {
    const req = https.request(`${t.url}${path}`, { ca: t.caPem, localAddress: address, agent: false, headers: { ...headers, accept: 'application/json' } }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (text += c));
      res.on('end', () => resolve({ status: res.statusCode!, json: JSON.parse(text), text }));
    });
    req.on('error', reject);
    req.end();
  });
}

/**
 * Issue 26, finding 14 (HMAC): an unknown access key was answered "Unknown or deleted access key"
 * and a known one with a wrong signature "The signature does not match the request", so access
 * key ids could be found by trying; and failed signatures were not limited. Now both get one answer,
 * and each failure counts against the client address like a failed login (429 past the limit).
 */
describeEachDialect('HMAC: unknown keys and wrong signatures are answered alike, and limited', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  let user: Credentials;
  before(async () => {
    t = await startHangar(dialect, { plugins: ['system', 'iam'], overrides: { iam: { signature_failures_per_address: { max: LIMIT, window_seconds: 900 } } } });
    admin = await bootstrapAdmin(t);
    user = await createUser(t, admin, { username: 'keyholder' });
  });
  after(() => t?.stop());

  it('answers an unknown key, a deleted key and a wrong signature with the same 401', async () => {
    const deletedKey = await t.request('POST', `/v1/iam/users/${user.userId}/keys`, { body: {}, headers: bearer(admin.token) });
    const deleted = { accessKeyId: deletedKey.json.data.access_key_id, secretAccessKey: deletedKey.json.data.secret_access_key };
    await t.request('DELETE', `/v1/iam/users/${user.userId}/keys/${deletedKey.json.data.id}`, { headers: bearer(admin.token) });
    const cases = {
      'an unknown key': { accessKeyId: 'HKNOSUCHKEY0000000000', secretAccessKey: 'whatever' },
      'a deleted key': deleted,
      'a known key, wrong secret': { accessKeyId: user.accessKeyId, secretAccessKey: 'not-the-secret' },
    };
    const answers: Record<string, unknown> = {};
    for (const [what, creds] of Object.entries(cases)) {
      const res = await signedFrom(t, '127.0.0.2', creds, `/v1/iam/users/${user.userId}`);
      answers[what] = { status: res.status, error: res.json.error, message: res.json.message, details: res.json.details };
    }
    console.log(`      hmac: ${Object.keys(cases).length} kinds of bad credentials, ${new Set(Object.values(answers).map((a) => JSON.stringify(a))).size} distinct answer`);
    expect(new Set(Object.values(answers).map((a) => JSON.stringify(a))).size, JSON.stringify(answers, null, 1)).to.equal(1);
    expect(answers['an unknown key']).to.deep.include({ status: 401, error: 'Unauthorized' });
    expect(JSON.stringify(answers)).not.to.contain('HKNOSUCHKEY');
    // The right key still works.
    expect((await signed(t, user, 'GET', `/v1/iam/users/${user.userId}`)).status).to.equal(200);
  });

  it('counts failed signatures per client address like failed logins: past the limit that address is refused (429)', async () => {
    const bad = { accessKeyId: user.accessKeyId, secretAccessKey: 'guess' };
    const path = `/v1/iam/users/${user.userId}`;
    const answers: number[] = [];
    // Three were used by the test before from this address.
    for (let i = 0; i < LIMIT; i++) answers.push((await signedFrom(t, '127.0.0.2', i % 2 ? bad : { accessKeyId: `HKGUESS${i}`, secretAccessKey: 'x' }, path)).status);
    const right = await signedFrom(t, '127.0.0.2', user, path);
    const elsewhere = await signedFrom(t, '127.0.0.3', user, path);
    console.log(`      hmac: ${LIMIT + 3} failed signatures from 127.0.0.2 (limit ${LIMIT}) → ${answers.join(',')}; then the right one → ${right.status}; from 127.0.0.3 → ${elsewhere.status}`);
    expect(answers.filter((s) => s === 401).length).to.equal(LIMIT - 3);
    expect(answers.filter((s) => s === 429).length).to.equal(3);
    expect(right.status).to.equal(429);
    expect(right.json.message).to.match(/^Too many failed signatures; try again in \d+ s$/);
    expect(elsewhere.status).to.equal(200);
  });
});
