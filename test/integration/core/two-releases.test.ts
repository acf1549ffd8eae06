import { expect } from 'chai';
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import knexFactory from 'knex';
import { httpRequest } from '../../../core/http/client.js';
import { randomToken } from '../../../core/ids.js';
import { versionInfo } from '../../../core/version.js';
import { cleanupAgents, joinedNodeId, spawnAgent, waitFor } from '../../support/agents.js';
import { serveControlPlane, type ControlPlane } from '../../support/control-plane.js';
import { bearer, bootstrapAdmin, type Credentials } from '../../support/identity.js';
import { PG_URL, postgresAvailable, requireService, skipLoudly } from '../../support/requirements.js';

/**
 * The release this one is upgraded from, run from its own sources (`git archive` of its commit, this
 * checkout's node_modules): a commit of main before the migrations of projects (002), notifications
 * (003), alerts, backups and services that came after it, so that this test applies real ones.
 * Move it forward when a release is cut (docs/upgrading.md).
 */
const PREVIOUS_RELEASE = { commit: '690578b685b105a268f4c49335bdbd61b1e42e75', version: '0.2.0' };

/**
 * docs/upgrading.md, "Several control planes on one PostgreSQL": the previous release keeps serving
 * while this one migrates the store they share, and refuses to start again afterwards.
 */
describe('upgrading in place: the previous release and this one on one PostgreSQL', function () {
  this.timeout(240_000);
  const schema = `t_${randomToken(12)}`;
  const planes: ControlPlane[] = [];
  let tree = '';
  let caPem = '';
  let previous: ControlPlane;
  let current: ControlPlane;
  let admin: Credentials;
  const knex = knexFactory({ client: 'pg', connection: PG_URL, pool: { min: 0, max: 2 } });
  const migrations = async () => (await knex.withSchema(schema).table('hangar_migrations').select('id', 'release').orderBy('id')) as Array<{ id: string; release: string | null }>;
  // Alert rules checked every second: an agent of the previous release is reported at once.
  const serve = (name: string, root?: string) =>
    serveControlPlane({ name, schema, caPem: () => caPem, root, env: { HANGAR_NODES__HEARTBEAT_INTERVAL_SECONDS: '2', HANGAR_ALERTS__INTERVAL_SECONDS: '1' } });
  const as = (plane: ControlPlane) => (method: string, p: string, body?: unknown) =>
    plane.client.request(method, p, { body, headers: bearer(admin.token) });

  before(async function () {
    requireService(this, await postgresAvailable(), 'PostgreSQL (HANGAR_TEST_PG_URL, or run scripts/services.sh as root)');
    if (spawnSync('git', ['cat-file', '-e', `${PREVIOUS_RELEASE.commit}^{commit}`]).status !== 0) {
      skipLoudly(this, `needs the previous release's commit ${PREVIOUS_RELEASE.commit} in this clone (a full clone of main, not a shallow one)`);
    }
    tree = mkdtempSync(path.join(os.tmpdir(), 'hangar-previous-release-'));
    const archive = execFileSync('git', ['archive', '--format=tar', PREVIOUS_RELEASE.commit, 'bin', 'cli', 'core', 'plugins', 'drivers', 'agent', 'config', 'package.json', 'tsconfig.json'], { maxBuffer: 256 * 1024 * 1024 });
    execFileSync('tar', ['-x', '-C', tree], { input: archive });
    symlinkSync(path.resolve('node_modules'), path.join(tree, 'node_modules'));
  });

  after(async () => {
    await cleanupAgents();
    for (const plane of planes) if (plane.child.exitCode === null) plane.child.kill('SIGKILL');
    await knex.raw(`drop schema if exists "${schema}" cascade`).catch(() => undefined);
    await knex.destroy();
    if (tree) rmSync(tree, { recursive: true, force: true });
  });

  it('the previous release makes the store and its records', async () => {
    previous = await serve('previous', tree);
    planes.push(previous);
    caPem = (await httpRequest(`${previous.url}/v1/ca`, { ca: false })).text;
    expect((await previous.client.request('GET', '/v1/version')).json.data.version).to.equal(PREVIOUS_RELEASE.version);
    admin = await bootstrapAdmin(previous.client);
    const node = await as(previous)('POST', '/v1/nodes', { name: 'made-by-previous' });
    expect(node.status, node.text).to.equal(201);
    const project = await as(previous)('POST', '/v1/projects', { name: 'kept' });
    expect(project.status, project.text).to.equal(201);
    expect((await migrations()).every((m) => m.release === PREVIOUS_RELEASE.version)).to.equal(true);
  });

  it('this release migrates the shared store while the previous one serves, and each reads and writes what the other wrote', async () => {
    const before = new Set((await migrations()).map((m) => m.id));
    current = await serve('current');
    planes.push(current);
    expect((await current.client.request('GET', '/v1/version')).json.data.version).to.equal(versionInfo.version);
    const added = (await migrations()).filter((m) => !before.has(m.id));
    expect(added.length, 'this release applied migrations the previous one does not have').to.be.greaterThan(0);
    expect(added.map((m) => m.release)).to.deep.equal(added.map(() => versionInfo.version));
    console.log(`      applied by ${versionInfo.version} under ${PREVIOUS_RELEASE.version}: ${added.map((m) => m.id).join(', ')}`);

    // The previous release, still running on the migrated store: a login, reads and writes.
    const login = await previous.client.request('POST', '/v1/iam/login', { body: { username: admin.username, password: admin.password } });
    expect(login.status, login.text).to.equal(200);
    const listed = await as(previous)('GET', '/v1/nodes');
    expect(listed.status, listed.text).to.equal(200);
    expect(listed.json.data.map((n: { name: string }) => n.name)).to.include('made-by-previous');
    const byPrevious = await as(previous)('POST', '/v1/nodes', { name: 'during-previous' });
    expect(byPrevious.status, byPrevious.text).to.equal(201);
    const tag = await as(previous)('PUT', '/v1/tags', { resource_type: 'node', resource_id: byPrevious.json.data.id, key: 'rack', value: 'r1' });
    expect(tag.status, tag.text).to.equal(200);
    const user = await as(previous)('POST', '/v1/iam/users', { username: 'made-during-upgrade', password: admin.password, email: 'during@example.test', role: 'user' });
    expect(user.status, user.text).to.equal(201);
    const projects = await as(previous)('GET', '/v1/projects');
    expect(projects.status, projects.text).to.equal(200);
    expect(projects.json.data.map((p: { name: string }) => p.name)).to.include('kept');

    // This release sees them, and the previous one sees what this one writes.
    const seen = await as(current)('GET', `/v1/nodes/${byPrevious.json.data.id}`);
    expect(seen.status, seen.text).to.equal(200);
    expect((await as(current)('GET', '/v1/tags?key=rack')).json.data).to.deep.include({ resource_type: 'node', resource_id: byPrevious.json.data.id, key: 'rack', value: 'r1' });
    expect((await as(current)('GET', '/v1/iam/users')).json.data.map((u: { username: string }) => u.username)).to.include('made-during-upgrade');
    const byCurrent = await as(current)('POST', '/v1/nodes', { name: 'during-current' });
    expect(byCurrent.status, byCurrent.text).to.equal(201);
    const renamed = await as(current)('PATCH', `/v1/nodes/${byPrevious.json.data.id}`, { name: 'renamed-by-current' });
    expect(renamed.status, renamed.text).to.equal(200);
    const back = await as(previous)('GET', `/v1/nodes/${byCurrent.json.data.id}`);
    expect(back.status, back.text).to.equal(200);
    expect((await as(previous)('GET', `/v1/nodes/${byPrevious.json.data.id}`)).json.data.name).to.equal('renamed-by-current');
    expect(previous.child.exitCode, previous.output().slice(-2000)).to.equal(null);
    expect(previous.output(), 'the previous release logged no error while it served the migrated store').to.not.match(/"level":(50|60)/);
  });

  it('the previous release, stopped, refuses to start again on the migrated store, naming both releases', async () => {
    previous.child.kill('SIGTERM');
    await new Promise((resolve) => previous.child.once('exit', resolve));
    const again = await serve('previous-again', tree).then(
      (plane) => {
        planes.push(plane);
        return null;
      },
      (err: Error) => err.message,
    );
    expect(again, 'it started').to.be.a('string');
    expect(again).to.contain(`migrated by hangar ${versionInfo.version}, newer than this hangar ${PREVIOUS_RELEASE.version}`);
    // This release goes on serving.
    expect((await as(current)('GET', '/v1/nodes')).status).to.equal(200);
  });

  it('an agent of the previous release serves this control plane: it joins, heartbeats, runs a task, and is reported as outdated', async () => {
    const token = await as(current)('POST', '/v1/nodes/token', {});
    expect(token.status, token.text).to.equal(201);
    const agent = spawnAgent({ root: tree, join: { token: token.json.data.token, api: current.url } });
    const nodeId = await joinedNodeId(agent, 60_000);
    const node = await waitFor(
      async () => {
        const res = await as(current)('GET', `/v1/nodes/${nodeId}`);
        return res.json.data?.status === 'ready' ? res.json.data : null;
      },
      { timeoutMs: 60_000, what: 'the previous release\'s agent to be ready' },
    );
    expect(node.agent_version).to.equal(PREVIOUS_RELEASE.version);
    const queued = await as(current)('POST', `/v1/nodes/${nodeId}/logs?lines=5`);
    expect(queued.status, queued.text).to.equal(202);
    const done = await waitFor(
      async () => {
        const res = await as(current)('GET', `/v1/nodes/${nodeId}/logs/${queued.json.data.task_id}`);
        return res.json.data?.status === 'completed' || res.json.data?.status === 'failed' ? res.json.data : null;
      },
      { timeoutMs: 60_000, what: 'the log task to finish' },
    );
    expect(done.status, JSON.stringify(done)).to.equal('completed');
    expect(done.result.lines).to.be.an('array');
    const alert = await waitFor(
      async () => (await as(current)('GET', '/v1/alerts')).json.data?.find((a: { rule: string; resource_id: string }) => a.rule === 'agent_outdated' && a.resource_id === nodeId),
      { timeoutMs: 30_000, what: 'the agent_outdated alert' },
    );
    expect(alert.message).to.contain(`runs agent ${PREVIOUS_RELEASE.version}, older than the control plane’s ${versionInfo.version}`);
  });
});
