import { expect } from 'chai';
import type { TSchema } from '@sinclair/typebox';
import { loadConfig } from '../../../core/config.js';
import type { RouteDef } from '../../../core/plugin.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, createUser, type Credentials } from '../../support/identity.js';

const forge = (values: unknown) => Buffer.from(JSON.stringify(values)).toString('base64url');

/** Every paged list of the default plugins, with its required query parameters filled in. */
function pagedLists(t: TestHangar): string[] {
  return t.hangar.routes
    .map((r) => r.route as RouteDef)
    .filter((r) => r.method === 'GET' && !r.path.includes('{') && (r.schemas?.query as TSchema | undefined)?.properties?.cursor)
    .map((r) => {
      const query = r.schemas!.query as TSchema;
      const required = ((query.required as string[] | undefined) ?? []).map((name) => `${name}=probe`);
      return `${r.path}?${[...required, 'limit=1'].join('&')}`;
    });
}

describeEachDialect('page cursors', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  before(async () => {
    t = await startHangar(dialect, { plugins: loadConfig({ env: {} }).plugins });
    admin = await bootstrapAdmin(t);
    await createUser(t, admin, { username: 'second' });
  });
  after(() => t?.stop());

  it('refuses a made-up cursor on every paged list with a 400, whatever it holds', async () => {
    const lists = pagedLists(t);
    expect(lists.length).to.be.greaterThan(8);
    const failures: string[] = [];
    for (const list of lists) {
      for (const cursor of [forge([{ a: 1 }, [2]]), forge(['not a date', 'x']), forge(['2026-01-01T00:00:00.000Z', 'id']), 'garbage']) {
        const res = await t.request('GET', `${list}&cursor=${cursor}`, { headers: bearer(admin.token) });
        if (res.status !== 400 || !/query\.cursor is not a cursor this list issued/.test(res.json?.message)) failures.push(`${list} ${cursor} → ${res.status} ${res.text}`);
      }
    }
    expect(failures).to.deep.equal([]);
  });

  it('accepts a cursor only on the list that issued it', async () => {
    const users = await t.request('GET', '/v1/iam/users?limit=1', { headers: bearer(admin.token) });
    const cursor = users.json.next_cursor as string;
    expect(cursor).to.be.a('string');
    const next = await t.request('GET', `/v1/iam/users?limit=1&cursor=${cursor}`, { headers: bearer(admin.token) });
    expect(next.status).to.equal(200);
    expect(next.json.data[0].username).to.equal('second');
    const elsewhere = await t.request('GET', `/v1/ssh-profiles?cursor=${cursor}`, { headers: bearer(admin.token) });
    expect(elsewhere.status).to.equal(400);
    // Changing one character of the signature is enough to be refused.
    const altered = cursor.slice(0, -1) + (cursor.endsWith('A') ? 'B' : 'A');
    expect((await t.request('GET', `/v1/iam/users?limit=1&cursor=${altered}`, { headers: bearer(admin.token) })).status).to.equal(400);
  });
});
