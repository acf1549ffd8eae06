import { expect } from 'chai';
import { describeEachDialect } from '../../support/dialects.js';
import { FIXTURE_PLUGIN, startHangar, type TestHangar } from '../../support/hangar.js';
import { waitFor } from '../../support/agents.js';
import { halfSent, type WireAnswer } from '../../support/wire.js';

/**
 * A request whose body is sent in chunks (no Content-Length), as a slow or hostile client would:
 * `bytes` in all, then it ends, or with `stall` it stops sending and keeps the connection open.
 */
function chunkedRequest(t: TestHangar, path: string, options: { headers?: Record<string, string>; bytes: number; stall?: boolean }): { answer: Promise<WireAnswer>; abort(): void } {
  const sent = halfSent(t.url, path, { ca: t.caPem, headers: options.headers, sent: options.bytes, complete: !options.stall, opening: '{"name":"x","note":"' });
  return { answer: sent.answer, abort: sent.destroy };
}

const nested = (depth: number) => '['.repeat(depth) + ']'.repeat(depth);

describeEachDialect('request bodies: limits before and after authentication', (dialect) => {
  let t: TestHangar;
  before(async () => {
    t = await startHangar(dialect, {
      plugins: ['system', FIXTURE_PLUGIN],
      overrides: { api: { body_limit: '1mb', unauthenticated_body_limit: '16kb', unauthenticated_body_timeout_ms: 800, unauthenticated_bodies_in_flight: 3 } },
    });
  });
  after(() => t?.stop());

  const accessLine = (requestId: string) => t.logs.map((l) => JSON.parse(l)).find((l) => l.msg === 'request' && l.request_id === requestId);

  it('answers a chunked body over the limit with the JSON 413, a request id and an access-log line', async () => {
    const { answer } = chunkedRequest(t, '/v1/probe/authenticated', { headers: { 'x-test-user': 'user' }, bytes: 2 * 1024 * 1024 });
    const res = await answer;
    expect(res.status).to.equal(413);
    expect(res.headers['content-type']).to.match(/^application\/json/);
    expect(res.json).to.include({ error: 'Payload Too Large' });
    expect(res.json.message).to.contain('1048576-byte limit');
    expect(res.json.request_id).to.match(/^req-/);
    expect(accessLine(res.json.request_id)).to.include({ status: 413 });
  });

  it('refuses a deeply nested JSON body with a 400 that says so, with or without credentials', async () => {
    for (const headers of [{}, { 'x-test-user': 'user' }] as Array<Record<string, string>>) {
      const path = 'x-test-user' in headers ? '/v1/probe/authenticated' : '/v1/probe/echo';
      const res = await t.request('POST', path, { body: nested(8000), headers: { 'content-type': 'application/json', ...headers } });
      expect(res.status, res.text).to.equal(400);
      expect(res.json.message).to.contain('nests deeper than 64 levels');
    }
    // 64 levels are fine as far as parsing goes (the schema then says what is wrong).
    const shallow = await t.request('POST', '/v1/probe/echo', { body: nested(64), headers: { 'content-type': 'application/json' } });
    expect(shallow.status).to.equal(400);
    expect(shallow.json.message).to.match(/^Validation failed/);
    const xml = await t.request('POST', '/v1/probe/xml', { body: '<a>'.repeat(1000) + '</a>'.repeat(1000), headers: { 'content-type': 'application/xml' } });
    expect(xml.status, xml.text).to.equal(400);
    expect(xml.json.message).to.match(/^Malformed XML body: Maximum nested tags/);
    expect(t.logs.some((l) => l.includes('request failed'))).to.equal(false);
  });

  it('refuses the NUL character in bodies, query strings and paths with a 400 (PostgreSQL cannot store it)', async () => {
    const body = await t.request('POST', '/v1/probe/things', { body: { id: 'nul', label: 'a\u0000b', active: true, created_at: new Date().toISOString() } });
    expect(body.status, body.text).to.equal(400);
    expect(body.json.message).to.equal('Validation failed: body.label must not contain the NUL character (U+0000)');
    const key = await t.request('POST', '/v1/probe/echo', { body: '{"name":"x","a\\u0000":1}', headers: { 'content-type': 'application/json' } });
    expect(key.status).to.equal(400);
    const query = await t.request('GET', '/v1/probe/things?cursor=a%00b');
    expect(query.status).to.equal(400);
    expect(query.json.message).to.contain('query.cursor must not contain the NUL character');
    const path = await t.request('GET', '/v1/probe/items/1%00');
    expect(path.status).to.equal(400);
    expect(t.logs.some((l) => l.includes('request failed'))).to.equal(false);
  });

  it('lets a caller without credentials send only the small limit; one with credentials the full one', async () => {
    const note = 'y'.repeat(100 * 1024);
    const anonymous = await t.request('POST', '/v1/probe/echo', { body: { name: 'x', note } });
    expect(anonymous.status).to.equal(413);
    expect(anonymous.json.message).to.contain('16384-byte limit for requests without credentials');
    expect(anonymous.headers.connection).to.equal('close');
    const known = await t.request('POST', '/v1/probe/authenticated', { body: { name: 'x', note }, headers: { 'x-test-user': 'user' } });
    expect(known.status).to.equal(200);
    expect(known.json.data.body.note).to.have.length(note.length);
  });

  it('answers 401 on a protected route without waiting for the body of a caller without credentials', async () => {
    const { answer, abort } = chunkedRequest(t, '/v1/probe/admin', { bytes: 1024, stall: true });
    try {
      const res = await answer;
      expect(res.status).to.equal(401);
    } finally {
      abort();
    }
  });

  it('gives a caller without credentials a short time to send its body (408)', async () => {
    const { answer, abort } = chunkedRequest(t, '/v1/probe/echo', { bytes: 1024, stall: true });
    try {
      // The server's own deadline answers (a 408 naming it); the client never gives up by itself.
      const res = await answer;
      expect(res.status).to.equal(408);
      expect(res.json.message).to.contain('within 800 ms');
    } finally {
      abort();
    }
  });

  it('caps how many bodies of callers without credentials are received at once (503 + Retry-After)', async function () {
    this.timeout(60_000);
    // Its own control plane, whose stalled bodies are not cut off at 800 ms while the test looks.
    const held = await startHangar(dialect, {
      plugins: ['system', FIXTURE_PLUGIN],
      overrides: { api: { unauthenticated_body_limit: '16kb', unauthenticated_body_timeout_ms: 60_000, unauthenticated_bodies_in_flight: 3 } },
    });
    const stalled = [0, 1, 2].map(() => chunkedRequest(held, '/v1/probe/echo', { bytes: 1024, stall: true }));
    try {
      // Once the three are being received, the next body is refused: until then one gets through (200).
      const refused = await waitFor(
        async () => {
          const res = await chunkedRequest(held, '/v1/probe/echo', { bytes: 1024 }).answer;
          expect(res.status, res.text).to.be.oneOf([200, 503]);
          return res.status === 503 ? res : null;
        },
        { timeoutMs: 30_000, intervalMs: 20, what: 'a fourth body without credentials refused while three are held' },
      );
      expect(refused.headers['retry-after']).to.equal('1');
      // A caller with credentials is not held up by them.
      const known = await held.request('POST', '/v1/probe/authenticated', { body: { name: 'x' }, headers: { 'x-test-user': 'user' } });
      expect(known.status).to.equal(200);
      for (const s of stalled) s.abort();
      // Once they are gone (their connections closed) the next caller gets in.
      const after = await waitFor(
        async () => {
          const res = await held.request('POST', '/v1/probe/echo', { body: { name: 'x' } });
          expect(res.status, res.text).to.be.oneOf([200, 503]);
          return res.status === 200 ? res : null;
        },
        { timeoutMs: 30_000, intervalMs: 20, what: 'a body accepted once the held ones are gone' },
      );
      expect(after.json.data.body).to.deep.equal({ name: 'x' });
    } finally {
      for (const s of stalled) s.abort();
      await held.stop();
    }
  });
});
