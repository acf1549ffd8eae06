import type { Migration } from '../../core/db/migrations.js';
import { leaseColumns, markForTakeOver } from '../../core/clusters/migrations.js';
import { namedRecord, recordTimes } from '../../core/db/columns.js';

export const S3_INSTANCES = 's3_instances';

export const s3Migrations: Migration[] = [
  {
    id: '001_s3_instances',
    async up(knex) {
      await knex.schema.createTable(S3_INSTANCES, (t) => {
        namedRecord(t);
        t.string('swarm_id', 64).notNullable();
        t.string('volume_id', 64).notNullable();
        t.string('runtime_name', 100).notNullable();
        t.string('image', 255).notNullable();
        t.string('root_user', 64).notNullable();
        /** The root password, sealed with the `s3` secret box. */
        t.text('password_sealed').notNullable();
        t.string('cert_id', 100).nullable();
        t.boolean('sso').notNullable().defaultTo(false);
        t.string('domain', 253).notNullable();
        t.string('console_domain', 253).notNullable();
        /** deploying | running | failed | removing */
        t.string('status', 20).notNullable();
        t.text('error').nullable();
        t.integer('running').nullable();
        t.timestamp('observed_at', { useTz: true }).nullable();
        recordTimes(t, { paged: true });
        t.index(['swarm_id']);
        t.index(['volume_id']);
      });
    },
  },
  {
    id: '002_cluster_id',
    async up(knex) {
      // Swarm groups became clusters (core/008_clusters): a store names the cluster it runs on.
      await knex.schema.alterTable(S3_INSTANCES, (t) => {
        t.renameColumn('swarm_id', 'cluster_id');
      });
      await knex.schema.alterTable(S3_INSTANCES, (t) => {
        leaseColumns(t);
      });
      await markForTakeOver(knex, S3_INSTANCES, { deploying: 'deploy', removing: 'remove' });
    },
  },
  {
    id: '003_replicas',
    async up(knex) {
      // 0 while a restore of its volume (or a backup with consistency stop) has it stopped (status `stopped`).
      await knex.schema.alterTable(S3_INSTANCES, (t) => {
        t.integer('replicas').notNullable().defaultTo(1);
      });
    },
  },
];
