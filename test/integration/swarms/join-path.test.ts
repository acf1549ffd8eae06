import { expect } from 'chai';
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { answerTasks, FakeAgent, waitFor, type FakeManagerScript } from '../../support/agents.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, type Credentials } from '../../support/identity.js';

const wgKey = () => randomBytes(32).toString('base64');
const nowSeconds = () => Math.floor(Date.now() / 1000);

/** What an agent's heartbeat says of its overlay interface (core/overlay.ts OverlayReport). */
function overlayReport(options: { up?: boolean; address: string | null; peers: Array<{ node_id: string; handshake_ago: number | null }> }) {
  const now = nowSeconds();
  return {
    interface: 'hangar0',
    up: options.up ?? true,
    address: options.address,
    checked_at: now,
    peers: options.peers.map((p) => ({ public_key: wgKey(), node_id: p.node_id, latest_handshake: p.handshake_ago === null ? 0 : now - p.handshake_ago })),
  };
}

/**
 * Which address a swarm member is advertised by, and the path a joining node confirms first, with
 * test doubles of agents (no engine, no WireGuard): what the agents report of their overlay through
 * heartbeats decides the address; what the joining agent answers to network.confirm-path decides
 * whether the join goes on. The machine lab runs the same on real machines (provisioning suite).
 */
describeEachDialect('swarm joins: the address a member is reached at, and the path to the manager first', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  const scripts: Array<ReturnType<typeof answerTasks>> = [];

  const api = (method: string, p: string, body?: unknown) => t.request(method, p, { body, headers: bearer(admin.token) });
  const get = async (p: string) => {
    const res = await api('GET', p);
    expect(res.status, `${p}: ${res.text}`).to.equal(200);
    return res.json.data;
  };

  /** A machine that joined with a token (so it has an overlay address and a WireGuard key), and a test double of its agent. */
  async function joinedMachine(hostname: string) {
    const token = await api('POST', '/v1/nodes/token', {});
    expect(token.status, token.text).to.equal(201);
    const { publicKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
    const wg_public_key = wgKey();
    const joined = await t.request('POST', '/v1/nodes/join', {
      body: { token: token.json.data.token, hostname, public_key: publicKey.export({ type: 'spki', format: 'pem' }), architecture: 'amd64', wg_public_key },
    });
    expect(joined.status, joined.text).to.equal(201);
    const id = joined.json.data.node_id as string;
    const agent = await FakeAgent.forNode(t, id);
    expect((await agent.heartbeat()).status).to.equal(200);
    const node = await get(`/v1/nodes/${id}`);
    return { id, agent, overlayIp: joined.json.data.overlay_ip as string, ipAddress: node.ip_address as string, wgPublicKey: wg_public_key };
  }

  /** Heartbeats with this overlay report, then waits until the node's view shows what was kept of it. */
  async function reportOverlay(machine: { id: string; agent: FakeAgent }, report: ReturnType<typeof overlayReport> | null) {
    expect((await machine.agent.heartbeat(report ? { overlay: report } : {})).status).to.equal(200);
    // Heartbeats of an online node are written in batches (a quarter second).
    return waitFor(
      async () => {
        const node = await get(`/v1/nodes/${machine.id}`);
        if (report === null) return node.overlay === null ? node : null;
        const answering = report.peers.filter((p) => p.latest_handshake > 0 && report.checked_at - p.latest_handshake <= 180).length;
        const kept = node.overlay;
        return kept?.up === report.up && kept.address === report.address && kept.peers === report.peers.length && kept.handshakes === answering ? node : null;
      },
      { timeoutMs: 5000, what: `node ${machine.id}'s overlay state` },
    );
  }

  function answer(machine: { agent: FakeAgent }, script: FakeManagerScript) {
    const s = answerTasks(machine.agent, script);
    scripts.push(s);
    return s;
  }

  async function swarmSettled(id: string, ok: (s: any) => boolean, what: string) {
    return waitFor(
      async () => {
        const s = await get(`/v1/swarms/${id}`);
        return ok(s) ? s : null;
      },
      { timeoutMs: 15_000, intervalMs: 150, what },
    );
  }

  before(async () => {
    t = await startHangar(dialect, {
      plugins: ['system', 'iam', 'nodes', 'agent-internal', 'swarms'],
      overrides: { clusters: { call_timeout_seconds: 10, join_path_wait_seconds: 7 }, swarms: { drain_wait_seconds: 0 } },
    });
    admin = await bootstrapAdmin(t);
  });
  after(async () => {
    for (const s of scripts) await s.stop();
    await t?.stop();
  });

  it('keeps what the agent reports of its overlay: up, its address, how many peers answer and which do not; handshakes that only moved on change nothing', async function () {
    this.timeout(20_000);
    const m = await joinedMachine('reports');
    expect((await get(`/v1/nodes/${m.id}`)).overlay, 'nothing reported yet').to.equal(null);
    const peers = [
      { node_id: 'node-answers', handshake_ago: 20 },
      { node_id: 'node-silent', handshake_ago: null },
      { node_id: 'node-gone-quiet', handshake_ago: 600 },
    ];
    const node = await reportOverlay(m, overlayReport({ address: m.overlayIp, peers }));
    expect(node.overlay).to.deep.equal({ interface: 'hangar0', up: true, address: m.overlayIp, peers: 3, handshakes: 1, without_handshake: ['node-gone-quiet', 'node-silent'] });
    // The same peers answering, later: nothing to write but the heartbeat's time.
    await new Promise((resolve) => setTimeout(resolve, 1100));
    expect((await m.agent.heartbeat({ overlay: overlayReport({ address: m.overlayIp, peers: peers.map((p) => ({ ...p, handshake_ago: p.handshake_ago && p.handshake_ago - 1 })) }) })).status).to.equal(200);
    await waitFor(async () => (await get(`/v1/nodes/${m.id}`)).last_heartbeat_at !== node.last_heartbeat_at, { timeoutMs: 5000, what: 'the second heartbeat written' });
    const after = await get(`/v1/nodes/${m.id}`);
    expect(after.overlay).to.deep.equal(node.overlay);
    expect(after.updated_at, 'the node did not change').to.equal(node.updated_at);
  });

  it('advertises a swarm member by its overlay address only while its overlay is up with that address and a peer answering; otherwise by its node address, saying why', async function () {
    this.timeout(90_000);
    const m = await joinedMachine('advertised');
    let swarmNo = 0;
    answer(m, {
      answers: {
        init: () => ({ cluster_id: `fake-swarm-${swarmNo}`, runtime_node_id: 'fake-runtime' }),
        inspectWorkloads: () => ({ workloads: [] }),
        leave: () => ({ left: true }),
      },
    });
    const other = [{ node_id: 'node-peer', handshake_ago: 30 }];
    const cases: Array<{ what: string; report: ReturnType<typeof overlayReport> | null; overlay: boolean; why?: RegExp }> = [
      { what: 'no overlay reported', report: null, overlay: false, why: /its agent has not reported an overlay interface for / },
      { what: 'the interface is down', report: overlayReport({ up: false, address: m.overlayIp, peers: other }), overlay: false, why: /its overlay interface hangar0 is down/ },
      { what: 'another address on it', report: overlayReport({ address: '10.99.0.7', peers: other }), overlay: false, why: /hangar0 has the address 10\.99\.0\.7, not / },
      { what: 'no peer yet', report: overlayReport({ address: m.overlayIp, peers: [] }), overlay: false, why: /has no WireGuard peer yet/ },
      { what: 'no handshake', report: overlayReport({ address: m.overlayIp, peers: [{ node_id: 'node-peer', handshake_ago: null }] }), overlay: false, why: /no WireGuard handshake with any of its 1 peer in the last 180 s/ },
      { what: 'a handshake too old to be live', report: overlayReport({ address: m.overlayIp, peers: [{ node_id: 'node-peer', handshake_ago: 200 }] }), overlay: false, why: /no WireGuard handshake/ },
      { what: 'up, its address, a peer answering', report: overlayReport({ address: m.overlayIp, peers: other }), overlay: true },
    ];
    for (const c of cases) {
      await reportOverlay(m, c.report);
      const swarm = (await api('POST', '/v1/swarms', { name: `adv-${++swarmNo}` })).json.data;
      const joined = await api('POST', `/v1/swarms/${swarm.id}/join`, { node_id: m.id });
      expect(joined.status, `${c.what}: ${joined.text}`).to.equal(202);
      const active = await swarmSettled(swarm.id, (s) => s.status === 'active' || s.status === 'failed', `swarm ${swarm.name} to form`);
      expect(active.status, `${c.what}: ${active.error}`).to.equal('active');
      expect(active.manager.advertise_address, c.what).to.equal(c.overlay ? m.overlayIp : m.ipAddress);
      // Recorded just after the member turns active.
      const joinedEvent = await waitFor(
        async () => ((await get(`/v1/nodes/events?node_id=${m.id}`)) as Array<{ kind: string; message: string }>).find((e) => e.kind === 'swarm_joined' && e.message.startsWith(`joined swarm ${swarm.name} `)),
        { timeoutMs: 5000, what: `the swarm_joined event of ${swarm.name}` },
      );
      if (c.overlay) expect(joinedEvent.message, c.what).to.equal(`joined swarm ${swarm.name} as manager, advertising ${m.overlayIp}`);
      else expect(joinedEvent.message, c.what).to.match(new RegExp(`^joined swarm ${swarm.name} as manager, advertising its node address ${m.ipAddress.replace(/\./g, '\\.')} \\(its overlay is not used: `)).and.match(c.why!);
      expect((await api('DELETE', `/v1/swarms/${swarm.id}?force=true`)).status).to.be.oneOf([200, 202]);
      await waitFor(async () => (await api('GET', `/v1/swarms/${swarm.id}`)).status === 404, { timeoutMs: 15_000, intervalMs: 150, what: `swarm ${swarm.name} to go` });
    }
  });

  it('refuses to join a node that has neither a working overlay nor a node address (409 naming what is missing)', async () => {
    const bare = await api('POST', '/v1/nodes', { name: 'nowhere' });
    const agent = await FakeAgent.forNode(t, bare.json.data.id);
    expect((await agent.heartbeat()).status).to.equal(200);
    const swarm = (await api('POST', '/v1/swarms', { name: 'needs-an-address' })).json.data;
    const refused = await api('POST', `/v1/swarms/${swarm.id}/join`, { node_id: bare.json.data.id });
    expect(refused.status).to.equal(409);
    expect(refused.json.message).to.equal(
      `Node ${bare.json.data.id} has no address other members can reach: its overlay cannot be used (it has no overlay address) and it has no node address (set one with POST /v1/nodes/${bare.json.data.id}/ip)`,
    );
    expect((await get(`/v1/swarms/${swarm.id}`)).members, 'nothing was recorded').to.deep.equal([]);
  });

  describe('a worker joining a manager advertised by its overlay address', () => {
    let manager: Awaited<ReturnType<typeof joinedMachine>>;
    let swarmId: string;

    before(async function () {
      this.timeout(30_000);
      manager = await joinedMachine('manager');
      answer(manager, {
        answers: {
          init: () => ({ cluster_id: 'fake-overlay-swarm', runtime_node_id: 'rt-manager' }),
          joinTokens: () => ({ worker: 'SWMTKN-1-worker', manager: 'SWMTKN-1-manager', managers: [`${manager.overlayIp}:2377`] }),
          inspectWorkloads: () => ({ workloads: [] }),
          members: () => ({ members: [] }),
        },
      });
      await reportOverlay(manager, overlayReport({ address: manager.overlayIp, peers: [{ node_id: 'node-peer', handshake_ago: 5 }] }));
      swarmId = (await api('POST', '/v1/swarms', { name: 'overlaid' })).json.data.id;
      expect((await api('POST', `/v1/swarms/${swarmId}/join`, { node_id: manager.id })).status).to.equal(202);
      const s = await swarmSettled(swarmId, (x) => x.status === 'active', 'the manager');
      expect(s.manager.advertise_address).to.equal(manager.overlayIp);
    });

    it('confirms the path first — the manager’s WireGuard peer (by its key), then its swarm port — for the configured time, and joins at the address reached; the node’s events say how many attempts it took', async function () {
      this.timeout(30_000);
      const worker = await joinedMachine('patient-worker');
      await reportOverlay(worker, overlayReport({ address: worker.overlayIp, peers: [{ node_id: manager.id, handshake_ago: 3 }] }));
      const calls = answer(worker, {
        answers: {
          'network.confirm-path': (input) => ({ node_id: input.targets[0].node_id, address: input.targets[0].address, port: input.targets[0].port, via: 'overlay', attempts: 4, waited_seconds: 6.5 }),
          join: () => ({ runtime_node_id: 'rt-patient' }),
        },
      }).calls;
      expect((await api('POST', `/v1/swarms/${swarmId}/join`, { node_id: worker.id })).status).to.equal(202);
      const s = await swarmSettled(swarmId, (x) => x.members.some((m: any) => m.node_id === worker.id && m.status !== 'joining'), 'the worker to settle');
      const member = s.members.find((m: any) => m.node_id === worker.id);
      expect(member, member.error).to.include({ status: 'active', advertise_address: worker.overlayIp, runtime_node_id: 'rt-patient' });
      const asked = calls.filter((c) => c.method !== 'overlay.peers');
      expect(asked.map((c) => c.method)).to.deep.equal(['network.confirm-path', 'join']);
      expect(asked[0]!.input).to.deep.equal({ targets: [{ node_id: manager.id, address: manager.overlayIp, port: 2377, wireguard_public_key: manager.wgPublicKey }], wait_seconds: 7 });
      expect(asked[1]!.input).to.include({ advertise_address: worker.overlayIp, token: 'SWMTKN-1-worker' });
      expect(asked[1]!.input.remote_addresses).to.deep.equal([`${manager.overlayIp}:2377`]);
      const events = (await get(`/v1/nodes/events?node_id=${worker.id}`)) as Array<{ kind: string; message: string }>;
      // Recorded before the join itself.
      expect(events.find((e) => e.kind === 'swarm_join_path')?.message).to.equal(`reached manager ${manager.id} at ${manager.overlayIp}:2377 over the overlay after 4 attempts (6.5 s)`);
    });

    it('a worker whose path never comes up ends failed with the agent’s reason (the part that is missing), and its engine is asked nothing', async function () {
      this.timeout(30_000);
      const worker = await joinedMachine('stranded-worker');
      await reportOverlay(worker, overlayReport({ address: worker.overlayIp, peers: [{ node_id: 'node-peer', handshake_ago: 3 }] }));
      const reason = `no WireGuard handshake with node ${manager.id} (${manager.overlayIp}) after 7 s; its overlay is down or unreachable on UDP 51820 (endpoint 192.0.2.1:51820)`;
      const calls = answer(worker, { refusals: { 'network.confirm-path': () => reason } }).calls;
      expect((await api('POST', `/v1/swarms/${swarmId}/join`, { node_id: worker.id })).status).to.equal(202);
      const s = await swarmSettled(swarmId, (x) => x.members.some((m: any) => m.node_id === worker.id && m.status !== 'joining'), 'the worker to settle');
      const member = s.members.find((m: any) => m.node_id === worker.id);
      expect(member).to.include({ status: 'failed', error: `joining failed: ${reason}` });
      expect(calls.map((c) => c.method).filter((m) => m !== 'overlay.peers')).to.deep.equal(['network.confirm-path']);
      const failedEvent = await waitFor(
        async () => ((await get(`/v1/nodes/events?node_id=${worker.id}`)) as Array<{ kind: string; message: string }>).find((e) => e.kind === 'swarm_join_failed'),
        { timeoutMs: 5000, what: 'the swarm_join_failed event' },
      );
      expect(failedEvent.message).to.equal(`joining swarm overlaid failed: ${reason}`);
    });
  });
});
