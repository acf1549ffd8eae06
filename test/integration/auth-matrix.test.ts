import { expect } from 'chai';
import type { TSchema } from '@sinclair/typebox';
import type { RegisteredRoute } from '../../core/plugin.js';
import { parsePermission, permissionOf, widenedRoutes } from '../../core/auth/permissions.js';
import { loadConfig } from '../../core/config.js';
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
  return route.auth === 'authenticated' ? 'allowed' : 'refused';
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
    t = await startHangar(dialect, { plugins: loadConfig({ env: {} }).plugins });
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
