import { createTables, type Migration } from '../../core/db/migrations.js';
import { leaseColumns } from '../../core/clusters/migrations.js';
import { recordId, recordTimes } from '../../core/db/columns.js';

export const NODES = 'nodes';
export const JOIN_TOKENS = 'join_tokens';
export const OVERLAY_LEASES = 'overlay_leases';
export const NODE_EVENTS = 'node_events';
/** Fleet agent updates in waves (rollouts.ts). */
export const AGENT_ROLLOUTS = 'agent_rollouts';

export const nodeMigrations: Migration[] = [
  createTables('001_nodes', {
    [NODES]: (t) => {
      recordId(t);
      t.string('name', 100).notNullable();
      t.string('hostname', 255).nullable();
      t.string('ip_address', 64).nullable();
      t.string('interface', 64).nullable();
      t.string('architecture', 20).nullable();
      t.integer('gpu_overcommit_factor').notNullable().defaultTo(1);
      /** pending | online | offline | stopped — what the agent's heartbeats say. */
      t.string('connection', 20).notNullable().defaultTo('pending');
      /** active | cordoned | drained — what the operator asked for. */
      t.string('availability', 20).notNullable().defaultTo('active');
      t.boolean('reboot_required').notNullable().defaultTo(false);
      t.boolean('removing').notNullable().defaultTo(false);
      t.boolean('is_control_plane').notNullable().defaultTo(false);
      t.string('overlay_ip', 64).nullable().unique();
      t.string('wg_public_key', 64).nullable();
      t.integer('wg_port').nullable();
      t.string('agent_version', 40).nullable();
      t.timestamp('last_heartbeat_at', { useTz: true }).nullable();
      t.json('resources').nullable();
      t.json('facts').nullable();
      recordTimes(t, { paged: true });
      t.index(['connection', 'last_heartbeat_at']);
    },
    [JOIN_TOKENS]: (t) => {
      recordId(t);
      t.string('token_hash', 64).notNullable().unique();
      t.string('node_id', 64).nullable();
      t.string('overlay_ip', 64).nullable();
      t.timestamp('expires_at', { useTz: true }).notNullable();
      t.timestamp('used_at', { useTz: true }).nullable();
      t.string('used_by_node', 64).nullable();
      t.string('created_by', 64).nullable();
      t.timestamp('created_at', { useTz: true }).notNullable();
    },
    [OVERLAY_LEASES]: (t) => {
      t.string('ip', 64).primary();
      /** `tok-…` while a join token reserves it, `node-…` once a node holds it. */
      t.string('holder', 64).notNullable().index();
      t.timestamp('created_at', { useTz: true }).notNullable();
    },
    [NODE_EVENTS]: (t) => {
      t.bigIncrements('id').primary();
      t.string('node_id', 64).nullable();
      t.string('identifier', 255).nullable();
      t.string('kind', 64).notNullable();
      t.text('message').nullable();
      t.json('data').nullable();
      t.timestamp('created_at', { useTz: true }).notNullable();
      t.index(['node_id', 'id']);
      t.index(['identifier', 'id']);
      t.index(['created_at']);
    },
  }),
  {
    /**
     * The node's status as a column, so that lists filter by it in SQL (it was derived from four
     * columns on every read, and `GET /v1/nodes?status=` read every node). NodeStore keeps it in
     * step with those columns on every write; existing rows are filled in here by the rule of
     * nodeStatus() (plugins/nodes/nodes.ts) as it stands at this migration.
     */
    id: '002_node_status',
    async up(knex) {
      await knex.schema.alterTable(NODES, (t) => {
        t.string('status', 20).notNullable().defaultTo('pending');
        t.index(['status', 'created_at', 'id']);
      });
      await knex(NODES).update({
        status: knex.raw(
          `case when "removing" then 'removing' when "connection" in ('offline', 'stopped') then 'offline' when "reboot_required" then 'needs_reboot'` +
            ` when "availability" <> 'active' then "availability" when "connection" = 'pending' then 'pending' else 'ready' end`,
        ),
      });
    },
  },
  {
    /**
     * The overlay as the node's agent last reported it (core/overlay.ts OverlayState: interface up,
     * its address, peers and how many answer). A node is reached at its overlay address only while
     * this says the overlay works; null until an agent that reports it heartbeats.
     */
    id: '003_node_overlay',
    async up(knex) {
      await knex.schema.alterTable(NODES, (t) => {
        t.json('overlay').nullable();
      });
    },
  },
  {
    /**
     * Agent updates of many nodes in waves (rollouts.ts): what was selected, the waves, each node's
     * progress, and the operation lease (core/lifecycle.ts) of the process that runs it.
     */
    id: '004_agent_rollouts',
    async up(knex) {
      await knex.schema.createTable(AGENT_ROLLOUTS, (t) => {
        recordId(t);
        t.string('name', 100).notNullable();
        /** running | completed | halted | cancelled | failed */
        t.string('status', 20).notNullable();
        t.json('selector').notNullable();
        t.string('wave_size', 20).notNullable();
        t.integer('pause_s').notNullable();
        t.integer('grace_seconds').notNullable();
        /** The executable each architecture updates to: {arch: {version, sha256}}. */
        t.json('targets').notNullable();
        /** Node ids, wave by wave. */
        t.json('waves').notNullable();
        /** Each node's progress, by node id. */
        t.json('nodes').notNullable();
        t.integer('current_wave').notNullable().defaultTo(0);
        t.timestamp('next_wave_at', { useTz: true }).nullable();
        t.boolean('cancel_requested').notNullable().defaultTo(false);
        t.text('reason').nullable();
        t.string('failed_node_id', 64).nullable();
        t.string('created_by', 100).nullable();
        t.timestamp('finished_at', { useTz: true }).nullable();
        recordTimes(t);
        leaseColumns(t);
        t.index(['created_at', 'id']);
        t.index(['status']);
      });
    },
  },
  {
    /** One running agent rollout at a time, also between two requests at once (either dialect has partial indexes). */
    id: '005_agent_rollouts_one_running',
    async up(knex) {
      await knex.raw(`create unique index agent_rollouts_one_running on ${AGENT_ROLLOUTS} (status) where status = 'running'`);
    },
  },
];
