import { alterColumns, createTables, type Migration } from '../../core/db/migrations.js';
import { namedRecord, recordId, recordTimes } from '../../core/db/columns.js';

export const CHANNELS = 'notification_channels';
export const SUBSCRIPTIONS = 'notification_subscriptions';
/** The outbox: one row per (event, channel) to deliver, kept with its state until it is delivered or given up. */
export const DELIVERIES = 'notification_deliveries';
export const ATTEMPTS = 'notification_attempts';

export const notificationMigrations: Migration[] = [
  createTables('001_channels_subscriptions_outbox', {
    [CHANNELS]: (t) => {
      namedRecord(t);
      /** webhook | email | slack | discord | teams */
      t.string('kind', 20).notNullable();
      /** The receiver's URL, encrypted (a chat webhook's URL is its credential); null for email. */
      t.text('url_sealed').nullable();
      /** Extra request headers (name → value), encrypted as JSON: they may carry a receiver's credentials. */
      t.text('headers_sealed').nullable();
      /** Their names, shown (never the values). */
      t.text('header_names').notNullable();
      /** Email recipients (JSON array); empty for the other kinds. */
      t.text('recipients').notNullable();
      /** A webhook's signing secret, encrypted; shown once, at creation. */
      t.text('secret_sealed').nullable();
      recordTimes(t, { paged: true });
    },
    [SUBSCRIPTIONS]: (t) => {
      recordId(t);
      t.string('channel_id', 64).notNullable();
      /** JSON array of event types. */
      t.text('event_types').notNullable();
      /** JSON array of resource ids (empty: any). */
      t.text('resource_ids').notNullable();
      /** JSON object of tags the event's resource must carry (empty: any). */
      t.text('tags').notNullable();
      /** info | warning | critical: the least severe event delivered. */
      t.string('min_severity', 10).notNullable();
      recordTimes(t, { paged: true });
      t.index(['channel_id']);
    },
    [DELIVERIES]: (t) => {
      recordId(t);
      t.string('channel_id', 64).notNullable();
      t.string('subscription_id', 64).nullable();
      t.string('event_id', 64).notNullable();
      t.string('event_type', 64).notNullable();
      /** The event as delivered (JSON): the same bytes on every attempt. */
      t.text('event').notNullable();
      /** pending | sending | delivered | failed */
      t.string('status', 12).notNullable();
      t.integer('attempts').notNullable().defaultTo(0);
      /** When it is due next (pending), or until when its sender holds it (sending). */
      t.bigInteger('due_ms').notNullable();
      /** Past this, a failed attempt gives up (notifications.retry_hours after it was written or redelivered). */
      t.bigInteger('give_up_ms').notNullable();
      t.text('last_error').nullable();
      t.timestamp('delivered_at', { useTz: true }).nullable();
      recordTimes(t);
      t.unique(['event_id', 'channel_id']);
      t.index(['created_at', 'id']);
      t.index(['status', 'due_ms']);
      t.index(['channel_id']);
    },
    [ATTEMPTS]: (t) => {
      t.bigIncrements('id').primary();
      t.string('delivery_id', 64).notNullable();
      t.timestamp('at', { useTz: true }).notNullable();
      /** The receiver's HTTP status (null: no answer, or email). */
      t.integer('status_code').nullable();
      t.integer('latency_ms').notNullable();
      t.text('error').nullable();
      t.index(['delivery_id', 'id']);
    },
  }),
  // A subscription may name a project: it receives only events about that project's resources.
  alterColumns('002_subscription_project', SUBSCRIPTIONS, (t) => {
    t.string('project_id', 64).nullable();
  }),
  // The claim reads each channel's oldest due deliveries of one status from here, in order, a few rows
  // each: its cost no longer grows with the backlog (a window over every due delivery did).
  alterColumns('003_outbox_claim_by_channel', DELIVERIES, (t) => {
    t.index(['channel_id', 'status', 'due_ms', 'id'], 'notification_deliveries_claim_idx');
  }),
];
