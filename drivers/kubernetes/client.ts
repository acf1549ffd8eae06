import {
  ApiException,
  AppsV1Api,
  CoreV1Api,
  KubeConfig,
  KubernetesObjectApi,
  NetworkingV1Api,
  PatchStrategy,
  setHeaderOptions,
  type KubernetesObject,
  type V1APIResource,
} from '@kubernetes/client-node';
import { sleep } from '../../core/clock.js';
import { attemptWith } from '../../core/errors.js';
import { KubeDriverError } from './errors.js';

/** The field manager of everything hangar applies (server-side apply records it on each field it sets). */
export const FIELD_MANAGER = 'hangar';

/** On objects of a bundle (a manifest service): the bundle's name. */
export const BUNDLE_LABEL = 'io.hangar.bundle';
/** On a workload's Deployment, its pods and its Service selector: the workload's name. */
export const WORKLOAD_LABEL = 'io.hangar.workload';

/** KubernetesObjectApi that also says whether a kind is namespaced (its discovery, cached per group version). */
export class ObjectApi extends KubernetesObjectApi {
  resourceOf(apiVersion: string, kind: string): Promise<V1APIResource | undefined> {
    return this.resource(apiVersion, kind);
  }
}

/** What every part of the Kubernetes driver works with: the API clients of one cluster, and the namespace hangar's own workloads live in. */
export interface KubeContext {
  kubeConfig: KubeConfig;
  core: CoreV1Api;
  apps: AppsV1Api;
  networking: NetworkingV1Api;
  /** Any kind by apiVersion/kind (server-side apply of manifests). */
  objects: ObjectApi;
  namespace: string;
}

export function createContext(kubeConfig: KubeConfig, namespace: string): KubeContext {
  return {
    kubeConfig,
    core: kubeConfig.makeApiClient(CoreV1Api),
    apps: kubeConfig.makeApiClient(AppsV1Api),
    networking: kubeConfig.makeApiClient(NetworkingV1Api),
    objects: kubeConfig.makeApiClient(ObjectApi),
    namespace,
  };
}

export { KubeDriverError } from './errors.js';

/** The API server's Status answer (what a refusal says). */
interface ApiStatus {
  message?: string;
  reason?: string;
  details?: { causes?: Array<{ reason?: string; message?: string; field?: string }> };
}

export function statusOf(err: unknown): number | undefined {
  if (err instanceof ApiException) return err.code;
  return err instanceof KubeDriverError ? err.statusCode : undefined;
}

export const isNotFound = (err: unknown): boolean => statusOf(err) === 404;
/**
 * A request the API server forbids (403) because the object's namespace is being deleted (the
 * NamespaceLifecycle admission's cause `NamespaceTerminating`): an eviction of a pod there never
 * succeeds, and the namespace controller deletes the pod instead.
 */
export const isNamespaceTerminating = (err: unknown): boolean =>
  err instanceof ApiException && err.code === 403 && (apiStatus(err)?.details?.causes ?? []).some((c) => c.reason === 'NamespaceTerminating');
export const isConflict = (err: unknown): boolean => statusOf(err) === 409;

function apiStatus(err: ApiException<unknown>): ApiStatus | null {
  const body = err.body;
  if (body && typeof body === 'object') return body as ApiStatus;
  if (typeof body !== 'string') return null;
  try {
    return JSON.parse(body) as ApiStatus;
  } catch {
    return { message: body.trim() };
  }
}

/**
 * The API server's reason for a failure. A server-side apply conflict names each field and the
 * manager that owns it ("field .spec.replicas is managed by kubectl-edit"). Never the request (it
 * may hold secret data).
 */
export function kubeReason(err: unknown): string {
  if (err instanceof ApiException) {
    const status = apiStatus(err);
    const causes = status?.details?.causes ?? [];
    if (status?.reason === 'Conflict' && causes.some((c) => c.reason === 'FieldManagerConflict')) {
      const owners = causes.map((c) => `${c.field ?? '(a field)'} is managed by ${/conflict with "([^"]+)"/.exec(c.message ?? '')?.[1] ?? c.message}`);
      return `conflict with another field manager: ${owners.join('; ')}`;
    }
    // An eviction a PodDisruptionBudget refuses says which budget only in its causes.
    const budgets = causes.filter((c) => c.reason === 'DisruptionBudget' && c.message).map((c) => c.message);
    if (status?.message) return budgets.length ? `${status.message} ${budgets.join('; ')}` : status.message;
    return `the API server answered ${err.code}`;
  }
  const e = err as { code?: unknown; message?: unknown } | null;
  if (e && typeof e === 'object' && typeof e.code === 'string' && ['ECONNREFUSED', 'ENOTFOUND', 'EHOSTUNREACH', 'ETIMEDOUT', 'ECONNRESET'].includes(e.code)) {
    return `cannot reach the Kubernetes API server (${e.code})`;
  }
  return e && typeof e === 'object' && typeof e.message === 'string' ? e.message : String(err);
}

/** `<what>: <the API server's reason>`, keeping the status code. */
export function failure(what: string, err: unknown): KubeDriverError {
  if (err instanceof KubeDriverError) return err;
  return new KubeDriverError(`${what}: ${kubeReason(err)}`, statusOf(err));
}

/** Runs an API call, turning its failure into `<what>: <reason>`. */
export const attempt = attemptWith(failure);

/** An API read that answers null for 404. */
export async function readOrNull<T>(what: string, call: () => Promise<T>): Promise<T | null> {
  try {
    return await call();
  } catch (err) {
    if (isNotFound(err)) return null;
    throw failure(what, err);
  }
}

/** Polls `check` until it answers something other than undefined/false, or `timeoutMs` passes (then undefined). */
export async function waitUntil<T>(check: () => Promise<T | undefined | false>, timeoutMs: number, intervalMs = 250): Promise<T | undefined> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined && value !== false) return value;
    if (Date.now() >= deadline) return undefined;
    await sleep(Math.min(intervalMs, Math.max(0, deadline - Date.now())));
  }
}

/** A merge patch (JSON merge: objects merge, null removes, lists are replaced). */
export const mergePatch = setHeaderOptions('Content-Type', PatchStrategy.MergePatch);

/**
 * Server-side apply of one object with hangar's field manager. `force` takes over fields another
 * manager owns (hangar's own workloads); without it such a field is a 409 naming it and its owner.
 */
export function apply<T extends KubernetesObject>(ctx: KubeContext, object: T, options: { force: boolean; dryRun?: boolean }): Promise<T> {
  return ctx.objects.patch(object, undefined, options.dryRun ? 'All' : undefined, FIELD_MANAGER, options.force, PatchStrategy.ServerSideApply);
}

/** `kind/name` (with the namespace when it is not the driver's), as messages name an object. */
export function describeObject(ctx: KubeContext, object: KubernetesObject): string {
  const ns = object.metadata?.namespace;
  return `${(object.kind ?? 'object').toLowerCase()}/${ns && ns !== ctx.namespace ? `${ns}/` : ''}${object.metadata?.name ?? '(unnamed)'}`;
}

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;

/** A name Kubernetes takes for a Deployment, Service, Secret… (an RFC 1123 label: what a Service needs). */
export function checkName(kind: string, name: unknown): string {
  if (typeof name !== 'string' || name.length > 63 || !DNS_LABEL.test(name)) {
    throw new KubeDriverError(`invalid ${kind} name ${JSON.stringify(name)}: lower-case letters, digits and '-', starting and ending with a letter or digit, at most 63 characters`, 400);
  }
  return name;
}

/** A label selector as the API's query string takes it (matchLabels and matchExpressions). */
export function selectorString(selector: { matchLabels?: Record<string, string>; matchExpressions?: Array<{ key: string; operator: string; values?: string[] }> } | undefined): string {
  const parts = Object.entries(selector?.matchLabels ?? {}).map(([k, v]) => `${k}=${v}`);
  for (const e of selector?.matchExpressions ?? []) {
    if (e.operator === 'In') parts.push(`${e.key} in (${(e.values ?? []).join(',')})`);
    else if (e.operator === 'NotIn') parts.push(`${e.key} notin (${(e.values ?? []).join(',')})`);
    else if (e.operator === 'Exists') parts.push(e.key);
    else if (e.operator === 'DoesNotExist') parts.push(`!${e.key}`);
  }
  return parts.join(',');
}
