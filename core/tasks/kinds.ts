/** Task kinds the control plane queues and agents execute; one name each, shared by both sides. */
export const TASK_KINDS = {
  agentLogs: 'agent.logs',
  agentStop: 'agent.stop',
  agentUpdate: 'agent.update',
  osUpdate: 'os.update',
  osCheckUpdates: 'os.check-updates',
  osReboot: 'os.reboot',
  overlayPeers: 'overlay.peers',
  nodeAvailability: 'orchestrator.availability',
  unmanagedScan: 'orchestrator.unmanaged-scan',
} as const;

export type TaskKind = (typeof TASK_KINDS)[keyof typeof TASK_KINDS];
