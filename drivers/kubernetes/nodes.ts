import type { V1Node, V1Pod } from '@kubernetes/client-node';
import { NODE_AVAILABILITIES, type NodeAvailability } from './contract.js';
import { attempt, failure, FIELD_MANAGER, isNamespaceTerminating, isNotFound, kubeReason, KubeDriverError, mergePatch, readOrNull, statusOf, waitUntil, type KubeContext } from './client.js';

/**
 * On a node hangar cordoned or drained: which of the two (Kubernetes only knows `unschedulable`;
 * a drained node is a cordoned one whose pods were evicted).
 */
export const AVAILABILITY_ANNOTATION = 'io.hangar.availability';
const ROLE_LABEL_PREFIX = 'node-role.kubernetes.io/';

/** How long a drain keeps asking to evict pods a PodDisruptionBudget protects, and waits for evicted pods to go. */
export const DRAIN_TIMEOUT_MS = 60_000;

/** A cluster node as the cluster reports it. */
export interface KubeNode {
  runtime_node_id: string;
  address: string | null;
  ready: boolean;
  roles: string[];
  kubelet_version: string;
  availability: NodeAvailability;
  labels: Record<string, string>;
}

function availabilityOf(node: V1Node): NodeAvailability {
  if (!node.spec?.unschedulable) return 'schedulable';
  return node.metadata?.annotations?.[AVAILABILITY_ANNOTATION] === 'drained' ? 'drained' : 'cordoned';
}

export function nodeOf(node: V1Node): KubeNode {
  const labels = node.metadata?.labels ?? {};
  return {
    runtime_node_id: node.metadata!.name!,
    address: node.status?.addresses?.find((a) => a.type === 'InternalIP')?.address ?? null,
    ready: node.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false,
    roles: Object.keys(labels)
      .filter((k) => k.startsWith(ROLE_LABEL_PREFIX))
      .map((k) => k.slice(ROLE_LABEL_PREFIX.length))
      .sort(),
    kubelet_version: node.status?.nodeInfo?.kubeletVersion ?? '',
    availability: availabilityOf(node),
    labels,
  };
}

export async function listNodes(ctx: KubeContext): Promise<{ nodes: KubeNode[] }> {
  const list = await attempt('listing the nodes', () => ctx.core.listNode());
  await Promise.all(list.items.filter(staleAvailability).map((node) => forgetAvailability(ctx, node)));
  return { nodes: list.items.map(nodeOf).sort((a, b) => a.runtime_node_id.localeCompare(b.runtime_node_id)) };
}

/** A schedulable node still carrying hangar's annotation: uncordoned outside hangar (kubectl uncordon keeps annotations). */
function staleAvailability(node: V1Node): boolean {
  return !node.spec?.unschedulable && node.metadata?.annotations?.[AVAILABILITY_ANNOTATION] !== undefined;
}

/**
 * Removes the annotation of a node uncordoned outside hangar, so that a later `kubectl cordon` reads
 * as cordoned, not as the drain of long ago. Only if the node is unchanged since it was listed (its
 * resourceVersion): a cordon meanwhile keeps it. Best effort: the next listing tries again.
 */
async function forgetAvailability(ctx: KubeContext, node: V1Node): Promise<void> {
  const { name, resourceVersion } = node.metadata!;
  await ctx.core
    .patchNode({ name: name!, fieldManager: FIELD_MANAGER, body: { metadata: { resourceVersion, annotations: { [AVAILABILITY_ANNOTATION]: null } } } }, mergePatch)
    .catch(() => undefined);
}

/** Pods a drain evicts: every pod on the node but those of DaemonSets (they would come back at once) and static (mirror) pods. */
function evictable(pod: V1Pod): boolean {
  if (pod.metadata?.deletionTimestamp) return false;
  if (pod.metadata?.annotations?.['kubernetes.io/config.mirror']) return false;
  if (pod.status?.phase === 'Succeeded' || pod.status?.phase === 'Failed') return true;
  return !(pod.metadata?.ownerReferences ?? []).some((o) => o.kind === 'DaemonSet');
}

async function podsOnNode(ctx: KubeContext, node: string): Promise<V1Pod[]> {
  const list = await attempt(`listing the pods on node ${node}`, () => ctx.core.listPodForAllNamespaces({ fieldSelector: `spec.nodeName=${node}` }));
  return list.items;
}

/**
 * Evicts every evictable pod on the node through the Eviction API, so PodDisruptionBudgets are
 * honoured: an eviction a budget refuses (429) is asked again until `timeoutMs`; then the drain
 * fails (409) naming the pods still there and the budget's reason. A pod whose namespace is being
 * deleted cannot be evicted (403, NamespaceTerminating): as kubectl drain does, it is asked again
 * until the namespace controller has marked it deleted, and then waited for like an evicted pod.
 * Waits for evicted pods to be gone.
 */
async function evictAll(ctx: KubeContext, node: string, timeoutMs: number): Promise<string[]> {
  const deadline = Date.now() + timeoutMs;
  const evicted = new Set<string>();
  const refusals = new Map<string, string>();
  for (;;) {
    const pending = (await podsOnNode(ctx, node)).filter(evictable);
    if (!pending.length) return [...evicted].sort();
    // A refusal is about a pod still pending (one marked deleted meanwhile is waited for instead).
    const keys = new Set(pending.map((p) => `${p.metadata?.namespace}/${p.metadata?.name}`));
    for (const key of refusals.keys()) if (!keys.has(key)) refusals.delete(key);
    for (const pod of pending) {
      const name = pod.metadata!.name!;
      const namespace = pod.metadata!.namespace!;
      const key = `${namespace}/${name}`;
      try {
        await ctx.core.createNamespacedPodEviction({ name, namespace, body: { metadata: { name, namespace } } });
        evicted.add(key);
        refusals.delete(key);
      } catch (err) {
        if (isNotFound(err)) continue; // gone meanwhile
        if (isNamespaceTerminating(err)) {
          refusals.set(key, `its namespace ${namespace} is being deleted and the pod is not deleted yet`);
          continue;
        }
        if (statusOf(err) !== 429) throw failure(`draining node ${node}: evicting pod ${key}`, err);
        refusals.set(key, kubeReason(err));
      }
    }
    if (Date.now() >= deadline) {
      const blocked = [...refusals.entries()].map(([pod, why]) => `${pod} (${why})`);
      const left = pending.map((p) => `${p.metadata?.namespace}/${p.metadata?.name}`).filter((p) => !refusals.has(p));
      throw new KubeDriverError(
        `draining node ${node}: after ${timeoutMs / 1000} s ${blocked.length ? `the eviction of ${blocked.join(', ')} is still refused` : ''}${blocked.length && left.length ? ', and ' : ''}${left.length ? `${left.join(', ')} still running` : ''}; the node stays cordoned`,
        409,
      );
    }
    await new Promise((resolve) => setTimeout(resolve, refusals.size ? 1000 : 250));
  }
}

/**
 * hangar's availability on a Kubernetes node: schedulable = uncordon, cordoned = cordon, drained =
 * cordon and evict its pods (PodDisruptionBudgets honoured; fails with 409 naming the pods a
 * budget keeps there after `drainTimeoutMs`).
 */
export async function setNodeAvailability(ctx: KubeContext, node: string, availability: NodeAvailability, drainTimeoutMs = DRAIN_TIMEOUT_MS): Promise<{ availability: NodeAvailability }> {
  if (!NODE_AVAILABILITIES.includes(availability)) throw new KubeDriverError(`unknown availability ${JSON.stringify(availability)}: schedulable, cordoned or drained`, 400);
  const current = await readOrNull(`reading node ${node}`, () => ctx.core.readNode({ name: node }));
  if (!current) throw new KubeDriverError(`setting node ${node} to ${availability}: no such node in this cluster`, 404);
  const unschedulable = availability !== 'schedulable';
  // Cordoned first, marked drained only once its pods are gone.
  await attempt(`setting node ${node} to ${availability}`, () =>
    ctx.core.patchNode(
      { name: node, fieldManager: FIELD_MANAGER, body: { spec: { unschedulable }, metadata: { annotations: { [AVAILABILITY_ANNOTATION]: unschedulable ? 'cordoned' : null } } } },
      mergePatch,
    ),
  );
  if (availability === 'drained') {
    await evictAll(ctx, node, drainTimeoutMs);
    const stillThere = async () => (await podsOnNode(ctx, node)).filter((p) => evictable(p) || p.metadata?.deletionTimestamp);
    if (!(await waitUntil(async () => !(await stillThere()).length, drainTimeoutMs))) {
      const left = (await stillThere()).map((p) => `${p.metadata?.namespace}/${p.metadata?.name}`);
      if (left.length) throw new KubeDriverError(`draining node ${node}: after ${drainTimeoutMs / 1000} s ${left.join(', ')} ${left.length === 1 ? 'is' : 'are'} still terminating; the node stays cordoned`, 409);
    }
    await attempt(`marking node ${node} drained`, () =>
      ctx.core.patchNode({ name: node, fieldManager: FIELD_MANAGER, body: { metadata: { annotations: { [AVAILABILITY_ANNOTATION]: 'drained' } } } }, mergePatch),
    );
  }
  return { availability };
}

/** Removes a node object from the cluster (after its machine left); {removed: false} when there is none. */
export async function removeNode(ctx: KubeContext, node: string): Promise<{ removed: boolean }> {
  try {
    await ctx.core.deleteNode({ name: node });
    return { removed: true };
  } catch (err) {
    if (isNotFound(err)) return { removed: false };
    throw failure(`removing node ${node}`, err);
  }
}
