import { expect } from 'chai';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { FakeAgent, FAST_NODES, waitFor } from '../../support/agents.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, type Credentials } from '../../support/identity.js';
import { hangarCli } from '../runner/support.js';
import { ManualClock } from '../../../core/clock.js';
import { swarmDouble } from '../../support/swarm-double.js';

const SCRAPE_TOKEN = 'scrape-alerts-0123456789abcdef0123456789ab';
/** Longer than a flap of the node_offline test (clear, then offline again), which must not resolve its alert. */
const HOLD_DOWN_SECONDS = 12;
/** The hold-down after that test: the later ones only need an alert to resolve once its condition is clear. */
const SHORT_HOLD_DOWN_SECONDS = 1;
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

interface Alert {
  id: string;
  rule: string;
  resource_type: string;
  resource_id: string;
  subject: string | null;
  severity: string;
  state: string;
  message: string;
  started_at: string | null;
  cleared_at: string | null;
  resolved_at: string | null;
  silenced: boolean;
  silenced_until: string | null;
}

const PLUGINS = ['system', 'iam', 'metrics', 'events', 'nodes', 'agent-internal', 'swarms', 'alerts'];
const overrides = (holdDownSeconds: number) => ({
  ...FAST_NODES,
  metrics: { scrape_token: SCRAPE_TOKEN },
  clusters: { observe_interval_seconds: 1 },
  alerts: {
    interval_seconds: 1,
    hold_down_seconds: holdDownSeconds,
    retention_days: 90,
    rules: {
      node_offline: { for_seconds: 2 },
      node_disk: { for_seconds: 0, threshold_percent: 80 },
      node_memory: { for_seconds: 0, threshold_percent: 90 },
      cluster_member_not_ready: { for_seconds: 0 },
      // Longer than any certificate hangar issues lives: every one of them is "expiring".
      certificate_expiry: { within_days: 100 * 365 },
    },
  },
});

describeEachDialect('alerts: built-in rules, hold-down, silences, events, metric and CLI', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  let work: string;
  const storage = dialect.freshStorage();
  let holdDownSeconds = HOLD_DOWN_SECONDS;
  const started = () => startHangar(dialect, { plugins: PLUGINS, storage, overrides: overrides(holdDownSeconds), clock });
  let clock: ManualClock | undefined;
  const beaters: Array<() => Promise<void>> = [];

  before(async function () {
    this.timeout(60_000);
    work = mkdtempSync(path.join(os.tmpdir(), 'hangar-alerts-'));
    t = await started();
    admin = await bootstrapAdmin(t);
  });
  // Before the dialect's own after hook drops the store: no heartbeat may outlive its test.
  afterEach(async () => {
    for (const stop of beaters.splice(0)) await stop();
  });
  after(async function () {
    this.timeout(30_000);
    await t?.stop();
    if (work) rmSync(work, { recursive: true, force: true });
  });

  const api = (method: string, pathAndQuery: string, body?: unknown) => t.request(method, pathAndQuery, { body, headers: bearer(admin.token) });
  const alerts = async (query = ''): Promise<Alert[]> => {
    const res = await api('GET', `/v1/alerts${query}`);
    expect(res.status, res.text).to.equal(200);
    return res.json.data;
  };
  const alertsOn = async (resourceId: string, query = '') => (await alerts(`?resource_id=${resourceId}${query}`)).filter((a) => a.resource_id === resourceId);
  const events = async (type: 'alert.firing' | 'alert.resolved', alertId: string) => {
    const res = await api('GET', `/v1/events?types=${type}`);
    expect(res.status, res.text).to.equal(200);
    return (res.json.data as Array<{ type: string; data: Record<string, unknown> }>).filter((e) => e.data.id === alertId);
  };
  const firingMetric = async (rule: string, severity: string) => {
    const res = await t.request('GET', '/metrics', { headers: bearer(SCRAPE_TOKEN) });
    expect(res.status, res.text).to.equal(200);
    const line = res.text.split('\n').find((l) => l.startsWith(`hangar_alerts_firing{rule="${rule}",severity="${severity}"}`));
    expect(line, res.text).to.be.a('string');
    return Number(line!.split(' ').at(-1));
  };

  /** A node (record and client certificate) whose agent is simulated. */
  const node = async (name: string) => {
    const res = await api('POST', '/v1/nodes', { name: `${name}-${dialect.name}` });
    expect(res.status, res.text).to.equal(201);
    return FakeAgent.forNode(t, res.json.data.id as string);
  };
  /** Heartbeats every half second until the returned function is called. */
  const beat = (agent: FakeAgent, facts: Record<string, unknown> = {}) => {
    let on = true;
    const loop = (async () => {
      while (on) {
        const res = await agent.heartbeat(facts);
        const id = res.json?.request_id as string | undefined;
        expect(res.status, `${res.text}\n${id ? t.logs.filter((l) => l.includes(id)).join('') : ''}`).to.equal(200);
        await sleep(500);
      }
    })();
    const stop = async () => {
      on = false;
      await loop;
    };
    beaters.push(stop);
    return stop;
  };
  const status = async (id: string) => (await api('GET', `/v1/nodes/${id}`)).json.data.status as string;

  it('node_offline fires once a node is offline for for_seconds, keeps firing through a flap within the hold-down, and resolves once after it', async function () {
    this.timeout(120_000);
    const agent = await node('flappy');
    const id = agent.nodeId;
    let stop = beat(agent);
    await waitFor(async () => (await status(id)) === 'ready', { timeoutMs: 15_000, what: 'the node to be ready' });
    expect(await alertsOn(id, '&rule=node_offline')).to.deep.equal([]);
    await stop();

    const firing = await waitFor(async () => (await alertsOn(id, '&state=firing')).find((a) => a.rule === 'node_offline'), { timeoutMs: 30_000, what: 'node_offline to fire' });
    expect(firing).to.include({ resource_type: 'node', severity: 'critical', state: 'firing', silenced: false, resolved_at: null });
    expect(firing.message).to.contain(id).and.to.contain('offline');
    const [announced] = await waitFor(async () => {
      const seen = await events('alert.firing', firing.id);
      return seen.length ? seen : null;
    }, { timeoutMs: 10_000, what: 'the alert.firing event' });
    expect(announced!.data).to.include({ rule: 'node_offline', resource_type: 'node', resource_id: id, severity: 'critical', started_at: firing.started_at });

    // The node comes back for a moment: the condition clears, the hold-down starts, nothing resolves.
    stop = beat(agent);
    await waitFor(async () => (await api('GET', `/v1/alerts/${firing.id}`)).json.data.cleared_at, { timeoutMs: 15_000, what: 'the condition to be seen clear' });
    await stop();
    // …and goes again before the hold-down has passed: the same alert goes on firing.
    await waitFor(async () => (await status(id)) === 'offline', { timeoutMs: 15_000, what: 'the node offline again' });
    const again = await waitFor(async () => {
      const a = (await api('GET', `/v1/alerts/${firing.id}`)).json.data as Alert;
      return a.cleared_at === null ? a : null;
    }, { timeoutMs: 10_000, what: 'the condition to be seen again' });
    expect(again).to.include({ state: 'firing', started_at: firing.started_at });
    expect((await alertsOn(id, '&rule=node_offline')).map((a) => a.id)).to.deep.equal([firing.id]);
    expect(await events('alert.firing', firing.id)).to.have.length(1);
    expect(await events('alert.resolved', firing.id)).to.deep.equal([]);

    // Back for good (until the test ends): resolved once the hold-down has passed, announced once.
    beat(agent);
    const resolved = await waitFor(async () => {
      const a = (await api('GET', `/v1/alerts/${firing.id}`)).json.data as Alert;
      return a.state === 'resolved' ? a : null;
    }, { timeoutMs: HOLD_DOWN_SECONDS * 1000 + 20_000, what: 'the alert to resolve' });
    expect(Date.parse(resolved.resolved_at!) - Date.parse(resolved.cleared_at!)).to.be.at.least(HOLD_DOWN_SECONDS * 1000);
    const [gone] = await waitFor(async () => {
      const seen = await events('alert.resolved', firing.id);
      return seen.length ? seen : null;
    }, { timeoutMs: 10_000, what: 'the alert.resolved event' });
    expect(gone!.data).to.include({ rule: 'node_offline', resource_id: id, started_at: firing.started_at, resolved_at: resolved.resolved_at });
    expect((await alerts('?state=resolved')).map((a) => a.id)).to.include(firing.id);
    expect((await alerts('?state=firing')).map((a) => a.id)).not.to.include(firing.id);
    expect(await events('alert.firing', firing.id)).to.have.length(1);
  });

  it('a silence (CLI) keeps an alert out of hangar_alerts_firing and announces nothing until it ends', async function () {
    this.timeout(120_000);
    // The control plane goes on with a short hold-down (on the same store): waiting out the long one proves nothing more here.
    await t.stop();
    holdDownSeconds = SHORT_HOLD_DOWN_SECONDS;
    t = await started();
    const ca = path.join(work, 'ca.pem');
    writeFileSync(ca, t.caPem);
    const env = { XDG_CONFIG_HOME: work, HANGAR_API_URL: t.url, HANGAR_ACCESS_KEY: admin.accessKeyId, HANGAR_SECRET_KEY: admin.secretAccessKey, HANGAR_CA_FILE: ca };
    const cli = async (args: string[], code = 0) => {
      const res = await hangarCli(args, { env, timeoutMs: 60_000 });
      expect(res.code, `hangar ${args.join(' ')}\n${res.stderr}${res.stdout}`).to.equal(code);
      return res;
    };

    const agent = await node('silenced');
    const id = agent.nodeId;
    const stop = beat(agent);
    await waitFor(async () => (await status(id)) === 'ready', { timeoutMs: 15_000, what: 'the node to be ready' });
    await stop();
    const firing = await waitFor(async () => (await alertsOn(id, '&state=firing')).find((a) => a.rule === 'node_offline'), { timeoutMs: 30_000, what: 'node_offline to fire' });
    await waitFor(async () => (await events('alert.firing', firing.id)).length, { timeoutMs: 10_000, what: 'the alert.firing event' });

    // The metric counts the firing, unsilenced alerts of the rule: as many as the API lists (read
    // when neither changed meanwhile: other tests' nodes may come and go).
    const unsilenced = async () => (await alerts('?state=firing&rule=node_offline')).filter((a) => !a.silenced).length;
    const metricAgrees = () =>
      waitFor(async () => {
        const listed = await unsilenced();
        const metric = await firingMetric('node_offline', 'critical');
        return listed === metric && (await unsilenced()) === listed ? { listed } : null;
      }, { timeoutMs: 15_000, what: 'hangar_alerts_firing to equal the firing, unsilenced alerts listed' });
    expect((await metricAgrees()).listed).to.be.at.least(1);

    expect((await cli(['alerts', '--state', 'firing'])).stdout).to.contain(firing.id).and.to.contain('node_offline');
    expect((await cli(['alerts', '--state', 'resolved'])).stdout).not.to.contain(firing.id);
    const silencedOut = await cli(['alerts', 'silence', firing.id, '--minutes', '30']);
    expect(silencedOut.stdout).to.match(new RegExp(`^silenced alert ${firing.id} until \\S+\\n$`));
    const silencedAlert = (await api('GET', `/v1/alerts/${firing.id}`)).json.data as Alert;
    expect(silencedAlert.silenced).to.equal(true);
    expect(Date.parse(silencedAlert.silenced_until!) - Date.now()).to.be.within(25 * 60_000, 31 * 60_000);
    await metricAgrees();

    // It resolves while silenced: listed as resolved, not announced.
    beat(agent);
    await waitFor(async () => (await api('GET', `/v1/alerts/${firing.id}`)).json.data.state === 'resolved', { timeoutMs: SHORT_HOLD_DOWN_SECONDS * 1000 + 20_000, what: 'the alert to resolve' });
    await sleep(2500); // two more checks: time for an announcement that must not come
    expect(await events('alert.resolved', firing.id)).to.deep.equal([]);

    // The silence ends: the resolution of an announced firing is announced now.
    expect((await cli(['alerts', 'unsilence', firing.id])).stdout).to.equal(`unsilenced alert ${firing.id}\n`);
    await waitFor(async () => (await events('alert.resolved', firing.id)).length === 1, { timeoutMs: 10_000, what: 'the alert.resolved event after the silence' });

    // Bad input, named; nothing to silence on a resolved alert.
    const zero = await api('POST', `/v1/alerts/${firing.id}/silence`, { minutes: 0 });
    expect(zero.status).to.equal(400);
    expect(zero.json.message).to.contain('minutes');
    expect((await cli(['alerts', 'silence', firing.id, '--minutes', '5'], 1)).stderr).to.contain('resolved');
    expect((await api('POST', '/v1/alerts/alert-doesnotexist0/silence', { minutes: 5 })).status).to.equal(404);
    expect((await api('GET', '/v1/alerts?state=burning')).status).to.equal(400);
  });

  it('node_disk per mount, node_memory and agent_outdated from heartbeats; an older agent without per-mount disks is no error', async function () {
    this.timeout(60_000);
    const GiB = 2 ** 30;
    const full = await node('full');
    const old = await node('old');
    const older = await node('older');
    beat(full, {
      resources: {
        memory_total_bytes: 100 * GiB,
        memory_free_bytes: 5 * GiB,
        disks: [
          { mount: '/', fs_type: 'ext4', total_bytes: 100 * GiB, free_bytes: 50 * GiB },
          { mount: '/var/lib/docker', fs_type: 'xfs', total_bytes: 100 * GiB, free_bytes: 10 * GiB },
        ],
      },
    });
    // Agents before per-mount disks: the root's totals, or nothing at all.
    beat(old, { agent_version: '0.0.1', resources: { memory_total_bytes: 100 * GiB, memory_free_bytes: 50 * GiB, disk_total_bytes: 100 * GiB, disk_free_bytes: 1 * GiB } });
    beat(older, { agent_version: '0.0.1', resources: { cpus: 2 } });

    const disk = await waitFor(async () => {
      const found = (await alertsOn(full.nodeId, '&state=firing')).filter((a) => a.rule === 'node_disk');
      return found.length ? found : null;
    }, { timeoutMs: 15_000, what: 'node_disk to fire' });
    expect(disk.map((a) => a.subject)).to.deep.equal(['/var/lib/docker']);
    expect(disk[0]!.message).to.contain('/var/lib/docker is 90% full');
    const memory = await waitFor(async () => (await alertsOn(full.nodeId, '&state=firing')).find((a) => a.rule === 'node_memory'), { timeoutMs: 15_000, what: 'node_memory to fire' });
    expect(memory.message).to.contain('memory 95% in use');

    const oldDisk = await waitFor(async () => (await alertsOn(old.nodeId, '&state=firing')).find((a) => a.rule === 'node_disk'), { timeoutMs: 15_000, what: 'node_disk of the old agent’s root' });
    expect(oldDisk.subject).to.equal('/');
    for (const n of [old, older]) {
      const outdated = await waitFor(async () => (await alertsOn(n.nodeId, '&state=firing')).find((a) => a.rule === 'agent_outdated'), { timeoutMs: 15_000, what: 'agent_outdated' });
      expect(outdated).to.include({ severity: 'info' });
      expect(outdated.message).to.contain('0.0.1');
    }
    // Nothing to judge for the oldest: no disk or memory alert, the agent of now none either.
    const nodeRules = async (n: FakeAgent) => (await alertsOn(n.nodeId)).filter((a) => a.resource_type === 'node').map((a) => a.rule).sort();
    expect(await nodeRules(older)).to.deep.equal(['agent_outdated']);
    expect(await nodeRules(full)).to.deep.equal(['node_disk', 'node_memory']);
  });

  it('cluster_member_not_ready fires for a member its swarm reports down while its agent heartbeats, and clears when the swarm reports it ready', async function () {
    this.timeout(60_000);
    let state = 'ready';
    const member = () => ({ runtime_node_id: 'fake-runtime-node', hostname: 'fake-host', address: null, role: 'manager', state, availability: 'active', leader: true });
    const swarm = await swarmDouble(t, admin.token, { answers: { members: () => ({ members: [member()] }) } });
    beat(swarm.agent);
    try {
      state = 'down';
      const firing = await waitFor(async () => (await alertsOn(swarm.nodeId, '&state=firing')).find((a) => a.rule === 'cluster_member_not_ready'), { timeoutMs: 20_000, what: 'cluster_member_not_ready to fire' });
      expect(firing).to.include({ resource_type: 'node', severity: 'critical', message: `node fake-manager (${swarm.nodeId}) is not ready in swarm live: the swarm reports its node down` });
      state = 'ready';
      await waitFor(async () => (await alertsOn(swarm.nodeId)).find((a) => a.id === firing.id && a.cleared_at), { timeoutMs: 20_000, what: 'the condition to clear (the alert then resolves after the hold-down)' });
    } finally {
      // Its polling ends before the next test restarts the control plane.
      await swarm.stop();
    }
  });

  it('certificate_expiry fires for the CA, the server certificate and each node’s client certificate within the configured days', async function () {
    this.timeout(30_000);
    const agent = await node('cert');
    const certs = await waitFor(async () => {
      const found = (await alerts('?state=firing&rule=certificate_expiry')).filter((a) => ['ca', 'server', agent.nodeId].includes(a.resource_id));
      return found.length === 3 ? found : null;
    }, { timeoutMs: 15_000, what: 'certificate_expiry for the CA, the server and the node' });
    for (const a of certs) {
      expect(a).to.include({ resource_type: 'certificate', severity: 'warning' });
      expect(a.message).to.match(/expires on \d{4}-\d\d-\d\dT/);
    }
    expect(certs.find((a) => a.resource_id === agent.nodeId)!.message).to.contain(`client certificate of node ${agent.nodeId}`);
  });

  // Last: it restarts the control plane on the same store with the clock moved on.
  it('a resolved alert is deleted once it was resolved longer ago than alerts.retention_days; firing ones stay', async function () {
    this.timeout(60_000);
    const resolved = await alerts('?state=resolved');
    expect(resolved, 'the node_offline test left a resolved alert').to.not.deep.equal([]);
    const firing = (await alerts('?state=firing')).map((a) => a.id);
    await t.stop();
    clock = new ManualClock(Date.now() + 91 * 86_400_000);
    t = await started();
    const login = await t.request('POST', '/v1/iam/login', { body: { username: admin.username, password: admin.password } });
    expect(login.status, login.text).to.equal(200);
    admin = { ...admin, token: login.json.data.token };
    // Only those resolved before: an alert still in its hold-down when the clock jumped resolves now, within its retention.
    const gone = new Set(resolved.map((a) => a.id));
    await waitFor(async () => ((await alerts('?state=resolved')).some((a) => gone.has(a.id)) ? null : true), { timeoutMs: 15_000, what: 'the resolved alerts past their retention to go' });
    for (const a of resolved) expect((await api('GET', `/v1/alerts/${a.id}`)).status).to.equal(404);
    const left = (await alerts()).map((a) => a.id);
    for (const id of firing) {
      // Still firing (the rules run again at the new time): kept. A node_offline alert that fired meanwhile is new.
      const now = (await api('GET', `/v1/alerts/${id}`)).json.data as Alert;
      if (now.state !== 'resolved') expect(left).to.include(id);
    }
  });
});
