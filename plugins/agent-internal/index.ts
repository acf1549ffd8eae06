import { Type } from '@sinclair/typebox';
import { forbidden, notFound } from '../../core/errors.js';
import { definePlugin, defineRoute } from '../../core/plugin.js';
import { heartbeatSchema, NodesRef, nodesOf } from '../nodes/api.js';
import { PollSpread } from './poll-spread.js';

const NodeIdParams = Type.Object({ nodeId: Type.String({ pattern: '^node-[0-9a-z]+$' }) });

/** The agents' side of the API (mutual TLS): heartbeats, long-polled tasks, results. */
export default definePlugin({
  name: 'agent-internal',
  description: 'agent heartbeats, task long-poll and results over mutual TLS',
  deps: [NodesRef],
  setup(services) {
    const { tasks, config } = services;
    const api = nodesOf(services);
    /**
     * How long a long-poll is held (seconds), as every heartbeat reply tells the agent: the fleet's
     * empty re-polls stay within tasks.max_polls_per_second (each one is a request, and its objects
     * live long enough to be garbage the young generation cannot collect), so a large fleet waits
     * longer, from tasks.poll_wait_seconds up to tasks.max_poll_wait_seconds. A task still wakes
     * the poll the moment it is queued.
     */
    const pollWaitSeconds = () => {
      const { poll_wait_seconds: floor, max_poll_wait_seconds: ceiling, max_polls_per_second: perSecond } = config.tasks;
      // The ceiling wins over a floor set above it: balancers are sized by it.
      return Math.min(ceiling, Math.max(floor, Math.floor(api.cadence.fleetSize / perSecond)));
    };
    const spread = new PollSpread();

    return {
      routes: [
        defineRoute({
          method: 'POST',
          path: '/v1/internal/heartbeat',
          auth: 'agent',
          summary: 'Agent heartbeat: facts about the machine; the reply sets the next interval',
          schemas: { body: heartbeatSchema(services.clusters.backends().flatMap((b) => (b.nodeFact ? [b.nodeFact] : []))) },
          async handler(req) {
            const done = services.metrics.heartbeatDuration.startTimer();
            const node = await api.nodes.get(req.agent!.nodeId);
            if (!node || node.removing) {
              services.metrics.heartbeats.inc({ outcome: 'refused' });
              throw notFound(`Node ${req.agent!.nodeId} is not managed any more`);
            }
            const body = req.body;
            // Capabilities first: once a heartbeat has made the node ready, what it can run is known.
            await tasks.recordCapabilities(node.id, { version: body.agent_version, kinds: body.capabilities?.kinds ?? null, backends: body.capabilities?.backends ?? [] });
            const updated = await api.heartbeat(node, req.body);
            await tasks.renewLeases(node.id, body.held_tasks ?? []);
            services.metrics.heartbeats.inc({ outcome: 'ok' });
            done();
            const pollWait = pollWaitSeconds();
            spread.tell(updated.id, pollWait * 1000);
            return { node_id: updated.id, heartbeat_interval_seconds: api.cadence.intervalSeconds, poll_wait_seconds: pollWait };
          },
        }),
        defineRoute({
          method: 'GET',
          path: '/v1/internal/tasks/{nodeId}',
          auth: 'agent',
          summary: 'Long-poll: answers the moment a task is queued for this node, or empty after the wait',
          errors: [403],
          schemas: {
            params: NodeIdParams,
            query: Type.Object({ wait: Type.Optional(Type.Integer({ minimum: 0, maximum: 120, description: 'seconds to hold the request (default and most: the poll_wait_seconds of the heartbeat reply)' })) }, { additionalProperties: false }),
          },
          async handler(req) {
            if (req.params.nodeId !== req.agent!.nodeId) throw forbidden('Insufficient permissions');
            const longest = pollWaitSeconds() * 1000;
            const asked = req.query.wait === undefined ? longest : Math.min(req.query.wait * 1000, longest);
            const waitMs = emptyAnswerAfterMs(asked, spread.firstOfItsWait(req.params.nodeId, asked));
            const leased = await tasks.poll(req.params.nodeId, waitMs, req.signal);
            return leased.map((t) => ({ task_id: t.id, kind: t.kind, payload: t.payload ?? {}, attempt: t.attempts, lease_expires_at: t.lease_expires_at }));
          },
        }),
        defineRoute({
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
        }),
        defineRoute({
          method: 'POST',
          path: '/v1/internal/tasks/{taskId}/progress',
          auth: 'agent',
          summary: 'Report a running task’s progress (a backup’s bytes done of its total); recorded only while this node holds the task',
          schemas: {
            params: Type.Object({ taskId: Type.String({ pattern: '^task-[0-9a-z]+$' }) }),
            body: Type.Object(
              {
                progress: Type.Record(Type.String({ pattern: '^[a-z_]{1,40}$' }), Type.Union([Type.Number(), Type.String({ maxLength: 200 }), Type.Null()]), {
                  maxProperties: 20,
                  additionalProperties: false,
                  description: 'plain numbers and words (never a secret): what the task has done so far',
                }),
              },
              { additionalProperties: false },
            ),
            response: Type.Object({ task_id: Type.String(), recorded: Type.Boolean({ description: 'false: the task is no longer this node’s running one' }) }),
          },
          async handler(req) {
            return { task_id: req.params.taskId, recorded: await tasks.reportProgress(req.params.taskId, req.agent!.nodeId, req.body.progress) };
          },
        }),
      ],
    };
  },
});

/**
 * When a long-poll with nothing to hand out is answered, of a wait of `askedMs`. A fleet that
 * connects together (all of it, after a control-plane restart) would re-poll together every wait,
 * thousands of requests in a few seconds while the rest of the wait is quiet, and answer its
 * heartbeats slowly in those seconds. So is a fleet told a new wait together (it grew past
 * tasks.max_polls_per_second): the polls of the old wait end spread over it, those of the new one
 * over the same stretch, and the rest of the new wait is quiet. A node's first poll of a wait (its
 * first since this process started, or the first with a new wait) is answered anywhere in the wait,
 * which spreads the fleet's polls over all of it at once; later ones anywhere in the wait's last
 * eighth, which keeps them spread.
 */
function emptyAnswerAfterMs(askedMs: number, firstOfItsWait: boolean): number {
  return firstOfItsWait ? Math.floor(Math.random() * askedMs) : askedMs - Math.floor((Math.random() * askedMs) / 8);
}
