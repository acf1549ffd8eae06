import type { KubernetesObject, V1ConfigMap, V1PersistentVolume, V1Secret, V1PersistentVolumeClaim, V1PodSpec } from '@kubernetes/client-node';
import { HANGAR_LABELS } from '../../core/orchestrator.js';
import { apply, attempt, checkName, failure, FIELD_MANAGER, isConflict, isNotFound, KubeDriverError, mergePatch, readOrNull, waitUntil, type KubeContext } from './client.js';

/** The key a hangar secret or config keeps its value under (a Secret's or ConfigMap's data), mounted as a file with subPath. */
export const objectKey = 'value';

/** How long staging a volume waits for its claim to be bound to its PersistentVolume. */
const BIND_WAIT_MS = 45_000;
/** How long unstaging a volume waits for its claim and PersistentVolume to be gone. */
const UNSTAGE_WAIT_MS = 60_000;
/**
 * The capacity written on a volume's PersistentVolume and claim: NFS enforces no size, but a
 * claim binds only to a volume at least as large as it asks, so both say the same.
 */
const NOMINAL_CAPACITY = '1Gi';

type ObjectKind = 'secret' | 'config';

/** The label naming the hangar object a Secret or ConfigMap holds. */
const HANGAR_OBJECT_LABEL = HANGAR_LABELS.object;

/** Whether a pod spec uses a secret, a config map or a claim of this name (volumes, projected volumes, env). */
function podSpecUses(spec: V1PodSpec | undefined, kind: ObjectKind | 'volume', name: string): boolean {
  if (!spec) return false;
  for (const volume of spec.volumes ?? []) {
    if (kind === 'secret' && volume.secret?.secretName === name) return true;
    if (kind === 'config' && volume.configMap?.name === name) return true;
    if (kind === 'volume' && volume.persistentVolumeClaim?.claimName === name) return true;
    for (const source of volume.projected?.sources ?? []) {
      if (kind === 'secret' && source.secret?.name === name) return true;
      if (kind === 'config' && source.configMap?.name === name) return true;
    }
  }
  if (kind === 'volume') return false;
  for (const container of [...spec.containers, ...(spec.initContainers ?? [])]) {
    for (const from of container.envFrom ?? []) {
      if (kind === 'secret' && from.secretRef?.name === name) return true;
      if (kind === 'config' && from.configMapRef?.name === name) return true;
    }
    for (const env of container.env ?? []) {
      if (kind === 'secret' && env.valueFrom?.secretKeyRef?.name === name) return true;
      if (kind === 'config' && env.valueFrom?.configMapKeyRef?.name === name) return true;
    }
  }
  return false;
}

/** What in the namespace uses each of these secrets, configs or claims: workloads (Deployments, StatefulSets, DaemonSets) and pods of no workload, as `kind/name`, by name. */
async function usersByName(ctx: KubeContext, kind: ObjectKind | 'volume', names: string[], namespace: string): Promise<Record<string, string[]>> {
  const [deployments, statefulSets, daemonSets, pods] = await Promise.all([
    attempt('listing deployments', () => ctx.apps.listNamespacedDeployment({ namespace })),
    attempt('listing stateful sets', () => ctx.apps.listNamespacedStatefulSet({ namespace })),
    attempt('listing daemon sets', () => ctx.apps.listNamespacedDaemonSet({ namespace })),
    attempt('listing pods', () => ctx.core.listNamespacedPod({ namespace })),
  ]);
  const specs: Array<[string, V1PodSpec | undefined]> = [];
  for (const [label, items] of [['deployment', deployments.items], ['statefulset', statefulSets.items], ['daemonset', daemonSets.items]] as const) {
    for (const item of items) specs.push([`${label}/${item.metadata?.name}`, item.spec?.template.spec]);
  }
  for (const pod of pods.items) {
    if (pod.metadata?.ownerReferences?.length || pod.metadata?.deletionTimestamp) continue;
    specs.push([`pod/${pod.metadata?.name}`, pod.spec]);
  }
  return Object.fromEntries(names.map((name) => [name, specs.filter(([, spec]) => podSpecUses(spec, kind, name)).map(([user]) => user).sort()]));
}

/** What in the namespace uses a secret, config or claim (see {@link usersByName}). */
export async function usersOf(ctx: KubeContext, kind: ObjectKind | 'volume', name: string, namespace = ctx.namespace): Promise<string[]> {
  return (await usersByName(ctx, kind, [name], namespace))[name]!;
}

/** The workloads that use each of these secrets or configs (pods of no workload left out: nothing rolls them out), by name. */
export async function objectUsers(ctx: KubeContext, kind: ObjectKind, names: string[], namespace: string): Promise<{ users: Record<string, string[]> }> {
  const all = await usersByName(ctx, kind, names, namespace);
  return { users: Object.fromEntries(Object.entries(all).map(([name, users]) => [name, users.filter((u) => !u.startsWith('pod/'))])) };
}

/** The annotation `kubectl rollout restart` sets on a pod template: a change of it is a new rollout with the same spec. */
export const RESTARTED_AT = 'kubectl.kubernetes.io/restartedAt';

/** `kubectl rollout restart`: the pod template's restartedAt annotation set to now (a Deployment gets a new ReplicaSet). */
export async function restartWorkload(ctx: KubeContext, workload: string, namespace: string): Promise<{ restarted_at: string }> {
  const [kind, name] = workload.split('/') as [string, string];
  const restartedAt = new Date().toISOString();
  const body = { spec: { template: { metadata: { annotations: { [RESTARTED_AT]: restartedAt } } } } };
  const where = { name, namespace, body, fieldManager: FIELD_MANAGER };
  const patch = { deployment: () => ctx.apps.patchNamespacedDeployment(where, mergePatch), statefulset: () => ctx.apps.patchNamespacedStatefulSet(where, mergePatch), daemonset: () => ctx.apps.patchNamespacedDaemonSet(where, mergePatch) }[kind];
  if (!patch) throw new KubeDriverError(`restarting ${workload}: only deployments, statefulsets and daemonsets roll out`, 400);
  try {
    await patch();
  } catch (err) {
    throw isNotFound(err) ? new KubeDriverError(`restarting ${workload}: there is no ${kind} ${name} in namespace ${namespace}`, 404) : failure(`restarting ${workload}`, err);
  }
  return { restarted_at: restartedAt };
}

/**
 * A hangar secret or config kept in place (a cluster's own secrets and configs): a Secret or
 * ConfigMap under its own name in `namespace`, its value under {@link objectKey}. Created only when
 * the name is free or already this hangar object's (the {@link HANGAR_OBJECT_LABEL} label), or given
 * its new value in place.
 */
export async function putObject(
  ctx: KubeContext,
  input: { kind: ObjectKind; namespace: string; name: string; data: string; labels: Record<string, string>; replace: boolean },
): Promise<{ id: string }> {
  const { kind, namespace, labels } = input;
  const name = checkName(kind, input.name);
  const read = () =>
    readOrNull(`reading ${kind} ${name}`, () => (kind === 'secret' ? ctx.core.readNamespacedSecret({ name, namespace }) : ctx.core.readNamespacedConfigMap({ name, namespace })));
  const existing = await read();
  const owner = labels[HANGAR_OBJECT_LABEL];
  if (existing && existing.metadata?.labels?.[HANGAR_OBJECT_LABEL] !== owner) {
    throw new KubeDriverError(`${kind} ${name} exists in namespace ${namespace} and is not this hangar ${kind}: choose another name, or delete it with kubectl first`, 409);
  }
  if (!existing && input.replace) throw new KubeDriverError(`${kind} ${name} is no longer in namespace ${namespace} (deleted outside hangar?)`, 404);
  const object = { apiVersion: 'v1', metadata: { name, namespace, labels }, ...valueOf(kind, input.data) };
  const body: KubernetesObject = kind === 'secret' ? ({ ...object, kind: 'Secret', type: 'Opaque' } as V1Secret) : ({ ...object, kind: 'ConfigMap' } as V1ConfigMap);
  const applied = await attempt(`writing ${kind} ${name}`, () => apply(ctx, body, { force: true }));
  return { id: applied.metadata!.uid! };
}

/** Deletes a secret or config of a namespace; refused (409, naming them) while workloads or pods use it. */
export async function deleteObject(ctx: KubeContext, kind: ObjectKind, name: string, namespace: string): Promise<{ removed: boolean }> {
  const users = await usersOf(ctx, kind, name, namespace);
  if (users.length) throw new KubeDriverError(`removing ${kind} ${name}: it is in use by ${users.join(', ')}`, 409);
  try {
    if (kind === 'secret') await ctx.core.deleteNamespacedSecret({ name, namespace });
    else await ctx.core.deleteNamespacedConfigMap({ name, namespace });
    return { removed: true };
  } catch (err) {
    if (isNotFound(err)) return { removed: false };
    throw failure(`removing ${kind} ${name}`, err);
  }
}

/** A value as a Secret's or ConfigMap's fields: a ConfigMap keeps UTF-8 text as text, other bytes as binaryData. */
function valueOf(kind: ObjectKind, dataBase64: string): { data: Record<string, string> } | { binaryData: Record<string, string> } {
  if (kind === 'secret') return { data: { [objectKey]: dataBase64 } };
  const text = Buffer.from(dataBase64, 'base64').toString('utf8');
  return Buffer.from(text, 'utf8').toString('base64') === dataBase64 ? { data: { [objectKey]: text } } : { binaryData: { [objectKey]: dataBase64 } };
}

/**
 * A hangar secret or config as an immutable Secret or ConfigMap (a new value is a new object, as on
 * swarm), its value under {@link objectKey}. Answers the object's uid; the existing one's when the
 * name is taken.
 */
export async function createObject(ctx: KubeContext, kind: ObjectKind, name: string, dataBase64: string, labels: Record<string, string>): Promise<{ id: string }> {
  checkName(kind, name);
  const namespace = ctx.namespace;
  const metadata = { name, namespace, labels };
  try {
    const created =
      kind === 'secret'
        ? await ctx.core.createNamespacedSecret({ namespace, body: { metadata, immutable: true, type: 'Opaque', ...valueOf(kind, dataBase64) } })
        : await ctx.core.createNamespacedConfigMap({ namespace, body: { metadata, immutable: true, ...valueOf(kind, dataBase64) } });
    return { id: created.metadata!.uid! };
  } catch (err) {
    if (!isConflict(err)) throw failure(`creating ${kind} ${name}`, err);
  }
  const existing =
    kind === 'secret'
      ? await attempt(`reading secret ${name}`, () => ctx.core.readNamespacedSecret({ name, namespace }))
      : await attempt(`reading config ${name}`, () => ctx.core.readNamespacedConfigMap({ name, namespace }));
  return { id: existing.metadata!.uid! };
}

/** Removes a secret or config; refused (409, naming them) while workloads use it. */
export function removeObject(ctx: KubeContext, kind: ObjectKind, name: string): Promise<{ removed: boolean }> {
  return deleteObject(ctx, kind, name, ctx.namespace);
}

/**
 * A hangar volume on the cluster: a static NFS PersistentVolume (reclaim policy Retain: deleting
 * it leaves the data) pre-bound to a claim of the same name in the driver's namespace, which
 * workloads mount. Applied (idempotent); answers once the claim is Bound.
 */
export async function stageVolume(
  ctx: KubeContext,
  input: { name: string; nfs: { server: string; path: string }; labels: Record<string, string> },
): Promise<{ name: string }> {
  const name = checkName('volume', input.name);
  const namespace = ctx.namespace;
  const volume: V1PersistentVolume = {
    apiVersion: 'v1',
    kind: 'PersistentVolume',
    metadata: { name, labels: input.labels },
    spec: {
      capacity: { storage: NOMINAL_CAPACITY },
      accessModes: ['ReadWriteMany'],
      persistentVolumeReclaimPolicy: 'Retain',
      storageClassName: '',
      nfs: { server: input.nfs.server, path: input.nfs.path },
      claimRef: { namespace, name },
    },
  };
  const claim: V1PersistentVolumeClaim = {
    apiVersion: 'v1',
    kind: 'PersistentVolumeClaim',
    metadata: { name, namespace, labels: input.labels },
    spec: { accessModes: ['ReadWriteMany'], storageClassName: '', volumeName: name, resources: { requests: { storage: NOMINAL_CAPACITY } } },
  };
  await attempt(`staging volume ${name} (its PersistentVolume)`, () => apply(ctx, volume, { force: true }));
  await attempt(`staging volume ${name} (its claim)`, () => apply(ctx, claim, { force: true }));
  const bound = await waitUntil(async () => (await ctx.core.readNamespacedPersistentVolumeClaim({ name, namespace })).status?.phase === 'Bound', BIND_WAIT_MS);
  if (!bound) {
    const phase = (await ctx.core.readNamespacedPersistentVolumeClaim({ name, namespace })).status?.phase ?? 'unknown';
    throw new KubeDriverError(`staging volume ${name}: its claim is still ${phase} after ${BIND_WAIT_MS / 1000} s (is there another PersistentVolume or claim named ${name}?)`, 504);
  }
  return { name };
}

/** The phase of a staged volume's claim (Bound, Pending, Lost), or null when it is not staged. */
export async function volumePhase(ctx: KubeContext, name: string): Promise<string | null> {
  const claim = await readOrNull(`reading claim ${name}`, () => ctx.core.readNamespacedPersistentVolumeClaim({ name, namespace: ctx.namespace }));
  return claim ? (claim.status?.phase ?? 'Pending') : null;
}

/** Removes a staged volume's claim and PersistentVolume (the data stays); refused (409) while a workload mounts the claim. */
export async function unstageVolume(ctx: KubeContext, name: string): Promise<{ removed: boolean }> {
  const namespace = ctx.namespace;
  const users = await usersOf(ctx, 'volume', name);
  if (users.length) throw new KubeDriverError(`removing volume ${name}: its claim is mounted by ${users.join(', ')}`, 409);
  const readClaim = () => readOrNull(`reading the claim of volume ${name}`, () => ctx.core.readNamespacedPersistentVolumeClaim({ name, namespace }));
  const readVolume = () => readOrNull(`reading the PersistentVolume of volume ${name}`, () => ctx.core.readPersistentVolume({ name }));
  // Removed by this call only if something was there and not already on its way out (a claim's
  // protection finalizer keeps it, deleting, until no pod uses it).
  const [claim, volume] = await Promise.all([readClaim(), readVolume()]);
  const removed = [claim, volume].some((object) => object && !object.metadata?.deletionTimestamp);
  if (claim) await readOrNull(`removing the claim of volume ${name}`, () => ctx.core.deleteNamespacedPersistentVolumeClaim({ name, namespace }));
  if (volume) await readOrNull(`removing the PersistentVolume of volume ${name}`, () => ctx.core.deletePersistentVolume({ name }));
  // Gone before this answers, so that a workload naming the volume next is refused rather than bound to a claim that is going.
  const gone = await waitUntil(async () => !(await readClaim()) && !(await readVolume()), UNSTAGE_WAIT_MS);
  if (!gone) throw new KubeDriverError(`removing volume ${name}: its claim or PersistentVolume is still there after ${UNSTAGE_WAIT_MS / 1000} s`, 504);
  return { removed };
}
