import { defineTopic } from '../../core/events.js';

/** An audit entry as written, with the kind of resource its route acts on (core/auth/permissions.ts). */
export interface AuditRecordedEvent {
  /** The kind of the route's permission (`secrets`, `nodes`, `iam`…), or `other` for routes of no kind (the login API). */
  kind: string;
  permission: string;
  method: string;
  route: string;
  resource_id: string | null;
  principal_id: string | null;
  principal_name: string | null;
  status: number;
  request_id: string;
  created_at: string;
}

/**
 * The audit plugin's contract (importing this never loads the plugin): each audited write, once
 * its answer is known and its entry is settled, by the process that served it. Floods of anonymous
 * writes counted together (plugins/audit/flood.ts) are not published.
 */
export const AuditRecorded = defineTopic<AuditRecordedEvent>('audit.recorded');
