import { expect } from 'chai';
import { loadConfig } from '../../../core/config.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, GOOD_PASSWORD, type Credentials } from '../../support/identity.js';

/** Same-name creates sent at one moment: the check before each insert passes for all of them. */
describeEachDialect('concurrent creates of the same name', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  before(async () => {
    t = await startHangar(dialect, { plugins: loadConfig({ env: {} }).plugins });
    admin = await bootstrapAdmin(t);
  });
  after(() => t?.stop());

  const cases: Array<[string, string, (i: number) => Record<string, unknown>]> = [
    ['users', '/v1/iam/users', (i) => ({ username: 'twin', email: `twin${i}@example.test`, password: GOOD_PASSWORD })],
    ['SSH profiles', '/v1/ssh-profiles', () => ({ name: 'twin', user: 'root', password: 'pw' })],
    ['swarms', '/v1/swarms', () => ({ name: 'twin' })],
  ];
  for (const [what, path, body] of cases) {
    it(`${what}: one 201, the others 409 saying what is taken, never 500`, async () => {
      const answers = await Promise.all(
        Array.from({ length: 8 }, (_, i) => t.request('POST', path, { headers: bearer(admin.token), body: body(i) })),
      );
      const statuses = answers.map((a) => a.status);
      expect(statuses.filter((s) => s === 201), answers.map((a) => a.text).join('\n')).to.have.length(1);
      expect(statuses.filter((s) => s !== 201).every((s) => s === 409), statuses.join(' ')).to.equal(true);
      for (const refused of answers.filter((a) => a.status === 409)) {
        // What is taken: the field (a plugin's own check may also name the value; core's 409 of a
        // race names only the field, never a value the client sent).
        expect(refused.json.message).to.match(/\bname\b|username|twin/);
        expect(refused.json.request_id).to.be.a('string');
      }
    });
  }

  // On SQLite the writes of one moment commit together (core/db/writes.ts): one refused must not
  // take the others with it, nor their audit entries.
  it('creates sent at once, two of one name: one of those two 409, every other created, each with its audit entry', async () => {
    const names = ['batch-a', 'batch-twin', 'batch-b', 'batch-c', 'batch-twin', 'batch-d'];
    const answers = await Promise.all(names.map((name) => t.request('POST', '/v1/ssh-profiles', { headers: bearer(admin.token), body: { name, user: 'root', password: 'pw' } })));
    const statuses = answers.map((a) => a.status);
    expect([statuses[0], statuses[2], statuses[3], statuses[5]], answers.map((a) => a.text).join('\n')).to.deep.equal([201, 201, 201, 201]);
    expect([statuses[1], statuses[4]].sort()).to.deep.equal([201, 409]);
    const listed = (await t.request('GET', '/v1/ssh-profiles?limit=1000', { headers: bearer(admin.token) })).json.data.map((p: { name: string }) => p.name);
    expect(listed.filter((n: string) => n.startsWith('batch-')).sort()).to.deep.equal(['batch-a', 'batch-b', 'batch-c', 'batch-d', 'batch-twin']);
    const entries = (await t.request('GET', '/v1/audit?route=/v1/ssh-profiles&limit=1000', { headers: bearer(admin.token) })).json.data as Array<{ request_id: string; status: number; resource_id: string | null }>;
    for (const answer of answers) {
      const entry = entries.filter((e) => e.request_id === answer.headers['x-request-id']);
      expect(entry, `the entry of ${answer.status} ${answer.text.slice(0, 80)}`).to.have.length(1);
      expect(entry[0]).to.include({ status: answer.status, resource_id: answer.status === 201 ? answer.json.data.id : null });
    }
  });
});
