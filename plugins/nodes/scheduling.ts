import { Type } from '@sinclair/typebox';
import { conflict } from '../../core/errors.js';
import { Reply } from '../../core/http/reply.js';
import { NodeAvailabilityActors, NodeAvailabilityRecorders } from '../../core/node-availability.js';
import { SetNodeAvailability } from '../../core/orchestrator.js';
import { defineRoute, type RouteDef } from '../../core/plugin.js';
import type { NodesContext, NodesPart } from './context.js';
import type { NodeRecord } from './nodes.js';
import { NodeParams } from './schemas.js';
import { taskResultRoute } from './task-results.js';
import { NodeAvailabilityChanged } from './api.js';

/** Scheduling: cordon, drain and uncordon (hangar's availability, acted on by orchestrator plugins), and GPU sharing. */
export function scheduling(ctx: NodesContext): NodesPart {
  const { services, nodes, events } = ctx;

  const eventKind = (availability: NodeRecord['availability']) => `node_${availability === 'active' ? 'uncordoned' : availability}`;

  /** Records what holds on the node (the event says what changed, or what failed). */
  async function settle(id: string, asked: NodeRecord['availability'], reached: NodeRecord['availability'], failure?: string) {
    const node = await nodes.require(id);
    if (node.availability !== reached) {
      const updated = await nodes.change(id, { availability: reached });
      await events.record({ nodeId: id, kind: eventKind(reached), message: `availability set to ${reached}` });
      services.events.publish(NodeAvailabilityChanged, { node: updated, availability: reached });
    } else if (!failure) {
      await events.record({ nodeId: id, kind: eventKind(reached), message: `availability set to ${reached}` });
    }
    if (failure) {
      await events.record({ nodeId: id, kind: 'node_availability_failed', message: `${asked === 'active' ? 'uncordon' : asked === 'cordoned' ? 'cordon' : 'drain'} failed: ${failure}`, data: { asked, availability: reached } });
    }
  }

  // What a node's cluster holds, observed (changed with kubectl or docker, a node object made anew
  // when the node joined again): the record follows the cluster's node, with a node event.
  services.provided.contribute(NodeAvailabilityRecorders, async (observed) => {
    const updated = await nodes.changeAvailabilityIf(observed.nodeId, observed.recorded, observed.availability);
    if (!updated) return false;
    await events.record({
      nodeId: observed.nodeId,
      kind: eventKind(observed.availability),
      message: `availability set to ${observed.availability}: ${observed.reason ?? `${observed.source} has the node ${observed.availability === 'active' ? 'schedulable' : observed.availability} (changed outside hangar)`}`,
      data: { from: observed.recorded, observed: true, source: observed.source },
    });
    services.events.publish(NodeAvailabilityChanged, { node: updated, availability: observed.availability });
    return true;
  });

  /**
   * Cordon, drain or uncordon: passed on first to the cluster the node is a member of (the actors
   * core's cluster kit contributes), and recorded once the cluster has done it. A node in no cluster
   * is recorded at once. 200 with the node; 409 when the cluster refused (its reason; the node keeps
   * what holds); 202 with the call's task when the cluster is still at it after
   * clusters.availability_wait_seconds (read it at GET /v1/nodes/{id}/availability/{taskId}).
   */
  async function setAvailability(id: string, availability: NodeRecord['availability']) {
    const node = await nodes.requireLive(id);
    const change = { nodeId: id, availability, from: node.availability, settle: (reached: NodeRecord['availability'], failure?: string) => settle(id, availability, reached, failure) };
    for (const actor of services.provided.contributions(NodeAvailabilityActors)) {
      const outcome = await actor(change);
      if (!outcome) continue;
      if (outcome.status === 'failed') throw outcome.error;
      if (outcome.status === 'running') return Reply.accepted(outcome.task);
      return ctx.view(await nodes.require(id));
    }
    await settle(id, availability, availability);
    return ctx.view(await nodes.require(id));
  }

  const routes: RouteDef[] = [
    defineRoute({
      method: 'POST',
      path: '/v1/nodes/{id}/cordon',
      auth: { role: 'admin' },
      summary: 'Mark unschedulable; running workloads are left alone',
      otherStatuses: [202],
      schemas: { params: NodeParams },
      handler: (req) => setAvailability(req.params.id, 'cordoned'),
    }),
    defineRoute({
      method: 'POST',
      path: '/v1/nodes/{id}/drain',
      auth: { role: 'admin' },
      summary: 'Cordon and move workloads off: 200 once the node’s cluster has drained it, 409 when the cluster refuses (a PodDisruptionBudget), 202 with the task while it is still draining',
      otherStatuses: [202],
      schemas: { params: NodeParams },
      handler: (req) => setAvailability(req.params.id, 'drained'),
    }),
    taskResultRoute(ctx, {
      verb: 'availability',
      kind: SetNodeAvailability,
      permission: 'nodes:inspect',
      summary: 'A cordon, drain or uncordon answered 202: its status, then `error` when it failed (read once once finished)',
      answer: (task) => ({ task_id: task.id, status: task.status, ...(task.error ? { error: task.error } : {}) }),
    }),
    defineRoute({
      method: 'POST',
      path: '/v1/nodes/{id}/uncordon',
      auth: { role: 'admin' },
      summary: 'Return a cordoned or drained node to service',
      otherStatuses: [202],
      schemas: { params: NodeParams },
      async handler(req) {
        const node = await nodes.require(req.params.id);
        if (node.availability === 'active') throw conflict(`Node ${node.id} is not cordoned or drained`);
        return setAvailability(node.id, 'active');
      },
    }),
    defineRoute({
      method: 'POST',
      path: '/v1/nodes/{id}/gpu-overcommit',
      auth: { role: 'admin' },
      summary: 'Set how many workloads may share one GPU (1, 2, 4 or 8)',
      schemas: {
        params: NodeParams,
        body: Type.Object({ gpu_overcommit_factor: Type.Integer({ enum: [1, 2, 4, 8] }) }, { additionalProperties: false }),
      },
      async handler(req) {
        await nodes.require(req.params.id);
        return ctx.view(await nodes.change(req.params.id, { gpu_overcommit_factor: req.body.gpu_overcommit_factor }));
      },
    }),
  ];
  return { routes };
}
