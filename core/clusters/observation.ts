import type { Clock } from '../clock.js';
import type { Logger } from '../log.js';
import { InspectWorkloads, type WorkloadState } from '../orchestrator.js';
import { defineExtensionPoint, type ServiceRegistry } from '../provided.js';
import type { ClusterCalls } from './calls.js';
import type { ClusterDirectory } from './directory.js';
import type { ClusterRecord, ClusterStore } from './store.js';

export interface ObservedCluster {
  cluster: ClusterRecord;
  workloads: WorkloadState[];
  /** When the cluster was asked: a record changed since may be newer than what it answered. */
  askedAt: Date;
  /** Runtime node id → hangar node id. */
  nodeIds: Map<string, string>;
}

/** Called with each cluster observation (the state of every workload on it). */
export const ClusterObservers = defineExtensionPoint<(observed: ObservedCluster) => Promise<void>>('clusters.observers', 'cluster observers');

export interface ObservationDeps {
  clusters: ClusterStore;
  directory: ClusterDirectory;
  calls: ClusterCalls;
  provided: ServiceRegistry;
  log: Logger;
  clock: Clock;
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
        const askedAt = this.deps.clock.now();
        const { workloads } = await this.deps.calls.callOn(cluster, InspectWorkloads, {}, { timeoutMs: Math.max(5000, this.deps.intervalMs()) });
        const observed = { cluster, workloads, askedAt, nodeIds: await this.deps.directory.nodeIdsByRuntime(cluster.id) };
        for (const observer of observers) await observer(observed);
      } catch (err) {
        this.deps.log.warn({ cluster_id: cluster.id, error: (err as Error).message }, 'observing a cluster failed');
      }
    }
  }
}
