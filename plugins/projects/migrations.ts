import { createTables, type Migration } from '../../core/db/migrations.js';
import { CLUSTERS } from '../../core/clusters/migrations.js';
import { newId } from '../../core/ids.js';
import { USERS } from '../iam/api.js';
import { DEFAULT_PROJECT, MIGRATED_ROLE, NODE_GRANTS, PROJECTS, PROJECT_MEMBERS, PROJECT_ROLES } from './api.js';
import { namedRecord, recordTimes } from '../../core/db/columns.js';

export const projectMigrations: Migration[] = [
  {
    id: '001_projects',
    async up(knex) {
      await knex.schema.createTable(PROJECTS, (t) => {
        namedRecord(t);
        t.string('description', 500).nullable();
        recordTimes(t, { paged: true });
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
        recordTimes(t);
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
  {
    // Alerts became a project's kind (a project's alerts are read by the roles that read the project):
    // a custom role made before held no alerts:read, and so counted as narrower than viewer (its
    // members could no longer grant viewer) and read none of its project's alerts. Every custom role
    // that reads something of its project reads its alerts too — no wider than before, when every
    // signed-in user read every alert.
    id: '002_custom_roles_read_alerts',
    async up(knex) {
      const roles: Array<{ project_id: string; name: string; permissions: string }> = await knex(PROJECT_ROLES).select('project_id', 'name', 'permissions');
      for (const role of roles) {
        let held: unknown;
        try {
          held = JSON.parse(role.permissions);
        } catch {
          continue;
        }
        if (!Array.isArray(held) || held.includes('alerts:read') || !held.some((p) => typeof p === 'string' && /^[a-z0-9-]+:read(-metadata)?$/.test(p))) continue;
        await knex(PROJECT_ROLES)
          .where({ project_id: role.project_id, name: role.name })
          .update({ permissions: JSON.stringify([...held, 'alerts:read'].sort()) });
      }
    },
  },
  // Nodes granted to projects (docs/tenancy.md "Nodes granted to projects"): none at first, every node the installation's.
  createTables('003_node_grants', {
    [NODE_GRANTS]: (t) => {
      t.string('node_id', 64).notNullable();
      t.string('project_id', 64).notNullable().references('id').inTable(PROJECTS).onDelete('CASCADE');
      t.string('created_at', 40).notNullable();
      t.primary(['node_id', 'project_id']);
      t.index(['project_id']);
    },
  }),
];
