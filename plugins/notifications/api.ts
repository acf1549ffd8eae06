import type { Knex } from 'knex';
import { keepWithWrite, type DurableWrite } from '../../core/events.js';
import { defineServiceRef } from '../../core/plugin.js';
import type { AlertAnnouncement } from '../alerts/api.js';
import type { AuditRecordedEvent } from '../audit/api.js';
import type { NewEvent, Severity } from './events.js';

/** Writes an event's outbox rows in the producer's transaction (its COMMIT makes them due). */
export type OutboxWrite = DurableWrite;

/**
 * The notifications plugin's contract: what other plugins import of it (importing this never loads the plugin).
 *
 * A producer whose change is written in a transaction of its own writes the notification of that
 * change in the same transaction, so a crash between the change and the outbox loses nothing:
 *
 *     const write = await notifications?.prepare(event);   // before the transaction: reads
 *     await knex.transaction(async (trx) => { …the change…; await write?.(trx); });
 *
 * The alert engine's alert.firing / alert.resolved, the audit log's audit.<kind> and the node
 * events come this way; the events of core and of plugins that know no notifications (task.failed,
 * workload.*, cluster.member.*, volume.*) come the same way through the bus's durable listeners
 * (core/events.ts `EventBus.keep`, filled by plugins/notifications/events.ts): every event's outbox
 * rows are written in the transaction of its change.
 */
export interface NotificationsApi {
  /**
   * Matches an event to the subscriptions and answers the write of its outbox rows (one per channel
   * a matching subscription names), null when no subscription wants it. The matching reads the store
   * (subscriptions, the resource's project and tags), so call it before the transaction, never inside
   * one (on SQLite the one connection is the transaction's: a read beside it would wait for it).
   */
  prepare(event: NewEvent): Promise<OutboxWrite | null>;
}

export const NotificationsRef = defineServiceRef<NotificationsApi>('notifications', 'notifications: channels, subscriptions and the outbox');

const str = (v: unknown): string | null => (typeof v === 'string' && v ? v : null);
const asSeverity = (v: unknown, fallback: Severity): Severity => (v === 'info' || v === 'warning' || v === 'critical' ? v : fallback);

/** A node event kind (plugins/nodes) that is also a notification type. */
const NODE_KINDS: Record<string, { type: string; severity: (data: Record<string, unknown> | null) => Severity }> = {
  node_created: { type: 'node.created', severity: () => 'info' },
  node_joined: { type: 'node.joined', severity: () => 'info' },
  node_status_changed: { type: 'node.status_changed', severity: (d) => (d?.to === 'offline' ? 'critical' : d?.to === 'ready' ? 'info' : 'warning') },
  node_removed: { type: 'node.removed', severity: () => 'info' },
  join_failed: { type: 'node.join_failed', severity: () => 'warning' },
  certificate_issued: { type: 'certificate.issued', severity: () => 'info' },
  certificates_revoked: { type: 'certificate.revoked', severity: () => 'warning' },
};

/** The notification of a node event (plugins/nodes, written with the event's row); null for a kind that is none. */
export function nodeEventNotification(e: { node_id: string | null; identifier: string | null; kind: string; message: string | null; data: Record<string, unknown> | null }): NewEvent | null {
  const kind = NODE_KINDS[e.kind];
  if (!kind) return null;
  return {
    type: kind.type,
    severity: kind.severity(e.data),
    resource: e.node_id ? { type: 'node', id: e.node_id } : null,
    message: e.message ?? `${kind.type}${e.node_id ? ` ${e.node_id}` : ''}`,
    data: { node_id: e.node_id, identifier: e.identifier, ...(e.data ?? {}) },
  };
}

/** The `alert.firing` / `alert.resolved` notification of an alert's announcement (plugins/alerts). */
export function alertNotification(state: 'firing' | 'resolved', a: AlertAnnouncement): NewEvent {
  const type = str(a.resource_type);
  const id = str(a.resource_id);
  return {
    type: `alert.${state}`,
    severity: state === 'resolved' ? 'info' : asSeverity(a.severity, 'warning'),
    resource: type && id ? { type, id } : null,
    message: `${state === 'firing' ? 'FIRING' : 'resolved'}: ${str(a.message) ?? str(a.rule) ?? 'an alert'}`,
    data: { ...a, rule: a.rule ?? null, resource_type: type, resource_id: id, severity: asSeverity(a.severity, 'warning'), started_at: a.started_at ?? null, message: a.message ?? null },
  };
}

/** The `audit.<kind>` notification of an audit entry (plugins/audit). */
export function auditNotification(a: AuditRecordedEvent): NewEvent {
  return {
    type: `audit.${a.kind}`,
    severity: a.status >= 400 ? 'warning' : 'info',
    resource: a.resource_id ? { type: a.kind, id: a.resource_id } : null,
    message: `${a.principal_name ?? 'an anonymous caller'}: ${a.method} ${a.route}${a.resource_id ? ` (${a.resource_id})` : ''} answered ${a.status}`,
    data: { ...a },
  };
}

/**
 * For a record that must be kept even when its notification cannot be written (an audit entry, a
 * node event): `change` and the event's outbox rows in one transaction (both or neither, as
 * `prepare` promises); when the matching or the outbox write fails, `change` alone, and `lost` is
 * told why (log it, naming the record: the notification is not written, the record is). The rest as
 * core's keepWithWrite (core/events.ts), which this is over.
 */
export function keepWithNotification<R>(
  knex: Knex,
  notifications: NotificationsApi | null | undefined,
  event: NewEvent,
  change: (trx?: Knex.Transaction) => Promise<R>,
  lost: (err: Error) => void,
  wanted?: (done: R) => boolean,
): Promise<R> {
  return keepWithWrite(knex, async () => (await notifications?.prepare(event)) ?? null, change, lost, wanted);
}
