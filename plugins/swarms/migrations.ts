import type { Migration } from '../../core/db/migrations.js';

export const SWARMS = 'swarms';
export const SWARM_MEMBERS = 'swarm_members';

export const swarmMigrations: Migration[] = [
  {
    id: '001_swarms',
    async up(knex) {
      await knex.schema.createTable(SWARMS, (t) => {
        t.string('id', 64).primary();
        t.string('name', 63).notNullable().unique();
        /** empty | forming | active | deleting | failed */
        t.string('status', 20).notNullable();
        t.string('manager_node_id', 64).nullable();
        t.string('cluster_id', 100).nullable();
        t.text('error').nullable();
        t.timestamp('created_at', { useTz: true }).notNullable();
        t.timestamp('updated_at', { useTz: true }).notNullable();
        t.index(['created_at', 'id']);
      });
      await knex.schema.createTable(SWARM_MEMBERS, (t) => {
        t.string('id', 64).primary();
        t.string('swarm_id', 64).notNullable().references('id').inTable(SWARMS).onDelete('CASCADE');
        t.string('node_id', 64).notNullable().unique();
        /** manager | worker */
        t.string('role', 20).notNullable();
        /** joining | active | leaving | failed */
        t.string('status', 20).notNullable();
        t.string('runtime_node_id', 100).nullable();
        t.string('advertise_address', 64).nullable();
        t.text('error').nullable();
        t.timestamp('created_at', { useTz: true }).notNullable();
        t.timestamp('updated_at', { useTz: true }).notNullable();
        t.index(['swarm_id']);
      });
    },
  },
];
