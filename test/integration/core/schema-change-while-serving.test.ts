import { expect } from 'chai';
import { NODE_PLUGINS } from '../../support/agents.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, type Credentials } from '../../support/identity.js';

/**
 * Control planes are upgraded one at a time (docs/upgrading.md): a newer release migrates the shared
 * store while the older one serves, adding columns. The older one's prepared statements must go on
 * working — PostgreSQL refuses a prepared `select *` or `returning *` whose result a column added
 * since would change ("cached plan must not change result type").
 */
describeEachDialect('a column added to a table while a control plane serves (a newer release upgraded beside it)', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  const api = (method: string, p: string, body?: unknown) => t.request(method, p, { body, headers: bearer(admin.token) });

  before(async function () {
    this.timeout(30_000);
    t = await startHangar(dialect, { plugins: NODE_PLUGINS });
    admin = await bootstrapAdmin(t);
  });
  after(() => t?.stop());

  it('reads and writes of that table go on answering as before', async function () {
    this.timeout(60_000);
    // Enough of each to have prepared its statements on every pooled connection.
    const rounds = 8;
    const ids: string[] = [];
    for (let i = 0; i < rounds; i++) {
      const made = await api('POST', '/v1/nodes', { name: `before-${i}` });
      expect(made.status, made.text).to.equal(201);
      ids.push(made.json.data.id);
      expect((await api('PATCH', `/v1/nodes/${made.json.data.id}`, { name: `renamed-${i}` })).status).to.equal(200);
      expect((await api('GET', `/v1/nodes/${made.json.data.id}`)).status).to.equal(200);
    }

    await t.hangar.store.knex.schema.alterTable('nodes', (table) => table.string('added_by_a_newer_release', 40).nullable());

    for (let i = 0; i < rounds; i++) {
      const renamed = await api('PATCH', `/v1/nodes/${ids[i]}`, { name: `again-${i}` });
      expect(renamed.status, renamed.text).to.equal(200);
      expect(renamed.json.data).to.include({ id: ids[i], name: `again-${i}` });
      const got = await api('GET', `/v1/nodes/${ids[i]}`);
      expect(got.status, got.text).to.equal(200);
      expect(got.json.data.name).to.equal(`again-${i}`);
      const made = await api('POST', '/v1/nodes', { name: `after-${i}` });
      expect(made.status, made.text).to.equal(201);
      expect((await api('GET', '/v1/nodes?limit=5')).status).to.equal(200);
    }
  });
});
