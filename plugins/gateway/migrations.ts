import { createTables, type Migration } from '../../core/db/migrations.js';
import { leaseColumns, markForTakeOver } from '../../core/clusters/migrations.js';
import { recordId, recordTimes } from '../../core/db/columns.js';

export const LOAD_BALANCERS = 'load_balancers';

export const gatewayMigrations: Migration[] = [
  createTables('001_load_balancers', {
    [LOAD_BALANCERS]: (t) => {
      recordId(t);
      t.string('name', 100).notNullable();
      /** Exactly one of swarm_id and cluster_id is set. */
      t.string('swarm_id', 64).nullable().unique();
      t.string('cluster_id', 64).nullable().unique();
      t.string('runtime_name', 100).notNullable();
      t.string('image', 255).notNullable();
      /** The node the balancer runs on (the swarm's manager when it was deployed). */
      t.string('node_id', 64).nullable();
      t.integer('http_port').notNullable();
      /** deploying | running | failed | removing */
      t.string('status', 20).notNullable();
      t.text('error').nullable();
      t.string('config_sha256', 64).nullable();
      t.integer('config_version').notNullable().defaultTo(0);
      t.json('routes').nullable();
      t.timestamp('applied_at', { useTz: true }).nullable();
      recordTimes(t, { paged: true });
    },
  }),
  {
    id: '002_cluster_id',
    async up(knex) {
      // Swarm groups became clusters (core/008_clusters): a balancer names its cluster, whatever its backend.
      await knex(LOAD_BALANCERS).whereNotNull('swarm_id').update({ cluster_id: knex.ref('swarm_id') });
      await knex.schema.alterTable(LOAD_BALANCERS, (t) => {
        t.dropUnique(['swarm_id']);
      });
      await knex.schema.alterTable(LOAD_BALANCERS, (t) => {
        t.dropColumn('swarm_id');
        leaseColumns(t);
      });
      await markForTakeOver(knex, LOAD_BALANCERS, { deploying: 'apply', removing: 'remove' });
    },
  },
];
