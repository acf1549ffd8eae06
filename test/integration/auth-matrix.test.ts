import { expect } from 'chai';
import type { TSchema } from '@sinclair/typebox';
import type { RegisteredRoute } from '../../core/plugin.js';
import { KINDS, parsePermission, permissionOf, PROJECT_ROLE_PERMISSIONS, PROJECT_ROLES, widenedRoutes } from '../../core/auth/permissions.js';
import { loadConfig } from '../../core/config.js';
import { waitFor } from '../support/agents.js';
import { describeEachDialect } from '../support/dialects.js';
import { startHangar, type TestHangar } from '../support/hangar.js';
import { bearer, bootstrapAdmin, createUser, type Credentials } from '../support/identity.js';

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

/** Who calls, in the generated matrix. */
type Caller = 'admin' | 'auditor' | 'user' | 'none';
/** What the authentication and permission steps made of a request. */
type Outcome = 'allowed' | 'unauthenticated' | 'refused';

/** The verbs that change nothing: an auditor's (docs/tenancy.md). */
const AUDITOR_VERBS = new Set(['read', 'read-metadata', 'logs', 'inspect']);

/**
 * The answer the declared permission calls for (docs/tenancy.md), written down apart from the
 * code that decides: agents' routes want a client certificate nobody here has; an admin holds every
 * permission but the scrape token's metrics:read; an auditor those whose verb changes nothing; a
 * user what it had before permissions (the routes open to any authenticated caller; the ids probed
 * are nobody's, so `orSelf` lets no one in); everybody its own account.
 */
function expected(route: RegisteredRoute['route'], caller: Caller): Outcome {
  if (route.auth === 'public') return 'allowed';
  if (route.auth === 'agent' || caller === 'none') return 'unauthenticated';
  const { kind, verb } = parsePermission(permissionOf(route))!;
  if (kind === 'metrics') return 'refused';
  if (kind === 'account' || caller === 'admin') return 'allowed';
  if (caller === 'auditor') return AUDITOR_VERBS.has(verb) ? 'allowed' : 'refused';
  // A route on a project's resource opens by membership (this user is a member of nothing); a list answers what it may see.
  // A kind that keeps the installation's resources beside its projects' (alerts) opens as its auth says: the installation's are read so.
  if (route.scope?.of && !installationToo(route)) return 'refused';
  return route.auth === 'authenticated' ? 'allowed' : 'refused';
}

/** A route on a kind whose resources of no project are the installation's (alerts on nodes), open to any authenticated caller. */
function installationToo(route: RegisteredRoute['route']): boolean {
  return route.auth === 'authenticated' && KINDS[parsePermission(permissionOf(route))!.kind]?.unowned === 'installation';
}

/** What the answer says the authentication and permission steps did (a handler's own 401/403 has other words). */
function observed(res: { status: number; json?: any }): Outcome {
  if (res.status === 401 && res.json?.message === 'Authentication required') return 'unauthenticated';
  if (res.status === 403 && String(res.json?.message).startsWith('Insufficient permissions')) return 'refused';
  return 'allowed';
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

  it('generated matrix: every operation × {admin, auditor, user, no credential} answers as its declared permission says, before validation', async function () {
    this.timeout(60_000);
    const callers: Array<[Caller, Record<string, string>, string]> = [
      ['admin', bearer(admin.token), 'admin'],
      ['auditor', bearer(auditor.token), 'auditor'],
      ['user', bearer(user.token), 'user'],
      ['none', {}, ''],
    ];
    const wronglyAllowed: string[] = [];
    const wronglyRefused: string[] = [];
    const wrongWords: string[] = [];
    let requests = 0;
    for (const { route } of routes) {
      for (const [caller, headers, role] of callers) {
        const res = await call(route, { headers, body: { __not_a_field__: true } });
        requests++;
        const want = expected(route, caller);
        const got = observed(res);
        const line = `${caller} ${label(route)} (${permissionOf(route)}): expected ${want}, got ${res.status} ${res.text.slice(0, 200)}`;
        if (got === want) {
          const words = `Insufficient permissions: this needs ${permissionOf(route)}, and role ${role} does not grant it`;
          if (got === 'refused' && res.json?.message !== words) wrongWords.push(line);
        } else if (got === 'allowed') wronglyAllowed.push(line);
        else wronglyRefused.push(line);
      }
    }
    console.log(`      auth matrix [${dialect.name}]: ${requests} requests over ${routes.length} operations, ${wronglyAllowed.length} wrongly allowed, ${wronglyRefused.length} wrongly refused`);
    expect({ wronglyAllowed, wronglyRefused, wrongWords }).to.deep.equal({ wronglyAllowed: [], wronglyRefused: [], wrongWords: [] });
  });

  it('cross-tenant matrix: every operation on a project\'s resource × resources of two projects × {admin, auditor, each project role in the owning project, a role in the other, no membership} answers as the declared permission says', async function () {
    this.timeout(120_000);
    const knex = t.hangar.services.db.knex;
    // Two projects, each with a swarm, a Kubernetes cluster, a service, an instance, a secret, a config, a load balancer, a volume, an object store, a backup target and schedule.
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
    /** Puts back every fixture a request removed (an allowed DELETE), its required columns filled with neutral values. */
    async function ensureFixtures() {
      for (const p of ['a', 'b'] as const) {
        for (const [table, row] of rows(p)) {
          if (await knex(table).where({ id: row.id }).first('id')) continue;
          if (!columns.has(table)) columns.set(table, (await knex(table).columnInfo()) as never);
          const full: Record<string, unknown> = { ...row };
          for (const [name, info] of Object.entries(columns.get(table)!)) {
            if (name in full || info.nullable || info.defaultValue !== null) continue;
            full[name] = /int|numeric|real|double/i.test(info.type) ? 0 : /bool/i.test(info.type) ? false : /time|date/i.test(info.type) ? new Date().toISOString() : /text|json/i.test(info.type) ? '[]' : 'x';
          }
          await knex(table).insert(full);
        }
      }
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
        for (const p of ['a', 'b'] as const) {
          for (const [table, row] of rows(p)) {
            if (!columns.has(table)) columns.set(table, (await knex(table).columnInfo()) as never);
            const op = columns.get(table)!.op ? ((await knex(table).where({ id: row.id }).first('op')) as { op: string | null } | undefined)?.op : null;
            if (op && /delete|remove/.test(op)) busy = true;
          }
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
    const fixture = (route: RegisteredRoute['route'], p: 'a' | 'b', kind: string) =>
      kind === 'cluster' ? (route.path.startsWith('/v1/kubernetes/') ? `cls-mx${p}` : `swm-mx${p}`) : `${{ service: 'svc', instance: 'inst', secret: 'sec', config: 'cfg', volume: 'vol', loadbalancer: 'lb', 'backup-target': 'bkt', 'backup-schedule': 'bks', 'object-store': 's3', alert: 'alert' }[kind]}-mx${p}`;

    // Callers: a member of project a in each built-in role, a maintainer of b, a user of no project.
    type Who = { name: string; headers: Record<string, string>; role: string; member: Partial<Record<'a' | 'b', string>> };
    const who: Who[] = [
      { name: 'admin', headers: bearer(admin.token), role: 'admin', member: {} },
      { name: 'auditor', headers: bearer(auditor.token), role: 'auditor', member: {} },
      { name: 'no membership', headers: bearer(user.token), role: 'user', member: {} },
    ];
    for (const [p, role] of [...PROJECT_ROLES.map((r) => ['a', r] as const), ['b', 'maintainer'] as const]) {
      const member = await createUser(t, admin, { username: `mx-${p}-${role}`, role: 'user' });
      const res = await t.request('PUT', `/v1/projects/${projects[p]}/members/mx-${p}-${role}`, { headers: bearer(admin.token), body: { role } });
      expect(res.status, res.text).to.equal(201);
      who.push({ name: `${role} of ${p}`, headers: bearer(member.token), role: 'user', member: { [p]: role } });
    }

    type Answer = 'allowed' | 'refused' | 'hidden';
    const grants = (w: Who, p: 'a' | 'b', permission: string) => {
      const role = w.member[p] as (typeof PROJECT_ROLES)[number] | undefined;
      return Boolean(role && PROJECT_ROLE_PERMISSIONS[role].includes(permission as never));
    };
    /** The rule written down apart from the code: installation role, else the role in the resource's project; another project's resource is hidden (404). */
    function expectedOf(route: RegisteredRoute['route'], w: Who, p: 'a' | 'b'): Answer {
      const permission = permissionOf(route);
      const { verb } = parsePermission(permission)!;
      if (w.role === 'admin' || (w.role === 'auditor' && AUDITOR_VERBS.has(verb))) return 'allowed';
      if (w.role === 'auditor') return 'refused';
      if (grants(w, p, permission)) return 'allowed';
      if (w.member[p]) return 'refused';
      // Not a member of the resource's project: hidden when its role elsewhere grants the permission (or it reads the installation's of the kind), else refused before any lookup.
      return (['a', 'b'] as const).some((q) => grants(w, q, permission)) || installationToo(route) ? 'hidden' : 'refused';
    }
    const scoped = routes.filter(({ route }) => route.scope?.of?.some((r) => r.from.startsWith('params.')) || route.scope?.list);
    expect(scoped.length).to.be.greaterThan(30);
    const wrong: string[] = [];
    let requests = 0;
    for (const { route } of scoped) {
      for (const p of ['a', 'b'] as const) {
        const ref = route.scope!.of?.find((r) => r.from.startsWith('params.'));
        if (route.scope!.list && p === 'b') continue;
        const ask = async (w: Who) => {
          const path = ref ? route.path.replace(/\{(\w+)\}/g, (_, name: string) => (name === ref.from.slice('params.'.length) ? fixture(route, p, ref.kind) : sampleParam(undefined))) : route.path;
          const res = await t.request(route.method, typeof route.scope!.list === 'object' ? `${path}?key=mx-tag` : path, {
            headers: w.headers,
            body: { __not_a_field__: true },
          });
          // An allowed write may have removed a fixture: put it back before the next request.
          if (route.method !== 'GET' && res.status < 300) await settled().then(ensureFixtures);
          return res;
        };
        if (typeof route.scope!.list === 'object') await ensureFixtures().then(ensureTags);
        // Reads change nothing: every caller at once; writes one after the other.
        const answers = route.method === 'GET' ? await Promise.all(who.map(ask)) : [];
        for (const [i, w] of who.entries()) {
          const res = answers[i] ?? (await ask(w));
          requests++;
          if (route.scope!.list) {
            // A list: 200, with exactly the fixtures of the projects the caller may see.
            // A list of several kinds (tags): the volumes' items by project, a node's to installation roles only.
            const list = route.scope!.list;
            const kind = typeof list === 'string' ? list : 'volume';
            // GET /v1/gateway answers {routes, load_balancers}: its balancers are the items.
            const data = res.json?.data;
            const items: Array<Record<string, string>> = Array.isArray(data) ? data : (data?.load_balancers ?? []);
            const ids = items.map((i) => i.id ?? i.resource_id);
            const shown: string[] = (['a', 'b'] as const).filter((q) => ids.includes(fixture(route, q, kind)));
            const want: string[] = (['a', 'b'] as const).filter((q) => expectedOf(route, w, q) === 'allowed');
            if (typeof list === 'object') {
              if (items.some((i) => i.resource_type === 'node')) shown.push('node');
              if (w.role === 'admin' || w.role === 'auditor') want.push('node');
            }
            // The installation's alert: to every caller (each holds alerts:read by its installation role, `user`'s grants counting).
            if (installationToo(route)) {
              if (ids.includes('alert-mxnode')) shown.push('node');
              want.push('node');
            }
            if (res.status !== 200 || shown.join() !== want.join()) wrong.push(`${w.name} ${label(route)}: expected 200 showing [${want}], got ${res.status} showing [${shown}] ${res.text.slice(0, 200)}`);
            continue;
          }
          const id = fixture(route, p, ref!.kind);
          const got: Answer =
            res.status === 403 && String(res.json?.message).startsWith('Insufficient permissions')
              ? 'refused'
              : res.status === 404 && String(res.json?.message).startsWith('No ') && String(res.json?.message).endsWith(` ${id}`)
                ? 'hidden'
                : 'allowed';
          const want = expectedOf(route, w, p);
          if (got !== want) wrong.push(`${w.name} ${label(route)} on project ${p}'s ${id} (${permissionOf(route)}): expected ${want}, got ${res.status} ${res.text.slice(0, 200)}`);
        }
      }
    }
    console.log(`      cross-tenant matrix [${dialect.name}]: ${requests} requests over ${scoped.length} operations × ${who.length} callers, ${wrong.length} mismatches`);
    expect(wrong.join('\n')).to.equal('');

    // What a request's body names is checked too: a member of a cannot put things on b's cluster or join b's volume to its instance.
    const deployerA = who.find((w) => w.name === 'deployer of a')!;
    const maintainerA = who.find((w) => w.name === 'maintainer of a')!;
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

  it('never answers 5xx to an admin calling any route on ids that do not exist, without a body', async function () {
    this.timeout(60_000);
    const failures: string[] = [];
    for (const { route } of routes.filter((r) => r.route.auth !== 'agent')) {
      const res = await call(route, { headers: route.auth === 'public' ? {} : bearer(admin.token) });
      if (res.status >= 500) failures.push(`${label(route)} → ${res.status} ${res.text}`);
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
