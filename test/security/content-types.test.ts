import { expect } from 'chai';
import { describeEachDialect } from '../support/dialects.js';
import { startHangar, type TestHangar } from '../support/hangar.js';
import { bearer, bootstrapAdmin, GOOD_PASSWORD, type Credentials } from '../support/identity.js';

const SECRET = 'Hunter2-never-echoed!';

/**
 * Issue 26, finding 1 (general part) and "never echo a submitted value": a form (urlencoded or
 * multipart) or text/plain body is what any web page can make a browser send to another site
 * without a preflight, so no route that changes state takes one (415 before the body is read); a
 * body must say it is JSON. And no error carries what the client sent: a JSON body sent as a form
 * was answered with a 400 that spelled the password back.
 */
describeEachDialect('request content types: JSON only on writes, and no error repeats a submitted value', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  before(async () => {
    t = await startHangar(dialect, { plugins: ['system', 'iam', 'login'], overrides: { login: { port: 0 } } });
    admin = await bootstrapAdmin(t);
  });
  after(() => t?.stop());

  const json = JSON.stringify({ username: 'admin', password: SECRET });

  it('answers 415 to form, multipart and text bodies, and to a body without a type, on both listeners, without reading them', async () => {
    const bodies: Array<[string | undefined, string]> = [
      ['application/x-www-form-urlencoded', `username=admin&password=${encodeURIComponent(SECRET)}`],
      ['application/x-www-form-urlencoded', json],
      ['multipart/form-data; boundary=x', `--x\r\nContent-Disposition: form-data; name="password"\r\n\r\n${SECRET}\r\n--x--\r\n`],
      ['text/plain', json],
      [undefined, json],
    ];
    let answered = 0;
    for (const [type, body] of bodies) {
      for (const [listener, path] of [['control', '/v1/iam/login'], ['login', '/login']] as const) {
        const res = await t.request('POST', path, { listener, body: Buffer.from(body), headers: type ? { 'content-type': type } : {} });
        expect(res.status, `${type} on ${path}: ${res.text}`).to.equal(415);
        expect(res.json.error).to.equal('Unsupported Media Type');
        expect(res.json.message).to.match(type ? /send application\/json$/ : /needs Content-Type: application\/json/);
        expect(res.text).not.to.contain(SECRET);
        answered++;
      }
    }
    // An admin's write too: credentials do not make a form acceptable.
    const form = await t.request('POST', '/v1/iam/users', { body: Buffer.from(`username=x&password=${SECRET}`), headers: { ...bearer(admin.token), 'content-type': 'application/x-www-form-urlencoded' } });
    expect(form.status).to.equal(415);
    // A form with no fields (what a cross-site <form> without inputs sends) is refused as well.
    const empty = await t.request('POST', '/v1/iam/login', { headers: { 'content-type': 'application/x-www-form-urlencoded' } });
    expect(empty.status).to.equal(415);
    // JSON works, as application/json and as a +json type.
    const ok = await t.request('POST', '/v1/iam/login', { body: Buffer.from(JSON.stringify({ username: admin.username, password: GOOD_PASSWORD })), headers: { 'content-type': 'application/vnd.hangar+json' } });
    expect(ok.status, ok.text).to.equal(200);
    console.log(`      content types: ${answered + 2} form, multipart, text and untyped bodies on writes refused with 415, none echoed`);
  });

  it('never puts a submitted value in an error: malformed JSON, unknown keys made of values, the type itself', async () => {
    const cases: Array<[string, string]> = [
      [`password=${SECRET}`, 'application/json'],
      [`{"username":"admin","password":"${SECRET}"`, 'application/json'],
      [`{"username":"admin","password":"${SECRET}",}`, 'application/json'],
      [`{"username":"admin","password":"x","${SECRET}":1}`, 'application/json'],
      [`{"username":"admin","password":"x","nested":{"${SECRET}":1}}`, 'application/json'],
      [json, `application/${SECRET.replace(/[^a-z]/gi, '')}`],
      [json, `text/x-${SECRET}`],
    ];
    for (const [body, type] of cases) {
      const res = await t.request('POST', '/v1/iam/login', { body: Buffer.from(body), headers: { 'content-type': type } });
      expect(res.status, res.text).to.be.oneOf([400, 415]);
      expect(res.text, `${type} ${body}`).not.to.contain(SECRET).and.not.to.contain(SECRET.replace(/[^a-z]/gi, ''));
    }
    const malformed = await t.request('POST', '/v1/iam/login', { body: Buffer.from(`{"password":"${SECRET}",}`), headers: { 'content-type': 'application/json' } });
    expect(malformed.json.message).to.match(/^Malformed JSON body: .* at line 1, column \d+$/);
    const unknown = await t.request('POST', '/v1/iam/login', { body: Buffer.from(`{"username":"a","password":"b","${SECRET}":1,"extra_field":2}`), headers: { 'content-type': 'application/json' } });
    expect(unknown.status).to.equal(400);
    // A name is named; what does not look like one is not repeated.
    expect(unknown.json.message).to.contain('body.extra_field is not an allowed property');
    expect(unknown.json.message).to.contain('body.(a name not shown) is not an allowed property');
  });
});
