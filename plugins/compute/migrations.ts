import { alterColumns, createTables, type Migration } from '../../core/db/migrations.js';
import { leaseColumns, markForTakeOver } from '../../core/clusters/migrations.js';
import { jsonColumn, seedRevisions } from '../../core/clusters/revisions.js';
import { instanceSpec, type InstanceRecord } from './store.js';
import { recordId, recordTimes } from '../../core/db/columns.js';

export const INSTANCES = 'compute_instances';

export const computeMigrations: Migration[] = [
  createTables('001_compute_instances', {
    [INSTANCES]: (t) => {
      recordId(t);
      t.string('name', 63).notNullable();
      t.string('swarm_id', 64).notNullable();
      t.string('runtime_name', 100).notNullable();
      t.string('image', 255).notNullable();
      t.string('type', 20).notNullable();
      t.integer('replicas').notNullable();
      /** running | stopped: what the operator asked for. */
      t.string('desired', 20).notNullable();
      /** deploying | running | stopped | drifted | failed | terminating: what the runtime shows. */
      t.string('status', 20).notNullable();
      t.text('reason').nullable();
      t.string('domain', 253).nullable();
      t.integer('http_port').nullable();
      t.json('ports').notNullable();
      t.json('env').notNullable();
      t.json('command').nullable();
      t.string('platform', 40).nullable();
      t.integer('gpu').notNullable().defaultTo(0);
      t.json('volumes').notNullable();
      /** Where each task runs, as last observed: [{node_id, state}]. */
      t.json('placement').nullable();
      t.integer('running').nullable();
      t.timestamp('observed_at', { useTz: true }).nullable();
      recordTimes(t);
      t.unique(['swarm_id', 'name']);
      t.index(['created_at', 'id']);
    },
  }),
  {
    id: '002_cluster_id',
    async up(knex) {
      // Swarm groups became clusters (core/008_clusters): an instance names the cluster it runs on.
      await knex.schema.alterTable(INSTANCES, (t) => {
        t.renameColumn('swarm_id', 'cluster_id');
      });
      await knex.schema.alterTable(INSTANCES, (t) => {
        leaseColumns(t);
      });
      await markForTakeOver(knex, INSTANCES, { deploying: 'deploy', terminating: 'terminate' });
    },
  },
  {
    id: '003_health_revisions',
    async up(knex) {
      // Health checks (issue 29); every instance's spec so far becomes its revision 1.
      await knex.schema.alterTable(INSTANCES, (t) => {
        t.json('health').nullable();
      });
      await seedRevisions(knex, 'instance', INSTANCES, (row) =>
        ({ ...instanceSpec({ ...row, ports: jsonColumn(row.ports), env: jsonColumn(row.env), command: jsonColumn(row.command), volumes: jsonColumn(row.volumes), health: null } as InstanceRecord) }),
      );
    },
  },
  // How an instance's updates roll out (issue 29).
  alterColumns('004_rollout', INSTANCES, (t) => {
    t.json('rollout').nullable();
  }),
];
