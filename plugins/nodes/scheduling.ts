import { Type } from '@sinclair/typebox';
import { conflict } from '../../core/errors.js';
import type { RouteDef } from '../../core/plugin.js';
import type { NodesContext, NodesPart } from './context.js';
import type { NodeRecord } from './nodes.js';
import { NodeParams } from './schemas.js';

/** Scheduling: cordon, drain and uncordon (hangar's availability, acted on by orchestrator plugins), and GPU sharing. */
export function scheduling(ctx: NodesContext): NodesPart {
  const { services, nodes, events } = ctx;

  async function setAvailability(id: string, availability: NodeRecord['availability']) {
    await nodes.requireLive(id);
    const updated = await nodes.change(id, { availability });
    await events.record({ nodeId: id, kind: `node_${availability === 'active' ? 'uncordoned' : availability}`, message: `availability set to ${availability}` });
    // Orchestrator plugins (swarm, kubernetes) act on this for their members.
    services.events.publish('node.availability', { node: updated, availability });
    return ctx.view(updated);
  }

  const routes: RouteDef[] = [
    {
      method: 'POST',
      path: '/v1/nodes/{id}/cordon',
      auth: { role: 'admin' },
      summary: 'Mark unschedulable; running workloads are left alone',
      schemas: { params: NodeParams },
      handler: (req) => setAvailability(req.params.id, 'cordoned'),
    },
    {
      method: 'POST',
      path: '/v1/nodes/{id}/drain',
      auth: { role: 'admin' },
      summary: 'Cordon and move workloads off',
      schemas: { params: NodeParams },
      handler: (req) => setAvailability(req.params.id, 'drained'),
    },
    {
      method: 'POST',
      path: '/v1/nodes/{id}/uncordon',
      auth: { role: 'admin' },
      summary: 'Return a cordoned or drained node to service',
      schemas: { params: NodeParams },
      async handler(req) {
        const node = await nodes.require(req.params.id);
        if (node.availability === 'active') throw conflict(`Node ${node.id} is not cordoned or drained`);
        return setAvailability(node.id, 'active');
      },
    },
    {
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
    },
  ];
  return { routes };
}
