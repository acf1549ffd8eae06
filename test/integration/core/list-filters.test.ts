import { expect } from 'chai';
import type { TSchema } from '@sinclair/typebox';
import { loadConfig } from '../../../core/config.js';
import type { RouteDef } from '../../../core/plugin.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, type Credentials } from '../../support/identity.js';

const NAMED_LIST_PLUGIN = 'test/support/fixtures/named-list-plugin.ts';

/**
 * The filters every resource list built by readRoutes (core/http/resources.ts) takes: name_prefix,
 * on a fixture resource whose rows the test chooses, and on the built-in lists that take it.
 */
describeEachDialect('resource lists: the name_prefix filter', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  const api = (method: string, p: string, body?: unknown) => t.request(method, p, { headers: bearer(admin.token), body });
  const names = async (query: string) => {
    const res = await api('GET', `/v1/named-list?${query}`);
    expect(res.status, res.text).to.equal(200);
    return { names: (res.json.data as Array<{ name: string }>).map((i) => i.name), next: res.json.next_cursor as string | null };
  };

  before(async () => {
    t = await startHangar(dialect, { plugins: [...loadConfig({ env: {} }).plugins, NAMED_LIST_PLUGIN] });
    admin = await bootstrapAdmin(t);
    const base = Date.parse('2026-01-01T00:00:00Z');
    for (const [i, name] of ['web-1', 'db', 'web-2', 'Web-3', 'webhook', 'w%x', 'w_y', 'wéb', 'web'].entries()) {
      const res = await api('POST', '/v1/named-list', { id: `item-${i}`, name, created_at: new Date(base + i * 1000).toISOString() });
      expect(res.status, res.text).to.equal(201);
    }
  });
  after(() => t?.stop());

  it('keeps the items whose name starts with the prefix, in the list’s order, case-sensitively and without wildcards', async () => {
    expect((await names('name_prefix=web')).names).to.deep.equal(['web-1', 'web-2', 'webhook', 'web']);
    expect((await names('name_prefix=web-')).names).to.deep.equal(['web-1', 'web-2']);
    expect((await names('name_prefix=Web')).names).to.deep.equal(['Web-3']);
    expect((await names(`name_prefix=${encodeURIComponent('w%')}`)).names).to.deep.equal(['w%x']);
    expect((await names('name_prefix=w_')).names).to.deep.equal(['w_y']);
    expect((await names(`name_prefix=${encodeURIComponent('wé')}`)).names).to.deep.equal(['wéb']);
    expect((await names('name_prefix=nothing')).names).to.deep.equal([]);
    expect((await names('limit=100')).names, 'no filter: every item').to.have.length(9);
  });

  it('pages through the filtered items with the cursors it hands out', async () => {
    const seen: string[] = [];
    let cursor: string | null = null;
    for (let page = 0; page < 10; page++) {
      const got: { names: string[]; next: string | null } = await names(`name_prefix=web&limit=1${cursor ? `&cursor=${cursor}` : ''}`);
      seen.push(...got.names);
      cursor = got.next;
      if (!cursor) break;
    }
    expect(seen).to.deep.equal(['web-1', 'web-2', 'webhook', 'web']);
  });

  it('refuses an empty prefix or a filter the list does not take, saying which', async () => {
    const empty = await api('GET', '/v1/named-list?name_prefix=');
    expect(empty.status).to.equal(400);
    expect(empty.json.message).to.contain('name_prefix');
    const unknown = await api('GET', '/v1/named-list?name_contains=web');
    expect(unknown.status).to.equal(400);
    expect(unknown.json.message).to.contain('name_contains');
  });

  it('is taken by the built-in resource lists built by readRoutes, which answer it', async () => {
    const lists = t.hangar.routes
      .map((r) => r.route as RouteDef)
      .filter((r) => r.method === 'GET' && r.path !== '/v1/named-list' && (r.schemas?.query as TSchema | undefined)?.properties?.name_prefix)
      .map((r) => r.path);
    expect(lists).to.include.members(['/v1/services', '/v1/volumes', '/v1/s3/instances', '/v1/loadbalancers']);
    for (const list of lists) {
      const res = await api('GET', `${list}?name_prefix=web&limit=5`);
      expect(res.status, `${list}: ${res.text}`).to.equal(200);
      expect(res.json.data, list).to.deep.equal([]);
    }
  });
});
