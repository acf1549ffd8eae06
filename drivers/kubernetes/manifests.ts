import type { KubernetesObject, V1ConfigMap, V1Deployment } from '@kubernetes/client-node';
import type { BundleState, LogOptions } from './contract.js';
import { apply, attempt, BUNDLE_LABEL, checkName, describeObject, failure, isConflict, isNotFound, KubeDriverError, readOrNull, waitUntil, type KubeContext } from './client.js';
import { logsOf } from './logs.js';
import { INVENTORY_PREFIX, ManifestProblem, readManifest } from './manifest-format.js';
import { confinedTo, ensureProjectNamespace } from './tenancy.js';
import { readinessProbeOf, stateOf } from './workloads.js';
import type { HealthSpec } from '../../core/orchestrator.js';

/** One object a bundle applied, as hangar lists and prunes them. */
export interface AppliedObject {
  api_version: string;
  kind: string;
  name: string;
  /** Null for cluster-scoped kinds (Namespace, PersistentVolume, ClusterRole…). */
  namespace: string | null;
}

/** A bundle's state with the objects its manifest applied. */
export type ManifestState = BundleState & { applied_objects: AppliedObject[] };

/** How long removing a bundle waits for its workloads to be gone. */
const REMOVE_WAIT_MS = 60_000;

/**
 * A bundle's inventory: a ConfigMap in the driver's namespace listing every object the bundle's
 * manifest applied (like kubectl's ApplySet), so that a new manifest prunes what it no longer
 * has and removing the bundle removes exactly those.
 */
const inventoryName = (bundle: string) => `${INVENTORY_PREFIX}${bundle}`;
const INVENTORY_KEY = 'objects';

async function readInventory(ctx: KubeContext, bundle: string): Promise<AppliedObject[] | null> {
  const map = await readOrNull(`reading the inventory of bundle ${bundle}`, () => ctx.core.readNamespacedConfigMap({ name: inventoryName(bundle), namespace: ctx.namespace }));
  if (!map) return null;
  try {
    return JSON.parse(map.data?.[INVENTORY_KEY] ?? '[]') as AppliedObject[];
  } catch {
    return [];
  }
}

async function writeInventory(ctx: KubeContext, bundle: string, objects: AppliedObject[]): Promise<void> {
  const map: V1ConfigMap = {
    apiVersion: 'v1',
    kind: 'ConfigMap',
    metadata: { name: inventoryName(bundle), namespace: ctx.namespace, labels: { [BUNDLE_LABEL]: bundle } },
    data: { [INVENTORY_KEY]: JSON.stringify(objects) },
  };
  await attempt(`recording the objects of bundle ${bundle}`, () => apply(ctx, map, { force: true }));
}

const sameObject = (a: AppliedObject, b: AppliedObject) => a.api_version === b.api_version && a.kind === b.kind && a.name === b.name && a.namespace === b.namespace;

/** The objects of a manifest (./manifest-format.ts reads it, as the control plane did before), each a Kubernetes object. */
export function parseManifest(bundle: string, manifest: string): KubernetesObject[] {
  try {
    return readManifest(manifest);
  } catch (err) {
    if (err instanceof ManifestProblem) throw new KubeDriverError(`bundle ${bundle}: ${err.message}`, 400);
    throw err;
  }
}

/** The object with the bundle's label and, when its kind is namespaced and it names none, the driver's namespace. */
async function prepare(ctx: KubeContext, bundle: string, object: KubernetesObject): Promise<KubernetesObject> {
  const resource = await attempt(`bundle ${bundle}: looking up ${object.apiVersion} ${object.kind}`, () => ctx.objects.resourceOf(object.apiVersion!, object.kind!));
  if (!resource) throw new KubeDriverError(`bundle ${bundle}: the cluster has no kind ${object.kind} in ${object.apiVersion}`, 400);
  const metadata = { ...object.metadata, labels: { ...(object.metadata?.labels ?? {}), [BUNDLE_LABEL]: bundle } };
  if (resource.namespaced) metadata.namespace = object.metadata?.namespace ?? ctx.namespace;
  else delete metadata.namespace;
  return { ...object, metadata };
}

function appliedOf(object: KubernetesObject): AppliedObject {
  return { api_version: object.apiVersion!, kind: object.kind!, name: object.metadata!.name!, namespace: object.metadata?.namespace ?? null };
}

/**
 * Deletes one object the inventory lists, if the live object is the bundle's: it carries the label
 * `io.hangar.bundle=<bundle>`. The inventory is a ConfigMap in the bundle's namespace, which the
 * project's Role lets its members edit (RBAC cannot grant a kind's objects but those of one name
 * prefix); an admin's bundle in a project namespace deletes with the agent's own credentials, so an
 * entry a member added (a Namespace, a ClusterRoleBinding…) must not be deleted. Only the bundle's
 * own objects carry its label, and labelling one outside the namespace takes more than the
 * project's rights. The delete names the uid read, so another object made meanwhile under the name
 * is not deleted either.
 */
async function deleteApplied(ctx: KubeContext, bundle: string, object: AppliedObject): Promise<void> {
  const spec: KubernetesObject = { apiVersion: object.api_version, kind: object.kind, metadata: { name: object.name, ...(object.namespace ? { namespace: object.namespace } : {}) } };
  const what = `bundle ${bundle}: deleting ${describeObject(ctx, spec)}`;
  try {
    const live = await ctx.objects.read(spec as KubernetesObject & { metadata: { name: string } });
    if (live.metadata?.labels?.[BUNDLE_LABEL] !== bundle) return;
    const options = { apiVersion: 'v1', kind: 'DeleteOptions', propagationPolicy: 'Foreground', preconditions: { uid: live.metadata.uid } };
    await ctx.objects.delete(spec, undefined, undefined, undefined, undefined, undefined, options);
  } catch (err) {
    if (!isNotFound(err) && !isConflict(err)) throw failure(what, err);
  }
}

/** The bundle's Deployments: in every namespace, or (confined: the project's user lists its own namespace only) in the context's. */
function bundleDeployments(ctx: KubeContext, bundle: string, confined: boolean) {
  const labelSelector = `${BUNDLE_LABEL}=${bundle}`;
  return attempt(`listing the workloads of bundle ${bundle}`, () =>
    confined ? ctx.apps.listNamespacedDeployment({ namespace: ctx.namespace, labelSelector }) : ctx.apps.listDeploymentForAllNamespaces({ labelSelector }),
  );
}

/**
 * Where a bundle's calls work (core/orchestrator.ts BundlePlacement): `namespace` is where its
 * objects that name none and its inventory go (the driver's own when not given); `confined`, as the
 * project's user of that namespace (drivers/kubernetes/tenancy.ts) instead of the agent's own credentials.
 */
export interface Placement {
  namespace?: string;
  confined?: boolean;
}

/** The context a bundle's calls use, by its placement. */
export function placed(ctx: KubeContext, bundle: string, placement: Placement): KubeContext {
  const namespace = placement.namespace ?? ctx.namespace;
  if (placement.confined) {
    if (!placement.namespace) throw new KubeDriverError(`bundle ${bundle}: a confined bundle needs its namespace`, 400);
    return confinedTo(ctx, namespace);
  }
  return namespace === ctx.namespace ? ctx : { ...ctx, namespace };
}

/** The bundle's state: each of its Deployments as a workload (component = the Deployment's name), and what it applied. */
async function bundleState(ctx: KubeContext, bundle: string, applied: AppliedObject[], confined: boolean): Promise<ManifestState> {
  const list = await bundleDeployments(ctx, bundle, confined);
  const services = [];
  for (const deployment of list.items.filter((d) => !d.metadata?.deletionTimestamp)) services.push(await stateOf(ctx, deployment));
  return { name: bundle, services, applied_objects: applied };
}

/**
 * Applies a bundle's manifest by server-side apply with hangar's field manager, not forced: a
 * field another manager owns (someone's `kubectl edit`) is a 409 naming the field and its
 * manager. Every object is applied as a dry run first, so a manifest the API server refuses
 * changes nothing. With `prune`, objects of the bundle's last manifest that this one no longer has
 * are deleted.
 */
/**
 * A Deployment of the manifest with a health check declared for it (by its name): the check is its
 * first container's readinessProbe, over the manifest's own.
 */
export function withReadiness(object: KubernetesObject, health: Record<string, HealthSpec>): KubernetesObject {
  const check = object.kind === 'Deployment' && object.apiVersion === 'apps/v1' ? health[object.metadata?.name ?? ''] : undefined;
  const containers = (object as V1Deployment).spec?.template?.spec?.containers;
  if (!check || !containers?.length) return object;
  const deployment = structuredClone(object) as V1Deployment;
  deployment.spec!.template.spec!.containers[0]!.readinessProbe = readinessProbeOf(check);
  return deployment as KubernetesObject;
}

export async function deployBundle(
  agent: KubeContext,
  bundle: string,
  manifest: string,
  options: Placement & { prune: boolean; health?: Record<string, HealthSpec>; project?: { id: string; name: string } },
): Promise<ManifestState> {
  checkName('bundle', bundle);
  // The project's namespace and its user's rights are made with the agent's own credentials.
  if (options.project && options.namespace) await ensureProjectNamespace(agent, options.namespace, options.project);
  const ctx = placed(agent, bundle, options);
  const confined = !!options.confined;
  const objects: KubernetesObject[] = [];
  for (const object of parseManifest(bundle, manifest)) objects.push(await prepare(ctx, bundle, withReadiness(object, options.health ?? {})));
  // A namespace the manifest itself creates does not exist during the dry run: its objects are checked when applied.
  const created = new Set(objects.filter((o) => o.kind === 'Namespace' && o.apiVersion === 'v1').map((o) => o.metadata!.name!));
  for (const object of objects) {
    if (object.metadata?.namespace && created.has(object.metadata.namespace)) continue;
    await attempt(`bundle ${bundle}: applying ${describeObject(ctx, object)}`, () => apply(ctx, object, { force: false, dryRun: true }));
  }
  const previous = (await readInventory(ctx, bundle)) ?? [];
  const applied: AppliedObject[] = [];
  for (const object of objects) {
    await attempt(`bundle ${bundle}: applying ${describeObject(ctx, object)}`, () => apply(ctx, object, { force: false }));
    applied.push(appliedOf(object));
  }
  const dropped = previous.filter((p) => !applied.some((a) => sameObject(a, p)));
  // Confined, what an admin's manifest made outside the namespace stays listed, for an admin's deploy or removal to delete.
  const pruned = options.prune ? dropped.filter((o) => !confined || o.namespace === ctx.namespace) : [];
  const kept = [...applied, ...dropped.filter((o) => !pruned.includes(o))];
  await writeInventory(ctx, bundle, kept);
  for (const object of pruned) await deleteApplied(ctx, bundle, object);
  return bundleState(ctx, bundle, kept, confined);
}

/** Deletes every object of the bundle and waits until its workloads are gone; {removed: false} when there is no such bundle. */
export async function removeBundle(agent: KubeContext, bundle: string, placement: Placement = {}): Promise<{ removed: boolean }> {
  const ctx = placed(agent, bundle, placement);
  const inventory = await readInventory(ctx, bundle);
  if (!inventory) return { removed: false };
  for (const object of [...inventory].reverse()) await deleteApplied(ctx, bundle, object);
  const gone = await waitUntil(async () => (await bundleDeployments(ctx, bundle, !!placement.confined)).items.length === 0, REMOVE_WAIT_MS);
  if (!gone) throw new KubeDriverError(`removing bundle ${bundle}: its workloads are still there after ${REMOVE_WAIT_MS / 1000} s`, 504);
  try {
    await ctx.core.deleteNamespacedConfigMap({ name: inventoryName(bundle), namespace: ctx.namespace });
  } catch (err) {
    if (!isNotFound(err)) throw failure(`removing the inventory of bundle ${bundle}`, err);
  }
  return { removed: true };
}

/** The objects a bundle applied (its inventory), or null when there is no such bundle. */
export async function bundleObjects(agent: KubeContext, bundle: string, placement: Placement = {}): Promise<AppliedObject[] | null> {
  return readInventory(placed(agent, bundle, placement), bundle);
}

/** The logs of every Deployment of a bundle, merged in time order, each line `<deployment> | <timestamp> <text>`. */
export async function bundleLogs(agent: KubeContext, bundle: string, options: LogOptions & Placement): Promise<{ lines: string[] }> {
  const ctx = placed(agent, bundle, options);
  if (!(await readInventory(ctx, bundle))) throw new KubeDriverError(`reading the logs of bundle ${bundle}: no such bundle`, 404);
  const list = await bundleDeployments(ctx, bundle, !!options.confined);
  return logsOf(
    ctx,
    list.items.map((deployment: V1Deployment) => ({ prefix: `${deployment.metadata?.name} | `, deployment })),
    options,
  );
}
