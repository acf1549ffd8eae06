import type { Knex } from 'knex';
import type { Clock } from '../../core/clock.js';
import { RowCodec, type Row } from '../../core/db/repository.js';
import type { Store } from '../../core/db/store.js';
import type { EventBus } from '../../core/events.js';
import { NODE_EVENTS, NODES } from './migrations.js';
import { NodeEventRecorded } from './api.js';
import { keepWithNotification, nodeEventNotification, type NotificationsApi } from '../notifications/api.js';
import type { Logger } from '../../core/log.js';

export interface NodeEvent {
  id: number;
  node_id: string | null;
  identifier: string | null;
  kind: string;
  message: string | null;
  data: Record<string, unknown> | null;
  created_at: string;
}

export const EVENT_LIMIT_DEFAULT = 200;
export const EVENT_LIMIT_MAX = 1000;

/** The kinds of event that mark a machine's first contact as a node. */
const FIRST_CONTACT = ['node_joined', 'node_status_changed'];

const codec = new RowCodec({ json: ['data'], dates: ['created_at'] });

export function eventView(e: NodeEvent) {
  return { ...e, id: Number(e.id) };
}

/** Node events: deploy steps, join failures, state changes, task failures, SSH updates. Each is announced as `node.event` on the bus. */
export class EventLog {
  constructor(
    private readonly store: Store,
    private readonly clock: Clock,
    private readonly bus: EventBus,
    /** The notifications plugin, when loaded: an event's notification is written with its row. */
    private readonly notifications: () => NotificationsApi | null,
    /** Where a notification that could not be written is told. */
    private readonly log: Logger,
  ) {}

  async record(event: { nodeId?: string | null; identifier?: string | null; kind: string; message?: string | null; data?: Record<string, unknown> | null }): Promise<NodeEvent> {
    const row = {
      node_id: event.nodeId ?? null,
      identifier: event.identifier ?? null,
      kind: event.kind,
      message: event.message ?? null,
      data: event.data ?? null,
      created_at: this.clock.now().toISOString(),
    };
    const notification = nodeEventNotification(row);
    const insert = (k: Knex | Knex.Transaction = this.store.knex) => k(NODE_EVENTS).insert(codec.encode(row)).returning('id');
    // The event's row and its notification's outbox rows commit together. The change the event
    // reports is committed already (every caller records after it): when the notification cannot
    // be written, the event is recorded alone and the loss logged, and the caller goes on.
    const [inserted] = notification
      ? await keepWithNotification(this.store.knex, this.notifications(), notification, insert, (err) =>
          this.log.error({ node_id: row.node_id, kind: row.kind, err: { message: err.message } }, `the notification of a node event was not written (${notification.type}); the event is`),
        )
      : await insert();
    const id = typeof inserted === 'object' ? (inserted as { id: number }).id : inserted;
    const recorded = { ...row, id: Number(id) };
    this.bus.publish(NodeEventRecorded, recorded);
    return recorded;
  }

  /**
   * Events oldest first. `nodeId`: the node's events, and those recorded against its address or
   * hostname before the machine first made contact (joined, or its first heartbeat changed its
   * status): set-up steps logged before it had an id. Later events at that address are other
   * machines' (a failed join from behind the same NAT, a new machine at a reused address).
   * `identifier`: the events recorded against an address or hostname, and those of nodes at it now.
   * `limit` keeps the newest N (default 200 only when no node or identifier is named).
   */
  async list(filter: { nodeId?: string; identifier?: string; since?: string; limit?: number }): Promise<NodeEvent[]> {
    const q = this.store.knex(NODE_EVENTS);
    if (filter.nodeId) {
      const node = await this.store.knex(NODES).where({ id: filter.nodeId }).first('ip_address', 'hostname');
      const aliases = [node?.ip_address, node?.hostname].filter(Boolean) as string[];
      const contact = await this.store.knex(NODE_EVENTS).where({ node_id: filter.nodeId }).whereIn('kind', FIRST_CONTACT).min({ id: 'id' }).first();
      q.where((w) => {
        w.where('node_id', filter.nodeId!);
        if (aliases.length) {
          w.orWhere((o) => {
            o.whereNull('node_id').whereIn('identifier', aliases);
            if (contact?.id != null) o.where('id', '<', contact.id);
          });
        }
      });
    }
    if (filter.identifier) {
      const identifier = filter.identifier;
      q.where((w) =>
        w.where('identifier', identifier).orWhereIn('node_id', this.store.knex(NODES).select('id').where('ip_address', identifier).orWhere('hostname', identifier)),
      );
    }
    if (filter.since) q.where('created_at', '>', new Date(filter.since).toISOString());
    const limit = Math.min(filter.limit ?? (filter.nodeId || filter.identifier ? Number.MAX_SAFE_INTEGER : EVENT_LIMIT_DEFAULT), EVENT_LIMIT_MAX);
    const rows: Row[] = await q.orderBy('id', 'desc').limit(limit);
    return rows.reverse().map((r) => codec.decode<NodeEvent>(r));
  }

  /** Deletes the events recorded before `before`; answers how many. */
  async prune(before: Date): Promise<number> {
    return this.store.knex(NODE_EVENTS).where('created_at', '<', before.toISOString()).delete();
  }

  /** Gives a node's events to another node (a deploy that found the machine is a known node). */
  async reassign(fromNodeId: string, toNodeId: string): Promise<void> {
    await this.store.knex(NODE_EVENTS).where({ node_id: fromNodeId }).update({ node_id: toNodeId });
  }
}
