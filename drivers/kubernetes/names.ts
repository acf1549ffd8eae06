// What the control plane's plugins need from the Kubernetes driver without running it. Nothing here
// imports @kubernetes/client-node: a plugin importing client.ts, k3s.ts or scan.ts loads the SDK
// (6 MB of code) into every control plane at start.

/** The port k3s's API server listens on. */
export const K3S_API_PORT = 6443;

/** The namespace hangar applies services' manifests (and its workloads, secrets, configs and volume claims) into. */
export const SERVICES_NAMESPACE = 'default';

/** Namespaces the cluster's own parts live in, never scanned. */
export const SYSTEM_NAMESPACES = ['kube-system', 'kube-public', 'kube-node-lease'];
/** The namespace of hangar's own cluster parts (its ingress controller), never scanned. */
export const HANGAR_NAMESPACE = 'hangar-system';
/** The namespace of the ServiceAccounts that stand for hangar users (their kubeconfigs' credentials). */
export const USERS_NAMESPACE = 'hangar-users';

/**
 * The ClusterRole hangar binds a non-admin user's ServiceAccount to (drivers/kubernetes/credentials.ts
 * creates and updates it before binding): reads of workloads' shapes — no logs, exec, ConfigMaps or
 * Secrets, which hangar's own API keeps from non-admins.
 */
export const USER_VIEW_ROLE = 'hangar-user-view';

/** The ServiceAccount (and ClusterRoleBinding) of a hangar user on a cluster: a DNS label. */
export function userAccountName(userId: string): string {
  const slug = userId.toLowerCase().replace(/[^a-z0-9-]+/g, '-').replace(/^-+|-+$/g, '');
  return `hangar-${slug}`.slice(0, 63).replace(/-+$/, '');
}
