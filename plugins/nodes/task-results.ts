import type { Permission } from '../../core/auth/permissions.js';
import { defineRoute, type RouteDef } from '../../core/plugin.js';
import type { TaskKind } from '../../core/tasks/kinds.js';
import { consumesReadOnce, type Task } from '../../core/tasks/queue.js';
import type { NodesContext } from './context.js';
import { NodeTaskParams } from './schemas.js';

/**
 * `GET /v1/nodes/{id}/<verb>/{taskId}`: a task of `kind` about the node (queued for it, or for its
 * cluster's manager: its subject is the node), read once once finished; `answer` is what the
 * caller is shown of it.
 */
export function taskResultRoute(ctx: NodesContext, route: { verb: string; kind: TaskKind; permission: Permission; summary: string; answer(task: Task): unknown }): RouteDef {
  return defineRoute({
    method: 'GET',
    path: `/v1/nodes/{id}/${route.verb}/{taskId}`,
    auth: { role: 'admin' },
    permission: route.permission,
    summary: route.summary,
    schemas: { params: NodeTaskParams },
    async handler(req) {
      await ctx.nodes.require(req.params.id);
      return route.answer(await ctx.services.tasks.take(req.params.taskId, { subject: req.params.id, kind: route.kind.name, consume: consumesReadOnce(req.principal) }));
    },
  });
}
