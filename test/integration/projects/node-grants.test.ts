import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { expect } from 'chai';
import { FakeAgent } from '../../support/agents.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, createUser, type Credentials } from '../../support/identity.js';
import { hangarCli, TempDirs } from '../runner/support.js';

/**
 * Issue 30, "nodes belong to the installation and are granted to projects (a node may serve several
 * projects' clusters only if an installation admin allows it)": an admin grants a node to a project
 * (a second project only with share), a maintainer of the project joins it to the project's swarm
 * and no other node, a deployer joins none, another project's member sees neither the grant nor the
 * node; an admin cannot put a node granted to one project in another's cluster. The same for
 * volumes and clusters made on a node by the project's members. Against agents' test doubles
 * (they heartbeat; the join and the volume's preparation themselves are tested elsewhere).
 */
describeEachDialect('nodes granted to projects', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  let mia: Credentials;
  let dora: Credentials;
  let mo: Credentials;
  const nodes: Record<'granted' | 'free' | 'other', string> = { granted: '', free: '', other: '' };
  const swarms: Record<'a' | 'b', string> = { a: '', b: '' };
  const agents: FakeAgent[] = [];
  const as = (who: Credentials, method: string, p: string, body?: unknown) => t.request(method, p, { body, headers: bearer(who.token) });
  const api = (method: string, p: string, body?: unknown) => as(admin, method, p, body);

  before(async function () {
    this.timeout(60_000);
    t = await startHangar(dialect, { plugins: ['system', 'iam', 'nodes', 'agent-internal', 'swarms', 'kubernetes', 'volumes', 'secrets', 'tags', 'projects'], overrides: { swarms: { call_timeout_seconds: 5 } } });
    admin = await bootstrapAdmin(t);
    for (const p of ['a', 'b'] as const) {
      expect((await api('POST', '/v1/projects', { name: `team-${p}` })).status).to.equal(201);
      const swarm = await api('POST', '/v1/swarms', { name: `swarm-${p}`, project_id: `team-${p}` });
      expect(swarm.status, swarm.text).to.equal(201);
      swarms[p] = swarm.json.data.id;
    }
    let address = 20;
    for (const name of Object.keys(nodes) as Array<keyof typeof nodes>) {
      const node = await api('POST', '/v1/nodes', { name: `node-${name}`, ip_address: `192.0.2.${address++}` });
      expect(node.status, node.text).to.equal(201);
      nodes[name] = node.json.data.id;
      const agent = await FakeAgent.forNode(t, node.json.data.id);
      expect((await agent.heartbeat()).status).to.equal(200);
      agents.push(agent);
    }
    mia = await createUser(t, admin, { username: 'mia' });
    dora = await createUser(t, admin, { username: 'dora' });
    mo = await createUser(t, admin, { username: 'mo' });
    for (const [who, project, role] of [['mia', 'a', 'maintainer'], ['dora', 'a', 'deployer'], ['mo', 'b', 'maintainer']]) {
      expect((await api('PUT', `/v1/projects/team-${project}/members/${who}`, { role })).status).to.equal(201);
    }
  });
  const temp = new TempDirs();
  after(async () => {
    await t?.stop();
    temp.cleanup();
  });

  it('an admin grants a node to a project, to a second one only with share; members of the project list it, others do not see it', async () => {
    const granted = await api('PUT', `/v1/projects/team-a/nodes/${nodes.granted}`, {});
    expect(granted.status, granted.text).to.equal(201);
    expect(granted.json.data).to.deep.include({ node_id: nodes.granted });
    expect((await api('PUT', `/v1/projects/team-a/nodes/${nodes.granted}`, {})).status, 'granted already').to.equal(200);
    const byMember = await as(mia, 'PUT', `/v1/projects/team-a/nodes/${nodes.free}`, {});
    expect(byMember.status, 'a maintainer grants nothing').to.equal(403);

    const second = await api('PUT', `/v1/projects/team-b/nodes/${nodes.granted}`, {});
    expect(second.status, second.text).to.equal(409);
    expect(second.json.message).to.contain('granted to project team-a').and.contain('share: true');
    const shared = await api('PUT', `/v1/projects/team-b/nodes/${nodes.granted}`, { share: true });
    expect(shared.status, shared.text).to.equal(201);
    expect(shared.json.data.projects).to.have.length(2);
    // The projects a node serves (a node's page in the dashboard): every one for admins, a member's own to a member.
    const servedBy = async (who: Credentials) => ((await as(who, 'GET', `/v1/projects?node=${nodes.granted}`)).json.data as Array<{ name: string }>).map((p) => p.name).sort();
    expect(await servedBy(admin)).to.deep.equal(['team-a', 'team-b']);
    expect(await servedBy(mia)).to.deep.equal(['team-a']);
    expect(((await api('GET', `/v1/projects?node=${nodes.free}`)).json.data as unknown[]).length, 'a node granted to none').to.equal(0);
    expect((await as(mia, 'GET', '/v1/projects/team-a/nodes')).json.data).to.deep.include({ node_id: nodes.granted, name: 'node-granted', status: 'ready', shared: true, granted_at: (await as(mia, 'GET', '/v1/projects/team-a/nodes')).json.data[0].granted_at });
    expect((await api('DELETE', `/v1/projects/team-b/nodes/${nodes.granted}`)).status).to.equal(200);
    const listed = await as(mia, 'GET', '/v1/projects/team-a/nodes');
    expect(listed.json.data.map((n: { node_id: string; shared: boolean }) => [n.node_id, n.shared])).to.deep.equal([[nodes.granted, false]]);
    expect((await as(mo, 'GET', '/v1/projects/team-a/nodes')).status, 'another project’s: as one that does not exist').to.equal(404);

    // The CLI: an admin grants, a member lists.
    const dir = temp.make('hangar-cli-node-grants-');
    writeFileSync(path.join(dir, 'ca.pem'), t.caPem);
    const envOf = (who: Credentials) => ({ XDG_CONFIG_HOME: dir, HANGAR_API_URL: t.url, HANGAR_ACCESS_KEY: who.accessKeyId, HANGAR_SECRET_KEY: who.secretAccessKey, HANGAR_CA_FILE: path.join(dir, 'ca.pem') });
    const grant = await hangarCli(['project', 'grant-node', 'team-b', nodes.other], { env: envOf(admin) });
    expect(grant.code, grant.stderr).to.equal(0);
    expect(grant.stdout).to.contain(`granted node ${nodes.other} to project team-b (it serves 1 project)`);
    const list = await hangarCli(['project', 'nodes', 'team-b'], { env: envOf(mo) });
    expect(list.code, list.stderr).to.equal(0);
    expect(list.stdout).to.contain(nodes.other).and.contain('node-other').and.not.contain(nodes.granted);
    const served = await hangarCli(['project', 'list', '--node', nodes.other], { env: envOf(admin) });
    expect(served.code, served.stderr).to.equal(0);
    expect(served.stdout).to.contain('team-b').and.not.contain('team-a');
  });

  it('a maintainer joins a node granted to its project to its cluster, and no other node; a deployer none; an admin no node granted to another project', async () => {
    const notGranted = await as(mia, 'POST', `/v1/swarms/${swarms.a}/join`, { node_id: nodes.free });
    expect(notGranted.status, notGranted.text).to.equal(404);
    expect(notGranted.json.message).to.equal(`No node ${nodes.free}`);
    expect((await as(mia, 'POST', `/v1/swarms/${swarms.a}/join`, { node_id: nodes.other })).status, 'another project’s node').to.equal(404);
    expect((await as(dora, 'POST', `/v1/swarms/${swarms.a}/join`, { node_id: nodes.granted })).status, 'a deployer').to.equal(403);
    expect((await as(mo, 'POST', `/v1/swarms/${swarms.a}/join`, { node_id: nodes.other })).status, 'another project’s cluster').to.equal(404);

    const joined = await as(mia, 'POST', `/v1/swarms/${swarms.a}/join`, { node_id: nodes.granted });
    expect(joined.status, joined.text).to.equal(202);
    expect(joined.json.data).to.include({ node_id: nodes.granted });
    const taken = await api('DELETE', `/v1/projects/team-a/nodes/${nodes.granted}`);
    expect(taken.status, 'taken back while it serves the project').to.equal(409);
    expect(taken.json.message).to.contain('swarm-a');

    const misplaced = await api('POST', `/v1/swarms/${swarms.a}/join`, { node_id: nodes.other });
    expect(misplaced.status, misplaced.text).to.equal(409);
    expect(misplaced.json.message).to.contain('granted to other projects');
    // The installation's nodes (granted to none) go where an admin puts them, as before grants.
    expect((await api('POST', `/v1/swarms/${swarms.b}/join`, { node_id: nodes.free })).status).to.equal(202);
  });
  it('a maintainer makes a volume on a node granted to its project, in that project; no other node, no other project; a deployer none', async () => {
    const volume = (who: Credentials, name: string, node: string, project?: string) =>
      as(who, 'POST', '/v1/volumes', { name, node_id: node, folder: `/srv/${name}`, type: 'local', ...(project ? { project_id: project } : {}) });
    const made = await volume(mia, 'vol-a', nodes.granted, 'team-a');
    expect(made.status, made.text).to.equal(202);
    const teamA = (await api('GET', '/v1/projects/team-a')).json.data.id;
    expect(made.json.data).to.include({ name: 'vol-a', node_id: nodes.granted, project_id: teamA });
    expect((await as(mia, 'GET', '/v1/volumes')).json.data.map((v: { name: string }) => v.name)).to.deep.equal(['vol-a']);
    expect((await as(mo, 'GET', '/v1/volumes')).json.data, 'another project’s volume').to.deep.equal([]);

    // The CLI: the maintainer makes one with --project and lists its project's.
    const dir = temp.make('hangar-cli-volumes-');
    writeFileSync(path.join(dir, 'ca.pem'), t.caPem);
    const env = { XDG_CONFIG_HOME: dir, HANGAR_API_URL: t.url, HANGAR_ACCESS_KEY: mia.accessKeyId, HANGAR_SECRET_KEY: mia.secretAccessKey, HANGAR_CA_FILE: path.join(dir, 'ca.pem') };
    const cli = await hangarCli(['volume', 'create', 'vol-cli', '--node', nodes.granted, '--folder', '/srv/vol-cli', '--type', 'local', '--project', 'team-a'], { env });
    expect(cli.code, cli.stderr).to.equal(0);
    expect(cli.stdout).to.contain('creating volume vol-cli');
    const listed = await hangarCli(['volume', 'list', '--project', 'team-a'], { env });
    expect(listed.code, listed.stderr).to.equal(0);
    expect(listed.stdout).to.contain('vol-a').and.contain('vol-cli');
    const refused = await hangarCli(['volume', 'create', 'vol-cli2', '--node', nodes.free, '--folder', '/srv/vol-cli2', '--type', 'local', '--project', 'team-a'], { env });
    expect(refused.code).to.not.equal(0);
    expect(refused.stderr).to.contain(`No node ${nodes.free}`);

    const notGranted = await volume(mia, 'vol-free', nodes.free, 'team-a');
    expect([notGranted.status, notGranted.json.message], 'a node of the installation').to.deep.equal([404, `No node ${nodes.free}`]);
    const othersNode = await volume(mia, 'vol-other', nodes.other, 'team-a');
    expect([othersNode.status, othersNode.json.message], 'a node granted to another project').to.deep.equal([404, `No node ${nodes.other}`]);
    const othersProject = await volume(mia, 'vol-b', nodes.other, 'team-b');
    expect([othersProject.status, othersProject.json.message], 'in another project').to.deep.equal([404, 'No project team-b']);
    const deployer = await volume(dora, 'vol-dora', nodes.granted, 'team-a');
    expect([deployer.status, deployer.json.message]).to.deep.equal([403, 'Insufficient permissions: this needs volumes:write, and role user does not grant it']);
    expect((await as(mia, 'GET', `/v1/volumes/vol-dora`)).status, 'nothing made').to.equal(404);

    // Its default project is where a volume goes when the request names none: there too the role must grant it.
    expect((await api('PUT', '/v1/projects/team-a/members/mo', { role: 'viewer' })).status).to.equal(201);
    expect((await api('POST', `/v1/iam/users/${mo.userId}/properties`, { name: 'default_project', value: 'team-a' })).status).to.be.oneOf([200, 201]);
    const byDefault = await volume(mo, 'vol-mo', nodes.other);
    expect([byDefault.status, byDefault.json.message]).to.deep.equal([403, `Insufficient permissions: this needs volumes:write, and your role in project ${teamA} does not grant it`]);
    const inB = await volume(mo, 'vol-mo', nodes.other, 'team-b');
    expect(inB.status, inB.text).to.equal(202);
    expect((await as(mia, 'GET', '/v1/volumes/vol-mo')).status, 'another project’s volume').to.equal(404);

    // An admin puts no volume of one project on a node granted to another; the installation's nodes anywhere.
    const misplaced = await volume(admin, 'vol-admin', nodes.other, 'team-a');
    expect(misplaced.status, misplaced.text).to.equal(409);
    expect(misplaced.json.message).to.contain('granted to other projects than the new volume’s');
    expect((await volume(admin, 'vol-admin', nodes.free, 'team-a')).status).to.equal(202);
    // The grant stays while the node holds the project's volume.
    const taken = await api('DELETE', `/v1/projects/team-b/nodes/${nodes.other}`);
    expect([taken.status, taken.json.message]).to.deep.equal([409, `Node ${nodes.other} holds volume vol-mo of project team-b: delete it first`]);
  });

  it('a maintainer creates clusters in its project, on nodes granted to it only; a deployer none; no other project', async () => {
    const swarm = await as(mia, 'POST', '/v1/swarms', { name: 'swarm-a2', project_id: 'team-a' });
    expect(swarm.status, swarm.text).to.equal(201);
    expect((await as(mia, 'GET', '/v1/swarms/swarm-a2')).status).to.equal(200);
    expect((await as(mo, 'GET', '/v1/swarms?project=team-b')).json.data.map((c: { name: string }) => c.name), 'not in b').to.not.include('swarm-a2');
    const inB = await as(mia, 'POST', '/v1/swarms', { name: 'swarm-b2', project_id: 'team-b' });
    expect([inB.status, inB.json.message]).to.deep.equal([404, 'No project team-b']);
    const deployer = await as(dora, 'POST', '/v1/swarms', { name: 'swarm-dora', project_id: 'team-a' });
    expect([deployer.status, deployer.json.message]).to.deep.equal([403, 'Insufficient permissions: this needs clusters:write, and role user does not grant it']);

    // A Kubernetes cluster names its nodes at creation: the first (its server) must be granted to the project.
    const kube = (who: Credentials, node: string, project: string) => as(who, 'POST', '/v1/kubernetes/clusters', { name: `kube-${project}`, node_ids: [node], project_id: project });
    for (const node of [nodes.free, nodes.other]) {
      const refused = await kube(mia, node, 'team-a');
      expect([refused.status, refused.json.message]).to.deep.equal([404, `No node ${node}`]);
    }
    const onGranted = await kube(mo, nodes.other, 'team-b');
    // Past the grant: what follows is the backend's (the k3s files this machine may lack: a 409 naming them).
    expect(onGranted.status, onGranted.text).to.not.be.oneOf([400, 403, 404]);
    expect(String(onGranted.json.message ?? '')).to.not.contain('granted');
  });
});
