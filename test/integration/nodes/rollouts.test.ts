import { expect } from 'chai';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { versionInfo } from '../../../core/version.js';
import { FakeAgent, FAST_NODES, NODE_PLUGINS, waitFor } from '../../support/agents.js';
import { describeEachDialect, type TestDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, type Credentials } from '../../support/identity.js';
import { hangarCli, TempDirs } from '../runner/support.js';

/** The version the stand-in build serves: what an updated agent reports. */
const NEW_VERSION = '9.9.9';

/**
 * How a test agent answers its update: `good` completes the task and comes back with the new
 * version; `returns` completes it but keeps reporting the old version (its new executable never
 * reached the control plane and the watchdog put the previous one back); `fails` fails the task.
 */
type Behaviour = 'good' | 'returns' | 'fails';

/**
 * A test double of a node's agent (FakeAgent) that heartbeats every second with the version it
 * runs and answers its agent.update tasks as `behaviour` says, recording when it took each.
 */
class FleetAgent {
  version = versionInfo.version;
  readonly updates: Array<{ task_id: string; at: number }> = [];
  private stopping = false;
  private loop: Promise<void> | null = null;

  constructor(
    readonly agent: FakeAgent,
    public behaviour: Behaviour,
  ) {}

  get id(): string {
    return this.agent.nodeId;
  }

  /** Why its loop ended early (its control plane went away), if it did. */
  failure: Error | null = null;

  /** One heartbeat with the version it runs, and one poll whose agent.update tasks it answers. */
  private async turn(): Promise<void> {
    await this.agent.heartbeat({ agent_version: this.version });
    const res = await this.agent.poll(1);
    for (const task of (res.json?.data ?? []) as Array<{ task_id: string; kind: string; payload: any }>) {
      if (task.kind !== 'agent.update') continue;
      this.updates.push({ task_id: task.task_id, at: Date.now() });
      if (this.behaviour === 'fails') {
        await this.agent.report(task.task_id, { status: 'failed', error: 'checksum mismatch: expected ab…, got cd…; kept the current executable' });
        continue;
      }
      await this.agent.report(task.task_id, { status: 'completed', output: { updated_to: task.payload.version, sha256: task.payload.sha256, grace_seconds: task.payload.grace_seconds } });
      if (this.behaviour === 'good') this.version = task.payload.version;
    }
  }

  start(): this {
    this.stopping = false;
    this.loop = (async () => {
      while (!this.stopping) {
        try {
          await this.turn();
        } catch (err) {
          // Its control plane stopped (the restart test) or the test that made it failed: it ends here.
          this.failure = err as Error;
          return;
        }
      }
    })();
    return this;
  }

  async stop(): Promise<void> {
    this.stopping = true;
    await this.loop;
  }
}

describeEachDialect('nodes: the agent updated in waves (POST /v1/nodes/update-agent)', (dialect: TestDialect) => {
  const temp = new TempDirs();
  let t: TestHangar;
  let admin: Credentials;
  let binaryDir: string;
  let storage: { dataDir: string; schema: string | null };
  const fleet: FleetAgent[] = [];

  const api = (method: string, pathAndQuery: string, body?: unknown) => t.request(method, pathAndQuery, { body, headers: bearer(admin.token) });
  const options = () => ({
    plugins: [...NODE_PLUGINS, 'tags', 'audit'],
    storage,
    overrides: {
      ...FAST_NODES,
      // A margin above the heartbeat interval: a node that returned to its previous version is heard from within it.
      nodes: { ...FAST_NODES.nodes, agent_rollout_margin_seconds: 3, agent_rollout_check_ms: 100 },
      system: { agent_binary_dir: binaryDir },
    },
  });

  /** Nodes whose test agents heartbeat as ready, named `<prefix>-1`…, each with a behaviour. */
  async function nodes(prefix: string, behaviours: Behaviour[]): Promise<FleetAgent[]> {
    const made: FleetAgent[] = [];
    for (const [i, behaviour] of behaviours.entries()) {
      const created = await api('POST', '/v1/nodes', { name: `${prefix}-${i + 1}` });
      expect(created.status, created.text).to.equal(201);
      made.push(new FleetAgent(await FakeAgent.forNode(t, created.json.data.id), behaviour).start());
    }
    await waitFor(async () => {
      for (const n of made) if ((await api('GET', `/v1/nodes/${n.id}`)).json.data.status !== 'ready') return false;
      return true;
    }, { what: `${prefix} nodes ready` });
    fleet.push(...made);
    return made;
  }

  const rollout = async (id: string) => (await api('GET', `/v1/nodes/update-agent/${id}`)).json.data;
  const settled = (id: string, timeoutMs = 30_000) =>
    waitFor(
      async () => {
        const r = await rollout(id);
        return r.status !== 'running' ? r : null;
      },
      { timeoutMs, intervalMs: 200, what: `rollout ${id} to end` },
    );
  const events = async (id: string) => ((await api('GET', `/v1/nodes/events?identifier=${id}`)).json.data as Array<{ kind: string; node_id: string | null; message: string }>).map((e) => e.kind);
  const tasksOf = async (nodeId: string) => (await t.hangar.services.db.knex('tasks').where({ node_id: nodeId, kind: 'agent.update' })).length;

  before(async function () {
    this.timeout(60_000);
    binaryDir = mkdtempSync(path.join(os.tmpdir(), 'hangar-binaries-'));
    // A stand-in build: the test agents never run it, they only report its version.
    writeFileSync(path.join(binaryDir, 'hangar-agent-test'), 'not really an executable');
    writeFileSync(path.join(binaryDir, 'manifest.json'), JSON.stringify({ version: NEW_VERSION, executables: { amd64: { file: 'hangar-agent-test', sha256: 'ab'.repeat(32), size: 24 } } }));
    storage = dialect.freshStorage();
    t = await startHangar(dialect, options());
    admin = await bootstrapAdmin(t);
  });
  afterEach(async () => {
    // Whatever a test left running ends before the next starts (one rollout at a time).
    for (const r of (await api('GET', '/v1/nodes/update-agent')).json.data as Array<{ id: string; status: string }>) {
      if (r.status === 'running') await api('POST', `/v1/nodes/update-agent/${r.id}/cancel`);
    }
    for (const r of (await api('GET', '/v1/nodes/update-agent')).json.data as Array<{ id: string }>) await settled(r.id, 60_000).catch(() => undefined);
  });
  after(async function () {
    this.timeout(30_000);
    await Promise.all(fleet.map((n) => n.stop()));
    await t?.stop();
    rmSync(binaryDir, { recursive: true, force: true });
    temp.cleanup();
  });

  it('bad input is a 400 naming the field: wave_size 0, over 100% or not a size, no selector, two selectors, an empty tag set, an unknown node', async function () {
    this.timeout(30_000);
    const [node] = await nodes('bad', ['good']);
    const cases: Array<[unknown, string]> = [
      [{ all: true, wave_size: 0 }, 'wave_size must be a number of nodes (at least 1)'],
      [{ all: true, wave_size: '0%' }, 'wave_size must be'],
      [{ all: true, wave_size: '150%' }, '150% is over 100%'],
      [{ all: true, wave_size: 'half' }, 'wave_size must be'],
      [{}, 'say which nodes to update: all: true, tags, cluster_id or node_ids'],
      [{ all: false }, 'say which nodes to update'],
      [{ all: true, node_ids: [node!.id] }, 'give one selector, not all and node_ids'],
      [{ tags: {} }, 'tags must name at least one tag'],
      [{ node_ids: [] }, 'node_ids'],
      [{ node_ids: ['node-0missing'] }, 'node_ids names no node node-0missing'],
      [{ tags: { fleet: 'nowhere' } }, 'the selector matches no node'],
      [{ all: true, pause_s: -1 }, 'pause_s'],
      [{ all: true, grace_seconds: 5 }, 'grace_seconds'],
    ];
    for (const [body, message] of cases) {
      const res = await api('POST', '/v1/nodes/update-agent', body);
      expect(res.status, `${JSON.stringify(body)}: ${res.text}`).to.equal(400);
      expect(res.json.message, JSON.stringify(body)).to.contain(message);
    }
    expect((await api('POST', '/v1/nodes/update-agent', { cluster_id: 'no-such-cluster' })).status).to.equal(404);
    expect((await api('GET', '/v1/nodes/update-agent/arol-0missing')).status).to.equal(404);
    // Nothing was queued by any of them.
    expect(await tasksOf(node!.id)).to.equal(0);
    await node!.stop();
  });

  it('waves respect the size and the order (by name), pause between them, and only the tagged nodes are touched; events and audit entries tell the story', async function () {
    this.timeout(60_000);
    const tagged = await nodes('wave', ['good', 'good', 'good', 'good', 'good']);
    const [untagged] = await nodes('other', ['good']);
    for (const n of [...tagged].reverse()) expect((await api('PUT', '/v1/tags', { resource_type: 'node', resource_id: n.id, key: 'fleet', value: 'a' })).status).to.be.oneOf([200, 201]);
    const started = await api('POST', '/v1/nodes/update-agent', { tags: { fleet: 'a' }, wave_size: '40%', pause_s: 1, grace_seconds: 15 });
    expect(started.status, started.text).to.equal(202);
    const id = started.json.data.id as string;
    expect(id).to.match(/^arol-/);
    expect(started.json.data).to.include({ status: 'running', waves_total: 3, wave_size: '40%', pause_s: 1 });
    expect(started.json.data.waves.map((w: { node_ids: string[] }) => w.node_ids)).to.deep.equal([
      [tagged[0]!.id, tagged[1]!.id],
      [tagged[2]!.id, tagged[3]!.id],
      [tagged[4]!.id],
    ]);
    // One at a time.
    const second = await api('POST', '/v1/nodes/update-agent', { all: true });
    expect(second.status).to.equal(409);
    expect(second.json.message).to.contain(`Agent rollout ${id} is still running`);

    const done = await settled(id);
    expect(done, JSON.stringify(done)).to.include({ status: 'completed', waves_done: 3, current_wave: null, failed_node: null });
    expect(done.counts).to.include({ total: 5, updated: 5, failed: 0, pending: 0, updating: 0 });
    expect(done.target_versions).to.deep.equal({ amd64: NEW_VERSION });
    for (const n of tagged) expect((await api('GET', `/v1/nodes/${n.id}`)).json.data.agent_version).to.equal(NEW_VERSION);
    // Each wave was queued only once the wave before it had come back, and a pause after it.
    const waves = [tagged.slice(0, 2), tagged.slice(2, 4), tagged.slice(4)];
    for (let w = 1; w < waves.length; w++) {
      const cameBack = Math.max(...waves[w - 1]!.map((n) => Date.parse(done.nodes.find((p: { node_id: string }) => p.node_id === n.id).finished_at)));
      const queued = Math.min(...waves[w]!.map((n) => n.updates[0]!.at));
      expect(queued - cameBack, `wave ${w + 1} began ${queued - cameBack} ms after wave ${w} came back`).to.be.at.least(1000);
    }
    for (const n of tagged) expect(n.updates, n.id).to.have.length(1);
    // The node outside the selector was never asked.
    expect(untagged!.updates).to.have.length(0);
    expect(untagged!.version).to.equal(versionInfo.version);

    const kinds = await events(id);
    expect(kinds[0]).to.equal('agent_rollout_started');
    expect(kinds.filter((k) => k === 'agent_rollout_wave_started')).to.have.length(3);
    expect(kinds.filter((k) => k === 'agent_rollout_wave_completed')).to.have.length(3);
    expect(kinds.at(-1)).to.equal('agent_rollout_completed');
    const perNode = (await api('GET', `/v1/nodes/events?node_id=${tagged[0]!.id}`)).json.data.map((e: { kind: string }) => e.kind);
    expect(perNode).to.include('agent_rollout_node_updated');
    const audit = (await api('GET', `/v1/audit?route=${encodeURIComponent('/v1/nodes/update-agent')}`)).json.data as Array<{ method: string; status: number }>;
    expect(audit.map((e) => e.status)).to.include.members([202, 409]);
    await Promise.all([...tagged, untagged!].map((n) => n.stop()));
  });

  it('a wave whose agent returns to its previous executable halts the rollout: the status names the node and why, the waves after it are untouched', async function () {
    this.timeout(60_000);
    const set = await nodes('halt', ['good', 'returns', 'good', 'good']);
    const started = await api('POST', '/v1/nodes/update-agent', { node_ids: set.map((n) => n.id), wave_size: 1, grace_seconds: 15 });
    expect(started.status, started.text).to.equal(202);
    const id = started.json.data.id as string;
    const done = await settled(id, 45_000);
    expect(done.status).to.equal('halted');
    expect(done.failed_node.id).to.equal(set[1]!.id);
    expect(done.failed_node.error).to.contain(`did not come back with version ${NEW_VERSION}: it runs ${versionInfo.version} again`);
    expect(done.reason).to.contain(`halted at wave 2 of 4: node halt-2 (${set[1]!.id})`).and.to.contain('watchdog returned it to the previous executable');
    expect(done.counts).to.include({ updated: 1, failed: 1, not_started: 2, pending: 0 });
    expect(done.waves.map((w: { status: string }) => w.status)).to.deep.equal(['completed', 'failed', 'not_started', 'not_started']);
    // The rest untouched: no task was queued for them, they still run the old version.
    for (const n of set.slice(2)) {
      expect(await tasksOf(n.id), n.id).to.equal(0);
      expect((await api('GET', `/v1/nodes/${n.id}`)).json.data.agent_version).to.equal(versionInfo.version);
    }
    const kinds = await events(id);
    expect(kinds).to.include('agent_rollout_halted');
    expect(kinds).not.to.include('agent_rollout_completed');
    expect(kinds.filter((k) => k === 'agent_rollout_wave_started')).to.have.length(2);
    await Promise.all(set.map((n) => n.stop()));
  });

  it('a wave whose update task fails halts it at once with the agent’s reason', async function () {
    this.timeout(30_000);
    const set = await nodes('fail', ['fails', 'good']);
    const started = await api('POST', '/v1/nodes/update-agent', { node_ids: set.map((n) => n.id), wave_size: '50%' });
    expect(started.status, started.text).to.equal(202);
    const done = await settled(started.json.data.id);
    expect(done.status).to.equal('halted');
    expect(done.failed_node).to.deep.include({ id: set[0]!.id, name: 'fail-1' });
    expect(done.failed_node.error).to.contain('its update task failed: checksum mismatch');
    expect(await tasksOf(set[1]!.id)).to.equal(0);
    await Promise.all(set.map((n) => n.stop()));
  });

  it('cancel stops before the next wave; a finished rollout cannot be cancelled (409)', async function () {
    this.timeout(30_000);
    const set = await nodes('cancel', ['good', 'good', 'good']);
    // Two requests at once: one starts, the other is refused (one running rollout at a time; this one lasts until cancelled).
    const both = await Promise.all([1, 2].map(() => api('POST', '/v1/nodes/update-agent', { node_ids: set.map((n) => n.id), wave_size: 1, pause_s: 600 })));
    expect(both.map((r) => r.status).sort(), both.map((r) => `${r.status} ${r.text}`).join('\n')).to.deep.equal([202, 409]);
    expect(both.find((r) => r.status === 409)!.json.message).to.match(/^Agent rollout arol-[0-9a-z]+ (is still running|started meanwhile and is still running)/);
    const id = both.find((r) => r.status === 202)!.json.data.id as string;
    // The first wave done, the pause before the second.
    const paused = await waitFor(async () => {
      const r = await rollout(id);
      return r.waves_done === 1 && r.next_wave_at ? r : null;
    }, { timeoutMs: 15_000, what: 'the pause after the first wave' });
    expect(paused).to.include({ status: 'running', current_wave: 2 });
    expect(paused.next_wave_at).to.be.a('string');
    const cancel = await api('POST', `/v1/nodes/update-agent/${id}/cancel`);
    expect(cancel.status, cancel.text).to.equal(202);
    expect(cancel.json.data.cancel_requested).to.equal(true);
    const done = await settled(id);
    expect(done).to.include({ status: 'cancelled', reason: 'cancelled before wave 2 of 3' });
    expect(done.counts).to.include({ updated: 1, not_started: 2 });
    for (const n of set.slice(1)) expect(await tasksOf(n.id)).to.equal(0);
    const again = await api('POST', `/v1/nodes/update-agent/${id}/cancel`);
    expect(again.status).to.equal(409);
    expect(again.json.message).to.contain('is cancelled; only a running one can be cancelled');
    expect(await events(id)).to.include.members(['agent_rollout_cancel_requested', 'agent_rollout_cancelled']);
    await Promise.all(set.map((n) => n.stop()));
  });

  it('survives a control-plane restart: the next process takes the rollout over where it was', async function () {
    this.timeout(60_000);
    const set = await nodes('restart', ['good', 'good']);
    const started = await api('POST', '/v1/nodes/update-agent', { node_ids: set.map((n) => n.id), wave_size: 1, pause_s: 2 });
    const id = started.json.data.id as string;
    await waitFor(async () => (await rollout(id)).waves_done === 1, { timeoutMs: 15_000, what: 'the first wave' });
    await Promise.all(set.map((n) => n.stop()));
    await t.stop();
    t = await startHangar(dialect, options());
    const login = await t.request('POST', '/v1/iam/login', { body: { username: admin.username, password: admin.password } });
    expect(login.status, login.text).to.equal(200);
    admin = { ...admin, token: login.json.data.token };
    // The same nodes' agents, now talking to the new process.
    const back = await Promise.all(set.map(async (n) => Object.assign(new FleetAgent(await FakeAgent.forNode(t, n.id), 'good'), { version: n.version }).start()));
    fleet.push(...back);
    const done = await settled(id);
    expect(done.status, JSON.stringify(done)).to.equal('completed');
    expect(done.counts).to.include({ updated: 2, failed: 0 });
    expect(set[0]!.updates.length + back[0]!.updates.length, 'the first node was updated once').to.equal(1);
    expect(back[1]!.updates).to.have.length(1);
    await Promise.all(back.map((n) => n.stop()));
  });

  it('hangar node update-agent follows the progress wave by wave, and ends 1 with the failed node and why when a wave halts', async function () {
    this.timeout(90_000);
    const set = await nodes('cli', ['good', 'good', 'fails', 'good', 'good']);
    for (const n of set.slice(0, 4)) await api('PUT', '/v1/tags', { resource_type: 'node', resource_id: n.id, key: 'cli', value: 'yes' });
    const dir = temp.make('hangar-cli-rollout-');
    const ca = path.join(dir, 'ca.pem');
    writeFileSync(ca, t.caPem);
    const env = { XDG_CONFIG_HOME: dir, HANGAR_API_URL: t.url, HANGAR_ACCESS_KEY: admin.accessKeyId, HANGAR_SECRET_KEY: admin.secretAccessKey, HANGAR_CA_FILE: ca, HANGAR_CLI_POLL_MS: '100' };
    const cli = (args: string[]) => hangarCli(args, { env, timeoutMs: 60_000 });

    const bad = await cli(['node', 'update-agent', '--all', '--wave-size', '0']);
    expect(bad.code).to.equal(1);
    expect(bad.stderr).to.contain('wave_size must be a number of nodes');

    const run = await cli(['node', 'update-agent', '--tag', 'cli=yes', '--wave-size', '50%', '--grace', '15']);
    expect(run.code, run.stderr + run.stdout).to.equal(1);
    const lines = run.stdout.split('\n');
    expect(lines[0]).to.match(/^agent rollout arol-[0-9a-z]+: 4 node\(s\) selected, 2 wave\(s\), to 9\.9\.9$/);
    // The first line is the rollout as accepted; then a line whenever something moved.
    expect(lines[1]).to.match(/^\d\d:\d\d:\d\d running · wave 1\/2 · 0 updated · 0 failed · 0 updating · 4 pending$/);
    expect(run.stdout).to.match(/halted · 1\/2 waves done · 3 updated · 1 failed · 0 updating · 0 pending\n/);
    expect(run.stdout).to.contain(`✗ cli-3 (${set[2]!.id}): its update task failed: checksum mismatch`);
    expect(run.stdout).to.contain('halted at wave 2 of 2: node cli-3');
    const id = /arol-[0-9a-z]+/.exec(lines[0]!)![0];

    const shown = await cli(['node', 'rollout', id]);
    expect(shown.code).to.equal(1);
    expect(shown.stdout).to.match(new RegExp(`wave 2 +failed +cli-3 \\(${set[2]!.id}\\): its update task failed`));
    const asJson = await cli(['node', 'rollout', id, '--json']);
    expect(asJson.code).to.equal(0);
    expect(JSON.parse(asJson.stdout)).to.include({ id, status: 'halted' });

    // Nodes by name with --node, in the order given, --no-wait; then cancelled from the CLI.
    set[2]!.behaviour = 'good';
    const queued = await cli(['node', 'update-agent', '--node', 'cli-5', '--node', 'cli-3', '--pause', '600', '--no-wait', '--json']);
    expect(queued.code, queued.stderr).to.equal(0);
    const second = JSON.parse(queued.stdout);
    expect(second.waves.map((w: { node_ids: string[] }) => w.node_ids)).to.deep.equal([[set[4]!.id], [set[2]!.id]]);
    await waitFor(async () => (await rollout(second.id)).waves_done === 1, { timeoutMs: 15_000, what: 'the first wave' });
    const cancelled = await cli(['node', 'rollout-cancel', second.id]);
    expect(cancelled.code, cancelled.stderr).to.equal(0);
    expect(cancelled.stdout).to.contain(`cancelling agent rollout ${second.id}`);
    expect((await settled(second.id)).status).to.equal('cancelled');
    await Promise.all(set.map((n) => n.stop()));
  });
});
