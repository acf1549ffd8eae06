/**
 * The Kubernetes driver's contract: what the control plane's plugins import of it. Nothing here
 * loads @kubernetes/client-node or runs the driver: the membership kinds are typed task declarations
 * the kubernetes plugin queues and the agent answers (membership-calls.ts holds them), names.ts the
 * constants.
 */
export {
  K3S_AGENT_VERSION,
  K3S_DRIVER_CALLS,
  K3S_MEMBERSHIP_KINDS,
  K3sInstallServer,
  K3sJoin,
  K3sKubeconfig,
  K3sNodes,
  K3sRemoveNode,
  K3sRevokeUserCredential,
  K3sToken,
  K3sUninstall,
  K3sUserCredential,
  K3sVolumePhase,
  KubeNode,
  type K3sMembership,
  type KubeNodeState,
} from './membership-calls.js';
export { HANGAR_NAMESPACE, K3S_API_PORT, SYSTEM_NAMESPACES, USER_VIEW_ROLE, USERS_NAMESPACE } from './names.js';
