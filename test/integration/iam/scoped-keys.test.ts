import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { expect } from 'chai';
import { ManualClock } from '../../../core/clock.js';
import { loadConfig } from '../../../core/config.js';
import { openStore } from '../../../core/db/store.js';
import { KINDS, parsePermission, permissionOf, PROJECT_ROLE_PERMISSIONS } from '../../../core/auth/permissions.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, createUser, signed, type Credentials } from '../../support/identity.js';
import { hangarCli, TempDirs } from '../runner/support.js';

/** Every default plugin: the generated sweep covers the whole route table. */
const PLUGINS = loadConfig({ env: {} }).plugins;
const MINUTE = 60_000;

type Key = Pick<Credentials, 'accessKeyId' | 'secretAccessKey'> & { id: string; data: Record<string, any> };

/**
 * Scoped, expiring API keys (docs/api-auth.md "API keys", docs/tenancy.md "Scoped API keys"): a key
 * of a project or of the installation, holding a role or permissions no wider than its owner's,
 * until it expires, from its source networks; through HTTP and the CLI.
 */
describeEachDialect('scoped, expiring API keys', (dialect) => {
  const temp = new TempDirs();
  const clock = new ManualClock(Date.now());
  let t: TestHangar;
  let admin: Credentials;
  let bob: Credentials;
  let audrey: Credentials;
  let teamA: string;

  /** A request signed at the control plane's (manual) time. */
  const sig = (creds: Pick<Credentials, 'accessKeyId' | 'secretAccessKey'>, method: string, p: string, options: { body?: unknown; headers?: Record<string, string> } = {}) =>
    signed(t, creds, method, p, { ...options, timestamp: Math.floor(clock.now().getTime() / 1000) });
  const as = (creds: Credentials) => (method: string, p: string, body?: unknown) => t.request(method, p, { body, headers: bearer(creds.token) });
  const api = (method: string, p: string, body?: unknown) => as(admin)(method, p, body);
  async function makeKey(owner: Credentials, body: Record<string, unknown>, by: Credentials = owner): Promise<Key> {
    const res = await as(by)('POST', `/v1/iam/users/${owner.userId}/keys`, body);
    expect(res.status, res.text).to.equal(201);
    return { id: res.json.data.id, accessKeyId: res.json.data.access_key_id, secretAccessKey: res.json.data.secret_access_key, data: res.json.data };
  }

  before(async function () {
    this.timeout(60_000);
    t = await startHangar(dialect, { plugins: PLUGINS, clock, overrides: { api: { trusted_proxies: ['127.0.0.1', '::1'] } } });
    admin = await bootstrapAdmin(t);
    bob = await createUser(t, admin, { username: 'bob', role: 'user' });
    audrey = await createUser(t, admin, { username: 'audrey', role: 'auditor' });
    teamA = (await api('POST', '/v1/projects', { name: 'team-a' })).json.data.id;
    expect((await api('POST', '/v1/projects', { name: 'team-b' })).status).to.equal(201);
    expect((await api('PUT', '/v1/projects/team-a/members/bob', { role: 'deployer' })).status).to.equal(201);
    expect((await api('PUT', '/v1/projects/team-b/members/bob', { role: 'owner' })).status).to.equal(201);
  });
  after(async () => {
    await t?.stop();
    temp.cleanup();
  });

  it('keeps a key made without scope what keys always were: the installation, its owner’s role, no expiry, from anywhere', async () => {
    const keys = await as(bob)('GET', `/v1/iam/users/${bob.userId}/keys`);
    expect(keys.json.data[0]).to.include({ scope: 'installation', project_id: null, project_name: null, role: null, permissions: null, expires_at: null, expired: false });
    expect(keys.json.data[0].source_networks).to.deep.equal([]);
    const me = await sig(bob, 'GET', '/v1/iam/whoami');
    expect(me.status, me.text).to.equal(200);
    expect(me.json.data.credential).to.include({ kind: 'api_key', scope: 'installation', expires_at: null, limited: false });
    expect((await sig(bob, 'GET', '/v1/nodes')).status).to.equal(200);
  });

  it('limits a project’s key to its project and role: inside it answers, outside it is 404 or 403', async () => {
    const key = await makeKey(bob, { description: 'ci of team a', project: 'team-a', role: 'viewer' });
    expect(key.data).to.include({ scope: 'project', project_id: teamA, project_name: 'team-a', role: 'viewer', expires_at: null });
    expect(key.data.permissions).to.deep.equal([...new Set([...PROJECT_ROLE_PERMISSIONS.viewer, 'account:read'])].sort());

    // Inside: its project, its members.
    expect((await sig(key, 'GET', `/v1/projects/${teamA}`)).status).to.equal(200);
    expect((await sig(key, 'GET', '/v1/projects/team-a/members')).status).to.equal(200);
    const listed = await sig(key, 'GET', '/v1/projects');
    expect(listed.json.data.map((p: { name: string }) => p.name)).to.deep.equal(['team-a']);
    // Outside: another project its owner is a member (even an owner) of is not there for it.
    expect((await sig(key, 'GET', '/v1/projects/team-b')).status).to.equal(404);
    expect((await sig(key, 'GET', '/v1/projects/team-b/members')).status).to.equal(404);
    const other = await sig(key, 'GET', '/v1/swarms?project=team-b');
    expect(other.status, other.text).to.equal(400);
    // The installation's kinds are not the project's: 403 naming the permission.
    const nodes = await sig(key, 'GET', '/v1/nodes');
    expect(nodes.status).to.equal(403);
    expect(nodes.json.message).to.equal('Insufficient permissions: this needs nodes:read, and this credential is limited to other permissions');
    // A viewer's key manages no members though its owner's role elsewhere would.
    expect((await sig(key, 'PUT', '/v1/projects/team-a/members/audrey', { body: { role: 'viewer' } })).status).to.equal(403);
    // Not exchanged for a token without its limits.
    const token = await sig(key, 'POST', '/v1/iam/token');
    expect(token.status).to.equal(403);
    expect(token.json.message).to.equal('Insufficient permissions: this needs account:write, and this credential is limited to other permissions');

    const me = await sig(key, 'GET', '/v1/iam/whoami');
    expect(me.json.data.credential).to.include({ kind: 'api_key', scope: 'project', project_id: teamA, project_name: 'team-a', key_role: 'viewer', limited: true, expires_at: null });
    expect(me.json.data.permissions).to.deep.equal(key.data.permissions);

    // A project key without a role follows its owner's role there; an owner's key manages members.
    const owners = await makeKey(bob, { project: 'team-b' });
    expect(owners.data).to.include({ role: null, permissions: null });
    expect((await sig(owners, 'GET', '/v1/iam/whoami')).json.data.permissions).to.include.members(['projects:members', 'services:deploy']);
    const added = await sig(owners, 'PUT', '/v1/projects/team-b/members/audrey', { body: { role: 'viewer' } });
    expect(added.status, added.text).to.equal(201);
    expect((await sig(owners, 'PUT', '/v1/projects/team-a/members/audrey', { body: { role: 'viewer' } })).status).to.equal(404);

    // A custom role of the project works as a built-in one.
    expect((await api('POST', '/v1/projects/team-a/roles', { name: '2nd-line', permissions: ['services:read', 'services:deploy'] })).status).to.equal(201);
    const custom = await makeKey(bob, { project: 'team-a', role: '2nd-line' });
    expect(custom.data).to.include({ role: '2nd-line' });
    expect(custom.data.permissions).to.deep.equal(['account:read', 'services:deploy', 'services:read']);
    expect((await sig(custom, 'GET', '/v1/iam/whoami')).json.data.permissions).to.deep.equal(['account:read', 'services:deploy', 'services:read']);
    expect((await sig(custom, 'GET', `/v1/projects/${teamA}`)).status).to.equal(403);
  });

  it('whoami answers the caller’s projects with its role and what it grants in each, as the credential holds it', async () => {
    type Grant = { id: string; name: string; role: string | null; permissions: string[] };
    const projectsOf = async (res: Promise<{ status: number; text: string; json: any }>) => {
      const me = await res;
      expect(me.status, me.text).to.equal(200);
      return Object.fromEntries((me.json.data.projects as Grant[]).map((p) => [p.name, { role: p.role, permissions: p.permissions }]));
    };
    const sorted = (list: readonly string[]) => [...list].sort();
    // bob's own credential: both memberships, each role's permissions.
    expect(await projectsOf(as(bob)('GET', '/v1/iam/whoami'))).to.deep.equal({
      'team-a': { role: 'deployer', permissions: sorted(PROJECT_ROLE_PERMISSIONS.deployer) },
      'team-b': { role: 'owner', permissions: sorted(PROJECT_ROLE_PERMISSIONS.owner) },
    });
    // A custom role without projects:read: whoami still says what it grants (the dashboard decides its buttons from it).
    const carla = await createUser(t, admin, { username: 'carla', role: 'user' });
    expect((await api('PUT', '/v1/projects/team-a/members/carla', { role: '2nd-line' })).status).to.equal(201);
    expect((await as(carla)('GET', `/v1/projects/${teamA}`)).status, 'no projects:read').to.equal(403);
    const carlas = (await as(carla)('GET', '/v1/iam/whoami')).json.data;
    expect(carlas.projects).to.deep.equal([{ id: teamA, name: 'team-a', role: '2nd-line', permissions: ['services:deploy', 'services:read'] }]);
    // A project's key: its project only, what the key holds there.
    const viewerKey = await makeKey(bob, { project: 'team-a', role: 'viewer' });
    expect(await projectsOf(sig(viewerKey, 'GET', '/v1/iam/whoami'))).to.deep.equal({ 'team-a': { role: 'deployer', permissions: viewerKey.data.permissions } });
    // An installation key with a list: each membership within the list.
    const listed = await makeKey(bob, { permissions: ['services:read', 'projects:members'] });
    expect(await projectsOf(sig(listed, 'GET', '/v1/iam/whoami'))).to.deep.equal({
      'team-a': { role: 'deployer', permissions: ['services:read'] },
      'team-b': { role: 'owner', permissions: ['projects:members', 'services:read'] },
    });
    // A member removed is no longer told the project; a user of no project gets an empty list.
    expect((await api('DELETE', '/v1/projects/team-a/members/carla')).status).to.be.oneOf([200, 204]);
    expect((await as(carla)('GET', '/v1/iam/whoami')).json.data.projects).to.deep.equal([]);
  });

  it('reaches the resources of its project only: another project’s cluster is not there for it, even an admin’s key', async () => {
    const inA = await api('POST', '/v1/swarms', { name: 'sw-a', project_id: 'team-a' });
    const inB = await api('POST', '/v1/swarms', { name: 'sw-b', project_id: 'team-b' });
    expect([inA.status, inB.status], inB.text).to.deep.equal([201, 201]);
    const [a, b] = [inA.json.data.id as string, inB.json.data.id as string];
    const names = (res: { json: { data: Array<{ name: string }> } }) => res.json.data.map((c) => c.name);

    // bob may read both through his memberships; his key of team-a reads team-a's only.
    expect(names(await as(bob)('GET', '/v1/swarms'))).to.have.members(['sw-a', 'sw-b']);
    const bobs = await makeKey(bob, { project: 'team-a', role: 'viewer' });
    expect((await sig(bobs, 'GET', `/v1/swarms/${a}`)).status).to.equal(200);
    const elsewhere = await sig(bobs, 'GET', `/v1/swarms/${b}`);
    expect(elsewhere.status).to.equal(404);
    expect(elsewhere.text).not.to.contain('sw-b');
    expect(names(await sig(bobs, 'GET', '/v1/swarms'))).to.deep.equal(['sw-a']);
    // Inside its project, no more than its role: a viewer's key deletes no cluster (bob, a deployer, neither).
    const removal = await sig(bobs, 'DELETE', `/v1/swarms/${a}`);
    expect(removal.status).to.equal(403);
    expect(removal.json.message).to.match(/^Insufficient permissions: this needs clusters:write/);

    // An admin's key of team-a (admins need no membership) holds every permission there, nothing elsewhere.
    const admins = await makeKey(admin, { project: 'team-a' });
    expect(admins.data).to.include({ scope: 'project', project_id: teamA });
    expect((await sig(admins, 'GET', `/v1/swarms/${a}`)).status).to.equal(200);
    expect((await sig(admins, 'GET', `/v1/swarms/${b}`)).status).to.equal(404);
    expect((await sig(admins, 'DELETE', `/v1/swarms/${b}`)).status).to.equal(404);
    expect(names(await sig(admins, 'GET', '/v1/swarms'))).to.deep.equal(['sw-a']);
    expect((await sig(admins, 'GET', '/v1/projects/team-b')).status).to.equal(404);
    expect((await sig(admins, 'GET', '/v1/nodes')).status).to.equal(403);
    expect((await sig(admins, 'DELETE', `/v1/swarms/${a}`)).status).to.equal(200);
    expect((await api('DELETE', `/v1/swarms/${b}`)).status).to.equal(200);
  });

  it('uses the routes of backup targets, object stores and tags within its project (a project’s key of team-b: its owner’s role there)', async () => {
    // Two targets, one per project, written as the store holds them (making one probes an S3 endpoint).
    const at = clock.now().toISOString();
    const knex = t.hangar.services.db.knex;
    const sealed = t.hangar.services.ca.secretBox('backups').seal('x');
    const teamB = (await api('GET', '/v1/projects/team-b')).json.data.id as string;
    for (const [id, project] of [['bkt-keya', teamA], ['bkt-keyb', teamB]] as const) {
      await knex('backup_targets').insert({ id, name: id, kind: 's3', endpoint: 'http://127.0.0.1:9', bucket: 'keys', prefix: id, region: 'us-east-1', access_key_id: 'x', secret_sealed: sealed, password_sealed: sealed, project_id: project, checked_at: at, created_at: at, updated_at: at });
    }
    const key = await makeKey(bob, { project: 'team-b', role: 'owner' });
    const listed = await sig(key, 'GET', '/v1/backups/targets');
    expect(listed.status, listed.text).to.equal(200);
    expect(listed.json.data.map((x: { id: string }) => x.id)).to.deep.equal(['bkt-keyb']);
    expect((await sig(key, 'GET', '/v1/backups/targets/bkt-keya')).status).to.equal(404);
    expect((await sig(key, 'DELETE', '/v1/backups/targets/bkt-keya')).status).to.equal(404);
    expect((await sig(key, 'GET', '/v1/s3/instances')).status).to.equal(200);
    expect((await sig(key, 'GET', '/v1/tags?key=any')).status).to.equal(200);
    expect((await sig(key, 'DELETE', '/v1/backups/targets/bkt-keyb')).status).to.equal(204);
    expect((await api('DELETE', '/v1/backups/targets/bkt-keya')).status).to.equal(204);
  });

  it('refuses a key wider than its owner (403 naming what the owner lacks) and malformed scopes (400 naming the field)', async () => {
    const wider = await as(bob)('POST', `/v1/iam/users/${bob.userId}/keys`, { project: 'team-a', role: 'maintainer' });
    expect(wider.status).to.equal(403);
    expect(wider.json.message).to.match(/^Insufficient permissions: the key would hold .*\bclusters:write\b.*, which bob \(in project team-a\) does not/);
    expect(wider.json.message).not.to.contain('services:deploy');
    const listWider = await as(bob)('POST', `/v1/iam/users/${bob.userId}/keys`, { project: 'team-a', permissions: ['services:deploy', 'volumes:restore'] });
    expect(listWider.status).to.equal(403);
    expect(listWider.json.message).to.contain('volumes:restore').and.not.contain('services:deploy,');
    // An auditor changes nothing, so no key of the user role (which may manage the members of projects it owns).
    const auditors = await as(audrey)('POST', `/v1/iam/users/${audrey.userId}/keys`, { role: 'user' });
    expect(auditors.status).to.equal(403);
    expect(auditors.json.message).to.match(/^Insufficient permissions: the key would hold .*\bprojects:members\b.*, which audrey does not$/);
    const nodes = await as(bob)('POST', `/v1/iam/users/${bob.userId}/keys`, { permissions: ['nodes:write'] });
    expect(nodes.status).to.equal(403);
    expect(nodes.json.message).to.contain('nodes:write');

    const bad: Array<[Record<string, unknown>, RegExp]> = [
      [{ project: 'team-c' }, /^Validation failed: body\.project: no project team-c that the key's owner \(bob\) is a member of/],
      [{ project: 'default' }, /^Validation failed: body\.project: no project default/],
      [{ project: 'team-a', role: 'releaser' }, /^Validation failed: body\.role: project team-a has no role releaser/],
      [{ role: 'deployer' }, /^Validation failed: body\.role: deployer is not an installation role/],
      [{ role: 'user', permissions: ['nodes:read'] }, /^Validation failed: body\.role: give role or permissions, not both/],
      [{ project: 'team-a', permissions: ['nodes:read'] }, /^Validation failed: body\.permissions: .*nodes is not a project's kind/],
      [{ permissions: ['wibble:read'] }, /^Validation failed: body\.permissions: .*"wibble:read" is no permission of this installation/],
      [{ expires_at: new Date(clock.now().getTime() - MINUTE).toISOString() }, /^Validation failed: body\.expires_at: must be in the future/],
      [{ expires_in: '0d' }, /^Validation failed: body\.expires_in: must be a positive number/],
      [{ expires_in: '30 days' }, /^Validation failed:/],
      [{ expires_in: '1d', expires_at: new Date(clock.now().getTime() + MINUTE).toISOString() }, /^Validation failed: body\.expires_in: give expires_at or expires_in, not both/],
      [{ source_networks: ['10.0.0.0/33'] }, /^Validation failed: body\.source_networks\[0\]: "10\.0\.0\.0\/33": the prefix length of an IPv4 network is 0 to 32/],
      [{ source_networks: ['10.0.0.0/8', 'intranet'] }, /^Validation failed: body\.source_networks\[1\]: "intranet" is not a CIDR/],
    ];
    for (const [body, message] of bad) {
      const res = await as(bob)('POST', `/v1/iam/users/${bob.userId}/keys`, body);
      expect(res.status, JSON.stringify(body)).to.equal(400);
      expect(res.json.message, JSON.stringify(body)).to.match(message);
    }
  });

  it('limits an installation key to a role or a permission list, and a limited key makes no key wider than itself', async () => {
    const readOnly = await makeKey(admin, { role: 'auditor', description: 'audit' });
    expect(readOnly.data.permissions).to.include.members(['nodes:read', 'iam:read', 'account:read']).and.not.include('nodes:write');
    expect((await sig(readOnly, 'GET', '/v1/nodes')).status).to.equal(200);
    expect((await sig(readOnly, 'POST', '/v1/projects', { body: { name: 'team-x' } })).status).to.equal(403);

    const keyAdmin = await makeKey(admin, { permissions: ['iam:admin', 'iam:read', 'nodes:read'] });
    const narrower = await sig(keyAdmin, 'POST', `/v1/iam/users/${bob.userId}/keys`, { body: { permissions: ['nodes:read'] } });
    expect(narrower.status, narrower.text).to.equal(201);
    const widerThanKey = await sig(keyAdmin, 'POST', `/v1/iam/users/${admin.userId}/keys`, { body: { permissions: ['nodes:write'] } });
    expect(widerThanKey.status).to.equal(403);
    expect(widerThanKey.json.message).to.equal('Insufficient permissions: the key would hold nodes:write, which the API key signing this request does not');
    expect((await sig(keyAdmin, 'POST', `/v1/iam/users/${admin.userId}/keys`, { body: {} })).status).to.equal(403);
  });

  it('stops a key at its expiry, and a project’s key when its owner leaves the project or is deleted, at once', async () => {
    const brief = await makeKey(bob, { expires_in: '10m' });
    expect(Date.parse(brief.data.expires_at) - clock.now().getTime()).to.equal(10 * MINUTE);
    const until = new Date(clock.now().getTime() + 30 * MINUTE).toISOString();
    const later = await makeKey(bob, { expires_at: until, project: 'team-a' });
    expect(later.data.expires_at).to.equal(until);
    expect((await sig(brief, 'GET', '/v1/iam/whoami')).json.data.credential.expires_at).to.equal(brief.data.expires_at);
    clock.advance(11 * MINUTE);
    const gone = await sig(brief, 'GET', '/v1/iam/whoami');
    expect(gone.status).to.equal(401);
    expect(gone.json.message).to.equal(`The API key ${brief.accessKeyId} expired at ${brief.data.expires_at}: make a new one`);
    const listed = (await as(bob)('GET', `/v1/iam/users/${bob.userId}/keys`)).json.data.find((k: { id: string }) => k.id === brief.id);
    expect(listed).to.include({ expired: true });
    expect((await sig(later, 'GET', '/v1/projects/team-a')).status).to.equal(200);

    // Removed from the project: the next request is refused.
    expect((await api('DELETE', '/v1/projects/team-a/members/bob')).status).to.equal(200);
    const removed = await sig(later, 'GET', '/v1/projects/team-a');
    expect(removed.status).to.equal(401);
    expect(removed.json.message).to.match(/limited to a project its owner is no longer a member of/);
    expect((await api('PUT', '/v1/projects/team-a/members/bob', { role: 'deployer' })).status).to.equal(201);
    expect((await sig(later, 'GET', '/v1/projects/team-a')).status).to.equal(200);

    // A deleted user's keys stop working, whatever their scope.
    const carol = await createUser(t, admin, { username: 'carol' });
    expect((await api('PUT', '/v1/projects/team-a/members/carol', { role: 'viewer' })).status).to.equal(201);
    const carols = await makeKey(carol, { project: 'team-a' });
    expect((await sig(carols, 'GET', '/v1/projects/team-a')).status).to.equal(200);
    expect((await api('DELETE', `/v1/iam/users/${carol.userId}`)).status).to.equal(200);
    expect((await sig(carols, 'GET', '/v1/projects/team-a')).status).to.equal(401);
    expect((await sig(carol, 'GET', '/v1/iam/whoami')).status).to.equal(401);

    // An admin needs no membership, but its key of a project that is deleted stops too.
    expect((await api('POST', '/v1/projects', { name: 'short-lived' })).status).to.equal(201);
    const admins = await makeKey(admin, { project: 'short-lived' });
    expect((await sig(admins, 'GET', '/v1/iam/whoami')).status).to.equal(200);
    expect((await api('DELETE', '/v1/projects/short-lived')).status).to.be.oneOf([200, 204]);
    const orphaned = await sig(admins, 'GET', '/v1/iam/whoami');
    expect(orphaned.status, orphaned.text).to.equal(401);
    expect(orphaned.json.message).to.match(/or that no longer exists/);
  });

  it('accepts a key from its source networks only, by the client address the app reads (trusted proxies’ X-Forwarded-For)', async () => {
    const key = await makeKey(bob, { source_networks: ['10.0.0.0/8', '2001:db8::/32', '192.0.2.7'] });
    expect(key.data.source_networks).to.deep.equal(['10.0.0.0/8', '2001:db8::/32', '192.0.2.7/32']);
    for (const from of ['10.1.2.3', '2001:db8::5', '192.0.2.7']) {
      const res = await sig(key, 'GET', '/v1/iam/whoami', { headers: { 'x-forwarded-for': from } });
      expect(res.status, `${from}: ${res.text}`).to.equal(200);
    }
    for (const from of ['192.0.2.8', '2001:db9::1', '11.0.0.1']) {
      const res = await sig(key, 'GET', '/v1/iam/whoami', { headers: { 'x-forwarded-for': from } });
      expect(res.status, from).to.equal(401);
      expect(res.json.message).to.equal(`The API key ${key.accessKeyId} is not valid from this address (${from}): it is accepted from its source networks only`);
    }
    // Loopback itself is not among them.
    expect((await sig(key, 'GET', '/v1/iam/whoami')).status).to.equal(401);
    expect((await sig(key, 'GET', '/v1/iam/whoami', { headers: { 'x-forwarded-for': '10.9.9.9' } })).json.data.credential.source_networks).to.deep.equal(key.data.source_networks);
  });

  it('writes last_used_at at most once a minute', async () => {
    const key = await makeKey(bob, {});
    const used = async () => (await as(bob)('GET', `/v1/iam/users/${bob.userId}/keys`)).json.data.find((k: { id: string }) => k.id === key.id).last_used_at;
    expect(await used()).to.equal(null);
    expect((await sig(key, 'GET', '/v1/iam/whoami')).status).to.equal(200);
    const first = await used();
    expect(first).to.equal(clock.now().toISOString());
    clock.advance(30_000);
    expect((await sig(key, 'GET', '/v1/iam/whoami')).status).to.equal(200);
    expect(await used()).to.equal(first);
    clock.advance(31_000);
    expect((await sig(key, 'GET', '/v1/iam/whoami')).status).to.equal(200);
    expect(await used()).to.equal(clock.now().toISOString());
  });

  it('generated from the route table: an expired key is refused (401) on every protected operation, a project’s key on every one of the installation and on every route of a project’s kind not scoped to projects (403)', async function () {
    this.timeout(120_000);
    const routes = t.hangar.services
      .routeTable()
      .map((r) => r.route)
      .filter((r) => (r.listener ?? 'control') === 'control' && r.auth !== 'public' && r.auth !== 'agent');
    // An admin's key of a project: it holds every permission there, and none of the installation's.
    const scoped = await makeKey(admin, { project: 'team-a' });
    const lapsing = await makeKey(admin, { expires_in: '1m' });
    clock.advance(2 * MINUTE);
    const mismatches: string[] = [];
    let requests = 0;
    for (const route of routes) {
      const p = route.path.replace(/\{\w+\}/g, 'matrix-probe');
      const what = `${route.method} ${route.path} (${permissionOf(route)})`;
      const gone = await sig(lapsing, route.method, p);
      requests++;
      if (gone.status !== 401 || !String(gone.json?.message).startsWith(`The API key ${lapsing.accessKeyId} expired at`)) mismatches.push(`expired key ${what}: ${gone.status} ${gone.text.slice(0, 200)}`);
      const kindName = parsePermission(permissionOf(route))!.kind;
      const kind = KINDS[kindName];
      if (permissionOf(route) === 'account:read') continue;
      if (kind?.scope === 'project') {
        // A project's kind on a route not scoped to projects (the gateway, creating clusters, volumes or backup targets…) would act installation-wide: refused.
        if (route.scope || kindName === 'projects') continue;
        const unscoped = await sig(scoped, route.method, p);
        requests++;
        if (unscoped.status !== 403 || !String(unscoped.json?.message).startsWith('This credential is limited to a project, and ')) mismatches.push(`project key, unscoped ${what}: ${unscoped.status} ${unscoped.text.slice(0, 200)}`);
        continue;
      }
      const outside = await sig(scoped, route.method, p);
      requests++;
      if (outside.status !== 403 || outside.json?.message !== `Insufficient permissions: this needs ${permissionOf(route)}, and this credential is limited to other permissions`) {
        mismatches.push(`project key ${what}: ${outside.status} ${outside.text.slice(0, 200)}`);
      }
    }
    console.log(`      scoped keys over the route table [${dialect.name}]: ${requests} requests over ${routes.length} operations, ${mismatches.length} mismatches`);
    expect(mismatches).to.deep.equal([]);
  });

  it('is `hangar key create --project --role --expires-in --source` and `hangar key list`', async function () {
    this.timeout(90_000);
    const dir = temp.make('hangar-keys-');
    const ca = path.join(dir, 'ca.pem');
    writeFileSync(ca, t.caPem);
    // The CLI signs with the real time: the control plane's clock is set back to it.
    clock.set(Date.now());
    const env = { XDG_CONFIG_HOME: dir, HANGAR_API_URL: t.url, HANGAR_ACCESS_KEY: bob.accessKeyId, HANGAR_SECRET_KEY: bob.secretAccessKey, HANGAR_CA_FILE: ca };
    const made = await hangarCli(['key', 'create', '--project', 'team-a', '--role', 'viewer', '--expires-in', '30d', '--source', '10.0.0.0/8', '--source', '127.0.0.1', '--description', 'cli'], { env });
    expect(made.code, made.stderr).to.equal(0);
    expect(made.stdout).to.match(/^scope: +project team-a \(prj-[0-9a-z]+\), role viewer$/m);
    expect(made.stdout).to.match(/^expires: +\d{4}-\d\d-\d\dT.*; from 10\.0\.0\.0\/8, 127\.0\.0\.1\/32 only$/m);
    const accessKey = /access key id: +(\S+)/.exec(made.stdout)![1]!;
    const secret = /secret access key: +(\S+)/.exec(made.stdout)![1]!;

    const scoped = { ...env, HANGAR_ACCESS_KEY: accessKey, HANGAR_SECRET_KEY: secret };
    const who = await hangarCli(['whoami'], { env: scoped });
    expect(who.code, who.stderr).to.equal(0);
    expect(who.stdout).to.match(/^scope: +project team-a \(prj-[0-9a-z]+\), role viewer; from 10\.0\.0\.0\/8, 127\.0\.0\.1\/32 only$/m);
    expect(who.stdout).to.match(/^credential: +api_key \S+ \(cli\), expires \d{4}-/m);
    // bob is a deployer of team-a; the key holds a viewer's permissions there.
    expect(who.stdout).to.match(/^project: +team-a \(prj-[0-9a-z]+\), role deployer: account:read alerts:read backups:read clusters:credentials clusters:read /m);
    expect(who.stdout).not.to.contain('services:deploy');
    // (What it is refused, and a key wider than its owner, are the API's answers, tested above; each CLI run costs seconds.)
    const both = await hangarCli(['key', 'create', '--role', 'user', '--permission', 'nodes:read'], { env });
    expect(both.code).not.to.equal(0);
    expect(both.stderr).to.contain('give --role or --permission, not both');

    const list = await hangarCli(['key', 'list'], { env });
    expect(list.code, list.stderr).to.equal(0);
    const line = list.stdout.split('\n').find((l) => l.includes(accessKey))!;
    expect(line).to.match(/\| cli +\| project team-a +\| viewer +\| \d{4}-\d\d-\d\dT\S+ +\| \d{4}-\d\d-\d\dT\S+ +\| 10\.0\.0\.0\/8 127\.0\.0\.1\/32$/);
    expect(list.stdout).to.match(/\| installation +\| owner’s +\| never +\|/);
  });
});

describeEachDialect('scoped API keys: the migration of a store made before them', (dialect) => {
  it('keeps every existing key working as before: the installation, its owner’s role, no expiry; a maximum lifetime set later caps new keys only', async function () {
    this.timeout(60_000);
    const storage = dialect.freshStorage();
    let t = await startHangar(dialect, { storage, plugins: ['system', 'iam'] });
    const admin = await bootstrapAdmin(t);
    await t.stop();
    // The store as the release before scoped keys left it: api_keys without the new columns.
    const db = await openStore(dialect.config(storage));
    try {
      await db.knex.schema.alterTable('api_keys', (table) => {
        table.dropIndex(['project_id']);
        table.dropColumns('project_id', 'role', 'permissions', 'expires_at', 'source_networks');
      });
      expect(await db.knex('hangar_migrations').where({ id: 'iam/006_scoped_keys' }).delete()).to.equal(1);
      expect(await db.knex.schema.hasColumn('api_keys', 'expires_at')).to.equal(false);
    } finally {
      await db.close();
    }
    t = await startHangar(dialect, { storage, plugins: ['system', 'iam', 'projects'], overrides: { iam: { api_key_max_lifetime_days: 90 } } });
    try {
      const me = await signed(t, admin, 'GET', '/v1/iam/whoami');
      expect(me.status, me.text).to.equal(200);
      expect(me.json.data.role).to.equal('admin');
      expect(me.json.data.credential).to.include({ scope: 'installation', project_id: null, expires_at: null, limited: false });
      expect(me.json.data.permissions).to.include.members(['nodes:write', 'iam:admin']);
      const keys = await signed(t, admin, 'GET', `/v1/iam/users/${admin.userId}/keys`);
      expect(keys.json.data[0]).to.include({ access_key_id: admin.accessKeyId, scope: 'installation', role: null, permissions: null, expires_at: null, expired: false });

      // A maximum lifetime set later caps the keys made from then on: a key without expiry gets it, a longer one is refused.
      const before = Date.now();
      const capped = await signed(t, admin, 'POST', `/v1/iam/users/${admin.userId}/keys`, { body: {} });
      expect(capped.status, capped.text).to.equal(201);
      const lifetime = Date.parse(capped.json.data.expires_at) - before;
      expect(lifetime).to.be.within(90 * 86_400_000, 90 * 86_400_000 + 60_000);
      const longer = await signed(t, admin, 'POST', `/v1/iam/users/${admin.userId}/keys`, { body: { expires_in: '91d' } });
      expect(longer.status).to.equal(400);
      expect(longer.json.message).to.equal('Validation failed: body.expires_in: is later than the longest lifetime allowed here, 90 days (iam.api_key_max_lifetime_days)');
      expect((await signed(t, admin, 'POST', `/v1/iam/users/${admin.userId}/keys`, { body: { expires_in: '12w' } })).status).to.equal(201);
    } finally {
      await t.stop();
    }
  });
});
