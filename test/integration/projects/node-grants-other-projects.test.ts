import { expect } from 'chai';
import { AgentLogs } from '../../../core/tasks/host-kinds.js';
import { answerTasks, FakeAgent } from '../../support/agents.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, createUser, type Credentials } from '../../support/identity.js';

/**
 * Issue 30 (review): a member learns nothing of another project through the nodes granted to
 * projects (docs/tenancy.md "Nodes granted to projects"). A node granted to another project answers
 * as one that does not exist even while it is being removed. Against agents' test doubles.
 */
describeEachDialect('nodes granted to projects: what a member learns of other projects', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  let mia: Credentials;
  let mo: Credentials;
  const nodes: Record<'shared' | 'theirs', string> = { shared: '', theirs: '' };
  let swarmA = '';
  const answering: Array<{ stop(): Promise<void> }> = [];
  const as = (who: Credentials, method: string, p: string, body?: unknown) => t.request(method, p, { body, headers: bearer(who.token) });
  const api = (method: string, p: string, body?: unknown) => as(admin, method, p, body);
  const volume = (who: Credentials, name: string, node: string, folder: string, project: string) =>
    as(who, 'POST', '/v1/volumes', { name, node_id: node, folder, type: 'local', project_id: project });

  before(async function () {
    this.timeout(60_000);
    t = await startHangar(dialect, { plugins: ['system', 'iam', 'projects', 'nodes', 'agent-internal', 'swarms', 'kubernetes', 'volumes', 'backups'] });
    admin = await bootstrapAdmin(t);
    for (const p of ['a', 'b']) expect((await api('POST', '/v1/projects', { name: `team-${p}` })).status).to.equal(201);
    const swarm = await api('POST', '/v1/swarms', { name: 'swarm-a', project_id: 'team-a' });
    expect(swarm.status, swarm.text).to.equal(201);
    swarmA = swarm.json.data.id;
    let address = 60;
    for (const name of Object.keys(nodes) as Array<keyof typeof nodes>) {
      const node = await api('POST', '/v1/nodes', { name: `node-${name}`, ip_address: `192.0.2.${address++}` });
      expect(node.status, node.text).to.equal(201);
      nodes[name] = node.json.data.id;
      const agent = await FakeAgent.forNode(t, nodes[name]);
      expect((await agent.heartbeat()).status).to.equal(200);
      if (name === 'shared') answering.push(answerTasks(agent, {}));
    }
    expect((await api('PUT', `/v1/projects/team-b/nodes/${nodes.theirs}`, {})).status).to.equal(201);
    expect((await api('PUT', `/v1/projects/team-a/nodes/${nodes.shared}`, {})).status).to.equal(201);
    expect((await api('PUT', `/v1/projects/team-b/nodes/${nodes.shared}`, { share: true })).status).to.equal(201);
    mia = await createUser(t, admin, { username: 'mia' });
    mo = await createUser(t, admin, { username: 'mo' });
    expect((await api('PUT', '/v1/projects/team-a/members/mia', { role: 'maintainer' })).status).to.equal(201);
    expect((await api('PUT', '/v1/projects/team-b/members/mo', { role: 'maintainer' })).status).to.equal(201);
  });
  after(async () => {
    for (const a of answering) await a.stop();
    await t?.stop();
  });

  it('a node of another project being removed answers a member as one that does not exist (volume, cluster create, join); its own project’s member is told it is being removed', async function () {
    this.timeout(30_000);
    const removing = await api('DELETE', `/v1/nodes/${nodes.theirs}`);
    expect(removing.status, removing.text).to.equal(202);
    // Work still open on it keeps its record (the removal finishes once it has none).
    await t.hangar.services.tasks.enqueue({ nodeId: nodes.theirs, kind: AgentLogs, payload: { lines: 1 } });
    expect((await api('GET', `/v1/nodes/${nodes.theirs}`)).json.data.status).to.equal('removing');

    const notFound = [404, `No node ${nodes.theirs}`];
    const inVolume = await volume(mia, 'vol-gone', nodes.theirs, '/srv/gone', 'team-a');
    expect([inVolume.status, inVolume.json.message], 'a volume').to.deep.equal(notFound);
    const joined = await as(mia, 'POST', `/v1/swarms/${swarmA}/join`, { node_id: nodes.theirs });
    expect([joined.status, joined.json.message], 'a join').to.deep.equal(notFound);
    const created = await as(mia, 'POST', '/v1/kubernetes/clusters', { name: 'kube-gone', project_id: 'team-a', node_ids: [nodes.theirs] });
    expect([created.status, created.json.message], 'a cluster created on it').to.deep.equal(notFound);

    const own = await volume(mo, 'vol-gone', nodes.theirs, '/srv/gone', 'team-b');
    expect([own.status, own.json.message], 'its own project’s member').to.deep.equal([409, `Node ${nodes.theirs} is being removed`]);
    expect((await as(mia, 'GET', '/v1/volumes/vol-gone')).status, 'nothing made').to.equal(404);
  });
});
