import { KubeConfig, type KubernetesObject, type User } from '@kubernetes/client-node';
import { apply, attempt, createContext, failure, isNotFound, KubeDriverError, type KubeContext } from './client.js';
import { PROJECT_ACCOUNT, PROJECT_LABEL } from './names.js';

/**
 * A project's namespace on a cluster (docs/tenancy.md "Manifests inside their project"): the
 * namespace, labelled as hangar's and the project's, with Pod Security admission `restricted`
 * enforced; a Role of the namespace's workloads only (no RBAC, nothing cluster-scoped, no other
 * namespace) and its RoleBinding to the user `hangar:project:<namespace>`. A non-admin's manifest is
 * applied as that user ({@link confinedTo}), so the API server itself refuses what the project may not
 * do. A user, not a ServiceAccount: there is no token of it anywhere, so no pod can mount the
 * identity hangar applies the project's manifests with and call the API server as it.
 */

/** What the project's user may do in its namespace: the kinds a project's manifest may hold (./manifest-format.ts), every verb; pods' logs. */
const RULES = [
  { apiGroups: [''], resources: ['pods', 'services', 'configmaps', 'secrets', 'persistentvolumeclaims', 'serviceaccounts', 'replicationcontrollers', 'podtemplates'] },
  { apiGroups: ['apps'], resources: ['deployments', 'statefulsets', 'daemonsets', 'replicasets'] },
  { apiGroups: ['batch'], resources: ['jobs', 'cronjobs'] },
  { apiGroups: ['networking.k8s.io'], resources: ['ingresses', 'networkpolicies'] },
  { apiGroups: ['autoscaling'], resources: ['horizontalpodautoscalers'] },
  { apiGroups: ['policy'], resources: ['poddisruptionbudgets'] },
].map((rule) => ({ ...rule, verbs: ['get', 'list', 'watch', 'create', 'update', 'patch', 'delete', 'deletecollection'] }));
const LOG_RULE = { apiGroups: [''], resources: ['pods/log'], verbs: ['get'] };

/**
 * The user a project's manifests in `namespace` are applied as (what `Impersonate-User` names): no
 * credential of it exists, only the agent's right to impersonate it; bound in that namespace only.
 */
export const projectUser = (namespace: string) => `hangar:project:${namespace}`;

/**
 * Makes (or brings up to date) a project's namespace and its Role and RoleBinding, with the agent's
 * own credentials, by server-side apply (forced: these are hangar's). The ServiceAccount
 * `hangar-project` a namespace made before got (whose token a pod could mount) is deleted.
 */
export async function ensureProjectNamespace(ctx: KubeContext, namespace: string, project: { id: string; name: string }): Promise<void> {
  const managed = { 'app.kubernetes.io/managed-by': 'hangar', [PROJECT_LABEL]: project.id };
  const objects: KubernetesObject[] = [
    {
      apiVersion: 'v1',
      kind: 'Namespace',
      metadata: {
        name: namespace,
        labels: { ...managed, 'pod-security.kubernetes.io/enforce': 'restricted', 'pod-security.kubernetes.io/enforce-version': 'latest', 'pod-security.kubernetes.io/warn': 'restricted' },
        annotations: { 'io.hangar.project-name': project.name },
      },
    },
    { apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'Role', metadata: { name: PROJECT_ACCOUNT, namespace, labels: managed }, rules: [...RULES, LOG_RULE] } as KubernetesObject,
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'RoleBinding',
      metadata: { name: PROJECT_ACCOUNT, namespace, labels: managed },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: PROJECT_ACCOUNT },
      subjects: [{ apiGroup: 'rbac.authorization.k8s.io', kind: 'User', name: projectUser(namespace) }],
    } as KubernetesObject,
  ];
  for (const object of objects) await attempt(`making the namespace ${namespace} of project ${project.name}: applying ${object.kind} ${object.metadata!.name}`, () => apply(ctx, object, { force: true }));
  try {
    await ctx.core.deleteNamespacedServiceAccount({ name: PROJECT_ACCOUNT, namespace });
  } catch (err) {
    if (!isNotFound(err)) throw failure(`making the namespace ${namespace} of project ${project.name}: deleting the ServiceAccount ${PROJECT_ACCOUNT} of before`, err);
  }
}

/**
 * The context of `ctx`'s cluster acting as the project's user of `namespace`: every request carries
 * `Impersonate-User: hangar:project:<namespace>` (the agent's credentials may impersonate; the API
 * server then authorizes that user, with the group system:authenticated only), and the namespace is
 * the context's.
 */
export function confinedTo(ctx: KubeContext, namespace: string): KubeContext {
  const source = ctx.kubeConfig;
  const user = source.getCurrentUser();
  const context = source.getContextObject(source.getCurrentContext());
  if (!user || !context) throw new KubeDriverError('the kubeconfig has no current user to act as a project with', 500);
  const impersonating: User = { ...user, impersonateUser: projectUser(namespace) };
  const kubeConfig = new KubeConfig();
  kubeConfig.loadFromOptions({
    clusters: source.clusters,
    users: [...source.users.filter((u) => u.name !== user.name), impersonating],
    contexts: source.contexts,
    currentContext: context.name,
  });
  return createContext(kubeConfig, namespace);
}
