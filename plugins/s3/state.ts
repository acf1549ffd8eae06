import { latestTask, type WorkloadState } from '../../core/orchestrator.js';

/** The store's state from what its cluster reports: running with a task up, failed with the last task's error. */
export function observedState(w: WorkloadState): { status: 'running' | 'failed' | null; error: string | null } {
  if (w.running >= 1) return { status: 'running', error: null };
  const latest = latestTask(w.tasks);
  if (latest && (latest.error || latest.state === 'failed' || latest.state === 'rejected')) {
    return { status: 'failed', error: latest.error ?? latest.message ?? `its task is ${latest.state}` };
  }
  return { status: null, error: null };
}
