import { Type } from '@sinclair/typebox';
import type { Permission } from '../auth/permissions.js';
import { IdParams } from '../http/resources.js';
import { defineRoute, type RouteDef } from '../plugin.js';
import type { ClusterCalls } from './calls.js';

/** How much of a workload's log to read: the last `lines`, or everything after `since`. */
export const LogsQuery = Type.Object(
  {
    lines: Type.Optional(Type.Integer({ minimum: 1, maximum: 10_000, default: 100, description: 'the last lines' })),
    since: Type.Optional(Type.String({ format: 'date-time', description: 'only lines from this time on (RFC 3339)' })),
  },
  { additionalProperties: false },
);

const LogReadParams = Type.Object({ id: Type.String({ minLength: 1, maxLength: 100 }), taskId: Type.String({ minLength: 1, maxLength: 100 }) });

export interface WorkloadLogRoutes {
  /** The workload's own path, e.g. `/v1/services/{id}`: the routes are `…/logs` and `…/logs/{taskId}`. */
  path: string;
  /** The kind its scope resolver registers (core/auth/scope.ts). */
  kind: string;
  /** The permission a log read needs (`services:logs`…). */
  permission: Permission;
  summaries: { queue: string; read: string };
  /** Queues the read of `{id}`'s logs on its cluster (ClusterCalls.queueLogs): the 202's body. */
  queue(id: string, range: { lines?: number; since?: string }): Promise<unknown>;
  /** The id of the workload `{id}` names (a 404 when none): the subject its reads are queued under. */
  subject(id: string): Promise<string>;
  /** The clusters service (ClusterCalls.readLogs hands a finished read over once). */
  clusters: Pick<ClusterCalls, 'readLogs'>;
}

/**
 * A workload's log reads for admins (and project roles with the permission): POST …/logs queues
 * one on its cluster (202 with the task id), GET …/logs/{taskId} answers its status and, once done,
 * its lines (handed over once).
 */
export function workloadLogRoutes(r: WorkloadLogRoutes): RouteDef[] {
  const scope = { of: [{ kind: r.kind, from: 'params.id' as const }] };
  return [
    defineRoute({
      method: 'POST',
      path: `${r.path}/logs`,
      auth: { role: 'admin' },
      scope,
      permission: r.permission,
      summary: r.summaries.queue,
      status: 202,
      schemas: { params: IdParams, query: LogsQuery },
      handler: (req) => r.queue(req.params.id, req.query),
    }),
    defineRoute({
      method: 'GET',
      path: `${r.path}/logs/{taskId}`,
      auth: { role: 'admin' },
      scope,
      permission: r.permission,
      summary: r.summaries.read,
      schemas: { params: LogReadParams },
      handler: async (req) => r.clusters.readLogs(req.params.taskId, await r.subject(req.params.id), req.principal),
    }),
  ];
}
