import type { Migration } from '../../core/db/migrations.js';

export const SECRETS = 'secrets';

export const secretMigrations: Migration[] = [
  {
    id: '001_secrets',
    async up(knex) {
      await knex.schema.createTable(SECRETS, (t) => {
        t.string('id', 64).primary();
        /** secret | config */
        t.string('kind', 10).notNullable();
        t.string('name', 63).notNullable();
        // A swarm's objects go with the swarm (its runtime objects die with it too).
        t.string('swarm_id', 64).nullable().references('id').inTable('swarms').onDelete('CASCADE');
        /** For Kubernetes clusters, later: the cluster and namespace the object lives in. */
        t.string('cluster_id', 64).nullable();
        t.string('namespace', 63).nullable();
        t.integer('version').notNullable();
        /** The runtime object of the current version. */
        t.string('runtime_name', 100).notNullable();
        /** The value, encrypted (AES-256-GCM, key derived for this purpose). */
        t.text('data_sealed').notNullable();
        /** Runtime objects of earlier versions not removed yet (JSON array of names). */
        t.text('retired').notNullable();
        t.timestamp('created_at', { useTz: true }).notNullable();
        t.timestamp('updated_at', { useTz: true }).notNullable();
        t.unique(['kind', 'swarm_id', 'name']);
        t.unique(['kind', 'cluster_id', 'namespace', 'name']);
        t.index(['kind', 'created_at', 'id']);
        t.index(['kind', 'name']);
      });
    },
  },
];
