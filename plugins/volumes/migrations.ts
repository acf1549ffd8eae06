import { alterColumns, createTables, type Migration } from '../../core/db/migrations.js';
import { leaseColumns, markForTakeOver } from '../../core/clusters/migrations.js';
import { adoptIntoDefaultProject } from '../projects/api.js';
import { namedRecord, recordId, recordTimes } from '../../core/db/columns.js';

export const VOLUMES = 'volumes';
export const VOLUME_DEFINITIONS = 'volume_definitions';

export const volumeMigrations: Migration[] = [
  createTables('001_volumes', {
    [VOLUMES]: (t) => {
      namedRecord(t);
      t.string('node_id', 64).notNullable();
      t.string('folder', 1024).notNullable();
      /** nfs | local; fixed at creation */
      t.string('type', 10).notNullable();
      t.string('server_ip', 64).nullable();
      /** preparing | ready | failed | deleting */
      t.string('status', 20).notNullable();
      t.text('error').nullable();
      /** What the host node reported about the NFS export: {file, served, reason}. */
      t.text('nfs_export').nullable();
      recordTimes(t, { paged: true });
      t.index(['node_id']);
    },
    // Where a volume is defined (a named volume on that node's engine), so deletion removes each one.
    [VOLUME_DEFINITIONS]: (t) => {
      recordId(t);
      t.string('volume_id', 64).notNullable().references('id').inTable(VOLUMES).onDelete('CASCADE');
      t.string('node_id', 64).notNullable();
      t.timestamp('created_at', { useTz: true }).notNullable();
      t.unique(['volume_id', 'node_id']);
      t.index(['node_id']);
    },
  }),
  {
    id: '002_leases',
    async up(knex) {
      // Operations on volumes run under a lease (core/lifecycle.ts); a definition remembers its cluster's backend.
      await knex.schema.alterTable(VOLUMES, (t) => {
        leaseColumns(t);
      });
      await knex.schema.alterTable(VOLUME_DEFINITIONS, (t) => {
        // Data, not logic: the rows the previous release left were all staged on swarms (its only
        // backend), and SQLite adds a NOT NULL column only with a default. Every new row names its
        // cluster's backend (DefinitionStore.record), so the default is never relied on.
        t.string('backend', 20).notNullable().defaultTo('swarm');
      });
      // Work a process of the previous release left half done is taken over at the next start.
      await markForTakeOver(knex, VOLUMES, { preparing: 'prepare', deleting: 'delete' });
    },
  },
  {
    id: '003_project',
    async up(knex) {
      // A volume belongs to a project (docs/tenancy.md). Those made before belong to the project
      // named `default` (the one projects' migration puts an installation in): filled in here when
      // it exists already, else read so (a null project_id) until then.
      await knex.schema.alterTable(VOLUMES, (t) => {
        t.string('project_id', 64).nullable();
        t.index(['project_id']);
      });
      await adoptIntoDefaultProject(knex, [VOLUMES]);
    },
  },
  // A volume made from a backup (POST /v1/volumes {restore_from}): the backup, its target and
  // restic's snapshot id, as JSON; null for a volume made empty (or of a folder's contents).
  alterColumns('004_restore_from', VOLUMES, (t) => {
    t.text('restore_from').nullable();
  }),
];
