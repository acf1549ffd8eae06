import { expect } from 'chai';
import { FakeAgent, waitFor } from '../../support/agents.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, createUser, type Credentials } from '../../support/identity.js';

const NODES = 6;

/**
 * A node serves several projects only when an admin says so (`share`, docs/tenancy.md): two admins
 * granting one node to two projects at the same moment, neither with share, leave it granted to
 * one of them; the other gets the 409 it would get a moment later. Over HTTP, several nodes in turn.
 * And a member placing a volume on a node, or joining it to a cluster, while an admin takes the
 * node's grant back: one of the two finds the other, whichever comes first.
 */
describeEachDialect('nodes granted to projects: changes to one node at once', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  let mia: Credentials;
  let swarm = '';
  const as = (who: Credentials, method: string, p: string, body?: unknown) => t.request(method, p, { body, headers: bearer(who.token) });
  const api = (method: string, p: string, body?: unknown) => as(admin, method, p, body);

  before(async function () {
    this.timeout(60_000);
    t = await startHangar(dialect, { plugins: ['system', 'iam', 'nodes', 'agent-internal', 'swarms', 'volumes', 'projects'] });
    admin = await bootstrapAdmin(t);
    for (const p of ['a', 'b']) expect((await api('POST', '/v1/projects', { name: `race-${p}` })).status).to.equal(201);
    mia = await createUser(t, admin, { username: 'mia' });
    expect((await api('PUT', '/v1/projects/race-a/members/mia', { role: 'maintainer' })).status).to.equal(201);
    const made = await api('POST', '/v1/swarms', { name: 'swarm-a', project_id: 'race-a' });
    expect(made.status, made.text).to.equal(201);
    swarm = made.json.data.id;
  });
  after(async () => {
    await t?.stop();
  });

  it('without share, one of two grants made at once wins; the other is a 409 and the node serves one project', async function () {
    this.timeout(60_000);
    for (let i = 0; i < NODES; i++) {
      const node = await api('POST', '/v1/nodes', { name: `race-node-${i}`, ip_address: `192.0.2.${40 + i}` });
      expect(node.status, node.text).to.equal(201);
      const id = node.json.data.id as string;
      const answers = await Promise.all(['race-a', 'race-b'].map((project) => api('PUT', `/v1/projects/${project}/nodes/${id}`, {})));
      expect(answers.map((a) => a.status).sort(), answers.map((a) => a.text).join('\n')).to.deep.equal([201, 409]);
      const refused = answers.find((a) => a.status === 409)!;
      expect(refused.json.message).to.contain('share: true');
      const granted = answers.find((a) => a.status === 201)!;
      expect(granted.json.data.projects).to.have.length(1);
      const listed = await Promise.all(['race-a', 'race-b'].map(async (project) => (await api('GET', `/v1/projects/${project}/nodes`)).json.data as Array<{ node_id: string }>));
      expect(listed.flat().filter((n) => n.node_id === id), 'listed by one project').to.have.length(1);
    }
  });

  /** A node with an agent (heartbeating), granted to race-a. */
  async function grantedNode(name: string, address: string): Promise<string> {
    const node = await api('POST', '/v1/nodes', { name, ip_address: address });
    expect(node.status, node.text).to.equal(201);
    expect((await (await FakeAgent.forNode(t, node.json.data.id)).heartbeat()).status).to.equal(200);
    expect((await api('PUT', `/v1/projects/race-a/nodes/${node.json.data.id}`, {})).status).to.equal(201);
    return node.json.data.id;
  }

  // PostgreSQL locks rows; SQLite runs one writer at a time, which leaves no order to arrange.
  if (dialect.name === 'postgres') {
    /**
     * Holds the node's row (as an API write on the node does), sends `first`, waits until it waits
     * for the row, sends `second`, waits until it waits too, then lets the row go: the answers, in
     * the order the two took the row.
     */
    async function inTurn(nodeId: string, first: () => Promise<any>, second: () => Promise<any>) {
      const knex = t.hangar.services.db.knex;
      const waitingBehind = async (pids: number[]): Promise<number[]> =>
        ((await knex.raw("select pid from pg_stat_activity where wait_event_type = 'Lock' and pg_blocking_pids(pid) && ?::int[]", [pids])).rows as Array<{ pid: number }>).map((r) => r.pid);
      let release!: () => void;
      const released = new Promise<void>((resolve) => (release = resolve));
      let holder!: (pid: number) => void;
      const holding = new Promise<number>((resolve) => (holder = resolve));
      const held = knex.transaction(async (trx) => {
        await trx('nodes').where({ id: nodeId }).forUpdate().first('id');
        holder((await trx.raw('select pg_backend_pid() as pid')).rows[0].pid);
        await released;
      });
      try {
        const pid = await holding;
        const firstAnswer = first();
        const [firstPid] = await waitFor(async () => ((await waitingBehind([pid])).length ? waitingBehind([pid]) : null), { what: 'the first request waiting for the node’s row' });
        const secondAnswer = second();
        await waitFor(async () => ((await waitingBehind([pid, firstPid!])).some((p) => p !== firstPid) ? true : null), { what: 'the second request waiting for the node’s row' });
        release();
        await held;
        return [await firstAnswer, await secondAnswer];
      } finally {
        release();
        await held;
      }
    }

    it('a volume placed while its node’s grant is taken back: placed first, the revoke is a 409 naming it; revoked first, the volume is refused as on a node not granted', async function () {
      this.timeout(60_000);
      const volume = (node: string, name: string) => () => as(mia, 'POST', '/v1/volumes', { name, node_id: node, folder: `/srv/${name}`, type: 'local', project_id: 'race-a' });
      const revoke = (node: string) => () => api('DELETE', `/v1/projects/race-a/nodes/${node}`);

      const placedFirst = await grantedNode('placed-first', '192.0.2.50');
      const [placed, refused] = await inTurn(placedFirst, volume(placedFirst, 'vol-first'), revoke(placedFirst));
      expect(placed.status, placed.text).to.equal(202);
      expect([refused.status, refused.json.message]).to.deep.equal([409, `Node ${placedFirst} holds volume vol-first of project race-a: delete it first`]);

      const revokedFirst = await grantedNode('revoked-first', '192.0.2.51');
      const [revoked, notPlaced] = await inTurn(revokedFirst, revoke(revokedFirst), volume(revokedFirst, 'vol-late'));
      expect(revoked.status, revoked.text).to.equal(200);
      expect([notPlaced.status, notPlaced.json.message]).to.deep.equal([404, `No node ${revokedFirst}`]);
      expect((await api('GET', '/v1/volumes/vol-late')).status, 'no volume on a node no longer granted').to.equal(404);
    });

    it('a node joined to a cluster while its grant is taken back: revoked first, the join is refused as on a node not granted', async function () {
      this.timeout(60_000);
      const node = await grantedNode('join-late', '192.0.2.52');
      const [revoked, notJoined] = await inTurn(node, () => api('DELETE', `/v1/projects/race-a/nodes/${node}`), () => as(mia, 'POST', `/v1/swarms/${swarm}/join`, { node_id: node }));
      expect(revoked.status, revoked.text).to.equal(200);
      expect([notJoined.status, notJoined.json.message]).to.deep.equal([404, `No node ${node}`]);
      expect((await api('GET', `/v1/swarms/${swarm}/members`)).json.data, 'no member').to.deep.equal([]);
    });
  }
});
