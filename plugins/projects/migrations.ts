import type { Migration } from '../../core/db/migrations.js';
import { CLUSTERS } from '../../core/clusters/migrations.js';
import { newId } from '../../core/ids.js';
import { USERS } from '../iam/api.js';
import { DEFAULT_PROJECT, MIGRATED_ROLE, PROJECTS, PROJECT_MEMBERS, PROJECT_ROLES } from './api.js';

export const projectMigrations: Migration[] = [
  {
    id: '001_projects',
    async up(knex) {
      await knex.schema.createTable(PROJECTS, (t) => {
        t.string('id', 64).primary();
        t.string('name', 63).notNullable().unique();
        t.string('description', 500).nullable();
        t.timestamp('created_at', { useTz: true }).notNullable();
        t.timestamp('updated_at', { useTz: true }).notNullable();
        t.index(['created_at', 'id']);
      });
      await knex.schema.createTable(PROJECT_ROLES, (t) => {
        t.string('project_id', 64).notNullable().references('id').inTable(PROJECTS).onDelete('CASCADE');
        t.string('name', 63).notNullable();
        t.string('description', 500).nullable();
        /** JSON array of permissions (`kind:verb`). */
        t.text('permissions').notNullable();
        t.timestamp('created_at', { useTz: true }).notNullable();
        t.primary(['project_id', 'name']);
      });
      await knex.schema.createTable(PROJECT_MEMBERS, (t) => {
        t.string('project_id', 64).notNullable().references('id').inTable(PROJECTS).onDelete('CASCADE');
        t.uuid('userid').notNullable().references('userid').inTable(USERS).onDelete('CASCADE');
        /** A built-in role or the name of one of the project's custom roles. */
        t.string('role', 63).notNullable();
        t.timestamp('created_at', { useTz: true }).notNullable();
        t.timestamp('updated_at', { useTz: true }).notNullable();
        t.primary(['project_id', 'userid']);
        t.index(['userid']);
      });

      // An installation made before projects: one `default` project owns every cluster, and every
      // live user is a member of it with the role that keeps what they could do (MIGRATED_ROLE).
      const now = new Date().toISOString();
      const id = newId('prj');
      await knex(PROJECTS).insert({ id, name: DEFAULT_PROJECT, description: 'every cluster and user of the installation before projects', created_at: now, updated_at: now });
      await knex(CLUSTERS).whereNull('project_id').update({ project_id: id });
      const users: Array<{ userid: string }> = await knex(USERS).whereNull('deleted_at').select('userid');
      for (let i = 0; i < users.length; i += 200) {
        await knex(PROJECT_MEMBERS).insert(users.slice(i, i + 200).map((u) => ({ project_id: id, userid: u.userid, role: MIGRATED_ROLE, created_at: now, updated_at: now })));
      }
    },
  },
];
