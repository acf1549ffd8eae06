import { Type } from '@sinclair/typebox';
import { badRequest, conflict, notFound } from '../../core/errors.js';
import { Reply } from '../../core/http/reply.js';
import { newId } from '../../core/ids.js';
import { defineRoute, type RouteDef } from '../../core/plugin.js';
import type { NodesContext, NodesPart } from './context.js';
import type { NodeStatus } from './nodes.js';
import { InterfaceName, IpAddress, NodeName, NodeParams, NodeView } from './schemas.js';

const STATUSES: NodeStatus[] = ['pending', 'ready', 'offline', 'needs_reboot', 'cordoned', 'drained', 'removing'];

/** Node records: created ahead of an agent, listed (by status too), read, renamed, re-addressed. */
export function records(ctx: NodesContext): NodesPart {
  const { services, nodes, events, now, publishPeers } = ctx;
  const { ca } = services;

  const routes: RouteDef[] = [
    defineRoute({
      method: 'POST',
      path: '/v1/nodes',
      auth: { role: 'admin' },
      summary: 'Create a node record ahead of its agent (bind a join token to it, or deploy to it)',
      status: 201,
      schemas: {
        body: Type.Object(
          { name: NodeName, ip_address: Type.Optional(IpAddress), interface: Type.Optional(InterfaceName), is_control_plane: Type.Optional(Type.Boolean()) },
          { additionalProperties: false },
        ),
        response: NodeView,
      },
      async handler(req) {
        if (req.body.is_control_plane && (await nodes.findOne({ is_control_plane: true }))) throw conflict('There is already a control-plane node');
        const node = await nodes.insert({
          id: newId('node'),
          name: req.body.name,
          ip_address: req.body.ip_address ?? null,
          interface: req.body.interface ?? null,
          is_control_plane: req.body.is_control_plane ?? false,
          connection: 'pending',
          availability: 'active',
          created_at: now(),
          updated_at: now(),
        });
        await events.record({ nodeId: node.id, kind: 'node_created', message: `node ${node.name} created` });
        return ctx.view(node);
      },
    }),
    defineRoute({
      method: 'GET',
      path: '/v1/nodes',
      auth: 'authenticated',
      summary: 'List nodes',
      schemas: {
        query: Type.Object(
          {
            status: Type.Optional(Type.Array(Type.String({ enum: STATUSES }))),
            limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000 })),
            cursor: Type.Optional(Type.String()),
          },
          { additionalProperties: false },
        ),
        response: Type.Array(NodeView),
      },
      async handler(req) {
        const wanted = req.query.status as NodeStatus[] | undefined;
        const paging = { limit: req.query.limit, cursor: req.query.cursor };
        return Reply.page(await (wanted?.length ? nodes.pageByStatus(wanted, paging) : nodes.page(paging)), ctx.view);
      },
    }),
    defineRoute({
      method: 'GET',
      path: '/v1/nodes/{id}',
      auth: 'authenticated',
      summary: 'Get a node',
      schemas: { params: NodeParams, response: NodeView },
      handler: async (req) => ctx.view(await nodes.require(req.params.id)),
    }),
    defineRoute({
      method: 'PATCH',
      path: '/v1/nodes/{id}',
      auth: { role: 'admin' },
      summary: 'Rename the node’s display label (never the machine, swarm or Kubernetes)',
      schemas: { params: NodeParams, body: Type.Object({ name: NodeName }, { additionalProperties: false }), response: NodeView },
      async handler(req) {
        // One statement: the row as renamed, or none when there is no such node.
        const renamed = await nodes.update(req.params.id, { name: req.body.name, updated_at: now() });
        if (!renamed) throw notFound(`No node ${req.params.id}`);
        return ctx.view(renamed);
      },
    }),
    defineRoute({
      method: 'POST',
      path: '/v1/nodes/{id}/ip',
      auth: { role: 'admin' },
      summary: 'Change the node’s address or pinned interface; for the control-plane node optionally reissue the API certificate',
      schemas: {
        params: NodeParams,
        body: Type.Object(
          { ip_address: Type.Optional(IpAddress), interface: Type.Optional(InterfaceName), regenerate_cert: Type.Optional(Type.Boolean()) },
          { additionalProperties: false },
        ),
      },
      async handler(req) {
        const node = await nodes.require(req.params.id);
        const { ip_address, interface: iface, regenerate_cert } = req.body;
        if (!ip_address && !iface) {
          throw badRequest('Validation failed: give ip_address, interface or both', [{ path: 'body.ip_address', message: 'or body.interface is required' }]);
        }
        if (regenerate_cert && !node.is_control_plane) throw badRequest('regenerate_cert is accepted only for the control-plane node');
        const updated = await nodes.change(node.id, { ...(ip_address ? { ip_address } : {}), ...(iface ? { interface: iface } : {}) });
        await events.record({ nodeId: node.id, kind: 'node_address_changed', message: `address ${node.ip_address ?? '-'} → ${updated.ip_address ?? '-'}, interface ${updated.interface ?? '-'}` });
        const body: Record<string, unknown> = ctx.view(updated);
        if (regenerate_cert) {
          try {
            const { added_sans } = await ca.reissueServerCertificate([updated.ip_address!].filter(Boolean));
            body.certificate = { reissued: true, added_sans };
          } catch (err) {
            body.certificate = { reissued: false, added_sans: [], error: (err as Error).message };
          }
        }
        if (ip_address && node.wg_public_key) await publishPeers();
        return body;
      },
    }),
  ];
  return { routes };
}
