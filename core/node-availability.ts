import { defineExtensionPoint } from './provided.js';

/**
 * The extension point through which cordon, drain and uncordon of a node (the nodes plugin's
 * routes) reach the cluster the node is a member of. Defined in core so that core's cluster kit
 * (core/clusters/api.ts) contributes one actor per backend; the nodes plugin reads it at each
 * request and records a node's availability only once its cluster has done what it says.
 */

/** A node's availability in hangar's terms (the nodes API). */
export type HangarAvailability = 'active' | 'cordoned' | 'drained';

/** One availability change asked for through the nodes API. */
export interface AvailabilityChange {
  nodeId: string;
  /** What was asked for. */
  availability: HangarAvailability;
  /** The node's availability when it was asked. */
  from: HangarAvailability;
  /**
   * Records what holds on the node now that its cluster answered: `reached` (what was asked for, or
   * what is true after a failure: a drain that failed after its cordon leaves `cordoned`), and the
   * failure's reason. The actor calls it once the cluster answered, whether or not the request still
   * waits for it.
   */
  settle(reached: HangarAvailability, failure?: string): Promise<void>;
}

/** What a read of the call's task answers (core/tasks/queue.ts `taskView`). */
export interface AvailabilityTask {
  task_id: string;
  status: string;
  [field: string]: unknown;
}

/** The cluster's answer: done (settled), refused (settled; the error is the HTTP answer), or still running after the request's wait (answered 202 with its task). */
export type AvailabilityOutcome = { status: 'done' } | { status: 'failed'; error: Error } | { status: 'running'; task: AvailabilityTask };

/** Passes a change on to the node's cluster; null when the node is in no cluster of this actor's backend. */
export type NodeAvailabilityActor = (change: AvailabilityChange) => Promise<AvailabilityOutcome | null>;

export const NodeAvailabilityActors = defineExtensionPoint<NodeAvailabilityActor>('nodes.availability', 'node availability passed on to clusters');

/**
 * An availability a node's cluster holds that hangar did not set through the nodes API: changed
 * with the cluster's own tools (kubectl cordon, docker node update), or the fresh node object of a
 * node that joined again. The cluster's node is the truth; hangar's record follows it.
 */
export interface ObservedAvailability {
  nodeId: string;
  /** What hangar had recorded when the cluster was asked: the record is changed only while it still says so. */
  recorded: HangarAvailability;
  /** What the cluster holds. */
  availability: HangarAvailability;
  /** The cluster as the node event names it: `Kubernetes cluster web`. */
  source: string;
  /** What happened, when more than "observed" (a removal the cluster refused). */
  reason?: string;
}

/** Records an availability observed in a cluster (the nodes plugin's, with a node event); false when the record had changed meanwhile. */
export type NodeAvailabilityRecorder = (observed: ObservedAvailability) => Promise<boolean>;

export const NodeAvailabilityRecorders = defineExtensionPoint<NodeAvailabilityRecorder>('nodes.availability-observed', 'node availability observed in clusters');

/** Tells the recorders (the nodes plugin) what a cluster holds; true when a record changed. */
export async function recordObservedAvailability(recorders: readonly NodeAvailabilityRecorder[], observed: ObservedAvailability): Promise<boolean> {
  let changed = false;
  for (const record of recorders) changed = (await record(observed)) || changed;
  return changed;
}
