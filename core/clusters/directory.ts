import { Type } from '@sinclair/typebox';
import { badRequest, conflict, notFound } from '../errors.js';
import { notice, ResourceDeleted, type EventBus, type Notice } from '../events.js';
import type { Knex } from 'knex';
import { defineExtensionPoint, type ServiceRegistry } from '../provided.js';
import type { ClusterField } from './backend.js';
import { FIELD_NOUNS, type BackendRegistry } from './backend-registry.js';
import type { ClusterRecord, ClusterStore, MemberStore } from './store.js';
import { ClusterMemberRemoved } from './topics.js';

/** The query fields a list takes to show only what runs on one swarm or one Kubernetes cluster (resolve them with filterId). */
export const PlacementFilterQuery = {
  swarm_id: Type.Optional(Type.String({ minLength: 1, maxLength: 100, description: 'only those on this swarm (id or name; 400 when there is no such swarm)' })),
  cluster_id: Type.Optional(Type.String({ minLength: 1, maxLength: 100, description: 'only those on this Kubernetes cluster (id or name; 400 when there is no such cluster)' })),
};

/** Clusters removed by force (cleanup), of each backend with a cluster API (core/clusters/api.ts): by resource type (`swarm`, `cluster`). */
export const ClusterRemovals = defineExtensionPoint<{ type: string; forceRemove(idOrName: string): Promise<boolean> }>('clusters.removals', 'clusters removed by force');
/** Run before a cluster's record is removed, for records that go with it (secrets and configs). */
export const BeforeClusterRemoved = defineExtensionPoint<(clusterId: string) => Promise<void>>('clusters.before-removed', 'records removed with a cluster');
/** Fields added to a cluster's view (the gateway adds `load_balancer`). */
export const ClusterViewFields = defineExtensionPoint<(cluster: ClusterRecord) => Promise<Record<string, unknown>>>('clusters.view', 'cluster view fields');

export interface DirectoryDeps {
  clusters: ClusterStore;
  members: MemberStore;
  registry: BackendRegistry;
  events: EventBus;
  provided: ServiceRegistry;
  /** A member's change written with what the durable listeners of its topic keep of it (its reactions, its notification). */
  keepMemberChange<R>(said: Notice, change: (trx?: Knex.Transaction) => Promise<R>): Promise<R>;
}

/**
 * The clusters' records as requests name them (by id or name, by the field of their backend), their
 * members' records as other parts ask for them, and what goes when a cluster or a node does.
 */
export class ClusterDirectory {
  private readonly backendCache = new Map<string, string>();

  constructor(private readonly deps: DirectoryDeps) {}

  /** By id or name (names are unique), of this backend when one is named; 404 ("No swarm x") otherwise. */
  async require(idOrName: string, backend?: string): Promise<ClusterRecord> {
    const found = await this.deps.clusters.findByIdOrName(idOrName);
    if (!found || (backend && found.backend !== backend)) throw notFound(`No ${backend ? this.deps.registry.naming(backend).noun : 'cluster'} ${idOrName}`);
    return found;
  }

  /** A cluster that takes new work: 409 while it is being deleted. */
  async requireUsable(idOrName: string, backend?: string): Promise<ClusterRecord> {
    const cluster = await this.require(idOrName, backend);
    if (cluster.status === 'deleting') throw conflict(`${this.deps.registry.named(cluster)} is being deleted`);
    return cluster;
  }

  /** A cluster with a manager, for work that runs on it. */
  async requireActive(idOrName: string, backend?: string): Promise<ClusterRecord & { manager_node_id: string }> {
    const cluster = await this.requireUsable(idOrName, backend);
    if (!cluster.manager_node_id) throw conflict(`${this.deps.registry.named(cluster)} has no manager yet: ${this.deps.registry.naming(cluster.backend).joinHint(cluster.id)}`);
    return cluster as ClusterRecord & { manager_node_id: string };
  }

  /**
   * The cluster a request names, the way the API names it: by the field its backend is named by
   * (`swarm_id` a swarm, `cluster_id` a cluster of any other backend), by id or name; 404 when it
   * names none, or one of a backend named by the other field. Active (it has a manager) unless
   * `state` says otherwise.
   */
  async requireTarget(body: { swarm_id?: string; cluster_id?: string }, options: { state?: 'active' | 'usable' | 'any' } = {}): Promise<ClusterRecord> {
    const field: ClusterField = body.swarm_id !== undefined ? 'swarm_id' : 'cluster_id';
    const ref = body[field];
    if (!ref) throw conflict('Name the cluster to run on: swarm_id (a swarm) or cluster_id');
    const found = await this.deps.clusters.findByIdOrName(ref);
    if (!found) throw notFound(`No ${FIELD_NOUNS[field]} ${ref}`);
    const naming = this.deps.registry.naming(found.backend);
    if (naming.field !== field) throw notFound(`No ${FIELD_NOUNS[field]} ${ref} (it is a ${naming.noun}: name it with ${naming.field})`);
    const state = options.state ?? 'active';
    return state === 'any' ? found : state === 'usable' ? this.requireUsable(found.id) : this.requireActive(found.id);
  }

  /**
   * The id of the cluster a list's filter names (`?swarm_id=`, `?cluster_id=`), by id or name as
   * paths take them, of a backend named by that field; a 400 naming the field when there is none,
   * so that a wrong filter is never an empty list.
   */
  async filterId(ref: string, field: ClusterField): Promise<string> {
    const found = await this.deps.clusters.findByIdOrName(ref);
    if (found && this.deps.registry.naming(found.backend).field === field) return found.id;
    const noun = FIELD_NOUNS[field];
    throw badRequest(`Validation failed: query.${field} names no ${noun} (${ref}): give a ${noun}’s id or name`, [{ path: `query.${field}`, message: `names no ${noun}` }]);
  }

  /** The backend of a cluster (never changes, so it is remembered); null when there is no such cluster. */
  async backendOf(clusterId: string): Promise<string | null> {
    const known = this.backendCache.get(clusterId);
    if (known) return known;
    const cluster = await this.deps.clusters.get(clusterId);
    if (cluster) this.backendCache.set(clusterId, cluster.backend);
    return cluster?.backend ?? null;
  }

  /**
   * How an API names the cluster a record lives on: by its backend's field (`swarm_id` for a swarm,
   * as the specification has it; `cluster_id` for the others).
   */
  async placement(clusterId: string): Promise<{ swarm_id: string } | { cluster_id: string }> {
    const backend = await this.backendOf(clusterId);
    return (backend ? this.deps.registry.naming(backend).field : 'cluster_id') === 'swarm_id' ? { swarm_id: clusterId } : { cluster_id: clusterId };
  }

  async nodeIdsByRuntime(clusterId: string): Promise<Map<string, string>> {
    const map = new Map<string, string>();
    for (const m of await this.deps.members.of(clusterId)) if (m.runtime_node_id) map.set(m.runtime_node_id, m.node_id);
    return map;
  }

  /** The clusters a node belongs to, with its role in each. */
  async membershipsOf(nodeId: string): Promise<Array<{ cluster: ClusterRecord; role: 'manager' | 'worker'; manages: boolean }>> {
    const out = [];
    for (const m of await this.deps.members.findAll({ node_id: nodeId })) {
      const cluster = await this.deps.clusters.get(m.cluster_id);
      if (cluster) out.push({ cluster, role: m.role, manages: cluster.manager_node_id === nodeId || m.role === 'manager' });
    }
    return out;
  }

  /**
   * A node is being deleted (forced past its memberships): its member records go; a cluster it
   * managed fails over to another active manager, or is left without one, `failed`, saying so
   * (its records can then be deleted). `cluster.member.removed` is published for each membership,
   * so that the backend's plugin can tidy up the orchestrator's own list where it still can.
   */
  async detachNode(nodeId: string): Promise<void> {
    const { clusters, members } = this.deps;
    for (const member of await members.findAll({ node_id: nodeId })) {
      const cluster = await clusters.get(member.cluster_id);
      if (!cluster) {
        await members.remove(member.id);
        continue;
      }
      let patch: Partial<ClusterRecord> = {};
      if (cluster.manager_node_id === nodeId) {
        const next = (await members.of(cluster.id)).find((m) => m.role === 'manager' && m.status === 'active' && m.node_id !== nodeId);
        const noun = this.deps.registry.nounOf(cluster);
        patch = next
          ? { manager_node_id: next.node_id }
          : {
              manager_node_id: null,
              status: 'failed',
              error: `its manager, node ${nodeId}, was deleted; delete the ${noun} (force=true) to remove what hangar recorded of it, or join a node to start it anew`,
            };
      }
      // The member goes, its cluster changes and what reacts to it is kept, in one transaction.
      const removed = { cluster: { ...cluster, ...patch }, member };
      await this.deps.keepMemberChange(notice(ClusterMemberRemoved, removed), async (trx) => {
        await members.remove(member.id, trx);
        if (Object.keys(patch).length) await clusters.change(cluster.id, patch, trx);
      });
      this.deps.events.publish(ClusterMemberRemoved, { ...removed, cluster: (await clusters.get(cluster.id)) ?? removed.cluster });
    }
  }

  /** Fields other plugins add to a cluster's view. */
  async viewFields(cluster: ClusterRecord): Promise<Record<string, unknown>> {
    let extra: Record<string, unknown> = {};
    for (const extend of this.deps.provided.contributions(ClusterViewFields)) extra = { ...extra, ...(await extend(cluster)) };
    return extra;
  }

  /** Removes a cluster's record (and what goes with it); announces `resource.deleted` for its tags. */
  async forget(clusterId: string): Promise<boolean> {
    const cluster = await this.deps.clusters.get(clusterId);
    for (const hook of this.deps.provided.contributions(BeforeClusterRemoved)) await hook(clusterId);
    const removed = await this.deps.clusters.remove(clusterId);
    this.backendCache.delete(clusterId);
    if (removed && cluster) this.deps.events.publish(ResourceDeleted, { type: this.deps.registry.naming(cluster.backend).resourceType, id: clusterId });
    return removed;
  }
}
