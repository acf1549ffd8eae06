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
});
