import { createTables, type Migration } from '../../core/db/migrations.js';
import { leaseColumns } from '../../core/clusters/migrations.js';
import { recordId, recordTimes } from '../../core/db/columns.js';

export const SECRETS = 'secrets';
/** The sealed values of a versioned object's earlier versions, kept for rollbacks (the last `clusters.revisions_kept`). */
export const SECRET_VERSIONS = 'secret_versions';

export const secretMigrations: Migration[] = [
  createTables('001_secrets', {
    [SECRETS]: (t) => {
      recordId(t);
      /** secret | config */
      t.string('kind', 10).notNullable();
      t.string('name', 63).notNullable();
      // A swarm's objects go with the swarm (its runtime objects die with it too). Swarms became
      // clusters (core/008_clusters, which runs first); 002 moves this column into cluster_id.
      t.string('swarm_id', 64).nullable().references('id').inTable('clusters').onDelete('CASCADE');
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
      recordTimes(t);
      t.unique(['kind', 'swarm_id', 'name']);
      t.unique(['kind', 'cluster_id', 'namespace', 'name']);
      t.index(['kind', 'created_at', 'id']);
      t.index(['kind', 'name']);
    },
  }),
  {
    id: '002_cluster_id',
    async up(knex) {
      // Swarm groups became clusters (core/008_clusters): an object names its cluster, whatever its
      // backend; backends without namespaces (swarm) have '' so that names stay unique per cluster.
      await knex(SECRETS).whereNotNull('swarm_id').update({ cluster_id: knex.ref('swarm_id'), namespace: '' });
      await knex.schema.alterTable(SECRETS, (t) => {
        t.dropUnique(['kind', 'swarm_id', 'name']);
        t.dropForeign(['swarm_id']);
      });
      await knex.schema.alterTable(SECRETS, (t) => {
        t.dropColumn('swarm_id');
      });
      await knex.schema.alterTable(SECRETS, (t) => {
        t.index(['cluster_id']);
        // One change (a rotation, a deletion) at a time, whichever control plane runs it (core/lifecycle.ts).
        leaseColumns(t);
      });
    },
  },
  // A rollback restores the versions its revision used (issue 29): the values of earlier versions
  // are kept, sealed like the current one; they go with their object.
  createTables('003_versions', {
    [SECRET_VERSIONS]: (t) => {
      t.string('object_id', 64).notNullable().references('id').inTable(SECRETS).onDelete('CASCADE');
      t.integer('version').notNullable();
      t.text('data_sealed').notNullable();
      t.timestamp('created_at', { useTz: true }).notNullable();
      t.primary(['object_id', 'version']);
    },
  }),
];
