import { ORCHESTRATOR_CALLS } from '../../core/orchestrator.js';
import { isDriverCall } from '../../core/tasks/kinds.js';
import { AgentLogs, AgentStop, AgentUpdate, HOST_KINDS, NetworkConfirmPath, OsCheckUpdates, OsReboot, OsUpdate, NfsClientInstall, OverlayPeers, VolumePrepare, VolumeRelease } from '../../core/tasks/host-kinds.js';
import { TaskKindRegistry } from '../../core/tasks/kinds.js';
import { fetchLogs, stopAgent, updateAgent } from './agent.js';
import { checkUpdates, osUpdate, reboot } from './os.js';
import { AGENT_DRIVERS, agentBackends, driverExecutor, loadAgentDrivers, runtimeFacts } from './orchestrator.js';
import { confirmPathExecutor } from './network.js';
import { applyPeers } from './overlay.js';
import { prepareVolume, releaseVolume } from './volumes.js';
import { ensureNfsClient } from './nfs.js';
import { backupVolume, checkBackupFolder, restoreVolume } from './backups.js';
import { BackupFolderCheck, VolumeBackup, VolumeRestore } from '../../core/tasks/backup-kinds.js';
import { executorFor, type Executor, type ExecutorEntry } from './types.js';

/** Every task kind this agent knows (the same definitions the control plane queues them by). */
export function agentTaskKinds(): TaskKindRegistry {
  return new TaskKindRegistry([...HOST_KINDS, ...ORCHESTRATOR_CALLS, ...Object.values(AGENT_DRIVERS).flatMap((d) => d.kinds)]);
}

/** The executors this agent has, by task kind (each typed by its kind: {@link executorFor}). */
export function builtinExecutors(): Map<string, Executor> {
  const entries: ExecutorEntry[] = [
    executorFor(AgentLogs, fetchLogs),
    executorFor(AgentStop, stopAgent),
    executorFor(AgentUpdate, updateAgent),
    executorFor(OsCheckUpdates, checkUpdates),
    executorFor(OsUpdate, osUpdate),
    executorFor(OsReboot, reboot),
    executorFor(OverlayPeers, applyPeers),
    executorFor(NetworkConfirmPath, confirmPathExecutor),
    executorFor(VolumePrepare, prepareVolume),
    executorFor(VolumeRelease, releaseVolume),
    executorFor(NfsClientInstall, ensureNfsClient),
    executorFor(VolumeBackup, backupVolume),
    executorFor(VolumeRestore, restoreVolume),
    executorFor(BackupFolderCheck, checkBackupFolder),
    ...agentTaskKinds()
      .all()
      .filter(isDriverCall)
      .map((call) => [call, driverExecutor(call)] as const),
    ...Object.values(AGENT_DRIVERS).flatMap((backend) => backend.executors ?? []),
  ];
  return new Map(entries.map(([kind, executor]) => [kind.name, executor]));
}

export { agentBackends, loadAgentDrivers, runtimeFacts };
export type { Executor, ExecutorContext } from './types.js';
