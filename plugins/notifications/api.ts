import type { Knex } from 'knex';
import { defineServiceRef } from '../../core/plugin.js';
import type { NewEvent } from './events.js';

/** The notifications plugin's contract: what other plugins import of it (importing this never loads the plugin). */
export interface NotificationsApi {
  /**
   * Writes the outbox rows of an event inside the producer's own transaction `trx`: the event's
   * record and its notifications commit together or not at all. For a producer that has a
   * transaction and does not also publish the event on the bus (bus topics are bridged already).
   */
  record(event: NewEvent, trx: Knex.Transaction): Promise<void>;
}

export const NotificationsRef = defineServiceRef<NotificationsApi>('notifications', 'notifications: channels, subscriptions and the outbox');
