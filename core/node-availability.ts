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
