import { setTimeout as sleep } from 'node:timers/promises';
import type { WorkloadState } from '../orchestrator.js';

/** How often, and how long at most, a workload scaled to zero is waited for until it runs no container. */
const POLL_MS = 500;
const SETTLE_MS = 120_000;

/** The states of a task whose container no longer runs. */
const TASK_ENDED: ReadonlySet<string> = new Set(['complete', 'shutdown', 'failed', 'rejected', 'orphaned', 'remove', 'succeeded']);

/**
 * Whether a workload still runs a container: a running task asked to run, or a task told to shut
 * down that has not yet (it may run out its grace period, and a scale up takes it back).
 */
export const runsContainers = (w: WorkloadState) => w.running > 0 || w.tasks.some((task) => !TASK_ENDED.has(task.state));

/**
 * Reads the workloads (`read`) until none of those scaled to zero (`zero`) runs a container
 * (a restore must not write under a live process): answers the last read. Throws after two
 * minutes naming those still running, or when `signal` aborts.
 */
export async function untilScaledDown(read: () => Promise<WorkloadState[]>, zero: (w: WorkloadState) => boolean, signal: AbortSignal): Promise<WorkloadState[]> {
  for (let waited = 0; ; waited += POLL_MS) {
    const workloads = await read();
    const running = workloads.filter((w) => zero(w) && runsContainers(w)).map((w) => w.component ?? w.name);
    if (!running.length) return workloads;
    if (waited >= SETTLE_MS) throw new Error(`${running.join(', ')} still ran containers ${SETTLE_MS / 1000} s after being scaled to 0`);
    await sleep(POLL_MS, undefined, { signal });
  }
}
