import { expect } from 'chai';
import { tableResolver } from '../../../core/auth/scope.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';

/** How a kind's resources find their project (core/auth/scope.ts tableResolver), on the store itself. */
describeEachDialect('project scope resolvers', (dialect) => {
  let t: TestHangar;
  before(async () => {
    t = await startHangar(dialect, { plugins: ['system'] });
    const knex = t.hangar.services.db.knex;
    await knex.schema.createTable('scope_probe', (tb) => {
      tb.string('id').primary();
      tb.string('name').notNullable();
      tb.string('cluster_id').notNullable();
      tb.string('kind').notNullable();
    });
    const now = new Date().toISOString();
    for (const [id, project] of [['swm-pa', 'prj-a'], ['swm-pb', 'prj-b'], ['swm-pa2', 'prj-a']]) {
      await knex('clusters').insert({ id, name: id, backend: 'swarm', status: 'empty', project_id: project, created_at: now, updated_at: now });
    }
    await knex('scope_probe').insert([
      { id: 'p-1', name: 'web', cluster_id: 'swm-pa', kind: 'secret' },
      { id: 'p-2', name: 'web', cluster_id: 'swm-pb', kind: 'secret' },
      { id: 'p-3', name: 'db', cluster_id: 'swm-pa', kind: 'secret' },
      { id: 'p-4', name: 'db', cluster_id: 'swm-pa2', kind: 'secret' },
      { id: 'p-5', name: 'db', cluster_id: 'swm-pb', kind: 'config' },
    ]);
  });
  after(() => t?.stop());

  const resolver = () => tableResolver('probe', () => t.hangar.services.db.knex, 'scope_probe', { via: 'cluster_id', where: { kind: 'secret' } });

  it('finds resources by id and by name, through their cluster, in one query for many', async () => {
    const found = await resolver().projectsOf(['p-1', 'p-2', 'db', 'nothing']);
    expect(Object.fromEntries(found)).to.deep.equal({ 'p-1': 'prj-a', 'p-2': 'prj-b', db: 'prj-a' });
  });

  it('gives a name that resources of two projects share no project (only installation roles reach it by name; its id works)', async () => {
    const found = await resolver().projectsOf(['web']);
    expect(found.has('web')).to.equal(true);
    expect(found.get('web')).to.equal(null);
  });

  it('keeps to its own rows (`where`): a config of the same name is not a secret', async () => {
    expect((await resolver().projectsOf(['p-5'])).has('p-5')).to.equal(false);
  });
});
