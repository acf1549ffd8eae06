import { expect } from 'chai';
import { loadConfig } from '../../../core/config.js';
import { PROJECT_ROLE_PERMISSIONS, KINDS, permissionOf, userGrantsOf } from '../../../core/auth/permissions.js';
import { MIGRATED_ROLE, projectsOf } from '../../../plugins/projects/api.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, createUser, signed, type Credentials } from '../../support/identity.js';

const PLUGINS = ['system', 'iam', 'projects', 'nodes', 'swarms', 'kubernetes'];
const NOW = '2025-01-01T00:00:00.000Z';

describeEachDialect('projects: members, roles, the clusters they own', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  let alice: Credentials;
  let bob: Credentials;
  let carol: Credentials;
  let teamA: string;

  const as = (creds: Credentials) => (method: string, p: string, body?: unknown) => t.request(method, p, { body, headers: bearer(creds.token) });
  const api = (method: string, p: string, body?: unknown) => as(admin)(method, p, body);
  const names = (res: { json: { data: Array<{ name: string }> } }) => res.json.data.map((x) => x.name);

  before(async () => {
    t = await startHangar(dialect, { plugins: PLUGINS });
    admin = await bootstrapAdmin(t);
    alice = await createUser(t, admin, { username: 'alice', role: 'user' });
    bob = await createUser(t, admin, { username: 'bob', role: 'user' });
    carol = await createUser(t, admin, { username: 'carol', role: 'user' });
  });
  after(() => t?.stop());

  it('creates, renames and lists projects; refuses bad input (400), duplicates (409) and non-admin creates (403)', async () => {
    const created = await api('POST', '/v1/projects', { name: 'team-a', description: 'the A team' });
    expect(created.status, created.text).to.equal(201);
    expect(created.json.data).to.include({ name: 'team-a', description: 'the A team', role: null });
    expect(created.json.data.id).to.match(/^prj-/);
    teamA = created.json.data.id;
    expect((await api('POST', '/v1/projects', { name: 'team-b' })).status).to.equal(201);
    const dup = await api('POST', '/v1/projects', { name: 'team-a' });
    expect(dup.status).to.equal(409);
    expect(dup.json.message).to.equal('A project named team-a exists');
    for (const body of [{ name: 'Team A' }, { name: '' }, { name: 'x', extra: 1 }, { description: 'no name' }, { name: 'ok', description: 'd'.repeat(501) }]) {
      const res = await api('POST', '/v1/projects', body);
      expect(res.status, JSON.stringify(body)).to.equal(400);
      expect(res.json.message).to.match(/^Validation failed:/);
    }
    expect((await as(alice)('POST', '/v1/projects', { name: 'mine' })).status).to.equal(403);
    // A fresh installation has its default project too.
    expect(names(await api('GET', '/v1/projects'))).to.deep.equal(['default', 'team-a', 'team-b']);
    const page = await api('GET', '/v1/projects?limit=2');
    expect(names(page)).to.deep.equal(['default', 'team-a']);
    expect(names(await api('GET', `/v1/projects?limit=2&cursor=${page.json.next_cursor}`))).to.deep.equal(['team-b']);

    const renamed = await api('PATCH', '/v1/projects/team-b', { name: 'team-bee', description: null });
    expect(renamed.status, renamed.text).to.equal(200);
    expect(renamed.json.data).to.include({ name: 'team-bee', description: null });
    expect((await api('PATCH', '/v1/projects/team-bee', {})).json.message).to.match(/^Validation failed: give name or description/);
    expect((await api('PATCH', '/v1/projects/team-bee', { name: 'team-a' })).status).to.equal(409);
    expect((await api('GET', '/v1/projects/nothing-here')).status).to.equal(404);
  });

  it('adds members with a role; an owner manages members, others are refused (403), non-members see nothing (404)', async () => {
    const put = await api('PUT', `/v1/projects/${teamA}/members/alice`, { role: 'owner' });
    expect(put.status, put.text).to.equal(201);
    expect(put.json.data).to.include({ project_id: teamA, user_id: alice.userId, username: 'alice', role: 'owner' });
    expect(put.json.data.permissions).to.deep.equal(PROJECT_ROLE_PERMISSIONS.owner);
    // The owner adds bob (by user id) as a viewer.
    const byOwner = await as(alice)('PUT', `/v1/projects/team-a/members/${bob.userId}`, { role: 'viewer' });
    expect(byOwner.status, byOwner.text).to.equal(201);
    expect((await as(alice)('PUT', `/v1/projects/team-a/members/bob`, { role: 'deployer' })).status).to.equal(200);

    // A deployer manages no members; a non-member does not see the project at all.
    const refused = await as(bob)('PUT', `/v1/projects/team-a/members/carol`, { role: 'viewer' });
    expect(refused.status).to.equal(403);
    expect(refused.json.message).to.equal('Insufficient permissions: this needs projects:members, and role user does not grant it');
    // A member of no project is refused before anything is looked up (403, as for a project that does not exist); a member of another project gets the 404 of one that does not exist.
    for (const [method, path, body] of [['GET', `/v1/projects/${teamA}`], ['GET', `/v1/projects/${teamA}/members`], ['PUT', `/v1/projects/${teamA}/members/carol`, { role: 'owner' }]] as const) {
      const [existing, missing] = [await as(carol)(method, path, body), await as(carol)(method, path.replace(teamA, 'nothing-here'), body)];
      expect([existing.status, existing.json.message], existing.text).to.deep.equal([403, missing.json.message]);
      if (method === 'GET') expect((await as(bob)(method, path.replace(teamA, 'team-bee'))).status).to.equal(404);
    }

    // An auditor reads every project and changes none.
    const auditor = await createUser(t, admin, { username: 'auditor-1', role: 'auditor' });
    expect(names(await as(auditor)('GET', '/v1/projects'))).to.deep.equal(['default', 'team-a', 'team-bee']);
    expect((await as(auditor)('GET', `/v1/projects/${teamA}/members`)).status).to.equal(200);
    expect(names(await as(auditor)('GET', '/v1/swarms?project=team-a'))).to.deep.equal([]);
    const notAuditors = await as(auditor)('PUT', `/v1/projects/${teamA}/members/carol`, { role: 'viewer' });
    expect(notAuditors.status).to.equal(403);
    expect(notAuditors.json.message).to.match(/^Insufficient permissions: .*projects:members/);
    expect((await as(auditor)('POST', '/v1/projects', { name: 'by-auditor' })).status).to.equal(403);

    // Members list the project and its members; each lists only its own projects.
    expect(names(await as(bob)('GET', '/v1/projects'))).to.deep.equal(['team-a']);
    expect((await as(bob)('GET', '/v1/projects')).json.data[0].role).to.equal('deployer');
    expect(names(await as(carol)('GET', '/v1/projects'))).to.deep.equal([]);
    const list = await as(bob)('GET', `/v1/projects/${teamA}/members`);
    expect(list.status).to.equal(200);
    expect(list.json.data.map((m: { username: string; role: string }) => `${m.username}:${m.role}`).sort()).to.deep.equal(['alice:owner', 'bob:deployer']);

    for (const [user, body, status, message] of [
      ['carol', { role: 'emperor' }, 400, /project team-a has no role emperor \(roles: viewer, deployer, maintainer, owner\)/],
      ['carol', { role: 'Owner' }, 400, /^Validation failed/],
      ['carol', {}, 400, /^Validation failed/],
      ['nobody', { role: 'viewer' }, 404, /^No user nobody$/],
    ] as const) {
      const res = await api('PUT', `/v1/projects/${teamA}/members/${user}`, body);
      expect(res.status, res.text).to.equal(status);
      expect(res.json.message).to.match(message);
    }
    // The last owner stays: an owner cannot remove or demote itself when no other owner is left.
    expect((await as(alice)('DELETE', `/v1/projects/${teamA}/members/alice`)).status).to.equal(409);
    expect((await as(alice)('PUT', `/v1/projects/${teamA}/members/alice`, { role: 'viewer' })).status).to.equal(409);
  });

  it('keeps custom roles: sets of the catalogue’s permissions, given no wider than the giver’s own', async () => {
    const created = await as(alice)('POST', `/v1/projects/${teamA}/roles`, { name: 'releaser', description: 'ships services', permissions: ['services:read', 'services:deploy'] });
    expect(created.status, created.text).to.equal(201);
    expect(created.json.data).to.deep.equal({ name: 'releaser', description: 'ships services', builtin: false, permissions: ['services:deploy', 'services:read'] });
    const bad = await api('POST', `/v1/projects/${teamA}/roles`, { name: 'odd', permissions: ['services:fly', 'nodes:write', 'nonsense'] });
    expect(bad.status).to.equal(400);
    expect(bad.json.message).to.match(/^Validation failed: body.permissions: .*services:fly.*nodes is not a project's kind.*"nonsense" is not <kind>:<verb>/);
    expect((await api('POST', `/v1/projects/${teamA}/roles`, { name: 'owner', permissions: ['services:read'] })).status).to.equal(409);
    expect((await api('POST', `/v1/projects/${teamA}/roles`, { name: 'releaser', permissions: ['services:read'] })).status).to.equal(409);
    expect((await as(bob)('POST', `/v1/projects/${teamA}/roles`, { name: 'sneaky', permissions: ['services:read'] })).status).to.equal(403);

    const roles = await as(bob)('GET', `/v1/projects/${teamA}/roles`);
    expect(roles.json.data.map((r: { name: string; builtin: boolean }) => `${r.name}:${r.builtin}`)).to.deep.equal(['viewer:true', 'deployer:true', 'maintainer:true', 'owner:true', 'releaser:false']);

    const given = await as(alice)('PUT', `/v1/projects/${teamA}/members/carol`, { role: 'releaser' });
    expect(given.status, given.text).to.equal(201);
    expect(given.json.data.permissions).to.deep.equal(['services:deploy', 'services:read']);
    expect((await projectsOf(t.hangar.services).membership(teamA, carol.userId))?.permissions).to.deep.equal(['services:deploy', 'services:read']);
    const held = await api('DELETE', `/v1/projects/${teamA}/roles/releaser`);
    expect(held.status).to.equal(409);
    expect(held.json.message).to.match(/^Role releaser is held by 1 member/);
    expect((await api('DELETE', `/v1/projects/${teamA}/members/carol`)).status).to.equal(200);
    expect((await api('DELETE', `/v1/projects/${teamA}/roles/releaser`)).status).to.equal(200);
    expect((await api('DELETE', `/v1/projects/${teamA}/roles/releaser`)).status).to.equal(404);
    expect((await api('DELETE', `/v1/projects/${teamA}/roles/owner`)).status).to.equal(409);
  });

  it('a member who manages members acts on no one wider than itself, and leaves a real owner (issue 30)', async () => {
    const project = (await api('POST', '/v1/projects', { name: 'managed' })).json.data.id;
    const dave = await createUser(t, admin, { username: 'dave', role: 'user' });
    const role = (name: string, permissions: readonly string[]) => api('POST', `/v1/projects/${project}/roles`, { name, permissions });
    // A narrow manager, a viewer's manager, and a custom role granting all an owner has.
    expect((await role('narrow', ['projects:read', 'projects:members'])).status).to.equal(201);
    expect((await role('viewer-manager', [...PROJECT_ROLE_PERMISSIONS.viewer, 'projects:members'])).status).to.equal(201);
    expect((await role('co-owner', PROJECT_ROLE_PERMISSIONS.owner)).status).to.equal(201);
    for (const [user, r] of [['alice', 'owner'], ['bob', 'viewer-manager'], ['carol', 'narrow']] as const) {
      expect((await api('PUT', `/v1/projects/${project}/members/${user}`, { role: r })).status).to.equal(201);
    }
    const wider = PROJECT_ROLE_PERMISSIONS.owner.filter((p) => !PROJECT_ROLE_PERMISSIONS.viewer.includes(p) && p !== 'projects:members');

    // Neither manager removes or demotes the owner: 403 naming what the owner's role grants beyond theirs.
    for (const [who, mine] of [[bob, 'viewer-manager'], [carol, 'narrow']] as const) {
      const removed = await as(who)('DELETE', `/v1/projects/${project}/members/alice`);
      expect(removed.status, removed.text).to.equal(403);
      expect(removed.json.details[0].path).to.equal('params.user');
      expect(removed.json.details[0].message).to.match(new RegExp(`^alice's role \\(owner\\) grants what your role \\(${mine}\\) does not: .*projects:write.*; you cannot remove a member wider than you`));
    }
    const demoted = await as(bob)('PUT', `/v1/projects/${project}/members/alice`, { role: 'viewer' });
    expect(demoted.status, demoted.text).to.equal(403);
    expect(demoted.json.details[0].message).to.match(/^alice's role \(owner\) grants what your role \(viewer-manager\) does not: .*; you cannot change a member wider than you/);
    for (const p of wider) expect(demoted.json.details[0].message).to.include(p);
    expect((await as(carol)('PUT', `/v1/projects/${project}/members/alice`, { role: 'narrow' })).status).to.equal(403);
    // The narrow manager cannot touch the wider viewer-manager either; the owner is still the owner.
    expect((await as(carol)('DELETE', `/v1/projects/${project}/members/bob`)).status).to.equal(403);
    const kept = (await api('GET', `/v1/projects/${project}/members`)).json.data.map((m: { username: string; role: string }) => `${m.username}:${m.role}`).sort();
    expect(kept).to.deep.equal(['alice:owner', 'bob:viewer-manager', 'carol:narrow']);

    // The viewer's manager adds, changes and removes a viewer: no wider than itself.
    expect((await as(bob)('PUT', `/v1/projects/${project}/members/dave`, { role: 'viewer' })).status).to.equal(201);
    const changed = await as(bob)('PUT', `/v1/projects/${project}/members/dave`, { role: 'narrow' });
    expect(changed.status, changed.text).to.equal(200);
    expect((await as(bob)('PUT', `/v1/projects/${project}/members/dave`, { role: 'viewer' })).status).to.equal(200);
    expect((await as(bob)('DELETE', `/v1/projects/${project}/members/dave`)).status).to.equal(200);
    // It removes the narrow manager too (narrower than itself), and the narrow one removes itself.
    expect((await as(bob)('PUT', `/v1/projects/${project}/members/dave`, { role: 'narrow' })).status).to.equal(201);
    expect((await as(bob)('DELETE', `/v1/projects/${project}/members/dave`)).status).to.equal(200);
    expect((await as(carol)('DELETE', `/v1/projects/${project}/members/carol`)).status).to.equal(200);

    // Managing members does not make an owner: with bob (projects:members) left, alice is still the last owner.
    const last = await as(alice)('DELETE', `/v1/projects/${project}/members/alice`);
    expect(last.status, last.text).to.equal(409);
    expect(last.json.message).to.equal('alice is the last owner of project managed: make another member owner first');
    expect((await as(alice)('PUT', `/v1/projects/${project}/members/alice`, { role: 'viewer-manager' })).status).to.equal(409);
    // A role granting all an owner has is an owner: with dave holding it, alice may step down.
    expect((await as(alice)('PUT', `/v1/projects/${project}/members/dave`, { role: 'co-owner' })).status).to.equal(201);
    expect((await as(alice)('PUT', `/v1/projects/${project}/members/alice`, { role: 'viewer' })).status).to.equal(200);
    expect((await as(dave)('DELETE', `/v1/projects/${project}/members/dave`)).status).to.equal(409);
    // An installation admin is limited by neither rule: it may remove the last owner.
    expect((await api('DELETE', `/v1/projects/${project}/members/dave`)).status).to.equal(200);
    expect((await api('DELETE', `/v1/projects/${project}`)).status).to.equal(200);
  });

  it('puts clusters in a project: the one named, the caller’s default project, or `default`; lists narrow with ?project=', async () => {
    const named = await api('POST', '/v1/swarms', { name: 'in-a', project_id: 'team-a' });
    expect(named.status, named.text).to.equal(201);
    expect(named.json.data.project_id).to.equal(teamA);
    const defaulted = await api('POST', '/v1/swarms', { name: 'in-default' });
    const project = (await api('GET', '/v1/projects/default')).json.data.id;
    expect(defaulted.json.data.project_id).to.equal(project);
    // A user property names the caller's own default project.
    await api('POST', `/v1/iam/users/${admin.userId}/properties`, { name: 'default_project', value: 'team-bee' });
    const own = await api('POST', '/v1/swarms', { name: 'in-bee' });
    expect(own.json.data.project_id).to.equal((await api('GET', '/v1/projects/team-bee')).json.data.id);

    const unknown = await api('POST', '/v1/swarms', { name: 'nowhere', project_id: 'no-such' });
    expect(unknown.status).to.equal(400);
    expect(unknown.json.message).to.equal('Validation failed: body.project_id: no project no-such');

    expect(names(await api('GET', '/v1/swarms?project=team-a'))).to.deep.equal(['in-a']);
    expect(names(await api('GET', `/v1/swarms?project=${project}`))).to.deep.equal(['in-default']);
    expect(names(await api('GET', '/v1/swarms'))).to.deep.equal(['in-a', 'in-default', 'in-bee']);
    expect((await api('GET', '/v1/kubernetes/clusters?project=team-a')).json.data).to.deep.equal([]);
    expect((await api('GET', '/v1/swarms?project=no-such')).status).to.equal(400);
    // A name no project can have (a NUL character, which PostgreSQL's text refuses) is no project either: 400, not a 500.
    for (const p of ['/v1/swarms?project=%00', '/v1/projects/%00x']) expect((await api('GET', p)).status, p).to.be.oneOf([400, 404]);
    // A user names only projects it is a member of.
    expect(names(await as(bob)('GET', '/v1/swarms?project=team-a'))).to.deep.equal(['in-a']);
    expect((await as(bob)('GET', '/v1/swarms?project=team-bee')).status).to.equal(400);
    expect(await projectsOf(t.hangar.services).projectOfCluster(named.json.data.id)).to.equal(teamA);

    const refused = await api('DELETE', '/v1/projects/team-a');
    expect(refused.status).to.equal(409);
    expect(refused.json.message).to.equal(`Project team-a owns clusters: in-a (${named.json.data.id}); delete them or move them to another project first`);
    expect((await api('DELETE', `/v1/swarms/${named.json.data.id}`)).status).to.equal(200);
    expect((await as(alice)('DELETE', '/v1/projects/team-a')).status).to.equal(403);
    const deleted = await api('DELETE', '/v1/projects/team-a');
    expect(deleted.status, deleted.text).to.equal(200);
    expect((await api('GET', `/v1/projects/${teamA}`)).status).to.equal(404);
    expect(names(await as(alice)('GET', '/v1/projects'))).to.deep.equal([]);
  });

  it('a removed member loses the project at its very next request, by token and by API key', async () => {
    const project = (await api('POST', '/v1/projects', { name: 'short-stay' })).json.data.id;
    await api('PUT', `/v1/projects/${project}/members/carol`, { role: 'maintainer' });
    expect((await as(carol)('GET', `/v1/projects/${project}`)).status).to.equal(200);
    expect((await signed(t, carol, 'GET', `/v1/projects/${project}`)).status).to.equal(200);
    expect((await api('DELETE', `/v1/projects/${project}/members/carol`)).status).to.equal(200);
    // A member of no project now: refused before the project is looked up.
    expect((await as(carol)('GET', `/v1/projects/${project}`)).status).to.equal(403);
    expect((await signed(t, carol, 'GET', `/v1/projects/${project}`)).status).to.equal(403);
    expect(await projectsOf(t.hangar.services).membership(project, carol.userId)).to.equal(null);
    expect((await api('DELETE', `/v1/projects/${project}/members/carol`)).status).to.equal(404);
  });
});

/**
 * An installation made before projects (every plugin but projects, so its store has the current
 * schema of everything else): adding projects migrates it into a `default` project and keeps every
 * user's access.
 */
describeEachDialect('projects: migrating an installation made before projects', (dialect) => {
  it('puts every cluster in `default` and every live user in it as a viewer; nothing else changes', async function () {
    this.timeout(60_000);
    const storage = dialect.freshStorage();
    // A default configuration's plugins, without projects and then with it.
    const all = loadConfig({ env: {} }).plugins;
    expect(all).to.include('projects');
    const before = await startHangar(dialect, { storage, plugins: all.filter((p) => p !== 'projects') });
    let admin: Credentials;
    let user: Credentials;
    let gone: Credentials;
    let swarms: unknown[];
    let clusters: unknown[];
    let reads: Record<string, unknown[]>;
    /** What a user reads of backup targets and schedules and of a swarm's tags (a node's tags are installation roles' since projects). */
    const READS = ['/v1/backups/targets', '/v1/backups/schedules', '/v1/tags?key=old&resource_type=swarm'];
    try {
      admin = await bootstrapAdmin(before);
      user = await createUser(before, admin, { username: 'old-user', role: 'user' });
      gone = await createUser(before, admin, { username: 'old-gone', role: 'user' });
      expect((await before.request('DELETE', `/v1/iam/users/${gone.userId}`, { headers: bearer(admin.token) })).status).to.equal(200);
      for (const name of ['old-a', 'old-b']) expect((await before.request('POST', '/v1/swarms', { body: { name }, headers: bearer(admin.token) })).status).to.equal(201);
      const stamp = { created_at: NOW, updated_at: NOW };
      await before.hangar.store.knex('clusters').insert({ id: 'cluster-oldk8s', name: 'old-k8s', backend: 'k8s', status: 'empty', manager_node_id: null, runtime_id: null, error: null, ...stamp });
      await before.hangar.store.knex('backup_targets').insert({ id: 'bkt-old', name: 'old-target', kind: 's3', endpoint: 'http://127.0.0.1:9', bucket: 'old', prefix: '', region: 'us-east-1', access_key_id: 'x', secret_sealed: 'x', password_sealed: 'x', checked_at: NOW, ...stamp });
      await before.hangar.store.knex('backup_schedules').insert({ id: 'bks-old', name: 'old-schedule', target_id: 'bkt-old', volume_ids: '[]', every_seconds: 86_400, next_run_at: '2100-01-01T00:00:00.000Z', ...stamp });
      expect((await before.request('PUT', '/v1/tags', { body: { resource_type: 'swarm', resource_id: 'old-a', key: 'old', value: 'x' }, headers: bearer(admin.token) })).status).to.equal(200);
      reads = {};
      for (const path of READS) reads[path] = (await before.request('GET', path, { headers: bearer(user.token) })).json.data;
      expect(Object.values(reads).map((r) => r.length)).to.deep.equal([1, 1, 1]);
      swarms = (await before.request('GET', '/v1/swarms', { headers: bearer(user.token) })).json.data;
      clusters = (await before.request('GET', '/v1/kubernetes/clusters', { headers: bearer(user.token) })).json.data;
      expect(swarms).to.have.length(2);
      expect(clusters).to.have.length(1);
    } finally {
      await before.stop();
    }

    const t = await startHangar(dialect, { storage, plugins: all });
    try {
      const get = async (creds: Credentials, path: string) => {
        const res = await t.request('GET', path, { headers: bearer(creds.token) });
        expect(res.status, `${path}: ${res.text}`).to.equal(200);
        return res.json.data;
      };
      const [project] = await get(admin!, '/v1/projects');
      expect(project).to.include({ name: 'default', role: MIGRATED_ROLE });
      // Every cluster, as it was, now in the default project.
      const strip = (list: Array<Record<string, unknown>>) => list.map(({ project_id: _p, ...rest }) => rest);
      const now = await get(user!, '/v1/swarms');
      expect(strip(now)).to.deep.equal(swarms);
      expect(now.map((s: { project_id: string }) => s.project_id)).to.deep.equal([project.id, project.id]);
      const k8s = await get(user!, '/v1/kubernetes/clusters');
      expect(strip(k8s)).to.deep.equal(clusters);
      expect(k8s[0].project_id).to.equal(project.id);
      // Backup targets and schedules (made before: the default project's) and tags of its resources, as they were.
      for (const path of READS) expect(await get(user!, path), path).to.deep.equal(reads![path]);
      // Every live user a member with the migrated role; the deleted one is not.
      const members = await get(admin!, `/v1/projects/${project.id}/members`);
      expect(members.map((m: { username: string; role: string }) => `${m.username}:${m.role}`).sort()).to.deep.equal([`${admin!.username}:viewer`, 'old-user:viewer']);
      expect(await get(user!, '/v1/projects')).to.have.length(1);
      expect(await projectsOf(t.hangar.services).membership(project.id, gone!.userId)).to.equal(null);

      // The migrated role is exactly what a user could do before: the permissions of the project's
      // kinds among the routes (of every default plugin) open to any authenticated caller (the reads,
      // and one's own read-only kubeconfig), and reading the project.
      const routes = t.hangar.routes.map((r) => r.route).filter((r) => r.path !== '/v1/projects' && !r.path.startsWith('/v1/projects/'));
      const before = [...userGrantsOf(routes)].filter((p) => KINDS[p.split(':')[0]!]?.scope === 'project');
      expect([...PROJECT_ROLE_PERMISSIONS[MIGRATED_ROLE]].filter((p) => p !== 'projects:read').sort()).to.deep.equal(before.sort());
      expect(routes.some((r) => permissionOf(r) === 'clusters:write' && r.auth === 'authenticated')).to.equal(false);
    } finally {
      await t.stop();
    }
  });
});
