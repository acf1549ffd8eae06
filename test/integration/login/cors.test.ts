import { expect } from 'chai';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bootstrapAdmin, GOOD_PASSWORD } from '../../support/identity.js';

const APP = 'https://app.example.test';

/**
 * Issue 26, identity gaps: the login API answered no CORS preflight (405), so a web application on
 * another origin could not call it from the browser. `login.cors_origins` lists the origins that
 * may (off by default): their preflights are answered and every answer, errors too, names the
 * origin; any other origin gets no CORS header, and the control API is untouched.
 */
describeEachDialect('login API: CORS for the configured origins (login.cors_origins)', (dialect) => {
  describe('with origins configured', () => {
    let t: TestHangar;
    before(async () => {
      t = await startHangar(dialect, { plugins: ['system', 'iam', 'login'], overrides: { login: { port: 0, cors_origins: [APP, 'http://localhost:3000'] } } });
      await bootstrapAdmin(t);
    });
    after(() => t?.stop());

    const preflight = (path: string, origin: string, method = 'POST') =>
      t.request('OPTIONS', path, { listener: 'login', headers: { origin, 'access-control-request-method': method, 'access-control-request-headers': 'content-type' } });

    it('answers the preflight of each route for an allowed origin, with what it allows', async () => {
      for (const [path, method] of [['/login', 'POST'], ['/refreshtoken', 'POST'], ['/login/resetrequest', 'POST'], ['/sampleprotected/ping', 'GET']] as const) {
        const res = await preflight(path, APP, method);
        expect(res.status, `${method} ${path}`).to.equal(204);
        expect(res.headers['access-control-allow-origin']).to.equal(APP);
        expect(res.headers['access-control-allow-methods']).to.equal(method);
        expect(String(res.headers['access-control-allow-headers']).toLowerCase()).to.contain('content-type').and.contain('authorization');
        expect(res.headers['access-control-allow-credentials'], 'no cookies across origins').to.equal(undefined);
        expect(res.headers.vary).to.contain('Origin');
      }
    });

    it('names the allowed origin on answers, errors included, and no other origin', async () => {
      const ok = await t.request('POST', '/login', { listener: 'login', body: { username: 'admin', password: GOOD_PASSWORD }, headers: { origin: APP } });
      expect(ok.status, ok.text).to.equal(200);
      expect(ok.headers['access-control-allow-origin']).to.equal(APP);
      expect(String(ok.headers['access-control-expose-headers'])).to.contain('Retry-After');
      const refused = await t.request('POST', '/login', { listener: 'login', body: { username: 'admin', password: 'Wrong-Password-1!' }, headers: { origin: 'http://localhost:3000' } });
      expect(refused.status).to.equal(401);
      expect(refused.headers['access-control-allow-origin'], 'the page can read why').to.equal('http://localhost:3000');
      const invalid = await t.request('POST', '/login', { listener: 'login', body: { username: 1 }, headers: { origin: APP } });
      expect(invalid.status).to.equal(400);
      expect(invalid.headers['access-control-allow-origin']).to.equal(APP);

      const other = await t.request('POST', '/login', { listener: 'login', body: { username: 'admin', password: GOOD_PASSWORD }, headers: { origin: 'https://evil.example' } });
      expect(other.headers['access-control-allow-origin'], 'an origin not listed').to.equal(undefined);
      const otherPreflight = await preflight('/login', 'https://evil.example');
      expect(otherPreflight.status).to.equal(204);
      expect(otherPreflight.headers['access-control-allow-origin']).to.equal(undefined);
      // An OPTIONS that is no preflight, and a path without a route, are what they were.
      expect((await t.request('OPTIONS', '/login', { listener: 'login' })).status).to.equal(405);
      expect((await preflight('/nowhere', APP)).status).to.equal(404);
      // The control API takes no part.
      const control = await t.request('OPTIONS', '/v1/iam/login', { headers: { origin: APP, 'access-control-request-method': 'POST' } });
      expect(control.status).to.equal(405);
      expect(control.headers['access-control-allow-origin']).to.equal(undefined);
      console.log(`      cors: preflights answered for ${APP} and http://localhost:3000 only; 401 and 400 readable by the page; control API untouched`);
    });
  });

  describe('by default', () => {
    let t: TestHangar;
    before(async () => {
      t = await startHangar(dialect, { plugins: ['system', 'iam', 'login'], overrides: { login: { port: 0 } } });
    });
    after(() => t?.stop());

    it('answers no preflight (405) and names no origin', async () => {
      const res = await t.request('OPTIONS', '/login', { listener: 'login', headers: { origin: APP, 'access-control-request-method': 'POST' } });
      expect(res.status).to.equal(405);
      expect(res.headers['access-control-allow-origin']).to.equal(undefined);
    });

    it('refuses a setting that is not an origin, saying so', async () => {
      const failed = await startHangar(dialect, { plugins: ['system', 'iam', 'login'], overrides: { login: { port: 0, cors_origins: ['app.example.test/path'] } } }).then(
        async (h) => {
          await h.stop();
          return null;
        },
        (err: Error) => err.message,
      );
      expect(failed).to.match(/login\.cors_origins/);
    });
  });
});
