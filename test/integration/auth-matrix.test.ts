import { expect } from 'chai';
import type { TSchema } from '@sinclair/typebox';
import type { ListenerName, RegisteredRoute } from '../../core/plugin.js';
import { KINDS, parsePermission, permissionOf, PROJECT_ROLE_PERMISSIONS, PROJECT_ROLES, widenedRoutes } from '../../core/auth/permissions.js';
import { loadConfig } from '../../core/config.js';
import { waitFor } from '../support/agents.js';
import { describeEachDialect } from '../support/dialects.js';
import { startHangar, type TestHangar } from '../support/hangar.js';
import { bearer, bootstrapAdmin, createUser, signed, type Credentials } from '../support/identity.js';

/** A value that passes a path parameter's schema, so only the thing under test can fail. */
function sampleParam(schema: Record<string, any> | undefined): string {
  if (schema?.format === 'uuid') return '00000000-0000-4000-8000-000000000000';
  if (schema?.type === 'integer' || schema?.type === 'number') return String(Math.max(1, schema.minimum ?? 1));
  return 'matrix-probe';
}

function pathFor(route: RegisteredRoute['route']): string {
  const props = (route.schemas?.params as TSchema | undefined)?.properties as Record<string, any> | undefined;
  return route.path.replace(/\{(\w+)\}/g, (_, name: string) => sampleParam(props?.[name]));
}

const label = (r: RegisteredRoute['route']) => `${r.listener ?? 'control'} ${r.method} ${r.path}`;

/** The verbs that change nothing: an auditor's (docs/tenancy.md). */
const AUDITOR_VERBS = new Set(['read', 'read-metadata', 'logs', 'inspect']);

/** A route on a kind whose resources of no project are the installation's (alerts on nodes), open to any authenticated caller. */
function installationToo(route: RegisteredRoute['route']): boolean {
  return route.auth === 'authenticated' && KINDS[parsePermission(permissionOf(route))!.kind]?.unowned === 'installation';
}

describeEachDialect('auth matrix over the whole route table', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  let user: Credentials;
  let auditor: Credentials;
  let routes: RegisteredRoute[];
  before(async () => {
    // Every plugin a default configuration loads.
    // Due backup schedules are looked for every second (one by tag is run below).
    t = await startHangar(dialect, { plugins: loadConfig({ env: {} }).plugins, overrides: { backups: { schedule_check_seconds: 1 } } });
    admin = await bootstrapAdmin(t);
    user = await createUser(t, admin, { username: 'matrix-user', role: 'user' });
    auditor = await createUser(t, admin, { username: 'matrix-auditor', role: 'auditor' });
    routes = t.hangar.routes;
  });
  after(() => t?.stop());

  const call = (r: RegisteredRoute['route'], options: { headers?: Record<string, string>; body?: unknown } = {}) =>
    t.request(r.method, pathFor(r), { listener: r.listener ?? 'control', ...options });

  it('covers every loaded plugin', () => {
    const plugins = new Set(routes.map((r) => r.plugin));
    expect([...plugins]).to.include.members(['system', 'iam', 'login']);
  });

  it('gives every operation one well-formed permission, none that a role-guarded route shares with an open one', () => {
    for (const { route } of routes) expect(parsePermission(permissionOf(route)), label(route)).to.not.equal(null);
    expect(widenedRoutes(routes.map((r) => r.route))).to.deep.equal([]);
  });

  it('cross-tenant matrix: every operation × resources of two projects × {admin, auditor, each project role (built-in and custom) in the owning project and in the other, no membership, no credential, keys inside and outside their project, keys with a permission list, an expired key, a removed member\'s keys} answers as the declared permission says', async function () {
    this.timeout(240_000);
    const knex = t.hangar.services.db.knex;
    // Two projects, each with a swarm, a Kubernetes cluster, a service, an instance, a secret, a config, a load balancer, a volume (and a backup of it), an object store, a backup target and schedule.
    const projects: Record<'a' | 'b', string> = { a: '', b: '' };
    for (const p of ['a', 'b'] as const) {
      const res = await t.request('POST', '/v1/projects', { headers: bearer(admin.token), body: { name: `matrix-${p}` } });
      expect(res.status, res.text).to.equal(201);
      projects[p] = res.json.data.id;
    }
    const sealed = t.hangar.services.ca.secretBox('secrets').seal(Buffer.from('matrix'));
    const rows = (p: 'a' | 'b') => {
      const now = new Date().toISOString();
      const swarm = `swm-mx${p}`;
      return [
        ['clusters', { id: swarm, name: `mx-swarm-${p}`, backend: 'swarm', status: 'empty', project_id: projects[p], created_at: now, updated_at: now }],
        ['clusters', { id: `cls-mx${p}`, name: `mx-kube-${p}`, backend: 'k8s', status: 'empty', project_id: projects[p], created_at: now, updated_at: now }],
        ['services', { id: `svc-mx${p}`, name: `mx-svc-${p}`, cluster_id: swarm, backend: 'swarm', status: 'failed', created_at: now, updated_at: now }],
        ['compute_instances', { id: `inst-mx${p}`, name: `mx-inst-${p}`, cluster_id: swarm, status: 'failed', created_at: now, updated_at: now }],
        ...(['secret', 'config'] as const).map((kind): [string, Record<string, unknown>] => [
          'secrets',
          { id: `${kind.slice(0, 3).replace('con', 'cfg')}-mx${p}`, kind, name: `mx-${kind}-${p}`, cluster_id: swarm, namespace: '', runtime_name: `mx-${kind}-${p}`, data_sealed: sealed, created_at: now, updated_at: now },
        ]),
        ['load_balancers', { id: `lb-mx${p}`, name: `lb-mx-swarm-${p}`, cluster_id: swarm, runtime_name: `mx-lb-${p}`, image: 'x', status: 'failed', routes: '[]', created_at: now, updated_at: now }],
        ['volumes', { id: `vol-mx${p}`, name: `mx-vol-${p}`, node_id: 'node-mxnobody', folder: `/srv/mx-${p}`, type: 'local', status: 'failed', project_id: projects[p], created_at: now, updated_at: now }],
        ['backup_targets', { id: `bkt-mx${p}`, name: `mx-target-${p}`, kind: 's3', endpoint: 'http://127.0.0.1:9', bucket: 'mx', prefix: p, region: 'us-east-1', access_key_id: 'x', secret_sealed: sealed, password_sealed: sealed, project_id: projects[p], checked_at: now, created_at: now, updated_at: now }],
        ['s3_instances', { id: `s3-mx${p}`, name: `mx-s3-${p}`, cluster_id: swarm, volume_id: `vol-mx${p}`, runtime_name: `s3-mx-${p}`, image: 'x', root_user: 'x', password_sealed: sealed, domain: `mx-${p}.s3`, console_domain: `console.mx-${p}.s3`, status: 'failed', created_at: now, updated_at: now }],
        // A volume's backup (GET /v1/backups lists it by its target's project).
        ['backup_runs', { id: `bak-mx${p}`, operation: 'backup', volume_id: `vol-mx${p}`, target_id: `bkt-mx${p}`, node_id: 'node-mxnobody', status: 'succeeded', snapshot_id: '0123abcd', started_at: now, finished_at: now, created_at: now, updated_at: now }],
        // Not due in this test: the schedules loop leaves it alone.
        ['backup_schedules', { id: `bks-mx${p}`, name: `mx-schedule-${p}`, target_id: `bkt-mx${p}`, volume_ids: JSON.stringify([`vol-mx${p}`]), every_seconds: 86_400, next_run_at: '2100-01-01T00:00:00.000Z', project_id: projects[p], created_at: now, updated_at: now }],
        // An alert on the instance (its own open_key: the rules leave it alone), and the installation's on a node, which every caller that lists alerts sees.
        ...[[`alert-mx${p}`, 'instance', `inst-mx${p}`, projects[p]], ...(p === 'a' ? [['alert-mxnode', 'node', 'node-mxnobody', null]] : [])].map(([id, type, resource, project]): [string, Record<string, unknown>] => [
          'alerts',
          { id, rule: type === 'node' ? 'node_offline' : 'instance_not_running', resource_type: type, resource_id: resource, subject: '', open_key: `mx|${id}`, severity: 'critical', state: 'firing', message: `mx ${resource}`, observed_at: now, started_at: now, project_id: project, created_at: now, updated_at: now },
        ]),
      ] as Array<[string, Record<string, unknown>]>;
    };
    const columns = new Map<string, Record<string, { type: string; nullable: boolean; defaultValue: unknown }>>();
    /** The fixtures by table (one query a table reads them all). */
    const byTable = () => {
      const tables = new Map<string, Array<Record<string, unknown>>>();
      for (const p of ['a', 'b'] as const) for (const [table, row] of rows(p)) tables.set(table, [...(tables.get(table) ?? []), row]);
      return tables;
    };
    const columnsOf = async (table: string) => {
      if (!columns.has(table)) columns.set(table, (await knex(table).columnInfo()) as never);
      return columns.get(table)!;
    };
    /** Puts back every fixture a request removed (an allowed DELETE), its required columns filled with neutral values; answers how many. */
    async function ensureFixtures(): Promise<number> {
      let putBack = 0;
      for (const [table, wanted] of byTable()) {
        const present = new Set((await knex(table).whereIn('id', wanted.map((r) => r.id as string)).select('id')).map((r: { id: string }) => r.id));
        for (const row of wanted.filter((r) => !present.has(r.id as string))) {
          const full: Record<string, unknown> = { ...row };
          for (const [name, info] of Object.entries(await columnsOf(table))) {
            if (name in full || info.nullable || info.defaultValue !== null) continue;
            full[name] = /int|numeric|real|double/i.test(info.type) ? 0 : /bool/i.test(info.type) ? false : /time|date/i.test(info.type) ? new Date().toISOString() : /text|json/i.test(info.type) ? '[]' : 'x';
          }
          await knex(table).insert(full);
          putBack++;
        }
      }
      return putBack;
    }
    await ensureFixtures();
    /**
     * Waits until no fixture is being removed (an allowed DELETE removes it in the background,
     * possibly after ensureFixtures looked), at most a few seconds: an operation that cannot finish
     * here (a task for a machine that never comes) leaves its row, which is what the next caller needs.
     */
    async function settled() {
      for (let i = 0; i < 100; i++) {
        let busy = false;
        for (const [table, wanted] of byTable()) {
          if (!(await columnsOf(table)).op) continue;
          const ops: Array<{ op: string | null }> = await knex(table).whereIn('id', wanted.map((r) => r.id as string)).select('op');
          if (ops.some(({ op }) => op && /delete|remove/.test(op))) busy = true;
        }
        if (!busy) return;
        await new Promise((r) => setTimeout(r, 30));
      }
    }
    /** Tags of both volumes and of a node (the installation's), which GET /v1/tags?key=mx-tag lists; put back before it is asked (a volume's deletion takes its tags). */
    const tagged = [...(['a', 'b'] as const).map((p) => ({ resource_type: 'volume', resource_id: `vol-mx${p}` })), { resource_type: 'node', resource_id: 'node-mxnobody' }];
    async function ensureTags() {
      for (const tag of tagged) {
        const row = { ...tag, key: 'mx-tag' };
        if (!(await knex('tags').where(row).first('key'))) await knex('tags').insert({ ...row, value: 'x', created_at: new Date().toISOString(), updated_at: new Date().toISOString() });
      }
    }
    await ensureTags();
    const fixture = (route: RegisteredRoute['route'], p: 'a' | 'b', kind: string) =>
      kind === 'project'
        ? projects[p]
        : kind === 'cluster'
          ? route.path.startsWith('/v1/kubernetes/') ? `cls-mx${p}` : `swm-mx${p}`
          : `${{ service: 'svc', instance: 'inst', secret: 'sec', config: 'cfg', volume: 'vol', loadbalancer: 'lb', 'backup-target': 'bkt', 'backup-schedule': 'bks', 'volume-backup': 'bak', 'object-store': 's3', alert: 'alert' }[kind]}-mx${p}`;

    /**
     * Who calls. `member`: what the caller holds in each project (its role's permissions there; for a
     * key limited to a project, what the key holds there). `list`: the credential's own permission
     * list (a key's), within which everything else counts. `project`: a key limited to that project.
     * `dead`: a key that no longer works, and the first words of its 401.
     */
    type Who = {
      name: string;
      role: string;
      member: Partial<Record<'a' | 'b', readonly string[]>>;
      list?: readonly string[];
      project?: 'a' | 'b';
      dead?: string;
      headers?: Record<string, string>;
      keys?: Pick<Credentials, 'accessKeyId' | 'secretAccessKey'>;
    };
    const send = (w: Who, method: string, path: string, listener: string) =>
      w.keys
        ? signed(t, w.keys, method, path, { listener: listener as ListenerName, body: { __not_a_field__: true } })
        : t.request(method, path, { listener: listener as ListenerName, headers: w.headers ?? {}, body: { __not_a_field__: true } });
    const adminApi = (method: string, path: string, body?: unknown) => t.request(method, path, { headers: bearer(admin.token), body });
    const makeKey = async (owner: Credentials, body: Record<string, unknown>) => {
      const res = await t.request('POST', `/v1/iam/users/${owner.userId}/keys`, { headers: bearer(owner.token), body });
      expect(res.status, res.text).to.equal(201);
      return { accessKeyId: res.json.data.access_key_id as string, secretAccessKey: res.json.data.secret_access_key as string };
    };
    const who: Who[] = [
      { name: 'admin', headers: bearer(admin.token), role: 'admin', member: {} },
      { name: 'auditor', headers: bearer(auditor.token), role: 'auditor', member: {} },
      { name: 'no membership', headers: bearer(user.token), role: 'user', member: {} },
      { name: 'no credential', role: 'user', member: {} },
    ];
    // An admin's key that expires in a few seconds, made first (with the real clock): it has expired once the callers below are made, before the first request.
    const expiry = new Date(Date.now() + 5_000);
    const expiring = await makeKey(admin, { expires_at: expiry.toISOString() });
    // A custom role of project a, holding some verbs of some kinds (a deploy without the read of its kind, no projects:read).
    const releaser = ['services:read', 'services:deploy', 'services:logs', 'instances:deploy', 'volumes:read', 'volumes:backup', 'backups:read', 'secrets:read-metadata', 'tags:write'];
    expect((await adminApi('POST', `/v1/projects/${projects.a}/roles`, { name: 'mx-releaser', permissions: releaser })).status).to.equal(201);
    const roles: Record<string, readonly string[]> = { ...PROJECT_ROLE_PERMISSIONS, 'mx-releaser': releaser };
    const users: Record<string, Credentials> = {};
    // A member of a in each role (built-in and custom), a maintainer of b; mx-keys, an owner of both, makes the keys below; mx-removed is removed from a once its key is made.
    const memberships: Array<[string, 'a' | 'b', string]> = [
      ...[...PROJECT_ROLES, 'mx-releaser'].map((role): [string, 'a' | 'b', string] => [`mx-a-${role}`, 'a', role]),
      ['mx-b-maintainer', 'b', 'maintainer'],
      ['mx-keys', 'a', 'owner'],
      ['mx-keys', 'b', 'owner'],
      ['mx-removed', 'a', 'maintainer'],
    ];
    for (const [username, p, role] of memberships) {
      users[username] ??= await createUser(t, admin, { username, role: 'user' });
      const res = await adminApi('PUT', `/v1/projects/${projects[p]}/members/${username}`, { role });
      expect(res.status, res.text).to.equal(201);
      if (username === `mx-${p}-${role}`) who.push({ name: `${role} of ${p}`, headers: bearer(users[username]!.token), role: 'user', member: { [p]: roles[role] } });
    }
    const keyOf = (list: readonly string[]) => [...new Set([...list, 'account:read'])].sort();
    // Keys of mx-keys, an owner of both projects: inside their project a (and b, outside it).
    const deployers = await makeKey(users['mx-keys']!, { project: projects.a, role: 'deployer' });
    who.push({ name: "a deployer's key of a (its owner owns b too)", keys: deployers, role: 'user', project: 'a', member: { a: PROJECT_ROLE_PERMISSIONS.deployer }, list: keyOf(PROJECT_ROLE_PERMISSIONS.deployer) });
    const listed = ['services:read', 'volumes:read', 'volumes:backup', 'backups:read', 'projects:read'];
    const listedKey = await makeKey(users['mx-keys']!, { project: projects.a, permissions: listed });
    who.push({ name: 'a key of a with a permission list', keys: listedKey, role: 'user', project: 'a', member: { a: listed }, list: keyOf(listed) });
    // Keys of the installation with a permission list (no wider than the owner's installation role): a user's acts through its memberships, an admin's everywhere, within the list.
    const usersList = ['services:read', 'volumes:read', 'nodes:read', 'alerts:read', 'projects:read'];
    const usersKey = await makeKey(users['mx-keys']!, { permissions: usersList });
    who.push({ name: 'an installation key with a permission list (its owner owns a and b)', keys: usersKey, role: 'user', member: { a: usersList, b: usersList }, list: keyOf(usersList) });
    const adminsList = ['services:read', 'services:deploy', 'volumes:restore', 'nodes:read', 'iam:read', 'projects:read'];
    const adminsListed = await makeKey(admin, { permissions: adminsList });
    who.push({ name: "an admin's installation key with a permission list", keys: adminsListed, role: 'admin', member: {}, list: keyOf(adminsList) });
    // An installation admin's key of project a: every permission of a project there, nothing elsewhere.
    const adminsKey = await makeKey(admin, { project: projects.a });
    who.push({ name: "an admin's key of a", keys: adminsKey, role: 'admin', project: 'a', member: { a: PROJECT_ROLE_PERMISSIONS.owner }, list: keyOf(PROJECT_ROLE_PERMISSIONS.owner) });
    who.push({ name: "an admin's expired key", keys: expiring, role: 'admin', member: {}, dead: `The API key ${expiring.accessKeyId} expired at ` });
    // A removed member's keys: its key of the project stops; its installation key acts as a user of no project.
    const removedProjectKey = await makeKey(users['mx-removed']!, { project: projects.a });
    expect((await adminApi('DELETE', `/v1/projects/${projects.a}/members/mx-removed`)).status).to.equal(200);
    who.push({ name: "a removed maintainer's key of a", keys: removedProjectKey, role: 'user', member: {}, dead: `The API key ${removedProjectKey.accessKeyId} is limited to a project its owner is no longer a member of` });
    who.push({ name: "a removed maintainer's installation key", keys: users['mx-removed']!, role: 'user', member: {} });
    while (Date.now() <= expiry.getTime()) await new Promise((r) => setTimeout(r, 100));

    type Answer = 'allowed' | 'refused' | 'hidden' | 'unauthenticated';
    /** The installation role's grant (docs/tenancy.md): admins every permission but the scrape token's, auditors those that change nothing, within the credential's list. */
    const byInstallationRole = (w: Who, permission: string) => {
      const { kind, verb } = parsePermission(permission)!;
      if (w.list && !w.list.includes(permission)) return false;
      if (kind === 'metrics') return false;
      return w.role === 'admin' || (w.role === 'auditor' && AUDITOR_VERBS.has(verb));
    };
    /**
     * The rule written down apart from the code: a key that stopped working is 401 everywhere but on
     * public routes; a key limited to a project acts on that project's resources (and its own account)
     * only; on a project's resource the installation role decides, else the role in the resource's
     * project; another project's resource is hidden (404) from a caller that holds the permission
     * somewhere, refused (403) to one that holds it nowhere; elsewhere the installation role, `user`
     * holding what routes open to any authenticated caller need.
     */
    function expectedOf(route: RegisteredRoute['route'], w: Who, p: 'a' | 'b' | null): Answer {
      if (route.auth === 'public') return 'allowed';
      // The login API (:8080) takes bearer tokens: a key is no credential there.
      if (route.auth === 'agent' || w.dead || !(w.headers || w.keys) || (w.keys && route.listener === 'login')) return 'unauthenticated';
      const permission = permissionOf(route);
      const { kind } = parsePermission(permission)!;
      const inList = !w.list || w.list.includes(permission);
      if (!route.scope) {
        if (kind === 'account') return inList ? 'allowed' : 'refused';
        if (w.project) return 'refused';
        if (byInstallationRole(w, permission)) return 'allowed';
        return inList && kind !== 'metrics' && w.role !== 'auditor' && w.role !== 'admin' && route.auth === 'authenticated' ? 'allowed' : 'refused';
      }
      if (!w.project && byInstallationRole(w, permission)) return 'allowed';
      if (!inList) return 'refused';
      const grants = (q: 'a' | 'b') => Boolean(w.member[q]?.includes(permission));
      const somewhere = grants('a') || grants('b') || (installationToo(route) && !w.project);
      // A route naming no resource by its path (a create naming its cluster in the body, refused later if need be): let in where the caller holds it somewhere.
      if (p === null) return somewhere ? 'allowed' : 'refused';
      if (grants(p)) return 'allowed';
      if (w.member[p]) return 'refused';
      return somewhere ? 'hidden' : 'refused';
    }

    /** One request of the matrix: an operation, the project whose resource its path names (null: none), a caller. */
    type Probe = { route: RegisteredRoute['route']; p: 'a' | 'b' | null; w: Who };
    const probes: Probe[] = [];
    for (const { route } of routes) {
      const byPath = route.scope?.of?.some((r) => r.from.startsWith('params.'));
      for (const p of byPath ? (['a', 'b'] as const) : [null]) for (const w of who) probes.push({ route, p, w });
    }
    const pathOf = ({ route, p }: Probe) => {
      const ref = route.scope?.of?.find((r) => r.from.startsWith('params.'));
      const props = (route.schemas?.params as TSchema | undefined)?.properties as Record<string, any> | undefined;
      const path = route.path.replace(/\{(\w+)\}/g, (_, name: string) => (ref && p && name === ref.from.slice('params.'.length) ? fixture(route, p, ref.kind) : sampleParam(props?.[name])));
      return typeof route.scope?.list === 'object' ? `${path}?key=mx-tag` : path;
    };
    const wrong: string[] = [];
    const tally = { wronglyAllowed: 0, wronglyRefused: 0, otherwise: 0 };
    function judge({ route, p, w }: Probe, res: { status: number; text: string; json?: any }) {
      const what = `${w.name} ${label(route)}${p ? ` on project ${p}'s resource` : ''} (${permissionOf(route)})`;
      const message = String(res.json?.message);
      if (route.scope?.list && expectedOf(route, w, null) !== 'unauthenticated' && (!w.list || w.list.includes(permissionOf(route)) || byInstallationRole(w, permissionOf(route)))) {
        // A list: 200, with exactly the fixtures of the projects the caller may see.
        // A list of several kinds (tags): the volumes' items by project, a node's to installation roles only.
        const list = route.scope.list;
        const kind = typeof list === 'string' ? list : 'volume';
        // GET /v1/gateway answers {routes, load_balancers}: its balancers are the items.
        const data = res.json?.data;
        const items: Array<Record<string, string>> = Array.isArray(data) ? data : (data?.load_balancers ?? []);
        const ids = items.map((i) => i.id ?? i.resource_id);
        const shown: string[] = (['a', 'b'] as const).filter((q) => ids.includes(fixture(route, q, kind)));
        const want: string[] = (['a', 'b'] as const).filter((q) => expectedOf(route, w, q) === 'allowed');
        // The installation's: a node's tags to installation roles, the node's alert to every caller of the installation (each holds alerts:read by its installation role, `user`'s grants counting).
        if (typeof list === 'object') {
          if (items.some((i) => i.resource_type === 'node')) shown.push('node');
          if ((w.role === 'admin' || w.role === 'auditor') && !w.project) want.push('node');
        }
        if (installationToo(route)) {
          if (ids.includes('alert-mxnode')) shown.push('node');
          if (!w.project) want.push('node');
        }
        if (res.status !== 200 || shown.join() !== want.join()) {
          wrong.push(`${what}: expected 200 showing [${want}], got ${res.status} showing [${shown}] ${res.text.slice(0, 200)}`);
          tally.otherwise++;
        }
        return;
      }
      const id = p && route.scope?.of ? fixture(route, p, route.scope.of.find((r) => r.from.startsWith('params.'))!.kind) : null;
      const got: Answer =
        // A 401 of the authentication step (a handler's own has other words: POST /v1/iam/token wants a signed request).
        res.status === 401 && (message === 'Authentication required' || (w.dead && message.startsWith(w.dead)))
          ? 'unauthenticated'
          : res.status === 403 && (message.startsWith('Insufficient permissions') || message.startsWith('This credential is limited to a project, and '))
            ? 'refused'
            : id && res.status === 404 && message.startsWith('No ') && message.endsWith(` ${id}`)
              ? 'hidden'
              : 'allowed';
      const want = expectedOf(route, w, p);
      if (got !== want) {
        wrong.push(`${what}: expected ${want}, got ${res.status} ${res.text.slice(0, 200)}`);
        tally[got === 'allowed' ? 'wronglyAllowed' : want === 'allowed' ? 'wronglyRefused' : 'otherwise']++;
        return;
      }
      // The words: a dead key says why; a refusal of the installation role names the permission and the role.
      const words =
        got === 'unauthenticated' && route.auth !== 'agent'
          ? ((!route.listener || route.listener === 'control') && w.dead) || 'Authentication required'
          : got === 'refused' && !route.scope && !w.list && !w.project
            ? `Insufficient permissions: this needs ${permissionOf(route)}, and role ${w.role} does not grant it`
            : null;
      if (words && !message.startsWith(words)) {
        wrong.push(`${what}: expected the words "${words}…", got ${res.status} ${res.text.slice(0, 200)}`);
        tally.otherwise++;
      }
    }

    // Requests that change nothing (reads, and what is refused) go a few at a time; a write that is let
    // in goes alone, and the fixture it may have removed is put back before the next one.
    const changes = (probe: Probe) => probe.route.method !== 'GET' && expectedOf(probe.route, probe.w, probe.p) === 'allowed';
    const ask = (probe: Probe) => send(probe.w, probe.route.method, pathOf(probe), probe.route.listener ?? 'control');
    const quiet = probes.filter((probe) => !changes(probe));
    let next = 0;
    await Promise.all(
      Array.from({ length: 8 }, async () => {
        while (next < quiet.length) {
          const probe = quiet[next++]!;
          judge(probe, await ask(probe));
        }
      }),
    );
    for (const probe of probes.filter(changes)) {
      let res = await ask(probe);
      // A fixture removed by an earlier write's background work after it was put back (seen once in
      // a while on a loaded machine): put back, the request is asked again.
      if (res.status === 404) {
        await settled();
        if ((await ensureFixtures()) > 0) res = await ask(probe);
      }
      judge(probe, res);
      if (res.status < 300) await settled().then(ensureFixtures).then(ensureTags);
    }
    console.log(
      `      cross-tenant matrix [${dialect.name}]: ${probes.length} requests over ${routes.length} operations × ${who.length} callers, ${tally.wronglyAllowed} wrongly allowed, ${tally.wronglyRefused} wrongly refused, ${tally.otherwise} other mismatches`,
    );
    if (wrong.length) console.log(wrong.join('\n'));
    expect(wrong.length, 'mismatches (listed above)').to.equal(0);

    // What a request's body names is checked too: a member of a cannot put things on b's cluster or join b's volume to its instance.
    const deployerA = { headers: bearer(users['mx-a-deployer']!.token) };
    const maintainerA = { headers: bearer(users['mx-a-maintainer']!.token) };
    const secret = (swarm: string, h: Record<string, string>) => t.request('POST', '/v1/secrets', { headers: h, body: { name: 'mx-new', swarm_id: swarm, data: Buffer.from('x').toString('base64') } });
    let res = await secret('swm-mxb', maintainerA.headers);
    expect([res.status, res.json?.message], res.text).to.deep.equal([404, 'No swarm swm-mxb']);
    res = await secret('swm-mxa', maintainerA.headers);
    expect(res.status, res.text).to.not.be.oneOf([401, 403, 404]);
    res = await secret('swm-mxa', deployerA.headers);
    expect([res.status, res.json?.message], res.text).to.deep.equal([403, 'Insufficient permissions: this needs secrets:write, and role user does not grant it']);
    const attach = (volume: string, h: Record<string, string>) => t.request('POST', '/v1/compute/instances/inst-mxa/volumes', { headers: h, body: { volume_id: volume, path: '/data' } });
    res = await attach('vol-mxb', deployerA.headers);
    expect([res.status, res.json?.message], res.text).to.deep.equal([404, 'No volume vol-mxb']);
    res = await attach('vol-mxb', bearer(admin.token));
    expect(res.status, res.text).to.equal(400);
    expect(res.json.message).to.match(/^Validation failed: body\.volume_id: volume vol-mxb belongs to another project than instance inst-mxa/);
    // A volume is made in a project: one named that does not exist is a 400 naming the field, before the node is looked up.
    const volume = (project: string) => t.request('POST', '/v1/volumes', { headers: bearer(admin.token), body: { name: 'mx-new', node_id: 'node-mxnobody', folder: '/srv/mx-new', project_id: project } });
    res = await volume('nope');
    expect([res.status, res.json?.message]).to.deep.equal([400, 'Validation failed: body.project_id: no project nope']);
    res = await volume('matrix-a');
    expect(res.status, res.text).to.equal(404);
    // ?project= narrows a list to one project the caller may see; another is a 400 as one that does not exist.
    res = await t.request('GET', '/v1/services?project=matrix-b', { headers: bearer(admin.token) });
    expect(res.json.data.map((s: { id: string }) => s.id)).to.include('svc-mxb').and.not.include('svc-mxa');
    res = await t.request('GET', `/v1/volumes?project=${projects.a}`, { headers: deployerA.headers });
    expect(res.json.data.map((v: { id: string }) => v.id)).to.deep.equal(['vol-mxa']);
    res = await t.request('GET', '/v1/volumes?project=matrix-b', { headers: deployerA.headers });
    expect([res.status, res.json?.message]).to.deep.equal([400, 'Validation failed: query.project: no project matrix-b']);
    res = await t.request('POST', '/v1/compute/instances', { headers: deployerA.headers, body: { name: 'mx-new', swarm_id: 'swm-mxa', image: 'x', volumes: ['mx-vol-b:/data'] } });
    expect([res.status, res.json?.message], res.text).to.deep.equal([404, 'No volume mx-vol-b']);
    // A schedule or a volume's backup names a target and volumes of one project: another's is hidden (404), mixing them a 400.
    const schedule = (h: Record<string, string>, target: string, volumes: string[]) =>
      t.request('POST', '/v1/backups/schedules', { headers: h, body: { name: 'mx-new', target_id: target, volume_ids: volumes, every_seconds: 86_400 } });
    res = await schedule(maintainerA.headers, 'bkt-mxb', ['vol-mxa']);
    expect([res.status, res.json?.message], res.text).to.deep.equal([404, 'No backup target bkt-mxb']);
    res = await schedule(maintainerA.headers, 'mx-target-a', ['mx-vol-b']);
    expect([res.status, res.json?.message], res.text).to.deep.equal([404, 'No volume mx-vol-b']);
    res = await schedule(bearer(admin.token), 'bkt-mxa', ['vol-mxb']);
    expect(res.status, res.text).to.equal(400);
    expect(res.json.message).to.match(/^Validation failed: body\.volume_ids\[\]: volume vol-mxb belongs to another project than backup target bkt-mxa/);
    res = await schedule(maintainerA.headers, 'mx-target-a', ['vol-mxa']);
    expect(res.status, res.text).to.equal(201);
    expect(res.json.data).to.include({ target_id: 'bkt-mxa', project_id: projects.a });
    res = await t.request('DELETE', '/v1/backups/schedules/mx-new', { headers: maintainerA.headers });
    expect(res.status, res.text).to.equal(204);
    const backUp = (target: string, h: Record<string, string>) => t.request('POST', '/v1/volumes/vol-mxa/backups', { headers: h, body: { target_id: target } });
    res = await backUp('bkt-mxb', maintainerA.headers);
    expect([res.status, res.json?.message], res.text).to.deep.equal([404, 'No backup target bkt-mxb']);
    res = await backUp('bkt-mxb', bearer(admin.token));
    expect(res.status, res.text).to.equal(400);
    expect(res.json.message).to.match(/^Validation failed: body\.target_id: backup target bkt-mxb belongs to another project than volume vol-mxa/);
    // An object store goes on a swarm and a volume of one project.
    const store = (h: Record<string, string>, swarm: string, volume: string) => t.request('POST', '/v1/s3/instances', { headers: h, body: { name: 'mx-new', swarm_id: swarm, volume_id: volume } });
    res = await store(maintainerA.headers, 'swm-mxa', 'vol-mxb');
    expect([res.status, res.json?.message], res.text).to.deep.equal([404, 'No volume vol-mxb']);
    res = await store(maintainerA.headers, 'swm-mxb', 'vol-mxa');
    expect([res.status, res.json?.message], res.text).to.deep.equal([404, 'No swarm swm-mxb']);
    res = await store(bearer(admin.token), 'swm-mxa', 'vol-mxb');
    expect(res.status, res.text).to.equal(400);
    expect(res.json.message).to.match(/^Validation failed: body\.volume_id: volume vol-mxb belongs to another project than swarm swm-mxa/);
    res = await store(deployerA.headers, 'swm-mxa', 'vol-mxa');
    expect([res.status, res.json?.message], res.text).to.deep.equal([403, 'Insufficient permissions: this needs object-stores:write, and role user does not grant it']);
    // A tag acts in its resource's project (in the body or, for a DELETE, the query string); a node's tags are installation roles' alone.
    const tag = (method: string, h: Record<string, string>, body: Record<string, string>, query = '') => t.request(method, `/v1/tags${query}`, { headers: h, body });
    res = await tag('PUT', maintainerA.headers, { resource_type: 'volume', resource_id: 'vol-mxb', key: 'mx-put', value: 'x' });
    expect([res.status, res.json?.message], res.text).to.deep.equal([404, 'No volume vol-mxb']);
    res = await tag('PUT', maintainerA.headers, { resource_type: 'swarm', resource_id: 'mx-swarm-b', key: 'mx-put', value: 'x' });
    expect([res.status, res.json?.message], res.text).to.deep.equal([404, 'No swarm mx-swarm-b']);
    res = await tag('PUT', maintainerA.headers, { resource_type: 'node', resource_id: 'node-mxnobody', key: 'mx-put', value: 'x' });
    expect([res.status, res.json?.message], res.text).to.deep.equal([404, 'No node node-mxnobody']);
    res = await tag('PUT', deployerA.headers, { resource_type: 'volume', resource_id: 'vol-mxa', key: 'mx-put', value: 'x' });
    expect([res.status, res.json?.message], res.text).to.deep.equal([403, 'Insufficient permissions: this needs tags:write, and role user does not grant it']);
    res = await tag('PUT', maintainerA.headers, { resource_type: 'volume', resource_id: 'mx-vol-a', key: 'mx-put', value: 'x' });
    expect([res.status, res.json?.data], res.text).to.deep.equal([200, { resource_type: 'volume', resource_id: 'vol-mxa', key: 'mx-put', value: 'x' }]);
    res = await tag('DELETE', maintainerA.headers, {}, '?resource_type=volume&resource_id=vol-mxb&key=mx-tag');
    expect([res.status, res.json?.message], res.text).to.deep.equal([404, 'No volume vol-mxb']);
    res = await tag('DELETE', maintainerA.headers, { resource_id: 'vol-mxb' }, '?resource_type=volume&key=mx-tag');
    expect([res.status, res.json?.message], res.text).to.deep.equal([404, 'No volume vol-mxb']);
    res = await tag('DELETE', maintainerA.headers, { resource_type: 'volume', resource_id: 'vol-mxa', key: 'mx-put' });
    expect(res.status, res.text).to.equal(200);
    // A schedule by tag backs up the volumes of its project only, though another project's carry the tag.
    // (vol-mxz sorts after vol-mxb, which would be tried first: once vol-mxz's run is recorded, vol-mxb's would be.)
    const at = new Date().toISOString();
    await knex('volumes').insert({ id: 'vol-mxz', name: 'mx-vol-z', node_id: 'node-mxnobody', folder: '/srv/mx-z', type: 'local', status: 'failed', project_id: projects.a, created_at: at, updated_at: at });
    for (const id of ['vol-mxb', 'vol-mxz']) {
      res = await tag('PUT', bearer(admin.token), { resource_type: 'volume', resource_id: id, key: 'mx-sched', value: 'x' });
      expect(res.status, res.text).to.equal(200);
    }
    res = await t.request('POST', '/v1/backups/schedules', { headers: bearer(admin.token), body: { name: 'mx-by-tag', target_id: 'bkt-mxa', volume_tags: { 'mx-sched': 'x' }, every_seconds: 86_400 } });
    expect(res.status, res.text).to.equal(201);
    const scheduleId: string = res.json.data.id;
    const runsOf = async (volume: string) => ((await t.request('GET', `/v1/volumes/${volume}/backups`, { headers: bearer(admin.token) })).json.data as Array<{ schedule_id: string; error: string }>).filter((r) => r.schedule_id === scheduleId);
    const [run] = await waitFor(async () => ((await runsOf('vol-mxz')).length ? runsOf('vol-mxz') : null), { timeoutMs: 20_000, what: 'the schedule to try vol-mxz' });
    expect(run!.error).to.match(/^scheduled by mx-by-tag: /);
    expect(await runsOf('vol-mxb')).to.deep.equal([]);
    // A target is made in a project (default: the caller's); an unknown one is a 400 naming the field, before the endpoint is probed.
    res = await t.request('POST', '/v1/backups/targets', { headers: bearer(admin.token), body: { name: 'mx-new', endpoint: 'http://127.0.0.1:9', bucket: 'mx-new', access_key_id: 'x', secret_access_key: 'y', project_id: 'nope' } });
    expect([res.status, res.json?.message]).to.deep.equal([400, 'Validation failed: body.project_id: no project nope']);
  });

  it('shows each operation\'s project scope in the OpenAPI document (x-hangar-scope), and ?project= on the scoped lists', async () => {
    const doc = (await t.request('GET', '/v1/openapi.json', { headers: bearer(admin.token) })).json;
    const scoped = routes.filter(({ route }) => route.scope && (route.listener ?? 'control') === 'control');
    expect(scoped.length).to.be.greaterThan(30);
    for (const { route } of scoped) {
      const op = doc.paths[route.path][route.method.toLowerCase()];
      expect(op['x-hangar-scope'], label(route)).to.deep.equal(route.scope);
      if (route.scope!.list) expect(op.parameters.map((p: { name: string }) => p.name), label(route)).to.include('project');
    }
  });

  it('answers 401 "Authentication required" without credentials on every protected route, even with a bad body', async () => {
    const failures: string[] = [];
    for (const { route } of routes.filter((r) => r.route.auth !== 'public')) {
      const res = await call(route, { body: { __not_a_field__: true } });
      if (res.status !== 401 || res.json?.error !== 'Unauthorized' || res.json?.message !== 'Authentication required') {
        failures.push(`${label(route)} → ${res.status} ${res.text}`);
      }
    }
    expect(failures).to.deep.equal([]);
  });

  it('answers 403 "Insufficient permissions" naming the permission to the wrong role on every role-guarded route, before validation', async () => {
    const failures: string[] = [];
    const guarded = routes.filter((r) => typeof r.route.auth === 'object');
    expect(guarded.length).to.be.greaterThan(5);
    for (const { route } of guarded) {
      const res = await call(route, { headers: bearer(user.token), body: { __not_a_field__: true } });
      const message = `Insufficient permissions: this needs ${permissionOf(route)}, and role user does not grant it`;
      if (res.status !== 403 || res.json?.error !== 'Forbidden' || res.json?.message !== message) {
        failures.push(`${label(route)} → ${res.status} ${res.text}`);
      }
    }
    expect(failures).to.deep.equal([]);
  });

  it('answers 400 "Validation failed" to a bad body once authentication and role pass', async () => {
    const failures: string[] = [];
    const withBody = routes.filter((r) => r.route.schemas?.body && r.route.auth !== 'agent');
    expect(withBody.length).to.be.greaterThan(5);
    for (const { route } of withBody) {
      const headers = route.auth === 'public' ? {} : bearer(admin.token);
      const res = await call(route, { headers, body: { __not_a_field__: true } });
      if (res.status !== 400 || !String(res.json?.message).startsWith('Validation failed:')) failures.push(`${label(route)} → ${res.status} ${res.text}`);
    }
    expect(failures).to.deep.equal([]);
  });

  it('never answers 5xx to an admin calling any route on ids that do not exist, without a body (one with a NUL character too, which PostgreSQL refuses)', async function () {
    this.timeout(60_000);
    const failures: string[] = [];
    for (const { route } of routes.filter((r) => r.route.auth !== 'agent')) {
      for (const path of new Set([pathFor(route), pathFor(route).replace(/matrix-probe/g, '%00x')])) {
        const res = await t.request(route.method, path, { listener: route.listener ?? 'control', headers: route.auth === 'public' ? {} : bearer(admin.token) });
        if (res.status >= 500) failures.push(`${label(route)} ${path} → ${res.status} ${res.text}`);
      }
    }
    expect(failures).to.deep.equal([]);
  });

  it('lets anyone reach the public routes', async () => {
    for (const { route } of routes.filter((r) => r.route.auth === 'public' && r.route.method === 'GET')) {
      const res = await call(route);
      expect([401, 403], label(route)).not.to.include(res.status);
    }
  });
});
