import { Type } from '@sinclair/typebox';
import { conflict } from '../../core/errors.js';
import { recordRemover } from '../../core/events.js';
import { defineRoute, type BackgroundLoop, type RouteDef } from '../../core/plugin.js';
import type { NodesContext, NodesPart } from './context.js';
import { NodeParams, NodeView } from './schemas.js';
import { NodeRemoving } from './api.js';

/**
 * Removing a node: at once its certificates are revoked, its overlay address released and its open
 * tasks failed (it is `removing`); the record goes once no task of it is left open (a loop).
 */
export function removal(ctx: NodesContext): NodesPart {
  const { services, nodes, events, overlay, publishPeers } = ctx;
  const { ca, tasks } = services;
  const forget = recordRemover(services.events, 'node', nodes);

  const routes: RouteDef[] = [
    defineRoute({
      method: 'DELETE',
      path: '/v1/nodes/{id}',
      auth: { role: 'admin' },
      summary: 'Remove a node: revoke its certificates, release its overlay address; the record goes once its work has drained; 409 while it is a cluster member unless forced',
      status: 202,
      schemas: {
        params: NodeParams,
        query: Type.Object(
          { force: Type.Optional(Type.Boolean({ description: 'remove it even while it is a member of a swarm or cluster (one it manages is left without a manager, failed)' })) },
          { additionalProperties: false },
        ),
        response: NodeView,
      },
      async handler(req) {
        const node = await nodes.require(req.params.id);
        const memberships = await services.clusters.membershipsOf(node.id);
        if (memberships.length && !req.query.force) {
          const { cluster, manages } = memberships[0]!;
          const { noun, leaveHint } = services.clusters.naming(cluster.backend);
          throw conflict(
            `Node ${node.id} ${manages ? 'manages' : 'is a member of'} ${noun} ${cluster.name} (${cluster.id}): remove it from the ${noun} first` +
              `${leaveHint(cluster.id, node.id)}, or pass force=true` +
              `${manages ? ` to delete it anyway and leave the ${noun} without this manager` : ''}`,
            memberships.map((m) => ({ [services.clusters.naming(m.cluster.backend).field]: m.cluster.id, role: m.role })),
          );
        }
        if (memberships.length) await services.clusters.detachNode(node.id);
        await ca.revokeNode(node.id);
        await overlay.release(node.id);
        await tasks.cancelForNode(node.id, 'the node is being removed');
        const updated = await nodes.change(node.id, { removing: true, overlay_ip: null });
        await events.record({ nodeId: node.id, kind: 'node_removing', message: `node ${node.name} is being removed` });
        services.events.publish(NodeRemoving, updated);
        if (node.wg_public_key) await publishPeers();
        return ctx.view(updated);
      },
    }),
  ];

  const loops: BackgroundLoop[] = [
    {
      name: 'nodes:finish-removals',
      once: true,
      intervalMs: 5000,
      async run() {
        for (const node of await nodes.findAll({ removing: true })) {
          if ((await tasks.countOpen(node.id)) > 0) continue;
          await forget(node.id);
          await tasks.forgetCapabilities(node.id);
          await events.record({ nodeId: node.id, identifier: node.ip_address ?? node.hostname, kind: 'node_removed', message: `node ${node.id} (${node.name}) removed` });
        }
      },
    },
  ];
  return { routes, loops };
}
