import { TASK_KINDS } from '../../core/tasks/kinds.js';
import { fetchLogs, stopAgent, updateAgent } from './agent.js';
import { checkUpdates, osUpdate, reboot } from './os.js';
import { orchestratorCall, unmanagedScan } from './orchestrator.js';
import { applyPeers } from './overlay.js';
import { prepareVolume, releaseVolume } from './volumes.js';
import type { Executor } from './types.js';

/** The executors this agent has. */
export function builtinExecutors(): Map<string, Executor> {
  return new Map<string, Executor>([
    [TASK_KINDS.agentLogs, fetchLogs],
    [TASK_KINDS.agentStop, stopAgent],
    [TASK_KINDS.agentUpdate, updateAgent],
    [TASK_KINDS.osCheckUpdates, checkUpdates],
    [TASK_KINDS.osUpdate, osUpdate],
    [TASK_KINDS.osReboot, reboot],
    [TASK_KINDS.overlayPeers, applyPeers],
    [TASK_KINDS.orchestratorCall, orchestratorCall],
    [TASK_KINDS.unmanagedScan, unmanagedScan],
    [TASK_KINDS.volumePrepare, prepareVolume],
    [TASK_KINDS.volumeRelease, releaseVolume],
  ]);
}

export type { Executor, ExecutorContext } from './types.js';
