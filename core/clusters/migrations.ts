import type { Knex } from 'knex';
import { createTables, type Migration } from '../db/migrations.js';
import { namedRecord, recordId, recordTimes } from '../db/columns.js';

export const CLUSTERS = 'clusters';
export const CLUSTER_MEMBERS = 'cluster_members';
/** Spec revisions of the workloads on clusters (instances, services): core/clusters/revisions.ts. */
export const SPEC_REVISIONS = 'spec_revisions';

/** The columns an operation lease adds to a record (core/lifecycle.ts). */
export function leaseColumns(t: Knex.CreateTableBuilder | Knex.AlterTableBuilder): void {
  /** The operation working on the record now (null when none), its id, and until when its lease holds. */
  t.string('op', 40).nullable();
  t.string('op_id', 64).nullable();
  t.timestamp('op_lease_until', { useTz: true }).nullable();
  /** Counts changes of what the record asks for: an operation settles only the revision it worked on. */
  t.integer('op_rev').notNullable().defaultTo(0);
}

const LONG_AGO = '1970-01-01T00:00:00.000Z';

/**
 * For the migration that adds leases to a table: records a process of the previous release left in
 * a transitional status get that status's operation, with an expired lease, so that the next start
 * takes them over (as it used to resume them).
 */
export async function markForTakeOver(knex: Knex, table: string, operations: Record<string, string>): Promise<void> {
  for (const [status, op] of Object.entries(operations)) {
    await knex(table).where({ status }).update({ op, op_id: 'op-migrated', op_lease_until: LONG_AGO });
  }
}

export const clusterMigrations: Migration[] = [
  {
    id: '008_clusters',
    async up(knex) {
      // Swarm groups became clusters (backend swarm): a store made by the swarms plugin has its
      // tables renamed in place (rows, ids and the references to them stay); a new one gets them here.
      if (await knex.schema.hasTable('swarms')) {
        await knex.schema.renameTable('swarms', CLUSTERS);
        await knex.schema.alterTable(CLUSTERS, (t) => {
          t.renameColumn('cluster_id', 'runtime_id');
        });
        await knex.schema.alterTable(CLUSTERS, (t) => {
          t.string('backend', 20).notNullable().defaultTo('swarm');
          leaseColumns(t);
        });
        await knex.schema.renameTable('swarm_members', CLUSTER_MEMBERS);
        await knex.schema.alterTable(CLUSTER_MEMBERS, (t) => {
          t.renameColumn('swarm_id', 'cluster_id');
        });
        await knex.schema.alterTable(CLUSTER_MEMBERS, (t) => {
          leaseColumns(t);
        });
        // Work a process of the previous release left half done is taken over at the next start.
        await markForTakeOver(knex, CLUSTERS, { deleting: 'force-delete' });
        const changing = knex(CLUSTER_MEMBERS).whereIn('status', ['joining', 'leaving']).distinct('cluster_id');
        await knex(CLUSTERS).whereIn('id', changing).whereNull('op').update({ op: 'members', op_id: 'op-migrated', op_lease_until: LONG_AGO });
        return;
      }
      await knex.schema.createTable(CLUSTERS, (t) => {
        namedRecord(t);
        /** empty | forming | active | deleting | failed */
        t.string('status', 20).notNullable();
        /** The node whose agent is asked first (a manager / server node). */
        t.string('manager_node_id', 64).nullable();
        /** The orchestrator's own id of the cluster (a swarm's cluster id). */
        t.string('runtime_id', 100).nullable();
        t.text('error').nullable();
        recordTimes(t, { paged: true });
        /** swarm | k8s */
        t.string('backend', 20).notNullable().defaultTo('swarm');
        leaseColumns(t);
      });
      await knex.schema.createTable(CLUSTER_MEMBERS, (t) => {
        recordId(t);
        t.string('cluster_id', 64).notNullable().references('id').inTable(CLUSTERS).onDelete('CASCADE');
        t.string('node_id', 64).notNullable().unique();
        /** manager | worker */
        t.string('role', 20).notNullable();
        /** joining | active | leaving | failed */
        t.string('status', 20).notNullable();
        t.string('runtime_node_id', 100).nullable();
        t.string('advertise_address', 64).nullable();
        t.text('error').nullable();
        recordTimes(t);
        t.index(['cluster_id']);
        leaseColumns(t);
      });
    },
  },
];

/** The table of spec revisions (after the store probe, 009, in core's list). */
export const specRevisionsMigration: Migration = createTables('010_spec_revisions', {
  [SPEC_REVISIONS]: (t) => {
    recordId(t);
    /** instance | service */
    t.string('resource_type', 40).notNullable();
    t.string('resource_id', 64).notNullable();
    t.integer('number').notNullable();
    /** Who asked for it (null: made by a migration). */
    t.string('principal_id', 64).nullable();
    t.string('principal_name', 255).nullable();
    /** The spec as the resource's plugin keeps it. */
    t.json('spec').notNullable();
    /** The secret and config versions it used: [{kind, id, name, version}]. */
    t.json('objects').notNullable();
    /** The revision a rollback returned to (null for any other change). */
    t.integer('rollback_of').nullable();
    t.timestamp('created_at', { useTz: true }).notNullable();
    t.unique(['resource_type', 'resource_id', 'number']);
  },
});

/**
 * The project that owns each cluster (plugins/projects; null while no project plugin assigned it).
 * The column is core's, as the table is; the projects plugin's own migration puts the clusters that
 * exist then in its `default` project.
 */
export const clusterProjectsMigration: Migration = {
  id: '011_cluster_projects',
  async up(knex) {
    await knex.schema.alterTable(CLUSTERS, (t) => {
      t.string('project_id', 64).nullable();
      t.index(['project_id']);
    });
  },
};

/**
 * Whether each member's node is ready as its cluster last reported it (a kubelet's Ready condition,
 * a swarm node's state), kept by each observation of the cluster: what the `cluster_member_not_ready`
 * alert reads. Null while unknown (not observed yet, or the backend reports no readiness).
 */
export const memberReadinessMigration: Migration = {
  id: '012_member_readiness',
  async up(knex) {
    await knex.schema.alterTable(CLUSTER_MEMBERS, (t) => {
      t.string('readiness', 16).nullable();
      t.string('readiness_reason', 500).nullable();
    });
  },
};
