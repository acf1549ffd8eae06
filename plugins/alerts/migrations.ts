import { alterColumns, createTables, type Migration } from '../../core/db/migrations.js';
import { recordId, recordTimes } from '../../core/db/columns.js';

export const ALERTS = 'alerts';

export const alertMigrations: Migration[] = [
  // One row per alert: a rule's condition on one resource, from the turn it was first seen
  // (pending) through firing to resolved. Resolved rows are the history; at most one row per
  // key is open (pending or firing) at a time.
  createTables('001_alerts', {
    [ALERTS]: (t) => {
      recordId(t);
      t.string('rule', 40).notNullable();
      t.string('resource_type', 40).notNullable();
      t.string('resource_id', 200).notNullable();
      /** What on the resource: a mount point, a certificate; '' when the resource is all. */
      t.string('subject', 300).notNullable();
      /** rule|resource_type|resource_id|subject while the alert is open; the row's id once resolved. */
      t.string('open_key', 700).notNullable().unique();
      t.string('severity', 20).notNullable();
      /** pending (seen, not yet for long enough) | firing | resolved */
      t.string('state', 20).notNullable();
      t.text('message').notNullable();
      /** When the condition was first seen (pending since). */
      t.timestamp('observed_at', { useTz: true }).notNullable();
      t.timestamp('started_at', { useTz: true }).nullable();
      /** While firing: when the condition was last seen to clear (the hold-down runs from here); null while it holds. */
      t.timestamp('cleared_at', { useTz: true }).nullable();
      t.timestamp('resolved_at', { useTz: true }).nullable();
      t.timestamp('silenced_until', { useTz: true }).nullable();
      /** The last state announced (alert.firing / alert.resolved): null, firing or resolved. */
      t.string('notified_state', 20).nullable();
      recordTimes(t, { paged: true });
      t.index(['state']);
    },
  }),
  // The project of the alert's resource (issue 31: GET /v1/alerts?project=, per-project rules);
  // null for nodes and certificates. Open alerts get theirs at the next check.
  alterColumns('002_project', ALERTS, (t) => {
    t.string('project_id', 64).nullable();
    t.index(['project_id']);
  }),
];
