import { Type } from '@sinclair/typebox';
import { conflict } from '../../core/errors.js';
import { Reply } from '../../core/http/reply.js';
import { ScanUnmanaged } from '../../core/orchestrator.js';
import { defineRoute, type RouteDef } from '../../core/plugin.js';
import { AgentLogs, AgentStop, AgentUpdate, OsCheckUpdates, OsReboot, OsUpdate } from '../../core/tasks/host-kinds.js';
import type { PayloadOf, TaskKind } from '../../core/tasks/kinds.js';
import { isTaskOf, resultOf, taskView } from '../../core/tasks/queue.js';
import { AgentBinariesRef, missingExecutable } from '../system/api.js';
import type { NodesContext, NodesPart } from './context.js';
import { nodeStatus, type NodeRecord } from './nodes.js';
import { NodeParams, TaskRef } from './schemas.js';
import { taskResultRoute } from './task-results.js';
import { TaskCompleted, TaskFailed } from '../../core/tasks/queue.js';

/**
 * Operations on the machine, queued as tasks for its agent: agent update and stop, OS updates and
 * reboots, log fetches and scans for unmanaged workloads (their results read once). The results
 * that change what hangar knows of a node (stopped, a reboot now required) are applied here too.
 */
export function operations(ctx: NodesContext): NodesPart {
  const { services, settings, nodes, events, changeNode, setConnection } = ctx;
  const { tasks, log } = services;

  services.events.subscribe(TaskCompleted, (task) => {
    const packages = resultOf(task, OsUpdate) ?? resultOf(task, OsCheckUpdates);
    const apply = async () => {
      const node = await nodes.get(task.node_id);
      if (!node) return;
      if (isTaskOf(task, AgentStop)) await setConnection(node, 'stopped', 'agent stopped on request');
      if (packages) {
        const facts = { ...(node.facts ?? {}), pending_updates: packages.pending_updates ?? null };
        const why = `${task.kind} reports ${packages.reboot_required ? 'that a reboot is required' : 'no reboot required'}`;
        await changeNode(node, { facts, reboot_required: Boolean(packages.reboot_required) }, why);
      }
    };
    apply().catch((err: Error) => log.error({ task_id: task.id, err: { message: err.message } }, 'applying a task result failed'));
  });
  services.events.subscribe(TaskFailed, (task) => {
    events
      .record({ nodeId: task.node_id, kind: 'task_failed', message: `${task.kind} failed: ${task.error}`, data: { task_id: task.id, kind: task.kind } })
      .catch((err: Error) => log.error({ err: { message: err.message } }, 'recording a task failure failed'));
  });

  /** Queues a task for a node the caller got from requireLive (a removing node has no certificate to fetch it with). */
  const queue = async <K extends TaskKind>(node: NodeRecord, kind: K, payload: PayloadOf<K>, readOnce = false) =>
    Reply.accepted(taskView(await tasks.enqueue({ nodeId: node.id, kind, payload, readOnce, subject: node.id })));

  /**
   * The node that runs a scan of `backend` for this node: the manager of the cluster of that backend
   * the node is a member of (only a manager or server can ask the cluster: a Kubernetes worker has
   * no credentials for its API, a swarm worker's engine refuses), else the node itself.
   */
  async function scannerFor(node: NodeRecord, backend: string): Promise<string> {
    const member = await services.clusters.members.findOne({ node_id: node.id });
    if (!member || member.status !== 'active') return node.id;
    const cluster = await services.clusters.clusters.get(member.cluster_id);
    return cluster?.backend === backend && cluster.manager_node_id ? cluster.manager_node_id : node.id;
  }

  const routes: RouteDef[] = [
    defineRoute({
      method: 'POST',
      path: '/v1/nodes/{id}/update-agent',
      auth: { role: 'admin' },
      summary: 'Queue an agent update: it downloads the new executable, checks it and restarts itself; the previous executable comes back by itself if the new one does not reach the control plane within grace_seconds',
      status: 202,
      schemas: {
        params: NodeParams,
        body: Type.Object({ grace_seconds: Type.Optional(Type.Integer({ minimum: 15, maximum: 3600, description: 'how long the new executable has to reach the control plane (default 120; at least 15: a restart by the supervisor and a first heartbeat take seconds)' })) }, { additionalProperties: false }),
        response: TaskRef,
      },
      async handler(req) {
        const node = await nodes.require(req.params.id);
        if (nodeStatus(node) !== 'ready') throw conflict(`Node ${node.id} is ${nodeStatus(node)}; update-agent needs it ready`);
        const binaries = services.provided.find(AgentBinariesRef);
        const { architecture } = node;
        if (!architecture) throw conflict(`Node ${node.id} has not reported its architecture yet; try again after its next heartbeat`);
        const binary = binaries?.describe(architecture);
        if (!binary) throw conflict(missingExecutable(architecture));
        return queue(node, AgentUpdate, { architecture, version: binary.version, sha256: binary.sha256, ...(req.body.grace_seconds ? { grace_seconds: req.body.grace_seconds } : {}) });
      },
    }),
    ...(
      [
        ['os-update', OsUpdate, 'Queue a full OS package upgrade; the node needs a reboot afterwards when the OS says so'],
        ['check-updates', OsCheckUpdates, 'Re-check pending OS package updates now instead of at the daily check'],
        ['reboot', OsReboot, 'Queue a reboot'],
        ['stop', AgentStop, 'Stop the agent; the machine and its workloads keep running and the node shows offline'],
      ] as const
    ).map(([verb, kind, summary]) => (defineRoute({
      method: 'POST' as const,
      path: `/v1/nodes/{id}/${verb}`,
      auth: { role: 'admin' },
      summary,
      status: 202,
      schemas: { params: NodeParams, response: TaskRef },
      async handler(req: { params: { id: string } }) {
        return queue(await nodes.requireLive(req.params.id), kind, {});
      },
    }))),
    defineRoute({
      method: 'POST',
      path: '/v1/nodes/{id}/logs',
      auth: { role: 'admin' },
      permission: 'nodes:logs',
      summary: 'Queue a fetch of the agent’s log: the last `lines` (default 100, max 10000), or everything after `since`',
      status: 202,
      schemas: {
        params: NodeParams,
        query: Type.Object(
          { lines: Type.Optional(Type.Integer({ minimum: 1, maximum: 10000 })), since: Type.Optional(Type.String({ format: 'date-time' })) },
          { additionalProperties: false },
        ),
        response: TaskRef,
      },
      async handler(req) {
        const node = await nodes.requireLive(req.params.id);
        const payload = req.query.since ? { since: new Date(req.query.since).toISOString() } : { lines: Math.min(req.query.lines ?? settings.log_lines_default, settings.log_lines_max) };
        return queue(node, AgentLogs, payload, true);
      },
    }),
    taskResultRoute(ctx, {
      verb: 'logs',
      kind: AgentLogs,
      permission: 'nodes:logs',
      summary: 'The log fetch: status, and the lines once completed (read once)',
      answer: taskView,
    }),
    defineRoute({
      method: 'POST',
      path: '/v1/nodes/{id}/unmanaged',
      auth: { role: 'admin' },
      permission: 'nodes:inspect',
      summary: 'Scan the node’s orchestrator for workloads hangar did not create (a member of a cluster of that backend: the cluster, through its manager)',
      status: 202,
      schemas: {
        params: NodeParams,
        query: Type.Object({ backend: Type.Union(services.clusters.backendNames().map((name) => Type.Literal(name))) }, { additionalProperties: false }),
        response: TaskRef,
      },
      async handler(req) {
        const node = await nodes.requireLive(req.params.id);
        const scanner = await scannerFor(node, req.query.backend);
        return Reply.accepted(taskView(await tasks.enqueue({ nodeId: scanner, kind: ScanUnmanaged, payload: { backend: req.query.backend }, readOnce: true, subject: node.id })));
      },
    }),
    taskResultRoute(ctx, {
      verb: 'unmanaged',
      kind: ScanUnmanaged,
      permission: 'nodes:inspect',
      summary: 'The scan: status, then `resources` when completed or `error` when failed (read once)',
      answer(task) {
        const result = resultOf(task, ScanUnmanaged);
        return { task_id: task.id, status: task.status, ...(result ? { resources: result.resources } : {}), ...(task.error ? { error: task.error } : {}) };
      },
    }),
  ];
  return { routes };
}
