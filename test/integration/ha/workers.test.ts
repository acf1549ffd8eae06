import { expect } from 'chai';
import { generateKeyPairSync } from 'node:crypto';
import https from 'node:https';
import tls from 'node:tls';
import type { IncomingMessage } from 'node:http';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import knexFactory from 'knex';
import { httpRequest, type HttpRequestOptions } from '../../../core/http/client.js';
import { SseParser } from '../../../core/http/sse.js';
import { randomToken } from '../../../core/ids.js';
import { versionInfo } from '../../../core/version.js';
import { cleanupAgents, joinedNodeId, spawnAgent, waitFor } from '../../support/agents.js';
import { serveControlPlane, type ControlPlane } from '../../support/control-plane.js';
import { describeEachDialect } from '../../support/dialects.js';
import { bearer, bootstrapAdmin, createUser, type Credentials } from '../../support/identity.js';
import { childrenOf, serverProcessOf, workersOf } from '../../support/proc.js';
import { PG_URL } from '../../support/requirements.js';

const SCRAPE_TOKEN = randomToken(40);

/**
 * `hangar serve` with `api.workers: 2` (core/workers.ts): a primary process and two workers sharing
 * the port, the data dir and the store. Each check pins a connection to each worker (found in /proc),
 * so it sees both at work.
 */
describeEachDialect('hangar serve with two workers (api.workers)', (dialect) => {
  let cp: ControlPlane;
  let schema: string | null;
  let admin: Credentials;
  let caPem = '';
  const fresh = (): HttpRequestOptions => ({ ca: caPem, agent: new https.Agent({ keepAlive: false, ca: caPem }) });
  const request = (method: string, p: string, options: HttpRequestOptions = {}) => httpRequest(`${cp.url}${p}`, { ...fresh(), ...options, method });

  /** A connection of the test's own to the control plane's store (tables of its schema on PostgreSQL). */
  const storeKnex = () =>
    dialect.name === 'postgres'
      ? knexFactory({ client: 'pg', connection: PG_URL, searchPath: [schema!], pool: { min: 0, max: 1 } })
      : knexFactory({ client: 'better-sqlite3', connection: { filename: path.join(cp.dataDir, 'hangar.db') }, useNullAsDefault: true });

  /**
   * A keep-alive connection to each worker (keyed by pid): fresh connections are opened until one
   * lands on every worker, so a check can do something through one worker and look through the other.
   */
  async function connectionPerWorker(clientCert?: { cert: string; key: string }): Promise<Map<number, HttpRequestOptions>> {
    const workers = workersOf(cp.child.pid!);
    const port = Number(new URL(cp.url).port);
    const pinned = new Map<number, HttpRequestOptions>();
    for (let attempt = 0; attempt < 200 && pinned.size < workers.length; attempt++) {
      const agent = new https.Agent({ keepAlive: true, maxSockets: 1, ca: caPem, ...clientCert });
      const res = await httpRequest(`${cp.url}/healthz`, { ca: caPem, agent });
      expect(res.status).to.equal(200);
      const socket = Object.values(agent.freeSockets).flat()[0]!;
      const pid = serverProcessOf(port, socket.localPort!, workers);
      if (pid !== null && !pinned.has(pid)) pinned.set(pid, { ca: caPem, agent });
      else agent.destroy();
    }
    expect([...pinned.keys()], 'a connection to each worker').to.have.members(workers);
    return pinned;
  }

  /** The server certificate each worker presents to a new TLS connection (keyed by pid). */
  async function certificatePerWorker(): Promise<Map<number, tls.PeerCertificate>> {
    const workers = workersOf(cp.child.pid!);
    const port = Number(new URL(cp.url).port);
    const seen = new Map<number, tls.PeerCertificate>();
    for (let attempt = 0; attempt < 100 && seen.size < workers.length; attempt++) {
      const socket = await new Promise<tls.TLSSocket>((resolve, reject) => {
        const s = tls.connect({ host: '127.0.0.1', port, ca: caPem, servername: 'localhost' }, () => resolve(s));
        s.on('error', reject);
      });
      const pid = serverProcessOf(port, socket.localPort!, workers);
      if (pid !== null) seen.set(pid, socket.getPeerCertificate());
      socket.destroy();
    }
    expect([...seen.keys()], 'a connection to each worker').to.have.members(workers);
    return seen;
  }

  before(async function () {
    this.timeout(90_000);
    cp = await serveControlPlane({
      name: `workers-${dialect.name}`,
      schema: (schema = dialect.freshStorage().schema),
      caPem: () => caPem,
      readyMessage: 'hangar workers serving',
      env: {
        HANGAR_API__WORKERS: '2',
        HANGAR_PLUGINS: 'system,iam,login,events,metrics,tags,nodes,agent-internal,volumes',
        // A mail server that refuses: the login plugin warns at start-up (once, not once per worker).
        HANGAR_MAIL__HOST: '127.0.0.1',
        HANGAR_MAIL__PORT: '1',
        HANGAR_IAM__ANNOUNCE_BOOTSTRAP_SECRET: 'true',
        HANGAR_METRICS__SCRAPE_TOKEN: SCRAPE_TOKEN,
        HANGAR_TASKS__POLL_WAIT_SECONDS: '30',
        // A heartbeat budget so small that a few nodes already lengthen the interval (see the cadence test).
        HANGAR_NODES__MAX_HEARTBEATS_PER_SECOND: '0.1',
      },
    });
    caPem = readFileSync(path.join(cp.dataDir, 'pki', 'ca.crt'), 'utf8');
    admin = await bootstrapAdmin(cp.client);
  });

  after(async function () {
    this.timeout(30_000);
    await cleanupAgents();
    if (cp && cp.child.exitCode === null) {
      cp.child.kill('SIGKILL');
      for (const pid of childrenOf(cp.child.pid!)) process.kill(pid, 'SIGKILL');
    }
  });

  it('runs two workers under the primary, each a control plane on the same store, each leading its own loops', async function () {
    this.timeout(30_000);
    const workers = workersOf(cp.child.pid!);
    expect(workers).to.have.length(2);
    const serving = cp.output().split('\n').find((l) => l.includes('"hangar workers serving"'));
    expect(JSON.parse(serving!).pids).to.have.members(workers);
    expect(cp.output().match(/"msg":"hangar started"/g), 'each worker says it serves').to.have.length(2);
    // What every worker would say alike is said once: the bootstrap secret (one secret, one banner) and the mail warning.
    expect(cp.output().match(/X-Bootstrap-Secret: /g), 'one bootstrap banner').to.have.length(1);
    await waitFor(() => /does not answer, so password reset mails cannot be sent/.test(cp.output()), { timeoutMs: 10_000, what: 'the mail warning' });
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    expect(cp.output().match(/does not answer, so password reset mails cannot be sent/g), 'one mail warning').to.have.length(1);
    await connectionPerWorker();

    // Loops that run once across control planes are taken by one worker at a time, named apart.
    const knex = storeKnex();
    try {
      const rows: Array<{ name: string; holder: string }> = await waitFor(
        async () => {
          const found = await knex('leader_leases').select('name', 'holder');
          return found.length ? found : null;
        },
        { timeoutMs: 20_000, what: 'a loop leader' },
      );
      for (const row of rows) expect(row.holder, row.name).to.match(/\/worker-[12]$/);
    } finally {
      await knex.destroy();
    }
  });

  it('sums the workers’ metrics on a scrape, whichever worker answers it', async () => {
    const [a, b] = [...(await connectionPerWorker()).values()];
    const before = await scrapeCount(a!);
    expect(await scrapeCount(b!), 'the same figure from either worker').to.equal(before);
    for (const via of [a!, b!]) for (let i = 0; i < 5; i++) expect((await request('GET', '/v1/version', via)).status).to.equal(200);
    expect(await scrapeCount(a!)).to.equal(before + 10);
    expect(await scrapeCount(b!)).to.equal(before + 10);

    async function scrapeCount(via: HttpRequestOptions): Promise<number> {
      const res = await request('GET', '/metrics', { ...via, headers: bearer(SCRAPE_TOKEN) });
      expect(res.status, res.text).to.equal(200);
      const line = res.text.split('\n').find((l) => l.startsWith('hangar_http_requests_total{') && l.includes('route="/v1/version"') && l.includes('status="200"'));
      return line ? Number(line.split(' ').pop()) : 0;
    }
  });

  it('a change made through one worker is seen at once by the other: a deleted user’s token stops working on both', async () => {
    const [a, b] = [...(await connectionPerWorker()).values()];
    // Several times: the other worker's answer races the notice unless the delete waits for it.
    for (let round = 0; round < 20; round++) {
      const user = await createUser(cp.client, admin, { username: `u${randomToken(6).toLowerCase()}` });
      // Both workers hold the user's principal in their caches now.
      for (const via of [a!, b!]) expect((await request('GET', '/v1/nodes', { ...via, headers: bearer(user.token) })).status).to.equal(200);
      expect((await request('DELETE', `/v1/iam/users/${user.userId}`, { ...a!, headers: bearer(admin.token) })).status).to.equal(200);
      expect((await request('GET', '/v1/nodes', { ...b!, headers: bearer(user.token) })).status, `through the other worker, round ${round + 1}`).to.equal(401);
      expect((await request('GET', '/v1/nodes', { ...a!, headers: bearer(user.token) })).status, 'through the same worker').to.equal(401);
    }
  });

  it('a live events stream on one worker carries the changes made through the other, and its event ids resume on the other', async function () {
    this.timeout(20_000);
    const pinned = await connectionPerWorker();
    const events: Array<{ id?: string; event: string; data: any }> = [];
    const parser = new SseParser();
    const res = await new Promise<IncomingMessage>((resolve, reject) => {
      const req = https.request(`${cp.url}/v1/events/stream?types=resource.changed`, { ca: caPem, agent: false, headers: { accept: 'text/event-stream', ...bearer(admin.token) } }, resolve);
      req.on('error', reject);
      req.end();
    });
    try {
      const streaming = serverProcessOf(Number(new URL(cp.url).port), res.socket.localPort!, [...pinned.keys()]);
      const other = [...pinned].find(([pid]) => pid !== streaming)![1];
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        for (const e of parser.push(chunk)) events.push({ id: e.id, event: e.event, data: JSON.parse(e.data) });
      });
      const ids: string[] = [];
      const create = async (name: string, via: HttpRequestOptions) => {
        const created = await request('POST', '/v1/nodes', { ...via, headers: bearer(admin.token), body: { name } });
        expect(created.status, created.text).to.equal(201);
        ids.push(created.json.data.id);
      };
      for (let i = 0; i < 3; i++) await create(`events-${i}`, other);
      await waitFor(() => ids.every((id) => events.some((e) => e.data.id === id)), { timeoutMs: 10_000, what: `events for ${ids.join(', ')} (got ${JSON.stringify(events)})` });

      // A client of the streaming worker that missed what came next asks the other worker for it (as
      // an EventSource reconnecting through another connection would): the same events, same ids.
      const seen = events.at(-1)!.id!;
      const own = [...pinned].find(([pid]) => pid === streaming)![1];
      for (let i = 3; i < 5; i++) await create(`events-${i}`, i === 3 ? own : other);
      await waitFor(() => ids.every((id) => events.some((e) => e.data.id === id)), { timeoutMs: 10_000, what: 'the later events on the stream' });
      // Every worker's events come back numbered from the primary, to the worker that made them too:
      // the other worker may journal its own change a moment after the stream carried it.
      const later = ids.slice(3);
      const missed = await waitFor(
        async () => {
          const replay = await request('GET', `/v1/events?types=resource.changed&after=${encodeURIComponent(seen)}`, { ...other, headers: bearer(admin.token) });
          expect(replay.status, replay.text).to.equal(200);
          return later.every((id) => replay.json.data.some((e: { data: { id: string } }) => e.data.id === id)) ? replay : undefined;
        },
        { timeoutMs: 5_000, what: 'the later events in the other worker’s journal' },
      );
      const onStream = events.slice(events.findIndex((e) => e.id === seen) + 1).map((e) => ({ id: e.id, id_of: e.data.id }));
      expect(missed.json.data.map((e: { id: string; data: { id: string } }) => ({ id: e.id, id_of: e.data.id }))).to.deep.equal(onStream);
      expect(onStream.map((e) => e.id_of)).to.include.members(ids.slice(3));
    } finally {
      res.destroy();
    }
  });

  it('an agent long-polling one worker gets a task queued through the other at once, not at the end of its wait', async function () {
    this.timeout(90_000);
    const token = await request('POST', '/v1/nodes/token', { headers: bearer(admin.token), body: {} });
    expect(token.status, token.text).to.equal(201);
    const agent = spawnAgent({ join: { token: token.json.data.token, api: cp.url } });
    const nodeId = await joinedNodeId(agent, 30_000);
    await waitFor(async () => (await request('GET', `/v1/nodes/${nodeId}`, { headers: bearer(admin.token) })).json.data?.status === 'ready', { timeoutMs: 30_000, what: 'the node to be ready' });
    // Queued through each worker in turn: whichever holds the agent's long-poll, the other wakes it.
    const through = [...(await connectionPerWorker()).values()];
    for (let i = 0; i < 4; i++) {
      const started = Date.now();
      const queued = await request('POST', `/v1/nodes/${nodeId}/logs?lines=1`, { ...through[i % 2]!, headers: bearer(admin.token) });
      expect(queued.status, queued.text).to.equal(202);
      await waitFor(
        async () => {
          const read = await request('GET', `/v1/nodes/${nodeId}/logs/${queued.json.data.task_id}`, { headers: bearer(admin.token) });
          return read.json.data?.status === 'completed';
        },
        { timeoutMs: 20_000, intervalMs: 100, what: `task ${i} to complete` },
      );
      expect(Date.now() - started, `task ${i}: woken by the enqueue, not by the 30 s wait`).to.be.lessThan(5_000);
    }
  });

  it('every worker tells the machines it answers the heartbeat interval of the whole fleet, not of those it saw', async function () {
    this.timeout(90_000);
    const pinned = [...(await connectionPerWorker()).values()];
    for (let i = 0; i < 6; i++) {
      expect((await request('POST', '/v1/nodes', { headers: bearer(admin.token), body: { name: `fleet-${i}` } })).status).to.equal(201);
    }
    // Each worker counts the fleet every 10 s. Six nodes or more at 0.1 heartbeats a second: 60 s,
    // the longest (half the task lease); a worker that knew only its own joins would say 10 s.
    // What each worker tells a machine now is in its heartbeat reply, which counts nothing: one
    // machine heartbeats through each worker until that worker says 60 (it never does if the worker
    // does not count the whole fleet; no sleep stands in for its count).
    const keys = generateKeyPairSync('ec', { namedCurve: 'P-256' });
    const machineToken = await request('POST', '/v1/nodes/token', { headers: bearer(admin.token), body: {} });
    const machine = await request('POST', '/v1/nodes/join', {
      body: { token: machineToken.json.data.token, hostname: `fleet-machine-${randomToken(6)}`, public_key: keys.publicKey.export({ type: 'spki', format: 'pem' }).toString(), architecture: 'x86_64' },
    });
    expect(machine.status, machine.text).to.equal(201);
    const asMachine = { cert: machine.json.data.certificate as string, key: keys.privateKey.export({ type: 'pkcs8', format: 'pem' }).toString() };
    for (const [pid, via] of await connectionPerWorker(asMachine)) {
      await waitFor(
        async () => {
          const beat = await request('POST', '/v1/internal/heartbeat', { ...via, body: { hostname: 'fleet-machine', architecture: 'amd64', agent_version: versionInfo.version } });
          expect(beat.status, beat.text).to.equal(200);
          return beat.json.data.heartbeat_interval_seconds === 60;
        },
        { timeoutMs: 30_000, intervalMs: 500, what: `worker ${pid} to tell a heartbeating machine the fleet’s interval (60 s)` },
      );
    }
    for (const via of pinned) {
      const token = await request('POST', '/v1/nodes/token', { ...via, headers: bearer(admin.token), body: {} });
      expect(token.status, token.text).to.equal(201);
      const publicKey = generateKeyPairSync('ec', { namedCurve: 'P-256' }).publicKey.export({ type: 'spki', format: 'pem' }).toString();
      const joined = await request('POST', '/v1/nodes/join', { ...via, body: { token: token.json.data.token, hostname: `fleet-machine-${randomToken(6)}`, public_key: publicKey, architecture: 'x86_64' } });
      expect(joined.status, joined.text).to.equal(201);
      expect(joined.json.data.heartbeat_interval_seconds).to.equal(60);
    }
  });

  it('a server certificate reissued through one worker is presented by every worker', async function () {
    this.timeout(30_000);
    const [through] = [...(await connectionPerWorker()).values()];
    const before = await certificatePerWorker();
    expect(new Set([...before.values()].map((c) => c.serialNumber)).size, 'one certificate to start with').to.equal(1);
    const node = await request('POST', '/v1/nodes', { ...through, headers: bearer(admin.token), body: { name: 'control-plane', is_control_plane: true, ip_address: '198.51.100.2' } });
    expect(node.status, node.text).to.equal(201);
    const moved = await request('POST', `/v1/nodes/${node.json.data.id}/ip`, { ...through, headers: bearer(admin.token), body: { ip_address: '192.0.2.10', regenerate_cert: true } });
    expect(moved.json.data.certificate, moved.text).to.deep.equal({ reissued: true, added_sans: ['192.0.2.10'] });
    const after = await waitFor(
      async () => {
        const now = await certificatePerWorker();
        return [...now.values()].every((c) => c.subjectaltname?.includes('IP Address:192.0.2.10')) ? now : null;
      },
      { timeoutMs: 10_000, what: 'every worker to present the reissued certificate' },
    );
    expect(new Set([...after.values()].map((c) => c.serialNumber)).size, 'the same certificate in each').to.equal(1);
    expect((await request('GET', '/v1/version')).status, 'verified against the CA').to.equal(200);
  });

  it('replaces a worker that dies, serving all the while, leaving the others’ operations alone; SIGTERM stops the workers and the primary cleanly', async function () {
    this.timeout(60_000);
    // An operation the surviving worker holds a live lease on (as if it were preparing a volume now).
    const knex = storeKnex();
    const now = new Date().toISOString();
    const held = { id: 'vol-held', name: 'held', node_id: 'node-elsewhere', folder: '/srv/held', type: 'local', status: 'preparing', op: 'prepare', op_id: 'op-held-by-a-worker', op_lease_until: new Date(Date.now() + 3_600_000).toISOString(), created_at: now, updated_at: now };
    await knex('volumes').insert(held);
    const [victim, survivor] = workersOf(cp.child.pid!);
    process.kill(victim!, 'SIGKILL');
    // (A connection handed over in the instant the worker died would go with it.)
    await waitFor(() => cp.output().includes('"msg":"worker exited; starting a new one"'), { timeoutMs: 10_000, what: 'the primary to see the worker go' });
    for (let i = 0; i < 4; i++) expect((await request('GET', '/healthz')).status, 'the other worker answers').to.equal(200);
    const workers = await waitFor(
      () => {
        const now = workersOf(cp.child.pid!);
        return now.length === 2 && !now.includes(victim!) ? now : null;
      },
      { timeoutMs: 30_000, what: 'a new worker' },
    );
    expect(workers).to.include(survivor);
    await waitFor(() => (cp.output().match(/"msg":"hangar started"/g) ?? []).length === 3, { timeoutMs: 30_000, what: 'the new worker to serve' });
    for (let i = 0; i < 4; i++) expect((await request('GET', '/healthz')).status).to.equal(200);
    try {
      const after = await knex('volumes').where({ id: held.id }).first();
      expect(after.op_id, 'the new worker did not take over a live operation').to.equal(held.op_id);
      expect(cp.output()).not.to.contain('took over an operation');
    } finally {
      await knex('volumes').where({ id: held.id }).delete();
      await knex.destroy();
    }

    const exited = new Promise<number | null>((resolve) => cp.child.once('exit', (code) => resolve(code)));
    cp.child.kill('SIGTERM');
    expect(await exited, cp.output()).to.equal(0);
    expect(cp.output().match(/"msg":"hangar stopped"/g), 'both workers stopped gracefully').to.have.length(2);
    for (const pid of workers) expect(() => process.kill(pid, 0), `worker ${pid} is gone`).to.throw();
  });
});

describe('hangar serve with workers that cannot start', function () {
  this.timeout(60_000);

  it('stops with the first worker’s exit code and its message, once, without starting the others', async () => {
    const failed = serveControlPlane({
      name: 'workers-broken',
      schema: null,
      caPem: () => '',
      readyMessage: 'hangar workers serving',
      env: { HANGAR_API__WORKERS: '3', HANGAR_API__TLS_CERT: '/nonexistent/server.crt' },
    }).catch((err: Error) => err);
    const err = await failed;
    expect(err).to.be.instanceOf(Error);
    const output = (err as Error).message;
    expect(output.match(/api\.tls_cert is set but api\.tls_key is not/g), output).to.have.length(1);
    expect(output).to.include('"msg":"worker exited before serving; stopping"');
    expect(output).to.include('"exit_code":2');
    expect(output, 'the primary exits with the worker’s code').to.include('exited (code 2)');
    expect(output).not.to.include('"worker":2');
  });
});
