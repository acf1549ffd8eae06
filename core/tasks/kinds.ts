/** Task kinds the control plane queues and agents execute; one name each, shared by both sides. */
export const TASK_KINDS = {
  agentLogs: 'agent.logs',
  agentStop: 'agent.stop',
  agentUpdate: 'agent.update',
  osUpdate: 'os.update',
  osCheckUpdates: 'os.check-updates',
  osReboot: 'os.reboot',
  overlayPeers: 'overlay.peers',
  unmanagedScan: 'orchestrator.unmanaged-scan',
  /** A method of the orchestrator driver, run by the agent against its local engine (core/orchestrator.ts). */
  orchestratorCall: 'orchestrator.call',
  /** Prepare a volume's folder (and its NFS export) on the machine that holds it. */
  volumePrepare: 'host.volume-prepare',
  /** Remove a volume's NFS export (the folder and its data stay). */
  volumeRelease: 'host.volume-release',
} as const;

export type TaskKind = (typeof TASK_KINDS)[keyof typeof TASK_KINDS];
