import { expect } from 'chai';
import { describeEachDialect } from '../../support/dialects.js';
import { FIXTURE_PLUGIN, startHangar, type TestHangar } from '../../support/hangar.js';

describeEachDialect('HTTP conventions', (dialect) => {
  let t: TestHangar;
  before(async () => {
    t = await startHangar(dialect, { plugins: ['system', FIXTURE_PLUGIN] });
  });
  after(() => t?.stop());

  const expectErrorShape = (body: any, error: string, status: number) => {
    expect(body.error, `error for ${status}`).to.equal(error);
    expect(body.message).to.be.a('string').and.not.empty;
    expect(body.request_id).to.match(/^req-/);
  };

  it('wraps success in {data}', async () => {
    const res = await t.request('GET', '/v1/version');
    expect(res.status).to.equal(200);
    expect(res.json.data).to.include({ api_version: 'v1' });
    expect(res.json.data.version).to.match(/^\d+\.\d+\.\d+/);
  });

  it('answers an unknown route with 404 and the error body', async () => {
    const res = await t.request('GET', '/v1/no-such-thing');
    expect(res.status).to.equal(404);
    expectErrorShape(res.json, 'Not Found', 404);
    expect(res.json.message).to.contain('/v1/no-such-thing');
    expect(res.headers['x-request-id']).to.equal(res.json.request_id);
  });

  it('answers a wrong method with 405, the error body and an Allow header', async () => {
    const res = await t.request('DELETE', '/v1/version');
    expect(res.status).to.equal(405);
    expectErrorShape(res.json, 'Method Not Allowed', 405);
    expect(res.headers.allow).to.contain('GET');
  });

  it('keeps a sane request id offered by the caller and replaces an unsafe one', async () => {
    const kept = await t.request('GET', '/v1/nope', { headers: { 'x-request-id': 'trace-123.abc' } });
    expect(kept.json.request_id).to.equal('trace-123.abc');
    const replaced = await t.request('GET', '/v1/nope', { headers: { 'x-request-id': 'bad id<script>' } });
    expect(replaced.json.request_id).to.match(/^req-/);
  });

  it('hides the cause of a 500: no stack, no SQL, but a request id that is in the log', async () => {
    const res = await t.request('GET', '/v1/probe/boom');
    expect(res.status).to.equal(500);
    expectErrorShape(res.json, 'Internal Server Error', 500);
    expect(res.text).not.to.contain('secret_table');
    expect(res.text).not.to.contain('hunter2');
    expect(res.text).not.to.match(/at .*\.ts:\d+/);
    const logged = t.logs.find((l) => l.includes(res.json.request_id) && l.includes('request failed'));
    expect(logged, 'the failure is logged with its request id').to.exist;
  });

  it('rejects malformed JSON with 400, an unsupported type with 415 and a huge body with 413', async () => {
    const malformed = await t.request('POST', '/v1/probe/echo', { body: '{"name": ', headers: { 'content-type': 'application/json' } });
    expect(malformed.status).to.equal(400);
    expectErrorShape(malformed.json, 'Bad Request', 400);
    expect(malformed.json.message).to.match(/^Malformed JSON body/);

    const unsupported = await t.request('POST', '/v1/probe/echo', { body: 'name=x', headers: { 'content-type': 'application/octet-stream' } });
    expect(unsupported.status).to.equal(415);
    expectErrorShape(unsupported.json, 'Unsupported Media Type', 415);

    const huge = await t.request('POST', '/v1/probe/echo', { body: { name: 'x', note: 'y'.repeat(2 * 1024 * 1024) } });
    expect(huge.status).to.equal(413);
    expectErrorShape(huge.json, 'Payload Too Large', 413);
  });

  it('sends a large answer whole, its Content-Length counting bytes, not characters', async () => {
    const note = 'nœud é 🚀 '.repeat(3_000); // 42 000 bytes in 30 000 characters (a public route's body is at most 64 KiB)
    const res = await t.request('POST', '/v1/probe/echo', { body: { name: 'large', note } });
    expect(res.status).to.equal(200);
    expect(Number(res.headers['content-length'])).to.equal(res.raw.length).and.to.be.greaterThan(42_000);
    expect(res.json.data.body.note).to.equal(note);
  });

  it('writes one JSON access-log line per request, without query strings or headers', async () => {
    await t.request('GET', '/v1/version?token=supersecretvalue', { headers: { authorization: 'Bearer abc.def.ghi' } });
    const lines = t.logs.map((l) => JSON.parse(l));
    const access = lines.filter((l) => l.msg === 'request' && l.path === '/v1/version');
    expect(access).to.have.length.greaterThan(0);
    expect(access[0]).to.include.keys('request_id', 'method', 'status', 'duration_ms');
    const all = t.logs.join('\n');
    expect(all).not.to.contain('supersecretvalue');
    expect(all).not.to.contain('abc.def.ghi');
  });

  it('leaves a health check that succeeds out of the access log at info, but not one that fails', async () => {
    const ok = await t.request('GET', '/healthz');
    expect(ok.status).to.equal(200);
    const refused = await t.request('POST', '/healthz');
    expect(refused.status).to.equal(405);
    const logged = (res: { json: { request_id?: string }; headers: Record<string, unknown> }) =>
      t.logs.map((l) => JSON.parse(l)).some((l) => l.msg === 'request' && l.request_id === (res.json.request_id ?? res.headers['x-request-id']));
    expect(logged(ok), 'a 200 from /healthz').to.equal(false);
    expect(logged(refused), 'a 405 from /healthz').to.equal(true);
  });

  it('paginates with a cursor: limit, next_cursor, no item twice', async () => {
    const base = Date.parse('2026-01-01T00:00:00Z');
    for (let i = 0; i < 7; i++) {
      const res = await t.request('POST', '/v1/probe/things', {
        body: { id: `thing-${i}`, label: `t${i}`, active: i % 2 === 0, meta: { n: i, list: [i] }, created_at: new Date(base + (i % 3) * 1000).toISOString() },
      });
      expect(res.status).to.equal(201);
      expect(res.json.data).to.deep.include({ id: `thing-${i}`, active: i % 2 === 0, meta: { n: i, list: [i] } });
    }
    const seen: string[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const res: any = await t.request('GET', `/v1/probe/things?limit=3${cursor ? `&cursor=${cursor}` : ''}`);
      expect(res.status).to.equal(200);
      expect(res.json.data.length).to.be.at.most(3);
      seen.push(...res.json.data.map((d: { id: string }) => d.id));
      cursor = res.json.next_cursor;
      pages++;
    } while (cursor);
    expect(pages).to.equal(3);
    expect(seen).to.have.length(7);
    expect(new Set(seen).size).to.equal(7);
    const bad = await t.request('GET', '/v1/probe/things?cursor=garbage');
    expect(bad.status).to.equal(400);
    expect(bad.json.message).to.match(/^Validation failed: query.cursor is not a cursor this list issued/);
  });
});
