import { expect } from 'chai';
import knexFactory, { type Knex } from 'knex';
import { projectMigrations } from '../../../plugins/projects/migrations.js';
import { PROJECT_ROLES } from '../../../plugins/projects/api.js';

/** plugins/projects migration 002 on custom roles an installation made before alerts were a project's kind. */
describe('projects migration 002: custom roles made before read their project’s alerts', () => {
  let knex: Knex;
  before(async () => {
    knex = knexFactory({ client: 'better-sqlite3', connection: { filename: ':memory:' }, useNullAsDefault: true });
    await knex.schema.createTable(PROJECT_ROLES, (t) => {
      t.string('project_id');
      t.string('name');
      t.text('permissions');
      t.primary(['project_id', 'name']);
    });
  });
  after(() => knex.destroy());

  it('adds alerts:read to a role that reads something of its project, and leaves the others as they were', async () => {
    const rows = {
      lead: ['projects:members', 'services:read', 'volumes:read-metadata'],
      writer: ['tags:write'],
      already: ['alerts:read', 'services:read'],
      broken: 'not json',
    };
    await knex(PROJECT_ROLES).insert(Object.entries(rows).map(([name, p]) => ({ project_id: 'prj-1', name, permissions: typeof p === 'string' ? p : JSON.stringify(p) })));
    await projectMigrations.find((m) => m.id === '002_custom_roles_read_alerts')!.up(knex, undefined as never); // it needs no store
    const after = Object.fromEntries((await knex(PROJECT_ROLES).select('name', 'permissions')).map((r: { name: string; permissions: string }) => [r.name, r.permissions]));
    expect(JSON.parse(after.lead)).to.deep.equal(['alerts:read', 'projects:members', 'services:read', 'volumes:read-metadata']);
    expect(JSON.parse(after.writer)).to.deep.equal(['tags:write']);
    expect(JSON.parse(after.already)).to.deep.equal(['alerts:read', 'services:read']);
    expect(after.broken).to.equal('not json');
  });
});
