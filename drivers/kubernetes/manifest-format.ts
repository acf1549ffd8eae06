/**
 * The k8s backend's bundle format: Kubernetes manifests (multi-document YAML), read once here for
 * both halves of the backend — the control plane checks a manifest before anything is deployed
 * ({@link manifestFormat}), the driver applies what the same reader gives it (./manifests.ts).
 */
import { Type } from '@sinclair/typebox';
import { LineCounter, parseAllDocuments } from 'yaml';
import { refusePrivileges, type BundleFormat, type ParsedBundle } from '../../core/clusters/backend.js';
import { badRequest } from '../../core/errors.js';
import { PROJECT_NAMESPACE_PREFIX, projectNamespace, SERVICES_NAMESPACE } from './names.js';

/** A manifest document as read: a Kubernetes object (apiVersion, kind and metadata.name at least). */
export interface ManifestObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; [key: string]: unknown };
  [key: string]: unknown;
}

/** Why a manifest cannot be taken: document `document` (1-based) `what` ("is not valid YAML: …"), or no objects at all (`document` null). */
export class ManifestProblem extends Error {
  constructor(
    readonly document: number | null,
    readonly what: string,
  ) {
    super(document === null ? 'the manifest has no objects' : `document ${document} of the manifest ${what}`);
  }
}

/**
 * The objects of a manifest, each checked to be a Kubernetes object; empty documents (a trailing
 * `---`) are skipped. Throws a {@link ManifestProblem} naming the document, its line and column.
 */
export function readManifest(text: string): ManifestObject[] {
  const lines = new LineCounter();
  const documents = parseAllDocuments(text, { lineCounter: lines, prettyErrors: false, uniqueKeys: true });
  const objects: ManifestObject[] = [];
  documents.forEach((document, i) => {
    const error = document.errors[0];
    if (error) {
      const at = lines.linePos(error.pos[0]);
      throw new ManifestProblem(i + 1, `is not valid YAML: line ${at.line}, column ${at.col}: ${error.message.split('\n')[0]}`);
    }
    const value: unknown = document.toJS({ maxAliasCount: 1000 });
    if (value === null || value === undefined) return;
    if (!isMap(value) || typeof value.apiVersion !== 'string' || typeof value.kind !== 'string' || !isMap(value.metadata) || typeof value.metadata.name !== 'string') {
      throw new ManifestProblem(i + 1, 'is not a Kubernetes object (it needs apiVersion, kind and metadata.name)');
    }
    objects.push(value as ManifestObject);
  });
  if (!objects.length) throw new ManifestProblem(null, '');
  return objects;
}

const invalid = (message: string) => badRequest(`Validation failed: ${message}`, [{ path: 'body.manifest', message }]);

/**
 * A manifest checked as far as hangar can without the cluster: valid YAML (400 naming the
 * document, line and column), every document a Kubernetes object. Its parts are its Deployments
 * (replicas: 1 when the manifest leaves them out). What the API server refuses is refused at deploy
 * time, before anything is applied (the driver applies every object as a dry run first). Unless
 * the caller is an installation admin, the privilege check ({@link manifestPrivileges}) refuses
 * what reaches beyond a project's workloads: a 400 naming each object and field.
 */
export function parseManifest(text: string, installationAdmin: boolean, namespace: string = SERVICES_NAMESPACE): ParsedBundle {
  let objects: ManifestObject[];
  try {
    objects = readManifest(text);
  } catch (err) {
    if (!(err instanceof ManifestProblem)) throw err;
    throw invalid(err.document === null ? 'manifest has no objects' : `manifest document ${err.document} ${err.what}`);
  }
  if (!installationAdmin) refusePrivileges(manifestPrivileges(objects, namespace), 'manifest');
  const desired: Record<string, number | null> = {};
  for (const object of objects) {
    if (object.kind !== 'Deployment' || object.apiVersion !== 'apps/v1') continue;
    const replicas = (object.spec as { replicas?: unknown } | undefined)?.replicas;
    desired[object.metadata.name] = typeof replicas === 'number' ? replicas : 1;
  }
  return { desired, routes: [], objects: [] };
}

const FOR_ADMINS = 'is for installation admins';
/** A bundle's inventory ConfigMap is `hangar-bundle-<bundle>` (./manifests.ts). */
export const INVENTORY_PREFIX = 'hangar-bundle-';
const ARE_FOR_ADMINS = 'are for installation admins';
const RBAC_KINDS = new Set(['Role', 'RoleBinding', 'ClusterRole', 'ClusterRoleBinding']);
/** Kinds a manifest of a non-admin may hold, by API group (`` for the core group): namespaced, no RBAC, none that reaches beyond the namespace. */
const NAMESPACED_KINDS: Record<string, readonly string[]> = {
  '': ['Pod', 'Service', 'ConfigMap', 'Secret', 'PersistentVolumeClaim', 'ServiceAccount', 'ReplicationController', 'PodTemplate'],
  apps: ['Deployment', 'StatefulSet', 'DaemonSet', 'ReplicaSet'],
  batch: ['Job', 'CronJob'],
  'networking.k8s.io': ['Ingress', 'NetworkPolicy'],
  autoscaling: ['HorizontalPodAutoscaler'],
  policy: ['PodDisruptionBudget'],
};
/** Cluster-scoped kinds of Kubernetes itself (any other kind not in {@link NAMESPACED_KINDS} is refused as unknown). */
const CLUSTER_KINDS = new Set([
  'Namespace', 'Node', 'PersistentVolume', 'ClusterRole', 'ClusterRoleBinding', 'CustomResourceDefinition', 'StorageClass', 'PriorityClass', 'RuntimeClass', 'IngressClass',
  'ValidatingWebhookConfiguration', 'MutatingWebhookConfiguration', 'ValidatingAdmissionPolicy', 'ValidatingAdmissionPolicyBinding', 'MutatingAdmissionPolicy', 'MutatingAdmissionPolicyBinding',
  'APIService', 'CertificateSigningRequest', 'CSIDriver', 'CSINode', 'VolumeAttachment', 'FlowSchema', 'PriorityLevelConfiguration',
]);
/** Where a kind keeps its pod spec, as a path of keys from the object. */
const POD_SPEC: Record<string, readonly string[]> = {
  Pod: ['spec'],
  PodTemplate: ['template', 'spec'],
  CronJob: ['spec', 'jobTemplate', 'spec', 'template', 'spec'],
  ...Object.fromEntries(['Deployment', 'StatefulSet', 'DaemonSet', 'ReplicaSet', 'Job', 'ReplicationController'].map((k) => [k, ['spec', 'template', 'spec']])),
};
const isMap = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const groupOf = (apiVersion: string) => (apiVersion.includes('/') ? apiVersion.split('/')[0]! : '');

/** The problems of one pod spec (at `at`: `spec.template.spec`): the host's namespaces and paths, privileged or escalating containers, added capabilities. */
function podPrivileges(spec: Record<string, unknown>, at: string): string[] {
  const problems: string[] = [];
  const refuse = (where: string, what: string, hint = '') => problems.push(`${at}.${where}: ${what} ${FOR_ADMINS}${hint}`);
  if (spec.hostNetwork === true) refuse('hostNetwork', "the host's network");
  if (spec.hostPID === true) refuse('hostPID', "the host's processes");
  if (spec.hostIPC === true) refuse('hostIPC', "the host's IPC namespace");
  // A pod runs as its namespace's default ServiceAccount: another one's token (that of an account
  // someone bound to rights) would let the pod call the API server as it.
  for (const field of ['serviceAccountName', 'serviceAccount']) {
    if (spec[field] !== undefined && spec[field] !== 'default') refuse(field, `running as the ServiceAccount ${String(spec[field])}`, '; leave it out (the namespace\'s default account)');
  }
  (Array.isArray(spec.volumes) ? spec.volumes : []).forEach((volume: unknown, i: number) => {
    if (isMap(volume) && volume.hostPath !== undefined) refuse(`volumes[${i}].hostPath`, `a path of the host (${String(isMap(volume.hostPath) ? volume.hostPath.path : volume.hostPath)})`, '; use a PersistentVolumeClaim');
    const sources = isMap(volume) && isMap(volume.projected) && Array.isArray(volume.projected.sources) ? volume.projected.sources : [];
    sources.forEach((source: unknown, j: number) => {
      if (isMap(source) && source.serviceAccountToken !== undefined) refuse(`volumes[${i}].projected.sources[${j}].serviceAccountToken`, 'a ServiceAccount token');
    });
  });
  for (const list of ['initContainers', 'containers', 'ephemeralContainers']) {
    (Array.isArray(spec[list]) ? spec[list] : []).forEach((container: unknown, i: number) => {
      const context = isMap(container) && isMap(container.securityContext) ? container.securityContext : {};
      const where = `${list}[${i}].securityContext`;
      if (context.privileged === true) refuse(`${where}.privileged`, 'a privileged container');
      if (context.allowPrivilegeEscalation === true) refuse(`${where}.allowPrivilegeEscalation`, 'privilege escalation');
      const added = isMap(context.capabilities) && Array.isArray(context.capabilities.add) ? context.capabilities.add : [];
      if (added.length) refuse(`${where}.capabilities.add`, `adding capabilities (${added.map(String).join(', ')})`);
      if (context.procMount !== undefined && context.procMount !== 'Default') refuse(`${where}.procMount`, `an unmasked /proc (${String(context.procMount)})`);
    });
  }
  return problems;
}

/** The volume types Pod Security `restricted` allows. */
const RESTRICTED_VOLUMES = ['configMap', 'csi', 'downwardAPI', 'emptyDir', 'ephemeral', 'persistentVolumeClaim', 'projected', 'secret'];
const CONTAINER_LISTS = ['initContainers', 'containers', 'ephemeralContainers'] as const;

/**
 * What Pod Security admission `restricted` (enforced in a project's namespace) would refuse in a pod
 * spec that {@link podPrivileges} does not already name: said up front, with what to set, instead of
 * a Deployment the API server accepts and whose pods it then refuses. The API server stays the judge
 * (its version's profile).
 */
function podRestricted(spec: Record<string, unknown>, at: string, namespace: string): string[] {
  const problems: string[] = [];
  const need = (where: string, what: string) => problems.push(`${at}.${where}: ${namespace} enforces Pod Security restricted: ${what}`);
  const pod = isMap(spec.securityContext) ? spec.securityContext : {};
  const containers = CONTAINER_LISTS.flatMap((list) => (Array.isArray(spec[list]) ? spec[list] : []).map((c: unknown, i: number) => ({ where: `${list}[${i}]`, c: isMap(c) ? c : {} })));
  const contextOf = (c: Record<string, unknown>) => (isMap(c.securityContext) ? c.securityContext : {});
  if (pod.runAsNonRoot !== true && !containers.every(({ c }) => contextOf(c).runAsNonRoot === true)) need('securityContext.runAsNonRoot', 'set runAsNonRoot: true (the pod, or every container)');
  const seccomp = (context: Record<string, unknown>) => (isMap(context.seccompProfile) ? context.seccompProfile.type : undefined);
  const allowed = (type: unknown) => type === 'RuntimeDefault' || type === 'Localhost';
  if (!allowed(seccomp(pod)) && !containers.every(({ c }) => allowed(seccomp(contextOf(c))))) need('securityContext.seccompProfile', 'set seccompProfile: {type: RuntimeDefault} (the pod, or every container)');
  if (pod.runAsUser === 0) need('securityContext.runAsUser', 'not as root (0)');
  for (const { where, c } of containers) {
    const context = contextOf(c);
    if (context.allowPrivilegeEscalation !== false && context.allowPrivilegeEscalation !== true) need(`${where}.securityContext.allowPrivilegeEscalation`, 'set allowPrivilegeEscalation: false');
    const drop = isMap(context.capabilities) && Array.isArray(context.capabilities.drop) ? context.capabilities.drop : [];
    if (!drop.includes('ALL')) need(`${where}.securityContext.capabilities.drop`, 'drop ALL capabilities (capabilities: {drop: [ALL]})');
    if (context.runAsUser === 0) need(`${where}.securityContext.runAsUser`, 'not as root (0)');
    (Array.isArray(c.ports) ? c.ports : []).forEach((port: unknown, j: number) => {
      if (isMap(port) && port.hostPort) need(`${where}.ports[${j}].hostPort`, `no port of the host (${String(port.hostPort)})`);
    });
  }
  (Array.isArray(spec.volumes) ? spec.volumes : []).forEach((volume: unknown, i: number) => {
    if (!isMap(volume) || volume.hostPath !== undefined) return;
    const type = Object.keys(volume).find((key) => key !== 'name');
    if (type && !RESTRICTED_VOLUMES.includes(type)) need(`volumes[${i}].${type}`, `no ${type} volume (${RESTRICTED_VOLUMES.join(', ')} only)`);
  });
  return problems;
}

/**
 * The manifest format's privilege check (docs/tenancy.md "What a bundle may ask of the machines"):
 * every object that reaches beyond a workload of `namespace` (the service's: its project's
 * namespace, or `default` for a service made before project namespaces), each a
 * problem naming the object and its field (`Deployment default/x spec.template.spec.hostNetwork: …`,
 * `ClusterRoleBinding y: …`). Only namespaced kinds hangar knows, no RBAC, no other namespace, no
 * host paths, host namespaces, privileged or escalating containers, added capabilities, service
 * account tokens (a Secret of one, a projected one, a pod naming a ServiceAccount), external IPs, claims of a given PersistentVolume or objects named like hangar's
 * inventory of a service. The services plugin refuses such a manifest (400) from any caller but an
 * installation admin with all its power; the API server refuses most of the same to the project's
 * user it is applied as (RBAC, Pod Security admission `restricted`). Not external IPs, a claim's
 * volumeName, an inventory's name or a pod's ServiceAccount: RBAC cannot say them (the Role grants
 * Services, claims, ConfigMaps and pods whole), and no admission policy is installed, so this check
 * alone refuses them.
 */
export function manifestPrivileges(objects: readonly ManifestObject[], home: string = SERVICES_NAMESPACE): string[] {
  const problems: string[] = [];
  for (const object of objects) {
    const { kind, apiVersion } = object;
    const name = object.metadata.name;
    if (CLUSTER_KINDS.has(kind)) {
      problems.push(`${kind} ${name}: cluster-scoped objects ${ARE_FOR_ADMINS}`);
      continue;
    }
    const namespace = object.metadata.namespace ?? home;
    const label = `${kind} ${namespace}/${name}`;
    if (RBAC_KINDS.has(kind)) {
      problems.push(`${label}: RBAC objects (Role, RoleBinding, ClusterRole, ClusterRoleBinding) ${ARE_FOR_ADMINS}`);
      continue;
    }
    if (!NAMESPACED_KINDS[groupOf(apiVersion)]?.includes(kind)) {
      problems.push(`${label}: kind ${kind} of ${apiVersion} ${FOR_ADMINS} (a project's manifest holds ${Object.values(NAMESPACED_KINDS).flat().join(', ')})`);
      continue;
    }
    if (namespace !== home) {
      problems.push(`${label} metadata.namespace: namespace ${namespace} ${FOR_ADMINS} (this service's objects go in ${home}: name it or leave namespace out)`);
    }
    if (kind === 'ConfigMap' && name.startsWith(INVENTORY_PREFIX)) problems.push(`${label} metadata.name: the names ${INVENTORY_PREFIX}… are hangar's (the objects a service applied)`);
    const path = POD_SPEC[kind];
    if (path) {
      const podSpec = path.reduce<unknown>((at, key) => (isMap(at) ? at[key] : undefined), object);
      if (isMap(podSpec)) problems.push(...podPrivileges(podSpec, `${label} ${path.join('.')}`));
      // A project's namespace enforces Pod Security restricted (a service made before is in default, which does not).
      if (isMap(podSpec) && home.startsWith(PROJECT_NAMESPACE_PREFIX)) problems.push(...podRestricted(podSpec, `${label} ${path.join('.')}`, home));
    }
    if (kind === 'Secret' && object.type === 'kubernetes.io/service-account-token') problems.push(`${label} type: a service account token ${FOR_ADMINS}`);
    const spec = isMap(object.spec) ? object.spec : {};
    if (kind === 'Service' && Array.isArray(spec.externalIPs) && spec.externalIPs.length) problems.push(`${label} spec.externalIPs: external IPs ${FOR_ADMINS}`);
    if (kind === 'PersistentVolumeClaim' && spec.volumeName) problems.push(`${label} spec.volumeName: binding a given PersistentVolume (${String(spec.volumeName)}) ${FOR_ADMINS}; leave it out to get a new one`);
  }
  return problems;
}

/** Manifests: the k8s backend's services (`manifest` in requests, base64), applied server-side; the objects applied are kept. */
export const manifestFormat: BundleFormat = {
  name: 'manifest',
  field: 'manifest',
  schema: Type.String({ minLength: 1, maxLength: 1_000_000, description: 'the Kubernetes manifest (multi-document YAML), base64-encoded' }),
  describes: 'manifest on a Kubernetes cluster',
  appliedObjects: true,
  parse: (text, { installationAdmin, namespace }) => parseManifest(text, installationAdmin, namespace ?? SERVICES_NAMESPACE),
  namespaceOf: (project) => projectNamespace(project.name),
};
