import { readFileSync } from 'node:fs';
import { CoreV1Api, RbacAuthorizationV1Api, type V1ClusterRole, type V1ClusterRoleBinding, type V1PolicyRule } from '@kubernetes/client-node';
import { stringify } from 'yaml';
import { apply, attempt, failure, isConflict, isNotFound, KubeDriverError, readOrNull, type KubeContext } from './client.js';
import { USER_VIEW_ROLE, USERS_NAMESPACE, userAccountName } from './names.js';

/**
 * Per-user credentials on a cluster: a ServiceAccount for each hangar user in the namespace
 * hangar-users, bound (a ClusterRoleBinding of the same name) to the ClusterRole the control plane
 * chose from the user's hangar role, and short-lived tokens of it from the TokenRequest API. Deleting
 * the ServiceAccount revokes every token of it at once (the API server checks that the account still
 * exists, with its UID, on each request).
 *
 * A non-admin's ClusterRole is hangar's own `hangar-user-view` (USER_VIEW_ROLE), applied before each
 * binding to it, not Kubernetes' `view`: `view` also reads pods' logs and ConfigMaps in every
 * namespace, which hangar's API keeps from non-admins (`instances:logs`, configs' values).
 */

const MANAGED = { 'app.kubernetes.io/managed-by': 'hangar' };
/** On a user's ServiceAccount and binding: the hangar user it stands for. */
export const USER_LABEL = 'io.hangar.user';

export interface UserCredential {
  kubeconfig: string;
  expires_at: string;
  service_account: string;
  namespace: string;
}

/** The cluster's CA (base64 PEM) as the driver's own kubeconfig holds it. */
function clusterCa(ctx: KubeContext): string {
  const cluster = ctx.kubeConfig.getCurrentCluster();
  if (cluster?.caData) return cluster.caData;
  if (cluster?.caFile) return readFileSync(cluster.caFile).toString('base64');
  throw new KubeDriverError('the cluster’s kubeconfig on this node names no certificate authority: a kubeconfig for a user would not verify the API server', 409);
}

const READ = ['get', 'list', 'watch'];
/**
 * What `hangar-user-view` allows: reading the shapes of workloads, cluster-wide. Not Secrets,
 * ConfigMaps, pods' logs, exec, attach, port-forward or ServiceAccount tokens (subresources are
 * named apart in RBAC: `pods` does not grant `pods/log`).
 */
export const USER_VIEW_RULES: V1PolicyRule[] = [
  { apiGroups: [''], resources: ['pods', 'services', 'endpoints', 'namespaces', 'events', 'persistentvolumeclaims', 'replicationcontrollers'], verbs: READ },
  { apiGroups: ['apps'], resources: ['deployments', 'replicasets', 'statefulsets', 'daemonsets'], verbs: READ },
  { apiGroups: ['batch'], resources: ['jobs', 'cronjobs'], verbs: READ },
  { apiGroups: ['networking.k8s.io'], resources: ['ingresses'], verbs: READ },
  { apiGroups: ['policy'], resources: ['poddisruptionbudgets'], verbs: READ },
];

/**
 * Creates `hangar-user-view`, or sets its rules back to USER_VIEW_RULES (server-side apply, forced:
 * hangar owns its rules, so an edit by hand or an older release's rules are replaced). Idempotent.
 */
async function applyUserViewRole(ctx: KubeContext): Promise<void> {
  const role: V1ClusterRole = {
    apiVersion: 'rbac.authorization.k8s.io/v1',
    kind: 'ClusterRole',
    metadata: { name: USER_VIEW_ROLE, labels: MANAGED },
    rules: USER_VIEW_RULES,
  };
  await attempt(`applying the cluster role ${USER_VIEW_ROLE}`, () => apply(ctx, role, { force: true }));
}

const labelValue = (userId: string) => userId.toLowerCase().replace(/[^a-z0-9._-]/g, '-').slice(0, 63).replace(/[^a-z0-9]+$/, '');

/** Creates an object; one that exists already (made by a concurrent request) is as good. */
async function created(what: string, call: () => Promise<unknown>): Promise<void> {
  try {
    await call();
  } catch (err) {
    if (!isConflict(err)) throw failure(what, err);
  }
}

/**
 * A kubeconfig for a hangar user: its ServiceAccount (made when missing) bound to `cluster_role`,
 * and a token of it valid for `ttl_seconds`. A binding to another role (the user's role changed
 * and the revocation did not reach the cluster) is replaced together with the account, so that no
 * token of the old role survives.
 */
export async function issueUserCredential(
  ctx: KubeContext,
  input: { user_id: string; username: string; cluster_role: string; ttl_seconds: number; server_url: string },
): Promise<UserCredential> {
  const core = ctx.kubeConfig.makeApiClient(CoreV1Api);
  const rbac = ctx.kubeConfig.makeApiClient(RbacAuthorizationV1Api);
  const name = userAccountName(input.user_id);
  const labels = { ...MANAGED, [USER_LABEL]: labelValue(input.user_id) };
  const ca = clusterCa(ctx);
  await created(`creating the namespace ${USERS_NAMESPACE}`, () => core.createNamespace({ body: { metadata: { name: USERS_NAMESPACE, labels: MANAGED } } }));

  // A binding to another role: the user's role changed and the revocation did not reach the cluster.
  let binding: V1ClusterRoleBinding | null = await readOrNull(`reading the cluster role binding ${name}`, () => rbac.readClusterRoleBinding({ name }));
  if (binding && binding.roleRef.name !== input.cluster_role) {
    await revokeUserCredential(ctx, { user_id: input.user_id });
    binding = null;
  }
  const account = await readOrNull(`reading the service account ${USERS_NAMESPACE}/${name}`, () => core.readNamespacedServiceAccount({ name, namespace: USERS_NAMESPACE }));
  if (!account) {
    await created(`creating the service account ${USERS_NAMESPACE}/${name}`, () =>
      core.createNamespacedServiceAccount({
        namespace: USERS_NAMESPACE,
        body: { metadata: { name, labels, annotations: { 'io.hangar.username': input.username } }, automountServiceAccountToken: false },
      }),
    );
  }
  if (input.cluster_role === USER_VIEW_ROLE) await applyUserViewRole(ctx);
  if (!binding) {
    const body: V1ClusterRoleBinding = {
      metadata: { name, labels },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: input.cluster_role },
      subjects: [{ kind: 'ServiceAccount', name, namespace: USERS_NAMESPACE }],
    };
    await created(`binding ${USERS_NAMESPACE}/${name} to the cluster role ${input.cluster_role}`, () => rbac.createClusterRoleBinding({ body }));
  }
  const request = await attempt(`requesting a token of ${USERS_NAMESPACE}/${name}`, () =>
    core.createNamespacedServiceAccountToken({ name, namespace: USERS_NAMESPACE, body: { spec: { audiences: [], expirationSeconds: input.ttl_seconds } } }),
  );
  const token = request.status?.token;
  if (!token) throw new KubeDriverError(`the API server answered the token request of ${USERS_NAMESPACE}/${name} without a token`, 409);
  const expiresAt = request.status?.expirationTimestamp ? new Date(request.status.expirationTimestamp).toISOString() : new Date(Date.now() + input.ttl_seconds * 1000).toISOString();
  const user = `hangar-${input.username}`;
  const kubeconfig = stringify({
    apiVersion: 'v1',
    kind: 'Config',
    clusters: [{ name: 'hangar', cluster: { server: input.server_url, 'certificate-authority-data': ca } }],
    users: [{ name: user, user: { token } }],
    contexts: [{ name: 'hangar', context: { cluster: 'hangar', user, namespace: 'default' } }],
    'current-context': 'hangar',
  });
  return { kubeconfig, expires_at: expiresAt, service_account: name, namespace: USERS_NAMESPACE };
}

/** Deletes a user's binding and ServiceAccount: every token of it is refused from then on. Answers whether there was one. */
export async function revokeUserCredential(ctx: KubeContext, input: { user_id: string }): Promise<{ revoked: boolean }> {
  const core = ctx.kubeConfig.makeApiClient(CoreV1Api);
  const rbac = ctx.kubeConfig.makeApiClient(RbacAuthorizationV1Api);
  const name = userAccountName(input.user_id);
  const gone = async (what: string, call: () => Promise<unknown>) => {
    try {
      await call();
      return true;
    } catch (err) {
      if (isNotFound(err)) return false;
      throw failure(what, err);
    }
  };
  const account = await gone(`deleting the service account ${USERS_NAMESPACE}/${name}`, () => core.deleteNamespacedServiceAccount({ name, namespace: USERS_NAMESPACE }));
  const binding = await gone(`deleting the cluster role binding ${name}`, () => rbac.deleteClusterRoleBinding({ name }));
  return { revoked: account || binding };
}
