import { createTables, type Migration } from '../../core/db/migrations.js';
import { adoptIntoDefaultProject } from '../projects/api.js';
import { namedRecord, recordId, recordTimes } from '../../core/db/columns.js';

export const BACKUP_TARGETS = 'backup_targets';
export const BACKUP_RUNS = 'backup_runs';
export const BACKUP_SCHEDULES = 'backup_schedules';
export const CONTROL_PLANE_ARCHIVES = 'backup_control_plane_archives';
export const CONTROL_PLANE_FAILURES = 'backup_control_plane_failures';

export const backupMigrations: Migration[] = [
  // Where backups go: an S3 bucket (and prefix) holding one restic repository per target.
  createTables('001_targets_and_runs', {
    [BACKUP_TARGETS]: (t) => {
      namedRecord(t);
      /** s3 */
      t.string('kind', 20).notNullable();
      t.string('endpoint', 512).notNullable();
      t.string('bucket', 63).notNullable();
      t.string('prefix', 512).notNullable();
      t.string('region', 64).notNullable();
      t.string('access_key_id', 256).notNullable();
      /** The S3 secret key, encrypted (AES-256-GCM, key derived for this purpose); never answered. */
      t.text('secret_sealed').notNullable();
      /** The restic repository's password, generated at creation, encrypted the same way; never answered. */
      t.text('password_sealed').notNullable();
      t.timestamp('checked_at', { useTz: true }).notNullable();
      recordTimes(t, { paged: true });
    },
    // One backup (a restic snapshot once it succeeds) or restore of a volume, run as an agent's task.
    [BACKUP_RUNS]: (t) => {
      recordId(t);
      /** backup | restore */
      t.string('operation', 10).notNullable();
      t.string('volume_id', 64).notNullable();
      t.string('target_id', 64).notNullable();
      t.string('node_id', 64).notNullable();
      /** The agent's task while it runs (deleted once its outcome is recorded: its payload holds the keys). */
      t.string('task_id', 64).nullable();
      /** running | succeeded | failed */
      t.string('status', 20).notNullable();
      t.text('error').nullable();
      /** restic's snapshot id: what a backup made, or what a restore restored. */
      t.string('snapshot_id', 64).nullable();
      /** For a restore: the backup it restored. */
      t.string('source_id', 64).nullable();
      t.bigInteger('bytes').nullable();
      t.bigInteger('bytes_added').nullable();
      t.integer('files').nullable();
      t.float('duration_seconds').nullable();
      t.timestamp('started_at', { useTz: true }).notNullable();
      t.timestamp('finished_at', { useTz: true }).nullable();
      recordTimes(t, { paged: true });
      t.index(['volume_id', 'operation']);
      t.index(['target_id']);
      t.index(['status']);
    },
  }),
  {
    id: '002_schedules',
    async up(knex) {
      // Backups taken at an interval, with a retention policy applied by restic forget --prune.
      await knex.schema.createTable(BACKUP_SCHEDULES, (t) => {
        namedRecord(t);
        t.string('target_id', 64).notNullable();
        /** The volumes it backs up (ids), as JSON. */
        t.text('volume_ids').notNullable();
        t.integer('every_seconds').notNullable();
        t.integer('keep_last').nullable();
        t.integer('keep_daily').nullable();
        t.integer('keep_weekly').nullable();
        t.integer('keep_monthly').nullable();
        t.timestamp('next_run_at', { useTz: true }).notNullable();
        t.timestamp('last_run_at', { useTz: true }).nullable();
        recordTimes(t, { paged: true });
        t.index(['next_run_at']);
      });
      await knex.schema.alterTable(BACKUP_RUNS, (t) => {
        /** The schedule that started a backup (null: started by hand). */
        t.string('schedule_id', 64).nullable();
      });
    },
  },
  {
    id: '003_schedule_cron_and_tags',
    async up(knex) {
      // A schedule runs at an interval or on a cron expression, and backs up volumes named or carrying tags.
      await knex.schema.alterTable(BACKUP_SCHEDULES, (t) => {
        t.string('cron', 100).nullable();
        /** The tags (key → value, JSON) a volume carries to be backed up, resolved at each run. */
        t.text('volume_tags').nullable();
      });
      await knex.schema.alterTable(BACKUP_SCHEDULES, (t) => t.setNullable('every_seconds'));
    },
  },
  {
    id: '004_project',
    async up(knex) {
      // Backup targets and schedules belong to a project (docs/tenancy.md). Those made before belong
      // to the project named `default`, as volumes' (volumes/003_project): filled in here when it
      // exists already, else read so (a null project_id) until then.
      for (const table of [BACKUP_TARGETS, BACKUP_SCHEDULES]) {
        await knex.schema.alterTable(table, (t) => {
          t.string('project_id', 64).nullable();
          t.index(['project_id']);
        });
      }
      await adoptIntoDefaultProject(knex, [BACKUP_TARGETS, BACKUP_SCHEDULES]);
    },
  },
  {
    id: '005_restore_drills',
    async up(knex) {
      // A backup may be proven restorable after it is taken (a restore drill): asked by its schedule or its request.
      await knex.schema.alterTable(BACKUP_SCHEDULES, (t) => {
        t.boolean('verify').notNullable().defaultTo(false);
      });
      await knex.schema.alterTable(BACKUP_RUNS, (t) => {
        /** Whether the backup was asked to be verified (a restore drill after it). */
        t.boolean('verify').notNullable().defaultTo(false);
        /** The drill's outcome: true (restorable), false (verify_error says why), null (not verified). */
        t.boolean('verified').nullable();
        t.timestamp('verified_at', { useTz: true }).nullable();
        t.text('verify_error').nullable();
      });
    },
  },
  {
    id: '006_restore_stops_workloads',
    async up(knex) {
      // A restore into a volume in use may stop its workloads and bring them back after (stop_workloads).
      await knex.schema.alterTable(BACKUP_RUNS, (t) => {
        /** The workloads a restore stopped (JSON: type, id, name, the replicas they had), null: none. */
        t.text('workloads').nullable();
        t.timestamp('workloads_stopped_at', { useTz: true }).nullable();
        t.timestamp('workloads_started_at', { useTz: true }).nullable();
        /** Seconds from the first workload stopped to the last brought back. */
        t.float('gap_seconds').nullable();
      });
    },
  },
  {
    id: '007_stopping_lease',
    async up(knex) {
      // A run that stops workloads is recorded before it stops any (status `stopping`), held by its
      // control plane's lease: one whose lease ran out (its control plane died) is taken over and
      // its workloads brought back.
      await knex.schema.alterTable(BACKUP_RUNS, (t) => {
        t.timestamp('lease_until', { useTz: true }).nullable();
      });
    },
  },
  // The control plane's own archives as it uploaded them: the schedule and keep_last believe
  // these only, not whatever names anyone with the bucket's keys writes there.
  createTables('008_control_plane_archives', {
    [CONTROL_PLANE_ARCHIVES]: (t) => {
      recordId(t);
      t.string('target_id', 64).notNullable();
      /** The object's whole key in the bucket. */
      t.string('key', 1024).notNullable();
      t.bigInteger('bytes').notNullable();
      /** The ETag the server answered the upload with (unquoted); null: it gave none. */
      t.string('etag', 200).nullable();
      /** When the archive was made (its name's time). */
      t.timestamp('made_at', { useTz: true }).notNullable();
      t.timestamp('created_at', { useTz: true }).notNullable();
      t.index(['target_id', 'made_at']);
    },
  }),
  {
    id: '009_backup_consistency',
    async up(knex) {
      // A backup may stop the volume's workloads for its snapshot (consistency `stop`), asked by its request or its schedule.
      await knex.schema.alterTable(BACKUP_SCHEDULES, (t) => {
        t.string('consistency', 10).notNullable().defaultTo('live');
      });
      await knex.schema.alterTable(BACKUP_RUNS, (t) => {
        /** live | stop (null: a restore, or a backup made before) */
        t.string('consistency', 10).nullable();
      });
    },
  },
  {
    id: '010_one_active_run_per_volume',
    async up(knex) {
      // One run of a volume in progress (stopping its workloads, or running) at a time, held by the
      // store: two requests at the same instant both past the busy check, the second insert is refused.
      // Any second active run left by that race before is failed first (the newest of a volume stays).
      const active: Array<{ id: string; volume_id: string }> = await knex(BACKUP_RUNS).whereIn('status', ['stopping', 'running']).orderBy([{ column: 'started_at', order: 'desc' }, { column: 'id', order: 'desc' }]).select('id', 'volume_id');
      const seen = new Set<string>();
      for (const r of active) {
        if (!seen.has(r.volume_id)) seen.add(r.volume_id);
        else await knex(BACKUP_RUNS).where({ id: r.id }).update({ status: 'failed', lease_until: null, error: 'another run of the volume was in progress at the same time; this one is no longer followed' });
      }
      await knex.raw(`create unique index "${BACKUP_RUNS}_one_active_per_volume" on "${BACKUP_RUNS}" ("volume_id") where "status" in ('stopping', 'running')`);
    },
  },
  {
    id: '011_pre_post_commands',
    async up(knex) {
      // Commands run in a workload's container before and after a backup (a database dump), kept with their outcome on the run.
      await knex.schema.alterTable(BACKUP_SCHEDULES, (t) => {
        t.json('pre').nullable();
        t.json('post').nullable();
      });
      await knex.schema.alterTable(BACKUP_RUNS, (t) => {
        t.json('pre').nullable();
        t.json('post').nullable();
        /** pre | backup | post: the task a running backup with commands waits for (null: one without) */
        t.string('phase', 10).nullable();
      });
    },
  },
  {
    id: '012_local_targets',
    async up(knex) {
      // A target of kind local: a restic repository in a folder of one node (its S3 columns hold '').
      await knex.schema.alterTable(BACKUP_TARGETS, (t) => {
        t.string('node_id', 64).nullable();
        t.string('path', 1024).nullable();
      });
    },
  },
  // The control plane's own backups that failed since its last success (a success removes them):
  // what the alert rule, the metrics and the schedule's back-off read, whichever control plane asks.
  createTables('013_control_plane_failures', {
    [CONTROL_PLANE_FAILURES]: (t) => {
      recordId(t);
      /** backups.control_plane.target when it failed (null: none configured). */
      t.string('target_id', 64).nullable();
      /** schedule | request */
      t.string('trigger', 10).notNullable();
      t.text('error').notNullable();
      t.timestamp('failed_at', { useTz: true }).notNullable();
      t.index(['failed_at']);
    },
  }),
];
