import { expect } from 'chai';
import { describeEachDialect } from '../../support/dialects.js';
import { FIXTURE_PLUGIN, startHangar, type TestHangar } from '../../support/hangar.js';

describeEachDialect('request validation from the route table', (dialect) => {
  let t: TestHangar;
  before(async () => {
    t = await startHangar(dialect, { plugins: ['system', FIXTURE_PLUGIN] });
  });
  after(() => t?.stop());

  const post = (path: string, body: unknown) => t.request('POST', path, { body });

  async function rejects(body: unknown, path: string, messagePart?: RegExp) {
    const res = await post('/v1/probe/echo', body);
    expect(res.status, JSON.stringify(res.json)).to.equal(400);
    expect(res.json.error).to.equal('Bad Request');
    expect(res.json.message).to.match(/^Validation failed:/);
    const detail = res.json.details.find((d: { path: string }) => d.path === path);
    expect(detail, `a detail for ${path} in ${JSON.stringify(res.json.details)}`).to.exist;
    if (messagePart) expect(detail.message).to.match(messagePart);
    return res.json;
  }

  it('accepts a valid body and hands it to the handler unchanged', async () => {
    const body = {
      name: 'ok',
      email: 'a@example.com',
      when: '2026-11-21T10:00:00Z',
      uuid: '6f1b8f5e-2c1d-4d0a-9a57-2d7f0d9e6f11',
      ipv4: '10.1.2.3',
      ipv6: 'fd00::1',
      count: 3,
      flag: true,
      color: 'red',
      size: 'm',
      address: { street: 'Main', zip: '12345' },
      tags: ['aa', 'bb'],
    };
    const res = await post('/v1/probe/echo', body);
    expect(res.status).to.equal(200);
    expect(res.json.data).to.deep.include({ kind: 'json', body });
  });

  it('required properties', async () => {
    await rejects({}, 'body.name', /required/);
  });

  it('types', async () => {
    await rejects({ name: 5 }, 'body.name', /string/);
    await rejects({ name: 'x', count: '3' }, 'body.count', /integer/);
    await rejects({ name: 'x', flag: 'yes' }, 'body.flag', /boolean/);
    await rejects({ name: 'x', count: -1 }, 'body.count', />= 0/);
    await rejects({ name: 'x'.repeat(21) }, 'body.name', /20 characters/);
  });

  it('formats: email, date-time, uuid, ipv4, ipv6', async () => {
    await rejects({ name: 'x', email: 'not-an-email' }, 'body.email', /email/);
    await rejects({ name: 'x', when: 'yesterday' }, 'body.when', /date-time/);
    await rejects({ name: 'x', uuid: '1234' }, 'body.uuid', /uuid/);
    await rejects({ name: 'x', ipv4: '300.1.1.1' }, 'body.ipv4', /ipv4/);
    await rejects({ name: 'x', ipv6: 'fd00:::1::' }, 'body.ipv6', /ipv6/);
  });

  it('enums, as literal unions and as enum keywords', async () => {
    await rejects({ name: 'x', size: 'xl' }, 'body.size', /one of: s, m, l/);
    await rejects({ name: 'x', color: 'blue' }, 'body.color');
  });

  it('nested objects, array items and additional properties', async () => {
    await rejects({ name: 'x', address: { street: 'Main', zip: 'abc' } }, 'body.address.zip', /pattern/);
    await rejects({ name: 'x', address: { zip: '12345' } }, 'body.address.street', /required/);
    await rejects({ name: 'x', tags: ['ok', 'x'] }, 'body.tags[1]', /2 characters/);
    await rejects({ name: 'x', tags: ['aa', 'bb', 'cc', 'dd'] }, 'body.tags', /3 items/);
    await rejects({ name: 'x', surprise: 1 }, 'body.surprise', /not an allowed property/);
    await rejects({ name: 'x', address: { street: 'a', zip: '12345', extra: true } }, 'body.address.extra');
  });

  it('lists every failing path at once', async () => {
    const res = await post('/v1/probe/echo', { email: 'bad', size: 'xl', extra: 1 });
    expect(res.status).to.equal(400);
    const paths = res.json.details.map((d: { path: string }) => d.path).sort();
    expect(paths).to.deep.equal(['body.email', 'body.extra', 'body.name', 'body.size']);
    for (const p of paths) expect(res.json.message).to.contain(p);
  });

  it('names a __proto__ key as the property it is, at any depth, and never takes it for the prototype', async () => {
    const json = (body: string) => t.request('POST', '/v1/probe/echo', { body, headers: { 'content-type': 'application/json' } });
    const top = await json('{"name":"x","__proto__":{"surprise":1,"count":"3"}}');
    expect(top.status, top.text).to.equal(400);
    expect(top.json.message).to.equal('Validation failed: body.__proto__ is not an allowed property');
    expect(top.json.details).to.deep.equal([{ path: 'body.__proto__', message: 'is not an allowed property', keyword: 'prototype' }]);
    // Deeper down, and where it would have filled a required property through the prototype.
    const nested = await json('{"name":"x","address":{"street":"Main","zip":"12345","__proto__":{}}}');
    expect(nested.status, nested.text).to.equal(400);
    expect(nested.json.message).to.contain('body.address.__proto__ is not an allowed property');
    const inherited = await json('{"__proto__":{"name":"x"}}');
    expect(inherited.status, inherited.text).to.equal(400);
    expect(inherited.json.message).to.equal('Validation failed: body.__proto__ is not an allowed property');
    // Kept nulls take another path through the server, a query string another part of the request: the same answer.
    const kept = await t.request('POST', '/v1/probe/echo-nulls', { body: '{"name":"x","__proto__":{"surprise":1}}', headers: { 'content-type': 'application/json' } });
    expect(kept.status, kept.text).to.equal(400);
    expect(kept.json.message).to.equal('Validation failed: body.__proto__ is not an allowed property');
    const query = await t.request('GET', '/v1/probe/items/1?__proto__=x');
    expect(query.status, query.text).to.equal(400);
    expect(query.json.message).to.equal('Validation failed: query.__proto__ is not an allowed property');
  });

  it('coerces and checks path and query parameters, filling defaults', async () => {
    const ok = await t.request('GET', '/v1/probe/items/7?verbose=true');
    expect(ok.status).to.equal(200);
    expect(ok.json.data.params).to.deep.equal({ id: 7 });
    expect(ok.json.data.query).to.deep.equal({ verbose: true, limit: 5 });
    const badPath = await t.request('GET', '/v1/probe/items/abc');
    expect(badPath.status).to.equal(400);
    expect(badPath.json.details[0].path).to.equal('path.id');
    const badQuery = await t.request('GET', '/v1/probe/items/1?limit=50&bogus=1');
    expect(badQuery.status).to.equal(400);
    expect(badQuery.json.details.map((d: { path: string }) => d.path).sort()).to.deep.equal(['query.bogus', 'query.limit']);
  });

  it('drops null-valued properties whose schema does not allow null, and keeps null where it does', async () => {
    const res = await post('/v1/probe/echo', { name: 'x', note: null, email: null, address: { street: 's', zip: '12345' } });
    expect(res.status).to.equal(200);
    expect(res.json.data.body).to.deep.equal({ name: 'x', note: null, address: { street: 's', zip: '12345' } });
  });

  it('keeps nulls with preserveNullValues, so an update can clear a field', async () => {
    const res = await post('/v1/probe/echo-nulls', { name: 'x', note: null });
    expect(res.status).to.equal(200);
    expect(res.json.data.body).to.deep.equal({ name: 'x', note: null });
    // Kept nulls are validated too: email does not allow null.
    const bad = await post('/v1/probe/echo-nulls', { name: 'x', email: null });
    expect(bad.status).to.equal(400);
    expect(bad.json.details[0].path).to.equal('body.email');
  });

  it('hands an XML body to the handler as an XML document, validated against the same schema', async () => {
    const xml = '<?xml version="1.0"?><probe><name>widget</name><count>3</count><tags>ab</tags><tags>cd</tags><address><street>Main</street><zip>12345</zip></address></probe>';
    const res = await t.request('POST', '/v1/probe/xml', { body: xml, headers: { 'content-type': 'application/xml' } });
    expect(res.status, res.text).to.equal(200);
    expect(res.json.data.kind).to.equal('xml');
    expect(res.json.data.root).to.equal('probe');
    expect(res.json.data.content).to.deep.include({ name: 'widget', count: 3, tags: ['ab', 'cd'] });

    const textXml = await t.request('POST', '/v1/probe/xml', { body: '<probe><name>x</name></probe>', headers: { 'content-type': 'text/xml' } });
    expect(textXml.json.data.kind).to.equal('xml');

    const invalid = await t.request('POST', '/v1/probe/xml', { body: '<probe><count>-2</count></probe>', headers: { 'content-type': 'text/xml' } });
    expect(invalid.status).to.equal(400);
    expect(invalid.json.details.map((d: { path: string }) => d.path).sort()).to.deep.equal(['body.count', 'body.name']);

    const malformed = await t.request('POST', '/v1/probe/xml', { body: '<probe><name>x</probe>', headers: { 'content-type': 'application/xml' } });
    expect(malformed.status).to.equal(400);
    expect(malformed.json.message).to.match(/^Malformed XML body/);
  });

  it('refuses XML on a route that does not accept it', async () => {
    const res = await t.request('POST', '/v1/probe/echo', { body: '<probe><name>x</name></probe>', headers: { 'content-type': 'application/xml' } });
    expect(res.status).to.equal(415);
    expect(res.json.message).to.contain('does not accept XML');
  });

  it('checks authentication, then role, then validation', async () => {
    const anonymous = await post('/v1/probe/admin', { bogus: true });
    expect(anonymous.status).to.equal(401);
    expect(anonymous.json).to.include({ error: 'Unauthorized', message: 'Authentication required' });
    const malformedAnonymous = await t.request('POST', '/v1/probe/admin', { body: '{oops', headers: { 'content-type': 'application/json' } });
    expect(malformedAnonymous.status, 'a malformed body is not judged before authentication').to.equal(401);

    const wrongRole = await t.request('POST', '/v1/probe/admin', { body: { bogus: true }, headers: { 'x-test-user': 'user' } });
    expect(wrongRole.status).to.equal(403);
    expect(wrongRole.json).to.include({ error: 'Forbidden', message: 'Insufficient permissions: this needs probe:write, and role user does not grant it' });

    const badBody = await t.request('POST', '/v1/probe/admin', { body: { bogus: true }, headers: { 'x-test-user': 'admin' } });
    expect(badBody.status).to.equal(400);

    const ok = await t.request('POST', '/v1/probe/admin', { body: { name: 'x' }, headers: { 'x-test-user': 'admin' } });
    expect(ok.status).to.equal(200);
    expect(ok.json.data.principal).to.include({ role: 'admin' });

    const anyone = await t.request('POST', '/v1/probe/authenticated', { body: { name: 'x' }, headers: { 'x-test-user': 'user' } });
    expect(anyone.status).to.equal(200);
  });
});
