import { defineTopic, type Topic } from '../../core/events.js';

/** The alerts plugin's contract: what other plugins import of it (importing this never loads the plugin). */

/** What `alert.firing` and `alert.resolved` carry (on the bus and the live events stream). */
export interface AlertAnnouncement {
  id: string;
  rule: string;
  resource_type: string;
  resource_id: string;
  /** The project of the resource (null: a node, a certificate, or a resource of no project). */
  project_id?: string | null;
  subject: string | null;
  severity: string;
  started_at: string | null;
  resolved_at: string | null;
  message: string;
}

export const AlertFiring = defineTopic<AlertAnnouncement>('alert.firing');
export const AlertResolved = defineTopic<AlertAnnouncement>('alert.resolved');

export const alertTopic = (state: 'firing' | 'resolved'): Topic<AlertAnnouncement> => (state === 'firing' ? AlertFiring : AlertResolved);
