import { expect } from 'chai';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { chromiumInstalled, openBrowser } from '../support/browser.js';
import { describeEachDialect } from '../support/dialects.js';
import { startHangar, type TestHangar } from '../support/hangar.js';
import { bootstrapAdmin, createUser, GOOD_PASSWORD } from '../support/identity.js';
import { requireService } from '../support/requirements.js';

/** The attacker's own account: logging the victim's browser into it is the attack. */
const ATTACKER = { username: 'mallory', password: GOOD_PASSWORD };

/**
 * Issue 26, finding 1 (login CSRF): POST /v1/iam/session took a form-encoded body, so any web page
 * could make a visitor's browser post the attacker's credentials and be logged into the attacker's
 * account (whatever the victim then typed or uploaded went to the attacker). The session route now
 * takes `application/json` only (a cross-site page cannot send it without a CORS preflight, which
 * the control API does not grant) and refuses a request whose Origin or Sec-Fetch-Site names
 * another site. Checked with raw HTTP as browsers send the attack, and in chromium.
 */
describeEachDialect('login CSRF: the dashboard login accepts only its own pages', (dialect) => {
  let t: TestHangar;
  before(async () => {
    t = await startHangar(dialect, { plugins: ['system', 'iam'] });
    const admin = await bootstrapAdmin(t);
    await createUser(t, admin, { username: ATTACKER.username });
  });
  after(() => t?.stop());

  const session = (body: string | Buffer, headers: Record<string, string>) => t.request('POST', '/v1/iam/session', { body: Buffer.from(body), headers });
  const setsCookie = (res: { headers: Record<string, unknown> }) => String(res.headers['set-cookie'] ?? '').includes('hangar_session=');

  it('refuses what a cross-site page can make a browser send: forms, text/plain, an untyped body, a foreign Origin or Sec-Fetch-Site', async () => {
    const json = JSON.stringify(ATTACKER);
    const foreign = { origin: 'https://evil.example', 'sec-fetch-site': 'cross-site', 'sec-fetch-mode': 'navigate' };
    const attacks: Array<[string, string, Record<string, string>, number]> = [
      ['an auto-submitted <form> (urlencoded)', `username=${ATTACKER.username}&password=${encodeURIComponent(ATTACKER.password)}`, { 'content-type': 'application/x-www-form-urlencoded', ...foreign }, 415],
      ['a <form enctype="text/plain"> shaped as JSON', `${json.slice(0, -2)}=x"}`, { 'content-type': 'text/plain', ...foreign }, 415],
      ['a multipart <form>', `--b\r\nContent-Disposition: form-data; name="username"\r\n\r\n${ATTACKER.username}\r\n--b--\r\n`, { 'content-type': 'multipart/form-data; boundary=b', ...foreign }, 415],
      ['fetch(no-cors) with a Blob body: no Content-Type at all', json, { ...foreign, 'sec-fetch-mode': 'no-cors' }, 415],
      ['JSON from another origin (what a preflight would have stopped)', json, { 'content-type': 'application/json', origin: 'https://evil.example' }, 403],
      ['JSON from the same host on another port', json, { 'content-type': 'application/json', origin: 'https://127.0.0.1:1' }, 403],
      ['JSON with Origin: null (a sandboxed frame)', json, { 'content-type': 'application/json', origin: 'null' }, 403],
      ['JSON whose Sec-Fetch-Site says cross-site, without Origin', json, { 'content-type': 'application/json', 'sec-fetch-site': 'cross-site' }, 403],
      ['JSON from a sibling site (same-site is not same-origin)', json, { 'content-type': 'application/json', 'sec-fetch-site': 'same-site' }, 403],
    ];
    for (const [what, body, headers, status] of attacks) {
      const res = await session(body, headers);
      expect(res.status, `${what}: ${res.text}`).to.equal(status);
      expect(setsCookie(res), `${what}: no session cookie`).to.equal(false);
      expect(res.text, what).not.to.contain(ATTACKER.password);
    }
    console.log(`      login CSRF: ${attacks.length} cross-site login attempts refused (415 or 403), no session cookie set`);
    // The dashboard's own request, as a browser sends it from the control plane's page, still logs in.
    const own = await session(json, { 'content-type': 'application/json', origin: t.url, 'sec-fetch-site': 'same-origin' });
    expect(own.status, own.text).to.equal(201);
    expect(setsCookie(own)).to.equal(true);
  });

  describe('in chromium', () => {
    let attackerSite: Server;
    let attackerUrl = '';
    before(async function () {
      requireService(this, chromiumInstalled(), 'chromium (/usr/bin/chromium)');
      // The attacker's page, on another origin (localhost, plain HTTP): it posts the attacker's
      // credentials to the control plane as soon as it loads, in each way a page can without CORS.
      attackerSite = createServer((req, res) => {
        const target = `${t.url}/v1/iam/session`;
        const pages: Record<string, string> = {
          '/form': `<form method="post" action="${target}"><input name="username" value="${ATTACKER.username}"><input name="password" value="${ATTACKER.password}"></form><script>document.forms[0].submit()</script>`,
          '/text': `<form method="post" enctype="text/plain" action="${target}"><input name='{"username":"${ATTACKER.username}","password":"${ATTACKER.password}","x":"' value='"}'></form><script>document.forms[0].submit()</script>`,
          '/fetch': `<script>fetch(${JSON.stringify(target)}, { method: 'POST', mode: 'no-cors', credentials: 'include', body: new Blob([${JSON.stringify(JSON.stringify(ATTACKER))}]) }).finally(() => { document.title = 'sent'; })</script>`,
        };
        res.writeHead(200, { 'content-type': 'text/html' }).end(`<!doctype html><title>cute cats</title>${pages[req.url ?? ''] ?? ''}`);
      });
      await new Promise<void>((resolve) => attackerSite.listen(0, '127.0.0.1', resolve));
      attackerUrl = `http://localhost:${(attackerSite.address() as AddressInfo).port}`;
    });
    after(() => new Promise<void>((resolve) => (attackerSite ? attackerSite.close(() => resolve()) : resolve())));

    it('a page elsewhere cannot log the browser into the attacker’s account; the control plane’s own page can log in', async () => {
      const { browser, page, close } = await openBrowser();
      try {
        const answers: number[] = [];
        for (const attack of ['/form', '/text', '/fetch']) {
          const answered = page.waitForResponse((r) => r.url() === `${t.url}/v1/iam/session`, { timeout: 15_000 });
          await page.goto(`${attackerUrl}${attack}`);
          const response = await answered;
          answers.push(response.status());
          expect(response.status(), attack).to.be.oneOf([403, 415]);
          const cookies = await page.context().cookies(t.url);
          expect(cookies.map((c) => c.name), `${attack}: the browser holds no session`).not.to.include('hangar_session');
        }
        console.log(`      login CSRF (chromium): form, text/plain form and no-cors fetch from ${attackerUrl} answered ${answers.join(', ')}; no session cookie`);
        // The control plane's own origin, as the dashboard does it.
        await page.goto(`${t.url}/v1/version`);
        const status = await page.evaluate(async (body) => {
          const res = await fetch('/v1/iam/session', { method: 'POST', headers: { 'content-type': 'application/json' }, body, credentials: 'same-origin' });
          return res.status;
        }, JSON.stringify(ATTACKER));
        expect(status).to.equal(201);
        expect((await page.context().cookies(t.url)).map((c) => c.name)).to.include('hangar_session');
      } finally {
        await close();
        void browser;
      }
    });
  });
});
