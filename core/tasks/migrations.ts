import type { Migration } from '../db/migrations.js';

export const TASKS = 'tasks';

export const taskMigrations: Migration[] = [
  {
    id: '002_tasks',
    async up(knex) {
      await knex.schema.createTable(TASKS, (t) => {
        t.string('id', 64).primary();
        t.string('node_id', 64).notNullable();
        t.string('kind', 100).notNullable();
        t.json('payload').nullable();
        t.string('status', 20).notNullable();
        t.integer('attempts').notNullable().defaultTo(0);
        t.integer('max_attempts').notNullable().defaultTo(3);
        t.boolean('read_once').notNullable().defaultTo(false);
        t.timestamp('lease_expires_at', { useTz: true }).nullable();
        t.json('result').nullable();
        t.text('error').nullable();
        t.string('subject', 128).nullable();
        t.timestamp('created_at', { useTz: true }).notNullable();
        t.timestamp('updated_at', { useTz: true }).notNullable();
        t.timestamp('completed_at', { useTz: true }).nullable();
        t.index(['node_id', 'status', 'created_at']);
        t.index(['status', 'lease_expires_at']);
      });
    },
  },
];
