import { createTables, type Migration } from '../db/migrations.js';
import { recordId, recordTimes } from '../db/columns.js';

export const TASKS = 'tasks';
export const AGENT_CAPABILITIES = 'agent_capabilities';

export const taskMigration: Migration = createTables('002_tasks', {
  [TASKS]: (t) => {
    recordId(t);
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
    recordTimes(t);
    t.timestamp('completed_at', { useTz: true }).nullable();
    t.index(['node_id', 'status', 'created_at']);
    t.index(['status', 'lease_expires_at']);
  },
});

// What each node's agent said in its last heartbeat it can run: checked when a task is queued.
export const agentCapabilitiesMigration: Migration = createTables('007_agent_capabilities', {
  [AGENT_CAPABILITIES]: (t) => {
    t.string('node_id', 64).primary();
    t.string('version', 40).notNullable();
    /** JSON array of task kind names; null for agents older than typed tasks (judged by version). */
    t.text('kinds').nullable();
    /** JSON array of orchestrator backends the agent has a driver for. */
    t.text('backends').notNullable();
    t.timestamp('updated_at', { useTz: true }).notNullable();
  },
});

export const taskProgressMigration: Migration = {
  id: '013_task_progress',
  async up(knex) {
    // What a running task's agent last said of its progress (a backup's bytes done of its total): JSON, no secrets.
    await knex.schema.alterTable(TASKS, (t) => {
      t.json('progress').nullable();
    });
  },
};
