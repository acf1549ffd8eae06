import { conflict } from '../errors.js';
import { ExecInWorkload, InspectWorkloads } from '../orchestrator.js';
import { callPayload, type PayloadOf } from '../tasks/kinds.js';
import type { Clusters } from './service.js';
import type { WorkloadRuntime } from './workloads.js';

/** Where a command in a workload's container runs: the node running one, and the task's payload. */
export interface ExecPlacement {
  node_id: string;
  payload: PayloadOf<typeof ExecInWorkload>;
}

/** Whether the backend of a cluster runs commands in its workloads' containers (its driver has {@link ExecInWorkload}). */
export function execSupported(clusters: Clusters, backend: string): boolean {
  return clusters.findBackend(backend)?.taskKinds.includes(ExecInWorkload) ?? false;
}

/**
 * Where to run a command in a running container of a workload: its cluster's inspection names the
 * runtime's tasks of it; the first one running is on a member node, whose agent runs the command
 * against its own runtime. A 409 when its backend cannot run commands in containers (saying so),
 * when its cluster has no manager, or when nothing of it runs on a member now.
 */
export async function placeExec(clusters: Clusters, workload: WorkloadRuntime, command: string[], timeoutS: number): Promise<ExecPlacement> {
  const cluster = await clusters.require(workload.cluster_id);
  const noun = clusters.nounOf(cluster);
  if (!execSupported(clusters, cluster.backend)) {
    throw conflict(`${workload.type} ${workload.name} runs on ${noun} ${cluster.name}, where hangar does not run commands in containers yet (only on swarms)`);
  }
  const { workloads } = await clusters.callOn(cluster, InspectWorkloads, { ...(workload.names ? { names: workload.names } : {}), ...(workload.stacks ? { stacks: workload.stacks } : {}) });
  const byRuntime = await clusters.nodeIdsByRuntime(cluster.id);
  for (const w of workloads) {
    for (const task of w.tasks) {
      // Running and meant to go on running (one being stopped is not a place to run a command).
      const nodeId = task.state === 'running' && task.desired_state === 'running' && task.runtime_node_id ? byRuntime.get(task.runtime_node_id) : undefined;
      if (nodeId) return { node_id: nodeId, payload: callPayload(ExecInWorkload, cluster.backend, { names: [w.name], command, timeout_s: timeoutS }) };
    }
  }
  throw conflict(`${workload.type} ${workload.name} has no running container on ${noun} ${cluster.name} to run the command in: start it first`);
}
