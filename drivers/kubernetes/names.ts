// What the control plane's plugins need from the Kubernetes driver without running it. Nothing here
// imports @kubernetes/client-node: a plugin importing client.ts, k3s.ts or scan.ts loads the SDK
// (6 MB of code) into every control plane at start.

import { createHash } from 'node:crypto';

/** The port k3s's API server listens on. */
export const K3S_API_PORT = 6443;

/** The namespace hangar applies services' manifests (and its workloads, secrets, configs and volume claims) into. */
export const SERVICES_NAMESPACE = 'default';

/** A project's namespaces begin with this: `hangar-project-<project name>` (docs/tenancy.md). */
export const PROJECT_NAMESPACE_PREFIX = 'hangar-project-';

/**
 * The namespace a project's manifest services go in on a cluster: `hangar-project-<project name>`;
 * a name too long for a DNS label (63) is cut and followed by 8 hex digits of its SHA-256, so two
 * long names never share one. The service keeps the namespace it was made in (a renamed project's
 * services stay where they are).
 */
export function projectNamespace(projectName: string): string {
  const whole = `${PROJECT_NAMESPACE_PREFIX}${projectName}`;
  if (whole.length <= 63) return whole;
  const hash = createHash('sha256').update(projectName).digest('hex').slice(0, 8);
  return `${whole.slice(0, 63 - 9).replace(/-+$/, '')}-${hash}`;
}

/**
 * In each project namespace: the Role and RoleBinding that limit the project's user
 * (`hangar:project:<namespace>`, drivers/kubernetes/tenancy.ts) to the namespace's workloads. A
 * non-admin's manifest is applied as that user (impersonation), so the API server refuses what the
 * project may not do. No ServiceAccount of that name is kept (a pod could mount its token).
 */
export const PROJECT_ACCOUNT = 'hangar-project';
/** On a project namespace: the project's id (and `app.kubernetes.io/managed-by: hangar`). */
export const PROJECT_LABEL = 'io.hangar.project';

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
