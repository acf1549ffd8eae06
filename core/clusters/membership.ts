import { conflict } from '../errors.js';
import type { EventBus } from '../events.js';
import { Reply } from '../http/reply.js';
import { defineLifecycle, REMOVED, type Lifecycle, type Operation } from '../lifecycle.js';
import { SetNodeAvailability, type NodeAvailability } from '../orchestrator.js';
import type { Clusters } from './service.js';
import type { ClusterRecord } from './store.js';

/** A node's availability as drivers take it (the nodes API says `active` for schedulable). */
export const DRIVER_AVAILABILITY: Record<'active' | 'cordoned' | 'drained', NodeAvailability> = { active: 'schedulable', cordoned: 'cordoned', drained: 'drained' };

/** What a backend's cluster plugin tells the shared membership lifecycle. */
export interface MembershipDef {
  /** How operations name the record (`swarm`, `cluster`). */
  noun: string;
  /** The cluster as messages name it: `swarm web`, `Kubernetes cluster web`. */
  describe(cluster: ClusterRecord): string;
  /** Carries out the pending joins and leaves, one at a time, in the order they were asked for. */
  converge(cluster: ClusterRecord, signal: AbortSignal): Promise<void>;
  /** Takes every member out of the cluster (the backend's own order); core forgets the cluster after. */
  removeMembers(cluster: ClusterRecord, signal: AbortSignal): Promise<void>;
}

export interface Membership {
  lifecycle: Lifecycle<ClusterRecord>;
  /** The 409 for a cluster that another operation holds (or that is gone). */
  refused(current: ClusterRecord | null): Error;
  /**
   * A cluster's DELETE: 202 with its view while it is deleted in the background (members leave,
   * then core forgets it), 200 `{id, deleted}` when there was nothing left to remove, 409 naming
   * the workloads on it unless forced (forced, they are removed first).
   */
  requestDelete(cluster: ClusterRecord, force: boolean, view: (cluster: ClusterRecord) => Promise<unknown>): Promise<unknown>;
}

/**
 * The membership lifecycle every cluster backend shares: the `members` operation (the joins and
 * leaves asked for, carried out in order, joining an operation already under way), and deletion
 * with or without force (a deletion taken over runs forced: its 409 check passed when it was asked,
 * and no workload can be added to a deleting cluster).
 */
export function defineMembership(core: Clusters, def: MembershipDef): Membership {
  const described = (c: ClusterRecord) => {
    const text = def.describe(c);
    return text.charAt(0).toUpperCase() + text.slice(1);
  };
  const deletion = (force: boolean): Operation<ClusterRecord> => ({
    from: '*',
    during: 'deleting',
    preempts: true,
    label: (c) => `delete ${def.describe(c)}`,
    async run(c, ctx) {
      if (force) await core.removeWorkloads(c.id);
      await def.removeMembers(c, ctx.signal);
      await core.forget(c.id);
      return REMOVED;
    },
    failed: (_c, err) => ({ status: 'failed', error: `deleting failed: ${err.message}` }),
  });
  const lifecycle = core.lifecycle(
    core.clusters,
    defineLifecycle<ClusterRecord>({
      noun: def.noun,
      operations: {
        members: {
          from: ['empty', 'forming', 'active', 'failed'],
          joins: true,
          label: (c) => `members of ${def.describe(c)}`,
          async run(c, ctx) {
            await def.converge(c, ctx.signal);
            return {};
          },
          failed: () => ({}),
        },
        delete: deletion(false),
        'force-delete': deletion(true),
      },
    }),
  );
  const refused = (c: ClusterRecord | null) => conflict(c ? `${described(c)} is ${c.status}` : `The ${def.noun} is gone`);
  return {
    lifecycle,
    refused,
    async requestDelete(cluster, force, view) {
      if (cluster.status === 'deleting') return Reply.accepted(await view(cluster));
      const running = await core.workloadsIn(cluster.id);
      if (running.length && !force) {
        throw conflict(`${described(cluster)} still runs workloads: ${running.map((w) => `${w.type} ${w.name}`).join(', ')}; remove them or pass force=true`, running);
      }
      if (!(await core.members.of(cluster.id)).length && !running.length) {
        await core.forget(cluster.id);
        return { id: cluster.id, deleted: true };
      }
      return Reply.accepted(await view(await lifecycle.start(cluster.id, force ? 'force-delete' : 'delete', {}, refused)));
    },
  };
}

/**
 * Cordon, drain and uncordon of a node (the nodes API) passed on to the cluster of `backend` it is a
 * member of, in the background; `failed` records what went wrong.
 */
export function followNodeAvailability(core: Clusters, events: EventBus, backend: string, failed: (nodeId: string, err: Error) => Promise<unknown>): void {
  events.subscribe('node.availability', (payload) => {
    const { node } = payload as { node: { id: string; availability: keyof typeof DRIVER_AVAILABILITY } };
    core.jobs.run(
      `${backend} availability of ${node.id}`,
      async () => {
        const member = await core.members.findOne({ node_id: node.id });
        if (!member?.runtime_node_id) return;
        const cluster = await core.clusters.get(member.cluster_id);
        if (!cluster?.manager_node_id || cluster.backend !== backend) return;
        await core.callOn(cluster, SetNodeAvailability, { runtime_node_id: member.runtime_node_id, availability: DRIVER_AVAILABILITY[node.availability] });
      },
      async (err) => {
        await failed(node.id, err);
      },
      { resumable: false },
    );
  });
}
