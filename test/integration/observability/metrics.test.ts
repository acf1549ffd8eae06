import { expect } from 'chai';
import { readFileSync } from 'node:fs';
import { cleanupAgents, FakeAgent, FAST_NODES, joinedNodeId, spawnAgent, waitFor } from '../../support/agents.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, type Credentials } from '../../support/identity.js';

const SCRAPE_TOKEN = 'scrape-0123456789abcdef0123456789abcdef';

/** One sample of the exposition text: name, labels, value. */
interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

function parseExposition(text: string): Sample[] {
  const samples: Sample[] = [];
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)$/.exec(line);
    if (!m) throw new Error(`not an exposition line: ${line}`);
    const labels: Record<string, string> = {};
    for (const [, k, v] of (m[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[k!] = v!;
    samples.push({ name: m[1]!, labels, value: Number(m[3]) });
  }
  return samples;
}

const find = (samples: Sample[], name: string, labels: Record<string, string> = {}) =>
  samples.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v));
const sum = (samples: Sample[]) => samples.reduce((n, s) => n + s.value, 0);

describeEachDialect('GET /metrics after real traffic', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  let nodeId: string;
  const scrape = async () => {
    const res = await t.request('GET', '/metrics', { headers: bearer(SCRAPE_TOKEN) });
    expect(res.status, res.text).to.equal(200);
    return { res, samples: parseExposition(res.text) };
  };

  before(async function () {
    this.timeout(60_000);
    t = await startHangar(dialect, {
      plugins: ['system', 'iam', 'metrics', 'events', 'nodes', 'agent-internal'],
      overrides: { ...FAST_NODES, metrics: { scrape_token: SCRAPE_TOKEN } },
    });
    admin = await bootstrapAdmin(t);
    // A real agent joins and heartbeats; its OS tasks fail at once (its PATH is empty).
    const token = await t.request('POST', '/v1/nodes/token', { body: {}, headers: bearer(admin.token) });
    const agent = spawnAgent({ join: { token: token.json.data.token, api: t.url } });
    nodeId = await joinedNodeId(agent);
    await waitFor(async () => (await t.request('GET', `/v1/nodes/${nodeId}`, { headers: bearer(admin.token) })).json.data.status === 'ready', { timeoutMs: 20_000, what: 'the node to be ready' });
    const check = await t.request('POST', `/v1/nodes/${nodeId}/check-updates`, { body: {}, headers: bearer(admin.token) });
    expect(check.status, check.text).to.equal(202);
    await waitFor(async () => ['completed', 'failed'].includes((await t.hangar.services.tasks.get(check.json.data.task_id))?.status ?? ''), { timeoutMs: 20_000, what: 'the agent to report its task' });
    for (let i = 0; i < 3; i++) await t.request('GET', '/v1/nodes', { headers: bearer(admin.token) });
    await t.request('GET', '/v1/nodes/node-doesnotexist0', { headers: bearer(admin.token) });
    await t.request('GET', '/no/such/path');
  });
  after(async () => {
    await cleanupAgents();
    await t?.stop();
  });

  it('answers only the scrape token: 401 without credentials, 403 to an admin, and the token works nowhere else', async () => {
    expect((await t.request('GET', '/metrics')).status).to.equal(401);
    expect((await t.request('GET', '/metrics', { headers: bearer('x'.repeat(40)) })).status).to.equal(401);
    const asAdmin = await t.request('GET', '/metrics', { headers: bearer(admin.token) });
    expect(asAdmin.status).to.equal(403);
    expect((await t.request('GET', '/v1/nodes', { headers: bearer(SCRAPE_TOKEN) })).status).to.equal(401);
  });

  it('serves the Prometheus text format, never cached', async () => {
    const { res } = await scrape();
    expect(res.headers['content-type']).to.match(/^text\/plain; version=0\.0\.4/);
    expect(res.headers['cache-control']).to.equal('no-store');
  });

  it('counts HTTP requests by route template, method and status, never by raw path', async () => {
    const { samples } = await scrape();
    const list = find(samples, 'hangar_http_requests_total', { method: 'GET', route: '/v1/nodes', status: '200' });
    expect(sum(list)).to.be.at.least(3);
    expect(sum(find(samples, 'hangar_http_requests_total', { route: '/v1/nodes/{id}', status: '404' }))).to.equal(1);
    expect(sum(find(samples, 'hangar_http_requests_total', { route: '(unmatched)', status: '404' }))).to.equal(1);
    const routes = new Set(find(samples, 'hangar_http_requests_total').map((s) => s.labels.route));
    for (const route of routes) expect(route, 'a route label is a template').not.to.match(/node-[0-9a-z]{6,}|\/no\/such/);
    const count = sum(find(samples, 'hangar_http_request_duration_seconds_count', { method: 'GET', route: '/v1/nodes' }));
    const total = sum(find(samples, 'hangar_http_request_duration_seconds_sum', { method: 'GET', route: '/v1/nodes' }));
    expect(count, 'one latency per request, whatever its status').to.equal(sum(find(samples, 'hangar_http_requests_total', { method: 'GET', route: '/v1/nodes' })));
    expect(total / count, 'mean latency of a list is a sane number of seconds').to.be.greaterThan(0).and.lessThan(5);
  });

  it('reports agents, heartbeats and their latency, and held long-polls', async () => {
    const { samples } = await scrape();
    expect(find(samples, 'hangar_agents', { connection: 'online' })[0]?.value).to.equal(1);
    expect(find(samples, 'hangar_agents', { connection: 'offline' })[0]?.value).to.equal(0);
    const beats = find(samples, 'hangar_heartbeats_total', { outcome: 'ok' })[0]?.value ?? 0;
    expect(beats).to.be.at.least(1);
    expect(find(samples, 'hangar_heartbeat_duration_seconds_count')[0]?.value).to.equal(beats);
    expect(find(samples, 'hangar_heartbeat_duration_seconds_sum')[0]?.value).to.be.greaterThan(0).and.lessThan(beats * 5);
    await waitFor(async () => find((await scrape()).samples, 'hangar_agent_polls_open')[0]?.value === 1, { timeoutMs: 10_000, what: 'the agent’s long-poll to show' });
  });

  it('reports the task queue by kind and status, lease expiries and task durations', async function () {
    this.timeout(30_000);
    const { samples: before } = await scrape();
    const kinds = find(before, 'hangar_task_duration_seconds_count');
    expect(sum(kinds), `task durations: ${JSON.stringify(kinds)}`).to.be.at.least(1);
    // A node with a stand-in agent that takes its task and never answers: the lease expires.
    const created = await t.request('POST', '/v1/nodes', { body: { name: 'silent' }, headers: bearer(admin.token) });
    const queued = await t.request('POST', `/v1/nodes/${created.json.data.id}/check-updates`, { body: {}, headers: bearer(admin.token) });
    expect(queued.status, queued.text).to.equal(202);
    const pending = find((await scrape()).samples, 'hangar_tasks', { status: 'pending', kind: queued.json.data.kind });
    expect(pending[0]?.value).to.equal(1);
    const silent = await FakeAgent.forNode(t, created.json.data.id);
    expect((await silent.poll(0)).json.data).to.have.length(1);
    expect(find((await scrape()).samples, 'hangar_tasks', { status: 'leased', kind: queued.json.data.kind })[0]?.value).to.equal(1);
    await waitFor(async () => (find((await scrape()).samples, 'hangar_task_lease_expiries_total', { outcome: 'retried' })[0]?.value ?? 0) >= 1, {
      timeoutMs: 15_000,
      what: 'a lease expiry to be counted',
    });
  });

  it('reports background loops, the store’s pool and the process', async () => {
    const { samples } = await scrape();
    expect(find(samples, 'hangar_loop_runs_total', { loop: 'nodes:offline-detection', outcome: 'ok' })[0]?.value).to.be.at.least(1);
    expect(find(samples, 'hangar_loop_runs_total', { outcome: 'failed' })).to.deep.equal([]);
    expect(find(samples, 'hangar_db_pool_connections', { state: 'max' })[0]?.value).to.equal(dialect.name === 'sqlite' ? 1 : 10);
    expect(find(samples, 'hangar_db_pool_connections', { state: 'used' })[0]?.value).to.be.at.least(0);
    expect(find(samples, 'process_resident_memory_bytes')[0]?.value).to.be.greaterThan(10_000_000);
    expect(find(samples, 'nodejs_eventloop_lag_seconds')).to.have.length(1);
  });

  it('has every series the Grafana dashboard (docs/grafana/hangar.json) queries', async () => {
    const dashboard = readFileSync('docs/grafana/hangar.json', 'utf8');
    const queried = new Set([...dashboard.matchAll(/\b((?:hangar|process|nodejs)_[a-z0-9_]+)/g)].map((m) => m[1]!.replace(/_(bucket|sum|count)$/, '')));
    expect(queried.size).to.be.greaterThan(10);
    const served = new Set((await scrape()).samples.map((s) => s.name.replace(/_(bucket|sum|count)$/, '')));
    expect([...queried].filter((name) => !served.has(name))).to.deep.equal([]);
  });
});
