import { expect } from 'chai';
import type { TSchema } from '@sinclair/typebox';
import type { RegisteredRoute } from '../../core/plugin.js';
import { permissionOf } from '../../core/auth/permissions.js';
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

describeEachDialect('auth matrix over the whole route table', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  let user: Credentials;
  let routes: RegisteredRoute[];
  before(async () => {
    // Every plugin a default configuration loads.
    t = await startHangar(dialect, { plugins: loadConfig({ env: {} }).plugins });
    admin = await bootstrapAdmin(t);
    user = await createUser(t, admin, { username: 'matrix-user', role: 'user' });
    routes = t.hangar.routes;
  });
  after(() => t?.stop());

  const call = (r: RegisteredRoute['route'], options: { headers?: Record<string, string>; body?: unknown } = {}) =>
    t.request(r.method, pathFor(r), { listener: r.listener ?? 'control', ...options });

  it('covers every loaded plugin', () => {
    const plugins = new Set(routes.map((r) => r.plugin));
    expect([...plugins]).to.include.members(['system', 'iam', 'login']);
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
