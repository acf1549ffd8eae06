import { expect } from 'chai';
import https from 'node:https';
import type { ClientRequest, IncomingMessage } from 'node:http';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { signRequest } from '../../core/auth/hmac.js';
import { httpRequest, type HttpRequestOptions } from '../../core/http/client.js';
import { SseParser, type ServerSentEvent } from '../../core/http/sse.js';
import { randomToken } from '../../core/ids.js';
import { waitFor } from '../support/agents.js';
import { serveControlPlane, type ControlPlane } from '../support/control-plane.js';
import { describeEachDialect, type TestDialect } from '../support/dialects.js';
import { startHangar, type TestHangar } from '../support/hangar.js';
import { bearer, bootstrapAdmin, createUser, GOOD_PASSWORD, type Credentials } from '../support/identity.js';
import { childrenOf, serverProcessOf, workersOf } from '../support/proc.js';

/**
 * Issue 26, findings 2 and 3: a live event stream (GET /v1/events/stream) ends as soon as its
 * principal would be refused (user deleted, API key deleted, session logged out, password changed),
 * on every control plane and worker; streams are capped per user and per address; a client that
 * does not read is dropped once it leaves events.stream_buffer_bytes untaken, and resumes with
 * Last-Event-ID without losing an event.
 */

const SCRAPE_TOKEN = randomToken(40);
/** Streams one user may open (events.streams_per_principal) in these tests. */
const PER_PRINCIPAL = 3;
/** Streams one address may open (events.streams_per_address) in these tests. */
const PER_ADDRESS = 6;
/** events.stream_buffer_bytes in these tests. */
const BUFFER_BYTES = 65_536;

const log = (line: string) => console.log(`      ${line}`);

interface Target {
  url: string;
  caPem: () => string;
}

/** A client of GET /v1/events/stream that collects what arrives (or, paused, reads nothing). */
class SseClient {
  readonly events: Array<ServerSentEvent & { json: any }> = [];
  private readonly parser = new SseParser();
  res?: IncomingMessage;
  req?: ClientRequest;
  status = 0;
  /** The error body of a refusal. */
  refusal: any = null;
  /** The response ended (or broke). */
  ended = false;

  /** Opens a stream; `paused`: the client reads nothing until resume() (its socket stops reading). */
  static open(target: Target, headers: Record<string, string>, options: { query?: string; localAddress?: string; paused?: boolean; agent?: https.Agent } = {}): Promise<SseClient> {
    const client = new SseClient();
    return new Promise((resolve, reject) => {
      const req = https.request(
        `${target.url}/v1/events/stream${options.query ?? ''}`,
        { ca: target.caPem(), agent: options.agent ?? false, localAddress: options.localAddress, headers: { accept: 'text/event-stream', ...headers } },
        (res) => {
          client.res = res;
          client.status = res.statusCode ?? 0;
          res.setEncoding('utf8');
          res.on('end', () => (client.ended = true));
          res.on('error', () => (client.ended = true));
          res.on('aborted', () => (client.ended = true));
          res.on('close', () => (client.ended = true));
          if (client.status !== 200) {
            let body = '';
            res.on('data', (c: string) => (body += c));
            res.on('end', () => {
              client.refusal = JSON.parse(body);
              resolve(client);
            });
            return;
          }
          if (options.paused) res.pause();
          else client.read();
          resolve(client);
        },
      );
      client.req = req;
      req.on('error', (err) => (client.res ? (client.ended = true) : reject(err)));
      req.end();
    });
  }

  /** Starts (or resumes) reading. */
  read(): void {
    this.res!.on('data', (chunk: string) => {
      for (const e of this.parser.push(chunk)) this.events.push({ ...e, json: JSON.parse(e.data) });
    });
    this.res!.resume();
  }

  get lastId(): string | undefined {
    return this.parser.lastEventId;
  }

  of(type: string, match: (data: any) => boolean = () => true) {
    return this.events.filter((e) => e.event === type && match(e.json));
  }

  until(what: string, type: string, match: (data: any) => boolean = () => true, timeoutMs = 15_000) {
    return waitFor(() => this.of(type, match)[0], { timeoutMs, intervalMs: 20, what: `${what} (events so far: ${this.events.map((e) => `${e.event} ${e.data}`).join('; ')})` });
  }

  /** Waits for the server's last event, `end`, and the end of the response after it. */
  async endedWith(what: string): Promise<any> {
    const end = await this.until(`${what}: an end event`, 'end');
    await waitFor(() => this.ended, { timeoutMs: 10_000, intervalMs: 20, what: `${what}: the response to end after its end event` });
    expect(this.events.at(-1)!.event, 'end is the last event').to.equal('end');
    return end.json;
  }

  close(): void {
    this.res?.destroy();
    this.req?.destroy();
  }
}

/** A control plane as these tests reach it: requests, streams, metrics. */
class Plane implements Target {
  readonly streams: SseClient[] = [];

  constructor(
    readonly url: string,
    readonly caPem: () => string,
    private readonly options: () => HttpRequestOptions = () => ({}),
  ) {}

  request(method: string, p: string, opts: HttpRequestOptions = {}) {
    return httpRequest(`${this.url}${p}`, { ca: this.caPem(), ...this.options(), ...opts, method });
  }

  async stream(headers: Record<string, string>, options: Parameters<typeof SseClient.open>[2] = {}): Promise<SseClient> {
    const s = await SseClient.open(this, headers, options);
    this.streams.push(s);
    return s;
  }

  /** A series of /metrics without labels, or the sum of a labelled one's series. */
  async metric(name: string): Promise<number> {
    const res = await this.request('GET', '/metrics', { headers: bearer(SCRAPE_TOKEN) });
    expect(res.status, res.text).to.equal(200);
    return res.text
      .split('\n')
      .filter((l) => l.startsWith(`${name} `) || l.startsWith(`${name}{`))
      .reduce((sum, l) => sum + Number(l.split(' ').pop()), 0);
  }

  closeAll(): void {
    for (const s of this.streams.splice(0)) s.close();
  }

  /** Closes every stream of the test and waits until the server counts none open. */
  async settle(): Promise<void> {
    this.closeAll();
    await waitFor(async () => (await this.metric('hangar_event_streams_open')) === 0, { timeoutMs: 10_000, intervalMs: 50, what: 'every stream to be closed on the server' });
  }
}

/** Signed headers of a GET of the stream with an API key (as `hangar events --follow` sends). */
function signedStream(creds: Credentials, query = ''): Record<string, string> {
  return signRequest({ accessKeyId: creds.accessKeyId, secretAccessKey: creds.secretAccessKey }, { method: 'GET', pathAndQuery: `/v1/events/stream${query}` });
}

/** A dashboard session: its cookie and CSRF token. */
async function sessionOf(plane: Plane, creds: Credentials): Promise<{ cookie: string; csrf: string }> {
  const res = await plane.request('POST', '/v1/iam/session', { body: { username: creds.username, password: creds.password } });
  expect(res.status, res.text).to.equal(201);
  const cookie = String(res.headers['set-cookie']).split(';')[0]!;
  return { cookie, csrf: res.json.data.csrf_token };
}

async function keyIdOf(plane: Plane, admin: Credentials, user: Credentials): Promise<string> {
  const keys = await plane.request('GET', `/v1/iam/users/${user.userId}/keys`, { headers: bearer(admin.token) });
  return (keys.json.data as Array<{ id: string; access_key_id: string }>).find((k) => k.access_key_id === user.accessKeyId)!.id;
}

/** A change every stream of a user sees (a node inserted), to tell a stream that still runs. */
async function aChange(plane: Plane, admin: Credentials): Promise<string> {
  const res = await plane.request('POST', '/v1/nodes', { body: { name: `change-${randomToken(6).toLowerCase()}` }, headers: bearer(admin.token) });
  expect(res.status, res.text).to.equal(201);
  return res.json.data.id;
}

const SETTINGS = (revalidateSeconds: number) => ({
  events: { streams_per_principal: PER_PRINCIPAL, streams_per_address: PER_ADDRESS, stream_buffer_bytes: BUFFER_BYTES, buffer: 5000, revalidate_seconds: revalidateSeconds },
  metrics: { scrape_token: SCRAPE_TOKEN },
});
const PLUGINS = ['system', 'iam', 'events', 'metrics', 'nodes'];

function inProcess(t: TestHangar): Plane {
  return new Plane(t.url, () => t.caPem);
}

let users = 0;
const newUser = (plane: Plane, admin: Credentials, role = 'user') => createUser(plane as unknown as TestHangar, admin, { username: `u${++users}-${randomToken(4).toLowerCase()}`, role });

describeEachDialect('event streams end when their credentials are revoked (issue 26, finding 2)', (dialect) => {
  let t: TestHangar;
  let plane: Plane;
  let admin: Credentials;

  before(async () => {
    // The backstop runs once an hour here: what ends a stream in these tests is the notice.
    t = await startHangar(dialect, { plugins: PLUGINS, overrides: SETTINGS(3600) });
    plane = inProcess(t);
    admin = await bootstrapAdmin(t);
    log('bound: a revoked stream ends at the notice of the change (events.revalidate_seconds = 3600, so not the backstop)');
  });
  afterEach(() => plane.settle());
  after(() => t?.stop());

  it('a deleted user’s streams end (token, API key and session alike) with event: end {reason: revoked}; another user’s stream goes on', async () => {
    const user = await newUser(plane, admin);
    const bystander = await newUser(plane, admin);
    const session = await sessionOf(plane, user);
    const byToken = await plane.stream(bearer(user.token));
    const byKey = await plane.stream(signedStream(user));
    const bySession = await plane.stream({ cookie: session.cookie });
    const other = await plane.stream(bearer(bystander.token));
    for (const s of [byToken, byKey, bySession, other]) expect(s.status).to.equal(200);
    const before = await aChange(plane, admin);
    for (const s of [byToken, byKey, bySession]) await s.until('a change before the deletion', 'resource.changed', (d) => d.id === before);

    expect((await plane.request('DELETE', `/v1/iam/users/${user.userId}`, { headers: bearer(admin.token) })).status).to.equal(200);
    for (const [name, s] of [['token', byToken], ['key', byKey], ['session', bySession]] as const) {
      const end = await s.endedWith(`the ${name} stream of the deleted user`);
      expect(end.reason, name).to.equal('revoked');
      expect(end.message, name).to.be.a('string').and.not.equal('');
    }
    const after = await aChange(plane, admin);
    await other.until('the bystander’s stream to go on', 'resource.changed', (d) => d.id === after);
    for (const s of [byToken, byKey, bySession]) expect(s.of('resource.changed', (d) => d.id === after)).to.deep.equal([]);
    expect(await plane.metric('hangar_event_streams_ended_total')).to.be.at.least(3);
  });

  it('a deleted API key’s stream ends; the same user’s token stream goes on', async () => {
    const user = await newUser(plane, admin);
    const byKey = await plane.stream(signedStream(user));
    const byToken = await plane.stream(bearer(user.token));
    expect([byKey.status, byToken.status]).to.deep.equal([200, 200]);
    const keyId = await keyIdOf(plane, admin, user);
    expect((await plane.request('DELETE', `/v1/iam/users/${user.userId}/keys/${keyId}`, { headers: bearer(user.token) })).status).to.equal(200);
    const end = await byKey.endedWith('the deleted key’s stream');
    expect(end).to.include({ reason: 'revoked' });
    expect(end.message).to.contain('access key');
    const change = await aChange(plane, admin);
    await byToken.until('the token stream to go on', 'resource.changed', (d) => d.id === change);
    expect(byToken.ended).to.equal(false);
  });

  it('a logged-out session’s stream ends; another session of the same user goes on', async () => {
    const user = await newUser(plane, admin);
    const [first, second] = [await sessionOf(plane, user), await sessionOf(plane, user)];
    const s1 = await plane.stream({ cookie: first.cookie });
    const s2 = await plane.stream({ cookie: second.cookie });
    expect([s1.status, s2.status]).to.deep.equal([200, 200]);
    const logout = await plane.request('DELETE', '/v1/iam/session', { headers: { cookie: first.cookie, 'x-csrf-token': first.csrf } });
    expect(logout.status, logout.text).to.equal(200);
    expect((await s1.endedWith('the logged-out session’s stream')).reason).to.equal('revoked');
    const change = await aChange(plane, admin);
    await s2.until('the other session’s stream to go on', 'resource.changed', (d) => d.id === change);
  });

  it('a password change ends the user’s token streams, and its key streams unless keep_api_keys', async () => {
    const user = await newUser(plane, admin);
    const byToken = await plane.stream(bearer(user.token));
    const byKey = await plane.stream(signedStream(user));
    const changed = await plane.request('POST', `/v1/iam/users/${user.userId}/password`, { body: { password: `${GOOD_PASSWORD}x`, keep_api_keys: true, current_password: user.password }, headers: bearer(user.token) });
    expect(changed.status, changed.text).to.equal(200);
    expect((await byToken.endedWith('the token stream after a password change')).reason).to.equal('revoked');
    const change = await aChange(plane, admin);
    await byKey.until('the kept key’s stream to go on', 'resource.changed', (d) => d.id === change);
    // Without keep_api_keys the keys go, and their streams with them.
    const again = await plane.request('POST', `/v1/iam/users/${user.userId}/password`, { body: { password: `${GOOD_PASSWORD}y` }, headers: bearer(admin.token) });
    expect(again.status, again.text).to.equal(200);
    expect((await byKey.endedWith('the key stream after a password change that removed the keys')).reason).to.equal('revoked');
  });
});

describeEachDialect('event streams follow a change of role (issue 26, finding 2)', (dialect) => {
  let t: TestHangar;
  let plane: Plane;
  let admin: Credentials;

  before(async () => {
    t = await startHangar(dialect, { plugins: [...PLUGINS, 'ssh-profiles'], overrides: SETTINGS(3600) });
    plane = inProcess(t);
    admin = await bootstrapAdmin(t);
  });
  afterEach(() => plane.settle());
  after(() => t?.stop());

  it('a demoted admin’s token stream is revoked, its key stream ends with role_changed, and the reconnect sees what a user may', async () => {
    const demoted = await newUser(plane, admin, 'admin');
    const byToken = await plane.stream(bearer(demoted.token));
    const byKey = await plane.stream(signedStream(demoted));
    const profile = async (name: string) => {
      const res = await plane.request('POST', '/v1/ssh-profiles', { body: { name, password: 'not-a-real-one' }, headers: bearer(admin.token) });
      expect(res.status, res.text).to.equal(201);
      return res.json.data.id as string;
    };
    const seenAsAdmin = await profile(`p-${randomToken(6).toLowerCase()}`);
    await byKey.until('an SSH profile change, seen as an admin', 'resource.changed', (d) => d.id === seenAsAdmin);

    const patched = await plane.request('PATCH', `/v1/iam/users/${demoted.userId}`, { body: { role: 'user' }, headers: bearer(admin.token) });
    expect(patched.status, patched.text).to.equal(200);
    expect((await byToken.endedWith('the demoted admin’s token stream')).reason).to.equal('revoked');
    const ended = await byKey.endedWith('the demoted admin’s key stream');
    expect(ended.reason).to.equal('role_changed');
    expect(ended.message).to.contain('user');

    // The key still works: the reconnect resumes after its last event, as a user.
    const again = await plane.stream({ ...signedStream(demoted), 'last-event-id': byKey.lastId! });
    expect(again.status).to.equal(200);
    const hidden = await profile(`p-${randomToken(6).toLowerCase()}`);
    const visible = await aChange(plane, admin);
    await again.until('a node change, which a user sees', 'resource.changed', (d) => d.id === visible);
    expect(again.of('resource.changed', (d) => d.id === hidden), 'no SSH profile change for a user').to.deep.equal([]);
  });
});

describeEachDialect('event streams: the periodic check ends a stream no notice told of (events.revalidate_seconds)', (dialect) => {
  let t: TestHangar;
  let plane: Plane;
  let admin: Credentials;

  before(async () => {
    t = await startHangar(dialect, { plugins: PLUGINS, overrides: SETTINGS(1) });
    plane = inProcess(t);
    admin = await bootstrapAdmin(t);
  });
  after(async () => {
    plane?.closeAll();
    await t?.stop();
  });

  it('a user deleted behind hangar’s back (a row changed by hand: no notice) loses its stream at the next check', async () => {
    log('bound: events.revalidate_seconds = 1: the stream ends at the next turn of events:revalidate-streams');
    const user = await newUser(plane, admin);
    const s = await plane.stream(signedStream(user));
    expect(s.status).to.equal(200);
    await t.hangar.services.db.knex('users').where({ userid: user.userId }).update({ deleted_at: new Date().toISOString() });
    expect((await s.endedWith('the stream of a user deleted by hand')).reason).to.equal('revoked');
  });
});

describeEachDialect('event streams are bounded (issue 26, finding 3)', (dialect) => {
  let t: TestHangar;
  let plane: Plane;
  let admin: Credentials;

  before(async () => {
    t = await startHangar(dialect, { plugins: PLUGINS, overrides: SETTINGS(3600) });
    plane = inProcess(t);
    admin = await bootstrapAdmin(t);
  });
  afterEach(() => plane.settle());
  after(() => t?.stop());

  it('answers 429 naming the limit past events.streams_per_principal and events.streams_per_address, and a closed stream frees its slot', async () => {
    log(`bound: events.streams_per_principal = ${PER_PRINCIPAL}, events.streams_per_address = ${PER_ADDRESS}`);
    const [u1, u2, u3] = [await newUser(plane, admin), await newUser(plane, admin), await newUser(plane, admin)];
    const mine: SseClient[] = [];
    for (let i = 0; i < PER_PRINCIPAL; i++) mine.push(await plane.stream(bearer(u1.token)));
    expect(mine.map((s) => s.status)).to.deep.equal(Array(PER_PRINCIPAL).fill(200));
    // Any credential of the same user counts: an API key too, and from another address.
    const over = await plane.stream(signedStream(u1), { localAddress: '127.0.0.2' });
    expect(over.status).to.equal(429);
    expect(over.refusal.message).to.contain('events.streams_per_principal').and.contain(String(PER_PRINCIPAL));

    // A slot comes back once a stream closes.
    mine[0]!.close();
    await waitFor(async () => (await plane.metric('hangar_event_streams_open')) === PER_PRINCIPAL - 1, { timeoutMs: 10_000, intervalMs: 50, what: 'the closed stream to be counted out' });
    const again = await plane.stream(bearer(u1.token));
    expect(again.status, JSON.stringify(again.refusal)).to.equal(200);

    // Per address: u1's 3 and u2's 3 fill 127.0.0.1; u3 is refused there, not from 127.0.0.3.
    for (let i = 0; i < PER_ADDRESS - PER_PRINCIPAL; i++) expect((await plane.stream(bearer(u2.token))).status).to.equal(200);
    const crowded = await plane.stream(bearer(u3.token));
    expect(crowded.status).to.equal(429);
    expect(crowded.refusal.message).to.contain('events.streams_per_address').and.contain(String(PER_ADDRESS));
    expect((await plane.stream(bearer(u3.token), { localAddress: '127.0.0.3' })).status).to.equal(200);
    expect(await plane.metric('hangar_event_streams_open')).to.equal(PER_ADDRESS + 1);
    expect(await plane.metric('hangar_event_streams_refused_total')).to.be.at.least(2);
  });

  it('drops a stream whose client does not read once it leaves events.stream_buffer_bytes untaken; a reconnect with Last-Event-ID gets the rest, nothing twice', async function () {
    this.timeout(240_000);
    const node = await aChange(plane, admin);
    const reader = await newUser(plane, admin);
    const openBefore = await plane.metric('hangar_event_streams_open');
    const droppedBefore = await plane.metric('hangar_event_streams_dropped_total');
    // A client that reads nothing: its socket stops reading, the kernel's buffers fill, then the server's.
    const unread = await plane.stream(bearer(reader.token), { query: '?types=node.event', paused: true });
    expect(unread.status).to.equal(200);
    await waitFor(async () => (await plane.metric('hangar_event_streams_open')) === openBefore + 1, { timeoutMs: 10_000, what: 'the stream to be counted open' });

    const posted: string[] = [];
    const post = async () => {
      const message = `m${posted.length.toString().padStart(5, '0')}-`;
      posted.push(message);
      const res = await plane.request('POST', '/v1/nodes/events', { body: { node_id: node, kind: 'flood', message: message + 'x'.repeat(3990) }, headers: bearer(admin.token) });
      expect(res.status, res.text).to.equal(201);
    };
    // Events of 4 kB each, 16 at a time, until the server drops the stream (the kernel holds a few MB first).
    const MAX_EVENTS = 8_000;
    while ((await plane.metric('hangar_event_streams_dropped_total')) === droppedBefore) {
      expect(posted.length, `the unread stream to be dropped within ${MAX_EVENTS} events of 4 kB`).to.be.below(MAX_EVENTS);
      for (let i = 0; i < 16; i++) await post();
    }
    expect(await plane.metric('hangar_event_streams_dropped_total')).to.equal(droppedBefore + 1);
    await waitFor(async () => (await plane.metric('hangar_event_streams_open')) === openBefore, { timeoutMs: 10_000, what: 'the dropped stream to be counted out' });
    const dropLine = t.logs.map((l) => JSON.parse(l)).find((l) => String(l.msg).startsWith('event stream dropped'));
    expect(dropLine, 'the drop is logged').to.not.equal(undefined);
    log(`bound: events.stream_buffer_bytes = ${BUFFER_BYTES}; dropped after ${posted.length} events of 4 kB with ${dropLine.unsent_bytes} bytes untaken (at most the bound and one event)`);
    expect(dropLine.unsent_bytes).to.be.at.most(BUFFER_BYTES + 4_200);

    // More happens while the client is away.
    for (let i = 0; i < 5; i++) await post();
    // The client reads what reached it before the cut, then reconnects from its last event.
    unread.read();
    await waitFor(() => unread.ended, { timeoutMs: 60_000, intervalMs: 50, what: 'the cut connection to end once read' });
    const first = unread.of('node.event', (d) => d.kind === 'flood').map((e) => String(e.json.message).slice(0, 7));
    expect(first.length, 'the client got events before the cut').to.be.greaterThan(0);
    const resumed = await plane.stream({ ...bearer(reader.token), 'last-event-id': unread.lastId! }, { query: '?types=node.event' });
    expect(resumed.status).to.equal(200);
    await resumed.until('the last posted event after the reconnect', 'node.event', (d) => String(d.message).startsWith(posted.at(-1)!), 60_000);
    expect(resumed.of('reset'), 'no reset: the journal still holds what was missed').to.deep.equal([]);
    const rest = resumed.of('node.event', (d) => d.kind === 'flood').map((e) => String(e.json.message).slice(0, 7));
    expect([...first, ...rest], 'every event exactly once, in order').to.deep.equal(posted);
    log(`the client got ${first.length} events before the cut and ${rest.length} after reconnecting with Last-Event-ID`);
  });

  it('replays a long backlog after Last-Event-ID as the client takes it, without dropping a client that reads', async function () {
    this.timeout(60_000);
    const node = await aChange(plane, admin);
    const s = await plane.stream(bearer(admin.token), { query: '?types=node.event' });
    const mark = await plane.request('POST', '/v1/nodes/events', { body: { node_id: node, kind: 'mark' }, headers: bearer(admin.token) });
    await s.until('the mark', 'node.event', (d) => d.kind === 'mark');
    const lastId = s.lastId!;
    s.close();
    expect(mark.status).to.equal(201);
    // More than events.stream_buffer_bytes happen while it is away (4 times the bound).
    const count = Math.ceil((4 * BUFFER_BYTES) / 4000);
    for (let i = 0; i < count; i++) {
      expect((await plane.request('POST', '/v1/nodes/events', { body: { node_id: node, kind: 'missed', message: `${i}:`.padEnd(3990, 'y') }, headers: bearer(admin.token) })).status).to.equal(201);
    }
    const droppedBefore = await plane.metric('hangar_event_streams_dropped_total');
    const resumed = await plane.stream({ ...bearer(admin.token), 'last-event-id': lastId }, { query: '?types=node.event' });
    await resumed.until('the last missed event', 'node.event', (d) => d.kind === 'missed' && String(d.message).startsWith(`${count - 1}:`));
    expect(resumed.of('node.event', (d) => d.kind === 'missed')).to.have.length(count);
    expect(await plane.metric('hangar_event_streams_dropped_total'), 'a reading client is not dropped').to.equal(droppedBefore);
  });
});

describeEachDialect('event streams end on every control plane and every worker (issue 26, finding 2)', (dialect) => {
  let cp: ControlPlane;
  let caPem = '';
  let admin: Credentials;

  before(async function () {
    this.timeout(90_000);
    cp = await serveControlPlane({
      name: `event-streams-${dialect.name}`,
      schema: dialect.freshStorage().schema,
      caPem: () => caPem,
      readyMessage: 'hangar workers serving',
      env: {
        HANGAR_API__WORKERS: '2',
        HANGAR_PLUGINS: PLUGINS.join(','),
        HANGAR_METRICS__SCRAPE_TOKEN: SCRAPE_TOKEN,
        HANGAR_EVENTS__REVALIDATE_SECONDS: '3600',
      },
    });
    caPem = readFileSync(path.join(cp.dataDir, 'pki', 'ca.crt'), 'utf8');
    admin = await bootstrapAdmin(cp.client);
  });
  after(async function () {
    this.timeout(30_000);
    if (cp && cp.child.exitCode === null) {
      cp.child.kill('SIGKILL');
      for (const pid of childrenOf(cp.child.pid!)) process.kill(pid, 'SIGKILL');
    }
  });

  it('a stream on one worker ends when its user is deleted through the other', async function () {
    this.timeout(60_000);
    const port = Number(new URL(cp.url).port);
    const workers = workersOf(cp.child.pid!);
    expect(workers).to.have.length(2);
    const plane = new Plane(cp.url, () => caPem);
    const user = await newUser(plane, admin);
    // Streams until one lands on each worker; the user is deleted through a connection to the other.
    const byWorker = new Map<number, SseClient>();
    for (let attempt = 0; attempt < 50 && byWorker.size < 2; attempt++) {
      const s = await plane.stream(signedStream(user));
      expect(s.status, JSON.stringify(s.refusal)).to.equal(200);
      const pid = serverProcessOf(port, s.res!.socket.localPort!, workers);
      if (pid !== null && !byWorker.has(pid)) byWorker.set(pid, s);
      else s.close();
    }
    expect([...byWorker.keys()]).to.have.members(workers);
    let via: HttpRequestOptions | null = null;
    for (let attempt = 0; attempt < 50 && !via; attempt++) {
      const agent = new https.Agent({ keepAlive: true, maxSockets: 1, ca: caPem });
      await httpRequest(`${cp.url}/healthz`, { ca: caPem, agent });
      const socket = Object.values(agent.freeSockets).flat()[0]!;
      if (serverProcessOf(port, socket.localPort!, workers) === workers[0]) via = { agent };
      else agent.destroy();
    }
    expect(via, 'a connection to the first worker').to.not.equal(null);
    const deleted = await plane.request('DELETE', `/v1/iam/users/${user.userId}`, { ...via!, headers: bearer(admin.token) });
    expect(deleted.status).to.equal(200);
    for (const [pid, s] of byWorker) expect((await s.endedWith(`the stream on worker ${pid}`)).reason).to.equal('revoked');
    plane.closeAll();
  });
});

describe('event streams end on another control plane on the same PostgreSQL (issue 26, finding 2)', () => {
  const dialects: TestDialect[] = [];
  let a: TestHangar;
  let b: TestHangar;
  let admin: Credentials;

  before(async function () {
    this.timeout(60_000);
    const { TestDialect: Dialect } = await import('../support/dialects.js');
    const { postgresAvailable, requireService } = await import('../support/requirements.js');
    requireService(this, await postgresAvailable(), 'PostgreSQL (HANGAR_TEST_PG_URL, or run scripts/services.sh as root)');
    const dialect = new Dialect('postgres');
    dialects.push(dialect);
    const shared = dialect.freshStorage();
    a = await startHangar(dialect, { plugins: PLUGINS, overrides: SETTINGS(3600), storage: shared });
    b = await startHangar(dialect, { plugins: PLUGINS, overrides: SETTINGS(3600), storage: { dataDir: dialect.freshStorage().dataDir, schema: shared.schema } });
    admin = await bootstrapAdmin(a);
  });
  after(async () => {
    await b?.stop();
    await a?.stop();
    for (const d of dialects) await d.cleanup();
  });

  it('the stream on control plane B ends when the user is deleted, or its key removed, through A', async () => {
    const planeA = inProcess(a);
    const planeB = inProcess(b);
    try {
      const user = await newUser(planeA, admin);
      const keyed = await newUser(planeA, admin);
      const byToken = await planeB.stream(bearer(user.token));
      const byKey = await planeB.stream(signedStream(keyed));
      expect([byToken.status, byKey.status]).to.deep.equal([200, 200]);
      expect((await planeA.request('DELETE', `/v1/iam/users/${user.userId}`, { headers: bearer(admin.token) })).status).to.equal(200);
      expect((await byToken.endedWith('B’s stream of the user deleted through A')).reason).to.equal('revoked');
      const keyId = await keyIdOf(planeA, admin, keyed);
      expect((await planeA.request('DELETE', `/v1/iam/users/${keyed.userId}/keys/${keyId}`, { headers: bearer(admin.token) })).status).to.equal(200);
      expect((await byKey.endedWith('B’s stream of the key removed through A')).reason).to.equal('revoked');
      expect(await planeB.metric('hangar_event_streams_ended_total')).to.equal(2);
    } finally {
      planeA.closeAll();
      planeB.closeAll();
    }
  });
});
