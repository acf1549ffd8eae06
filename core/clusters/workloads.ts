import type { StampedRepository } from '../db/repository.js';
import { recordRemover } from '../events.js';
import type { LeasedRecord, Lifecycle } from '../lifecycle.js';
import type { Services } from '../plugin.js';
import { TaggableResources, VolumeUsersPoint, type ResourceResolver, type VolumeUser } from '../resources.js';
import { RouteSources, type RouteProvider } from './routes.js';
import { defineExtensionPoint, type ServiceRegistry } from '../provided.js';
import { ClusterObservers, type ObservedCluster } from './observation.js';

/** A kind of workload plugins run on clusters: named in 409s, removed by forced deletes and cleanup. */
export interface WorkloadKind {
  /** The resource type as cleanup names it: instance, service, s3, loadbalancer. */
  type: string;
  inCluster(clusterId: string): Promise<Array<{ id: string; name: string }>>;
  /** Removes whatever exists of the resource in the runtime, then its record; false when unknown. */
  forceRemove(id: string): Promise<boolean>;
  /** A record by id or name with where it runs in the runtime (kinds that declare {@link WorkloadKindDef.runtime}); null when unknown. */
  runtimeOf?(ref: string): Promise<WorkloadRuntime | null>;
}

/** A workload record and what of the runtime is its: the workloads it runs by name, or the bundles (stacks) whose parts are its. */
export interface WorkloadRuntime {
  type: string;
  id: string;
  name: string;
  cluster_id: string;
  names?: string[];
  stacks?: string[];
}

/** The kinds of workload that run on clusters (compute, services, s3 and the gateway contribute). */
export const ClusterWorkloads = defineExtensionPoint<WorkloadKind>('clusters.workloads', 'workload kinds on clusters');

/** The workloads of every kind on a cluster (what a delete is refused for, what a forced one removes). */
export class ClusterWorkloadKinds {
  constructor(private readonly provided: ServiceRegistry) {}

  private kinds(): readonly WorkloadKind[] {
    return this.provided.contributions(ClusterWorkloads);
  }

  workloadKind(type: string): WorkloadKind | undefined {
    return this.kinds().find((k) => k.type === type);
  }

  /** A workload of any kind that tells where it runs (an instance, a service), by id or by name; null when none is. */
  async findRuntime(ref: string): Promise<WorkloadRuntime | null> {
    for (const kind of this.kinds()) {
      const found = await kind.runtimeOf?.(ref);
      if (found) return found;
    }
    return null;
  }

  /** Everything of every kind running on a cluster. */
  async workloadsIn(clusterId: string): Promise<Array<{ type: string; id: string; name: string }>> {
    const all: Array<{ type: string; id: string; name: string }> = [];
    for (const kind of this.kinds()) for (const w of await kind.inCluster(clusterId)) all.push({ type: kind.type, ...w });
    return all;
  }

  /** Forced removal of every workload of every kind on the cluster. */
  async removeWorkloads(clusterId: string): Promise<void> {
    for (const w of await this.workloadsIn(clusterId)) await this.workloadKind(w.type)!.forceRemove(w.id);
  }
}

/** The record of a workload on a cluster (an instance, a service, an object store, a load balancer). */
export interface WorkloadRecord extends LeasedRecord {
  id: string;
  name: string;
  cluster_id: string;
}

/**
 * A kind of workload a plugin runs on clusters, declared once: defineWorkloadKind registers it
 * everywhere it takes part — the workloads of a cluster (named in its 409s, removed by a forced
 * delete and by cleanup), the observation of every cluster, the load balancer's route sources, the
 * resources tags and cleanup resolve, and the users of volumes. Its lifecycle (`core.lifecycle`)
 * is taken over and resumed by core.
 */
export interface WorkloadKindDef<R extends WorkloadRecord, O> {
  /** The resource type: `instance`, `service`, `s3`, `loadbalancer` (cleanup's path, tags, 409s). */
  type: string;
  store: StampedRepository<R>;
  /** Its lifecycle, made with `services.clusters.lifecycle(store, …)`. */
  lifecycle: Lifecycle<R, O>;
  /** Removes what the runtime has of one record (its cluster without a manager, or gone: nothing). A forced removal ignores its failure. */
  removeRuntime(record: R): Promise<void>;
  /** After one was removed by force (its routes changed…). */
  removed?(record: R): void;
  /** What a cluster's observation says of one record: what its lifecycle's `reconcile` takes. */
  observed(record: R, observation: ObservedCluster): O;
  /** By id, or by name where its paths take names (tags, cleanup). */
  resolve: ResourceResolver;
  /** The routes its records ask the load balancer for (`instance`, `service`, `s3`). */
  routes?: RouteProvider;
  /** Its records that use a volume. */
  volumeUsers?(volumeId: string): Promise<VolumeUser[]>;
  /** What the runtime runs of a record: its workloads by name, or its bundles (where a command runs in one of its containers: a backup's pre and post). */
  runtime?(record: R): { names?: string[]; stacks?: string[] };
}

/** What defineWorkloadKind answers: what the plugin's own operations use. */
export interface WorkloadKindParts {
  /** Removes a record and announces it (`resource.deleted`, for its tags). */
  forget(id: string): Promise<unknown>;
}

export function defineWorkloadKind<R extends WorkloadRecord, O>(services: Services, def: WorkloadKindDef<R, O>): WorkloadKindParts {
  const { provided } = services;
  const removeRecord = recordRemover(services.events, def.type, def.store);
  // Its spec revisions go with it.
  const forget = async (id: string) => {
    const removed = await removeRecord(id);
    await services.clusters.revisions.forget(def.type, id);
    return removed;
  };
  const onCluster = (clusterId: string) => def.store.findAll({ cluster_id: clusterId } as Partial<R>);
  provided.contribute(ClusterWorkloads, {
    type: def.type,
    inCluster: async (clusterId) => (await onCluster(clusterId)).map((r) => ({ id: r.id, name: r.name })),
    async forceRemove(id) {
      const record = await def.store.get(id);
      if (!record) return false;
      await def.removeRuntime(record).catch(() => undefined);
      await forget(id);
      def.removed?.(record);
      return true;
    },
    ...(def.runtime
      ? {
          async runtimeOf(ref: string) {
            const id = await def.resolve(ref);
            const record = id ? await def.store.get(id) : null;
            return record ? { type: def.type, id: record.id, name: record.name, cluster_id: record.cluster_id, ...def.runtime!(record) } : null;
          },
        }
      : {}),
  });
  // What the cluster shows of each record no operation holds (the lifecycle never lets an observation overwrite one).
  provided.contribute(ClusterObservers, async (cluster) => {
    // Read before the cluster is asked: a record an operation holds now, or changes meanwhile (its revision moves), is not judged by the answer.
    const records = await onCluster(cluster.id);
    return async (observation) => {
      for (const record of records) await def.lifecycle.observe(record, def.observed(record, observation));
    };
  });
  provided.contribute(TaggableResources, { type: def.type, resolve: def.resolve });
  if (def.routes) provided.contribute(RouteSources, def.routes);
  if (def.volumeUsers) provided.contribute(VolumeUsersPoint, def.volumeUsers);
  return { forget };
}
