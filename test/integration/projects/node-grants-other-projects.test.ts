import { expect } from 'chai';
import { AgentLogs } from '../../../core/tasks/host-kinds.js';
import { answerTasks, FakeAgent } from '../../support/agents.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, createUser, type Credentials } from '../../support/identity.js';

/**
 * Issue 30 (review): a member learns nothing of another project through the nodes granted to
 * projects (docs/tenancy.md "Nodes granted to projects"). A node granted to another project answers
 * as one that does not exist even while it is being removed; on a node shared between two projects,
 * a folder taken by the other project's volume or local backup target is refused without naming it.
 * Against agents' test doubles (the volume's preparation and the target's folder check are answered).
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

  it('on a node shared between projects, a folder taken by the other project’s volume or local target is refused without naming it; its own project’s caller and admins are told which', async function () {
    this.timeout(30_000);
    const volumeB = await volume(mo, 'vol-b', nodes.shared, '/srv/data-b', 'team-b');
    expect(volumeB.status, volumeB.text).to.equal(202);
    const target = await api('POST', '/v1/backups/targets', { name: 'repo-b', kind: 'local', node_id: nodes.shared, path: '/srv/backups-b', project_id: 'team-b' });
    expect(target.status, target.text).to.equal(201);

    const sameFolder = await volume(mia, 'vol-a1', nodes.shared, '/srv/data-b', 'team-a');
    expect([sameFolder.status, sameFolder.json.message]).to.deep.equal([409, `Folder /srv/data-b on node ${nodes.shared} is taken by a resource of another project`]);
    const inTarget = await volume(mia, 'vol-a2', nodes.shared, '/srv/backups-b/mine', 'team-a');
    expect([inTarget.status, inTarget.json.message]).to.deep.equal([409, `Folder /srv/backups-b/mine on node ${nodes.shared} is taken by a resource of another project: choose another folder`]);
    expect(inTarget.json.details).to.deep.equal([{ path: 'body.folder', message: inTarget.json.message }]);

    // Those who read them are told which.
    for (const who of [mo, admin]) {
      const again = await volume(who, 'vol-b2', nodes.shared, '/srv/data-b', 'team-b');
      expect([again.status, again.json.message]).to.deep.equal([409, `Folder /srv/data-b on node ${nodes.shared} is volume vol-b already`]);
      const inOwnTarget = await volume(who, 'vol-b3', nodes.shared, '/srv/backups-b/mine', 'team-b');
      expect(inOwnTarget.status).to.equal(409);
      expect(inOwnTarget.json.message).to.equal(
        `Folder /srv/backups-b/mine on node ${nodes.shared} is inside the folder of backup target repo-b (/srv/backups-b): the volume's backups would copy the repository and its restores replace it; choose another folder, or delete the target first`,
      );
    }
    // A folder clear of both is the member's.
    expect((await volume(mia, 'vol-a3', nodes.shared, '/srv/data-a', 'team-a')).status).to.equal(202);
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
