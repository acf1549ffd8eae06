import { TASK_KINDS } from '../../core/tasks/kinds.js';
import { fetchLogs, stopAgent, updateAgent } from './agent.js';
import { checkUpdates, osUpdate, reboot } from './os.js';
import { applyPeers } from './overlay.js';
import type { Executor } from './types.js';

/** The executors this agent has; orchestrator executors join as their drivers arrive. */
export function builtinExecutors(): Map<string, Executor> {
  return new Map<string, Executor>([
    [TASK_KINDS.agentLogs, fetchLogs],
    [TASK_KINDS.agentStop, stopAgent],
    [TASK_KINDS.agentUpdate, updateAgent],
    [TASK_KINDS.osCheckUpdates, checkUpdates],
    [TASK_KINDS.osUpdate, osUpdate],
    [TASK_KINDS.osReboot, reboot],
    [TASK_KINDS.overlayPeers, applyPeers],
  ]);
}

export type { Executor, ExecutorContext } from './types.js';
