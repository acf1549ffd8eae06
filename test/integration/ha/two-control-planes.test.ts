import { expect } from 'chai';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import knexFactory from 'knex';
import { httpRequest } from '../../../core/http/client.js';
import { randomToken } from '../../../core/ids.js';
import { cleanupAgents, joinedNodeId, spawnAgent, waitFor, type AgentProcess } from '../../support/agents.js';
import { serveControlPlane, type ControlPlane } from '../../support/control-plane.js';
import { bearer, bootstrapAdmin, signed, type Credentials } from '../../support/identity.js';
import { PG_URL, postgresAvailable, requireService } from '../../support/requirements.js';
import { freePort } from '../../support/ports.js';

const PLUGINS = 'system,iam,nodes,agent-internal';

/**
 * A control plane of the test: the test's plugins, short task leases, quick heartbeats, and the
 * balancer's URL as its public URL, as docs/high-availability.md asks (the same on both: it is the
 * JWT issuer too, so a token from one is valid on the other).
 */
function serve(name: string, schema: string, port: number, publicUrl: string, caPem: () => string): Promise<ControlPlane> {
  return serveControlPlane({
    name,
    schema,
    port,
    caPem,
    env: {
      HANGAR_PLUGINS: PLUGINS,
      HANGAR_API__PUBLIC_URL: publicUrl,
      // Short leases: a task whose control plane died returns to pending within seconds.
      HANGAR_TASKS__LEASE_SECONDS: '3',
      HANGAR_TASKS__EXPIRY_CHECK_MS: '300',
      HANGAR_TASKS__POLL_WAIT_SECONDS: '20',
      HANGAR_NODES__HEARTBEAT_INTERVAL_SECONDS: '1',
    },
  });
}

/**
 * Two `hangar serve` processes on one PostgreSQL schema, each with its own data dir and port, and
 * haproxy in front of them as the load balancer (TCP: agents' mutual TLS passes through; `balance
 * first` sends everything to A while it is up). Real agent processes: one through the balancer
 * (on A until A dies), one straight to B.
 */
describe('high availability: two control planes on one PostgreSQL', function () {
  this.timeout(180_000);
  const schema = `t_${randomToken(12)}`;
  const planes: ControlPlane[] = [];
  let haproxy: ChildProcess | null = null;
  let a: ControlPlane;
  let b: ControlPlane;
  let caPem = '';
  let admin: Credentials;
  let viaBalancer: AgentProcess;
  let onB: AgentProcess;
  const nodes: Record<'balanced' | 'b', string> = { balanced: '', b: '' };
  const dirs: string[] = [];

  before(async function () {
    requireService(this, await postgresAvailable(), 'PostgreSQL (HANGAR_TEST_PG_URL, or run scripts/services.sh as root)');
    requireService(this, spawnSync('haproxy', ['-v']).status === 0, 'haproxy (apt-get install haproxy; .ci/run installs it)');
    const [portA, portB, portLb] = [await freePort(), await freePort(), await freePort()];
    a = await serve('a', schema, portA, `https://127.0.0.1:${portLb}`, () => caPem);
    planes.push(a);
    b = await serve('b', schema, portB, `https://127.0.0.1:${portLb}`, () => caPem);
    planes.push(b);
    // Trust on first use, for the test: every later request verifies against it.
    caPem = (await httpRequest(`${a.url}/v1/ca`, { ca: false })).text;

    const dir = mkdtempSync(path.join(os.tmpdir(), 'hangar-ha-lb-'));
    dirs.push(dir);
    const cfg = path.join(dir, 'haproxy.cfg');
    writeFileSync(
      cfg,
      [
        'defaults',
        '  mode tcp',
        '  timeout connect 2s',
        '  timeout client 60s',
        '  timeout server 60s',
        'frontend api',
        `  bind 127.0.0.1:${portLb}`,
        '  default_backend planes',
        'backend planes',
        '  balance first',
        `  server a 127.0.0.1:${portA} check inter 300 fall 1 rise 2 on-marked-down shutdown-sessions`,
        `  server b 127.0.0.1:${portB} check inter 300 fall 1 rise 2`,
        '',
      ].join('\n'),
    );
    haproxy = spawn('haproxy', ['-db', '-f', cfg], { stdio: 'ignore' });

    admin = await bootstrapAdmin(a.client);
    const token = async (plane: ControlPlane) => {
      const res = await plane.client.request('POST', '/v1/nodes/token', { body: {}, headers: bearer(admin.token) });
      expect(res.status, res.text).to.equal(201);
      return res.json.data.token as string;
    };
    viaBalancer = spawnAgent({ join: { token: await token(a), api: `https://127.0.0.1:${portLb}` } });
    onB = spawnAgent({ join: { token: await token(b), api: b.url } });
    nodes.balanced = await joinedNodeId(viaBalancer, 30_000);
    nodes.b = await joinedNodeId(onB, 30_000);
  });

  after(async () => {
    await cleanupAgents();
    haproxy?.kill('SIGKILL');
    for (const plane of planes) plane.child.kill('SIGKILL');
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
    const knex = knexFactory({ client: 'pg', connection: PG_URL, pool: { min: 0, max: 1 } });
    await knex.raw(`drop schema if exists "${schema}" cascade`).finally(() => knex.destroy());
  });

  /** Queues a log read for `nodeId` through `via`, then waits for its result through `readVia`. */
  async function logsThrough(via: ControlPlane, nodeId: string, readVia: ControlPlane, timeoutMs = 20_000): Promise<string[]> {
    const queued = await via.client.request('POST', `/v1/nodes/${nodeId}/logs?lines=5`, { headers: bearer(admin.token) });
    expect(queued.status, queued.text).to.equal(202);
    return readLogs(queued.json.data.task_id, nodeId, readVia, timeoutMs);
  }

  async function readLogs(taskId: string, nodeId: string, readVia: ControlPlane, timeoutMs = 20_000): Promise<string[]> {
    // A pending or running task answers without deleting it; a finished one is handed over once.
    return waitFor(
      async () => {
        const res = await readVia.client.request('GET', `/v1/nodes/${nodeId}/logs/${taskId}`, { headers: bearer(admin.token) });
        expect(res.status, res.text).to.equal(200);
        if (res.json.data.status === 'failed') throw new Error(`task failed: ${res.text}`);
        return res.json.data.status === 'completed' ? (res.json.data.result.lines as string[]) : null;
      },
      { timeoutMs, intervalMs: 200, what: `task ${taskId} on ${nodeId} to complete` },
    );
  }

  it('shares tokens, the CA and sealed secrets: a JWT and an API key made on A work on B', async () => {
    expect((await httpRequest(`${b.url}/v1/ca`, { ca: caPem })).text).to.equal(caPem);
    const me = await b.client.request('GET', `/v1/iam/users/${admin.userId}`, { headers: bearer(admin.token) });
    expect(me.status, me.text).to.equal(200);
    const key = await a.client.request('POST', `/v1/iam/users/${admin.userId}/keys`, { body: {}, headers: bearer(admin.token) });
    expect(key.status, key.text).to.equal(201);
    const pair = { accessKeyId: key.json.data.access_key_id, secretAccessKey: key.json.data.secret_access_key };
    const res = await signed(b.client, pair, 'GET', `/v1/iam/users/${admin.userId}`);
    expect(res.status, res.text).to.equal(200);
  });

  it('agents of each control plane run tasks queued on the other', async () => {
    expect(await logsThrough(b, nodes.balanced, a)).to.be.an('array');
    expect(await logsThrough(a, nodes.b, b)).to.be.an('array');
  });

  it('SIGKILL of A loses no acknowledged write and no task; B carries on, and the agent behind the balancer moves to it', async () => {
    // Writes in flight when A dies: every one A acknowledged must be there afterwards.
    const names = Array.from({ length: 40 }, (_, i) => `ha-user-${i}`);
    // A task for the agent on A, queued just before: it runs, or comes back to pending and runs through B.
    const queued = await a.client.request('POST', `/v1/nodes/${nodes.balanced}/logs?lines=3`, { headers: bearer(admin.token) });
    expect(queued.status, queued.text).to.equal(202);
    let answered = 0;
    const writes = names.map((username, i) =>
      new Promise((resolve) => setTimeout(resolve, i * 25))
        .then(() => a.client.request('POST', '/v1/iam/users', { body: { username, password: 'Correct-Horse-97-Battery!', role: 'user' }, headers: bearer(admin.token), timeoutMs: 10_000 }))
        .then((res) => (answered++, res))
        .catch(() => null),
    );
    // Kill it in the middle of the stream: some answered, more on their way.
    await waitFor(() => answered >= 5, { timeoutMs: 20_000, what: 'A to acknowledge some writes' });
    a.child.kill('SIGKILL');
    const answers = await Promise.all(writes);
    const acknowledged = answers.filter((res) => res?.status === 201).map((res) => res!.json.data.id as string);
    expect(acknowledged.length, 'some writes were acknowledged before the kill').to.be.greaterThan(0);
    for (const id of acknowledged) {
      const res = await b.client.request('GET', `/v1/iam/users/${id}`, { headers: bearer(admin.token) });
      expect(res.status, `user ${id}, acknowledged by A, read through B: ${res.text}`).to.equal(200);
    }

    // The task queued on A completes: the agent reconnects through the balancer, now to B.
    expect(await readLogs(queued.json.data.task_id, nodes.balanced, b, 40_000)).to.be.an('array');
    // B carries on: new tasks for both agents, new writes.
    expect(await logsThrough(b, nodes.balanced, b)).to.be.an('array');
    expect(await logsThrough(b, nodes.b, b)).to.be.an('array');
    const created = await b.client.request('POST', '/v1/iam/users', { body: { username: 'after-the-kill', password: 'Correct-Horse-97-Battery!', role: 'user' }, headers: bearer(admin.token) });
    expect(created.status, created.text).to.equal(201);
    expect(viaBalancer.exit(), viaBalancer.output()).to.equal(null);
    expect(onB.exit(), onB.output()).to.equal(null);
  });
});
