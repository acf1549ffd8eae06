import { ORCHESTRATOR_CALLS } from '../../core/orchestrator.js';
import { isDriverCall, type DriverCall } from '../../core/tasks/kinds.js';
import { AgentLogs, AgentStop, AgentUpdate, HOST_KINDS, NetworkConfirmPath, OsCheckUpdates, OsReboot, OsUpdate, NfsClientInstall, OverlayPeers, VolumePrepare, VolumeRelease } from '../../core/tasks/host-kinds.js';
import { TaskKindRegistry } from '../../core/tasks/kinds.js';
import { fetchLogs, stopAgent, updateAgent } from './agent.js';
import { checkUpdates, osUpdate, reboot } from './os.js';
import { AGENT_DRIVERS, agentBackends, driverExecutor, loadAgentDrivers, runtimeFacts } from './orchestrator.js';
import { confirmPathExecutor } from './network.js';
import { applyPeers } from './overlay.js';
import { prepareVolume, releaseVolume } from './volumes.js';
import { ensureNfsClient } from './nfs.js';
import { backupVolume, restoreVolume } from './backups.js';
import { VolumeBackup, VolumeRestore } from '../../core/tasks/backup-kinds.js';
import type { Executor } from './types.js';

/** Every task kind this agent knows (the same definitions the control plane queues them by). */
export function agentTaskKinds(): TaskKindRegistry {
  return new TaskKindRegistry([...HOST_KINDS, ...ORCHESTRATOR_CALLS, ...Object.values(AGENT_DRIVERS).flatMap((d) => d.kinds)]);
}

/** The executors this agent has, by task kind. */
export function builtinExecutors(): Map<string, Executor> {
  return new Map<string, Executor>([
    [AgentLogs.name, fetchLogs],
    [AgentStop.name, stopAgent],
    [AgentUpdate.name, updateAgent],
    [OsCheckUpdates.name, checkUpdates],
    [OsUpdate.name, osUpdate],
    [OsReboot.name, reboot],
    [OverlayPeers.name, applyPeers],
    [NetworkConfirmPath.name, confirmPathExecutor],
    [VolumePrepare.name, prepareVolume],
    [VolumeRelease.name, releaseVolume],
    [NfsClientInstall.name, ensureNfsClient],
    [VolumeBackup.name, backupVolume],
    [VolumeRestore.name, restoreVolume],
    ...agentTaskKinds()
      .all()
      .filter(isDriverCall)
      .map((call) => [call.name, driverExecutor(call as DriverCall)] as [string, Executor]),
    ...Object.values(AGENT_DRIVERS).flatMap((backend) => (backend.executors ?? []).map(([kind, executor]) => [kind.name, executor as Executor] as [string, Executor])),
  ]);
}

export { agentBackends, loadAgentDrivers, runtimeFacts };
export type { Executor, ExecutorContext } from './types.js';
