import { Type } from '@sinclair/typebox';
import { badRequest } from '../../core/errors.js';
import { defineRoute, type RouteDef } from '../../core/plugin.js';
import { retentionLoops } from '../../core/retention.js';
import type { NodesContext, NodesPart } from './context.js';
import { EVENT_LIMIT_MAX, eventView } from './events.js';
import { NodeId } from './schemas.js';

/** Node events over HTTP (recorded by deploy tools, listed by anyone signed in), and their retention. */
export function eventRoutes(ctx: NodesContext): NodesPart {
  const { services, settings, nodes, events } = ctx;
  const { clock, log } = services;

  const routes: RouteDef[] = [
    defineRoute({
      method: 'POST',
      path: '/v1/nodes/events',
      auth: { role: 'admin' },
      summary: 'Record a node event',
      status: 201,
      schemas: {
        body: Type.Object(
          {
            node_id: Type.Optional(Type.String({ ...NodeId, description: 'a node id (node-…): nodes are not addressed by name' })),
            identifier: Type.Optional(Type.String({ maxLength: 255, description: 'an IP address or hostname, for machines without a node id yet' })),
            kind: Type.String({ pattern: '^[a-z][a-z0-9_.-]{0,63}$' }),
            message: Type.Optional(Type.String({ maxLength: 4000 })),
            data: Type.Optional(Type.Record(Type.String(), Type.Any())),
          },
          { additionalProperties: false },
        ),
      },
      async handler(req) {
        if (!req.body.node_id && !req.body.identifier) throw badRequest('Validation failed: give node_id or identifier', [{ path: 'body.node_id', message: 'or body.identifier is required' }]);
        if (req.body.node_id) await nodes.require(req.body.node_id);
        return eventView(await events.record({ nodeId: req.body.node_id, identifier: req.body.identifier, kind: req.body.kind, message: req.body.message, data: req.body.data }));
      },
    }),
    defineRoute({
      method: 'GET',
      path: '/v1/nodes/events',
      auth: 'authenticated',
      summary: 'Node events, oldest first',
      schemas: {
        query: Type.Object(
          {
            node_id: Type.Optional(Type.String({ ...NodeId, description: 'a node id (node-…): nodes are not addressed by name' })),
            identifier: Type.Optional(Type.String({ maxLength: 255 })),
            since: Type.Optional(Type.String({ format: 'date-time' })),
            limit: Type.Optional(Type.Integer({ minimum: 1, maximum: EVENT_LIMIT_MAX })),
          },
          { additionalProperties: false },
        ),
      },
      async handler(req) {
        return (await events.list({ nodeId: req.query.node_id, identifier: req.query.identifier, since: req.query.since, limit: req.query.limit })).map(eventView);
      },
    }),
  ];

  const loops = retentionLoops({
    name: 'nodes:event-retention',
    days: settings.event_retention_days,
    intervalMs: settings.event_prune_interval_seconds * 1000,
    clock,
    log,
    what: 'nodes: events',
    prune: (before) => events.prune(before),
  });
  return { routes, loops };
}
