import type { Logger } from '../log.js';
import { InspectWorkloads, type WorkloadState } from '../orchestrator.js';
import { defineExtensionPoint, type ServiceRegistry } from '../provided.js';
import type { ClusterCalls } from './calls.js';
import type { ClusterDirectory } from './directory.js';
import type { ClusterRecord, ClusterStore } from './store.js';

export interface ObservedCluster {
  cluster: ClusterRecord;
  workloads: WorkloadState[];
  /** Runtime node id → hangar node id. */
  nodeIds: Map<string, string>;
}

/**
 * An observer of clusters: called with a cluster just before it is asked for its workloads (to read
 * what it will judge the answer against: a record read before the question and written guarded by
 * its revision is never judged by an answer older than a change made meanwhile, whatever the
 * clocks say), it answers what to do with the observation.
 */
export type ClusterObserver = (cluster: ClusterRecord) => Promise<(observed: ObservedCluster) => Promise<void>>;

/** Called with each cluster observation (the state of every workload on it). */
export const ClusterObservers = defineExtensionPoint<ClusterObserver>('clusters.observers', 'cluster observers');

export interface ObservationDeps {
  clusters: ClusterStore;
  directory: ClusterDirectory;
  calls: ClusterCalls;
  provided: ServiceRegistry;
  log: Logger;
  /** How often every active cluster is asked (a call may take that long, 5 s at least). */
  intervalMs(): number;
}

/** The observation of every active cluster (core's `clusters:observe` loop), handed to the observers. */
export class ClusterObservation {
  constructor(private readonly deps: ObservationDeps) {}

  /** Asks every active cluster for the state of its workloads and hands it to the observers. */
  async observe(signal: AbortSignal): Promise<void> {
    const observers = this.deps.provided.contributions(ClusterObservers);
    if (!observers.length) return;
    for (const cluster of await this.deps.clusters.findAll({ status: 'active' })) {
      if (signal.aborted) return;
      try {
        const judges = [];
        for (const observer of observers) judges.push(await observer(cluster));
        const { workloads } = await this.deps.calls.callOn(cluster, InspectWorkloads, {}, { timeoutMs: Math.max(5000, this.deps.intervalMs()) });
        const observed = { cluster, workloads, nodeIds: await this.deps.directory.nodeIdsByRuntime(cluster.id) };
        for (const judge of judges) await judge(observed);
      } catch (err) {
        this.deps.log.warn({ cluster_id: cluster.id, error: (err as Error).message }, 'observing a cluster failed');
      }
    }
  }
}
