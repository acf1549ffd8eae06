import { Type } from '@sinclair/typebox';
import { forbidden, notFound } from '../../core/errors.js';
import { definePlugin } from '../../core/plugin.js';
import { NodesRef, nodesOf } from '../nodes/index.js';
import { Heartbeat } from '../nodes/schemas.js';

const NodeIdParams = Type.Object({ nodeId: Type.String({ pattern: '^node-[0-9a-z]+$' }) });

/** The agents' side of the API (mutual TLS): heartbeats, long-polled tasks, results. */
export default definePlugin({
  name: 'agent-internal',
  description: 'agent heartbeats, task long-poll and results over mutual TLS',
  deps: [NodesRef],
  setup(services) {
    const { tasks, config } = services;
    const api = nodesOf(services);
    const pollWaitMs = config.tasks.poll_wait_seconds * 1000;
    /** Nodes that have long-polled this process since it started. */
    const polledSinceStart = new Set<string>();

    return {
      routes: [
        {
          method: 'POST',
          path: '/v1/internal/heartbeat',
          auth: 'agent',
          summary: 'Agent heartbeat: facts about the machine; the reply sets the next interval',
          schemas: { body: Heartbeat },
          async handler(req) {
            const done = services.metrics.heartbeatDuration.startTimer();
            const node = await api.nodes.get(req.agent!.nodeId);
            if (!node || node.removing) {
              services.metrics.heartbeats.inc({ outcome: 'refused' });
              throw notFound(`Node ${req.agent!.nodeId} is not managed any more`);
            }
            const body = req.body as { agent_version: string; held_tasks?: string[]; capabilities?: { kinds: string[]; backends: string[] } };
            // Capabilities first: once a heartbeat has made the node ready, what it can run is known.
            await tasks.recordCapabilities(node.id, { version: body.agent_version, kinds: body.capabilities?.kinds ?? null, backends: body.capabilities?.backends ?? [] });
            const updated = await api.heartbeat(node, req.body);
            await tasks.renewLeases(node.id, body.held_tasks ?? []);
            services.metrics.heartbeats.inc({ outcome: 'ok' });
            done();
            return {
              node_id: updated.id,
              heartbeat_interval_seconds: api.cadence.intervalSeconds,
              poll_wait_seconds: config.tasks.poll_wait_seconds,
            };
          },
        },
        {
          method: 'GET',
          path: '/v1/internal/tasks/{nodeId}',
          auth: 'agent',
          summary: 'Long-poll: answers the moment a task is queued for this node, or empty after the wait',
          errors: [403],
          schemas: {
            params: NodeIdParams,
            query: Type.Object({ wait: Type.Optional(Type.Integer({ minimum: 0, maximum: 120, description: 'seconds to hold the request (default: tasks.poll_wait_seconds)' })) }, { additionalProperties: false }),
          },
          async handler(req) {
            if (req.params.nodeId !== req.agent!.nodeId) throw forbidden('Insufficient permissions');
            const asked = req.query.wait === undefined ? pollWaitMs : Math.min(req.query.wait * 1000, pollWaitMs);
            const waitMs = emptyAnswerAfterMs(asked, !polledSinceStart.has(req.params.nodeId));
            polledSinceStart.add(req.params.nodeId);
            const leased = await tasks.poll(req.params.nodeId, waitMs, req.signal);
            return leased.map((t) => ({ task_id: t.id, kind: t.kind, payload: t.payload ?? {}, attempt: t.attempts, lease_expires_at: t.lease_expires_at }));
          },
        },
        {
          method: 'POST',
          path: '/v1/internal/tasks/{taskId}/result',
          auth: 'agent',
          summary: 'Report a task’s outcome',
          // A result is checked against its kind's schema as the agent sent it: nulls are values there.
          preserveNullValues: true,
          schemas: {
            params: Type.Object({ taskId: Type.String({ pattern: '^task-[0-9a-z]+$' }) }),
            body: Type.Object(
              {
                status: Type.Union([Type.Literal('completed'), Type.Literal('failed')]),
                output: Type.Optional(Type.Any()),
                error: Type.Optional(Type.String({ maxLength: 10000 })),
              },
              { additionalProperties: false },
            ),
          },
          async handler(req) {
            const task = await tasks.report(req.params.taskId, req.agent!.nodeId, { ok: req.body.status === 'completed', output: req.body.output, error: req.body.error });
            return { task_id: task.id, status: task.status };
          },
        },
      ],
    };
  },
});

/**
 * When a long-poll with nothing to hand out is answered, of a wait of `askedMs`. A fleet that
 * connects together (all of it, after a control-plane restart) would re-poll together every wait,
 * thousands of requests in a few seconds while the rest of the wait is quiet, and answer its
 * heartbeats slowly in those seconds: a node's first poll since this process started is answered
 * anywhere in the wait, which spreads the fleet's polls over all of it at once; later ones anywhere
 * in the wait's last eighth, which keeps them spread.
 */
function emptyAnswerAfterMs(askedMs: number, firstSinceStart: boolean): number {
  return firstSinceStart ? Math.floor(Math.random() * askedMs) : askedMs - Math.floor((Math.random() * askedMs) / 8);
}
