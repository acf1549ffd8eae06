import { expect } from 'chai';
import { cleanupAgents, FAST_NODES, NODE_PLUGINS, joinedNodeId, readAgentFiles, spawnAgent, waitFor } from '../../support/agents.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, type Credentials } from '../../support/identity.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describeEachDialect('nodes: heartbeats at fleet scale', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;

  before(async function () {
    this.timeout(30_000);
    // A budget of one heartbeat every 2 s for the whole fleet: two machines → every 4 s each
    // (leases long enough for two heartbeats of that interval).
    t = await startHangar(dialect, {
      plugins: NODE_PLUGINS,
      // Empty long-polls: one a second for the whole fleet, so the wait is 1 s × the fleet (above the 2 s floor).
      overrides: { nodes: { ...FAST_NODES.nodes, max_heartbeats_per_second: 0.5 }, tasks: { ...FAST_NODES.tasks, poll_wait_seconds: 2, lease_seconds: 20, max_polls_per_second: 1 } },
    });
    admin = await bootstrapAdmin(t);
  });
  after(async function () {
    this.timeout(30_000);
    await cleanupAgents();
    await t?.stop();
  });

  const api = (method: string, pathAndQuery: string, body?: unknown) => t.request(method, pathAndQuery, { body, headers: bearer(admin.token) });
  const lastHeartbeat = async (id: string) => (await api('GET', `/v1/nodes/${id}`)).json.data.last_heartbeat_at as string | null;

  it('tells every agent fleet ÷ nodes.max_heartbeats_per_second in the heartbeat reply, the real agent keeps to it, and silence is judged by the longer interval', async function () {
    this.timeout(60_000);
    const agents = [];
    for (let i = 0; i < 2; i++) {
      const token = (await api('POST', '/v1/nodes/token', {})).json.data.token as string;
      agents.push(spawnAgent({ join: { token, api: t.url } }));
    }
    const ids = await Promise.all(agents.map((a) => joinedNodeId(a)));
    await waitFor(async () => (await Promise.all(ids.map(lastHeartbeat))).every(Boolean), { timeoutMs: 15_000, what: 'both agents heartbeating' });

    // The reply an agent gets (asked with the agent's own certificate).
    const files = readAgentFiles(agents[0]!.dataDir);
    const reply = await waitFor(
      async () => {
        const res = await t.request('POST', '/v1/internal/heartbeat', { body: { hostname: 'probe', architecture: 'amd64', agent_version: '0.0.0' }, cert: files.certPem, key: files.keyPem });
        expect(res.status, res.text).to.equal(200);
        return res.json.data.heartbeat_interval_seconds === 4 ? res.json.data : null;
      },
      { timeoutMs: 10_000, what: 'the interval for a fleet of two (4 s)' },
    );
    expect(reply.heartbeat_interval_seconds).to.equal(4);

    // The other agent's heartbeats, as the API shows them: 4 s apart now, not the 1 s floor.
    // It may still be on the 2 s of a fleet of one: its next beat (within 2 s) brings it the 4 s, and
    // the beat after that comes anywhere between 2 and 4 s later (an agent spreads a longer interval,
    // agent/agent.ts). From then on its beats are 4 s apart.
    await sleep(7000);
    const seen: number[] = [];
    const until = Date.now() + 9500;
    while (Date.now() < until) {
      const at = await lastHeartbeat(ids[1]!);
      const ms = Date.parse(at!);
      if (seen.at(-1) !== ms) seen.push(ms);
      await sleep(200);
    }
    const gaps = seen.slice(1).map((ms, i) => ms - seen[i]!);
    expect(gaps.length, `heartbeats seen at ${seen.map((s) => new Date(s).toISOString())}`).to.be.within(1, 3);
    // At least the interval (not the 1 s floor); a loaded machine may add a little to each.
    for (const gap of gaps) expect(gap, `gaps ${gaps}`).to.be.within(3500, 8000);

    // offline_after_seconds (3 s of a 1 s interval) scales to 12 s of a 4 s one: a 4 s gap is no outage.
    const node = (await api('GET', `/v1/nodes/${ids[1]}`)).json.data;
    expect(node.status).to.equal('ready');
    const log = (await api('GET', `/v1/nodes/events?node_id=${ids[1]}`)).json.data as Array<{ kind: string; data?: { to?: string } }>;
    expect(log.filter((e) => e.kind === 'node_status_changed' && e.data?.to === 'offline')).to.deep.equal([]);
  });

  it('tells every agent a long-poll wait of fleet ÷ tasks.max_polls_per_second (above tasks.poll_wait_seconds), and holds an empty long-poll that long', async function () {
    this.timeout(90_000);
    const machines: Array<{ id: string; cert: string; key: string }> = [];
    for (const name of ['long-waits-a', 'long-waits-b']) {
      const node = (await api('POST', '/v1/nodes', { name })).json.data;
      const { certificate: cert, private_key: key } = (await api('POST', `/v1/nodes/${node.id}/cert`)).json.data;
      machines.push({ id: node.id as string, cert: cert as string, key: key as string });
    }
    const m = machines[0]!;
    const beat = async (machine: (typeof machines)[number]) => {
      const res = await t.request('POST', '/v1/internal/heartbeat', { cert: machine.cert, key: machine.key, body: { hostname: machine.id, architecture: 'amd64', agent_version: '0.0.0' } });
      expect(res.status, res.text).to.equal(200);
      return res.json.data as { heartbeat_interval_seconds: number; poll_wait_seconds: number };
    };
    // The fleet is counted every 10 s: once the count has every node (these two and the others), the
    // interval is fleet ÷ 0.5 (at most half of the 20 s lease) and the wait fleet ÷ 1 (at least 4 s:
    // the two agents of the test before and these two).
    const fleet = (await api('GET', '/v1/nodes?limit=1000')).json.data.length as number;
    expect(fleet, 'a fleet whose wait is above the 2 s floor').to.be.at.least(3);
    const told = await waitFor(
      async () => {
        const replies = await Promise.all(machines.map(beat));
        return replies[0]!.heartbeat_interval_seconds === Math.min(2 * fleet, 10) && replies[0]!.poll_wait_seconds === fleet ? replies[0]! : null;
      },
      { timeoutMs: 15_000, what: `the interval of a fleet of ${fleet}` },
    );
    const wait = told.poll_wait_seconds;

    const poll = async (asked: number) => {
      const started = Date.now();
      const res = await t.request('GET', `/v1/internal/tasks/${m.id}?wait=${asked}`, { cert: m.cert, key: m.key, timeoutMs: 130_000 });
      expect(res.status, res.text).to.equal(200);
      expect(res.json.data).to.deep.equal([]);
      return Date.now() - started;
    };
    await poll(0); // a node's first poll since the start is answered anywhere in its wait
    // So is its first of a newly told wait (the fleet's count grew while it heartbeat above): then the
    // ones after it in the wait's last eighth. 120 s asked: the told wait is the most.
    expect(await poll(120)).to.be.at.most(wait * 1000 + 2000);
    const held = await poll(120);
    expect(held, `held for the told ${wait} s, not the 120 s asked nor the 2 s floor`).to.be.within((wait * 1000 * 7) / 8 - 100, wait * 1000 + 2000);
  });

  it('written together: unchanged facts move only last_heartbeat_at; changed facts are stored and move updated_at', async function () {
    this.timeout(20_000);
    const node = (await api('POST', '/v1/nodes', { name: 'beats' })).json.data;
    const { certificate: cert, private_key: key } = (await api('POST', `/v1/nodes/${node.id}/cert`)).json.data;
    const facts = { hostname: 'beats-host', architecture: 'amd64', agent_version: '1.0.0', resources: { cpus: 2, load_1m: 0.5 } };
    const beat = async (body: object) => expect((await t.request('POST', '/v1/internal/heartbeat', { cert, key, body })).status).to.equal(200);
    const read = async () => (await api('GET', `/v1/nodes/${node.id}`)).json.data;
    await beat(facts); // pending → online: written at once
    const first = await read();
    expect(first.status).to.equal('ready');

    await sleep(20);
    await beat(facts);
    const same = await waitFor(async () => {
      const now = await read();
      return now.last_heartbeat_at > first.last_heartbeat_at ? now : null;
    }, { what: 'the second heartbeat written' });
    expect(same.updated_at, 'nothing about the node changed').to.equal(first.updated_at);
    expect(same.resources).to.deep.equal(facts.resources);

    await sleep(20);
    await beat({ ...facts, agent_version: '1.0.1', resources: { cpus: 2, load_1m: 1.5 } });
    const changed = await waitFor(async () => {
      const now = await read();
      return now.agent_version === '1.0.1' ? now : null;
    }, { what: 'the changed facts written' });
    expect(changed.resources).to.deep.equal({ cpus: 2, load_1m: 1.5 });
    expect(changed.updated_at > first.updated_at).to.equal(true);
    expect(changed.updated_at).to.equal(changed.last_heartbeat_at);
  });

  it('many reads of nodes at once (a fleet’s heartbeats, the API’s GETs) each answer their own node, and an unknown id 404', async function () {
    this.timeout(20_000);
    const made = await Promise.all(Array.from({ length: 12 }, (_, i) => api('POST', '/v1/nodes', { name: `many-${i}` })));
    const ids = made.map((res) => res.json.data.id as string);
    const answers = await Promise.all([...ids, ...ids, 'node-doesnotexist0'].map((id) => api('GET', `/v1/nodes/${id}`)));
    expect(answers.map((res) => res.json.data?.id ?? res.status)).to.deep.equal([...ids, ...ids, 404]);
    expect(answers.slice(0, 12).map((res) => res.json.data.name)).to.deep.equal(ids.map((_, i) => `many-${i}`));
  });

  // PostgreSQL locks rows; SQLite has one writer at a time and no row locks to skip.
  if (dialect.name === 'postgres') {
    it('a node whose row another transaction holds does not hold up the fleet’s heartbeat times; its own is written once the row is free', async function () {
      this.timeout(30_000);
      const facts = { hostname: 'held-host', architecture: 'amd64', agent_version: '1.0.0' };
      const nodes = await Promise.all(
        ['held', 'free'].map(async (name) => {
          const node = (await api('POST', '/v1/nodes', { name })).json.data;
          const { certificate: cert, private_key: key } = (await api('POST', `/v1/nodes/${node.id}/cert`)).json.data;
          const beat = async () => expect((await t.request('POST', '/v1/internal/heartbeat', { cert, key, body: facts })).status).to.equal(200);
          await beat(); // pending → online: written at once
          return { id: node.id as string, beat, first: (await lastHeartbeat(node.id))! };
        }),
      );
      const [held, free] = nodes as [(typeof nodes)[0], (typeof nodes)[0]];
      await sleep(20);
      // An API write in progress on the held node: its row locked until the transaction ends.
      let release!: () => void;
      const released = new Promise<void>((resolve) => (release = resolve));
      let locked!: () => void;
      const isLocked = new Promise<void>((resolve) => (locked = resolve));
      const holder = t.hangar.services.db.knex.transaction(async (trx) => {
        await trx('nodes').where({ id: held.id }).forUpdate().first('id');
        locked();
        await released;
      });
      try {
        await isLocked;
        await Promise.all([held.beat(), free.beat()]);
        await waitFor(async () => ((await lastHeartbeat(free.id))! > free.first ? true : null), { what: 'the free node’s heartbeat written while the other’s row is held' });
        expect(await lastHeartbeat(held.id), 'not written while its row is held').to.equal(held.first);
      } finally {
        release();
        await holder;
      }
      await waitFor(async () => ((await lastHeartbeat(held.id))! > held.first ? true : null), { what: 'the held node’s heartbeat written once its row is free' });
    });
  }
});
