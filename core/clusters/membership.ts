import { sleep } from '../clock.js';
import { conflict } from '../errors.js';
import { Reply } from '../http/reply.js';
import { defineLifecycle, REMOVED, type Lifecycle, type Operation } from '../lifecycle.js';
import type { AvailabilityOutcome, AvailabilityTask, HangarAvailability, NodeAvailabilityActor } from '../node-availability.js';
import { ScanUnmanaged, SetNodeAvailability, type NodeAvailability, type UnmanagedResource } from '../orchestrator.js';
import { taskView } from '../tasks/queue.js';
import { asHttpError, OrchestratorError, type CallOptions } from './calls.js';
import type { Clusters } from './service.js';
import type { ClusterRecord } from './store.js';

/** A node's availability as drivers take it (the nodes API says `active` for schedulable). */
export const DRIVER_AVAILABILITY: Record<'active' | 'cordoned' | 'drained', NodeAvailability> = { active: 'schedulable', cordoned: 'cordoned', drained: 'drained' };

/** `, in namespaces a, b` for workloads of a backend with namespaces (none named: nothing). */
function namespacesOf(resources: UnmanagedResource[]): string {
  const namespaces = [...new Set(resources.map((r) => r.namespace).filter((n): n is string => !!n))].sort();
  return namespaces.length ? `, in namespace${namespaces.length === 1 ? '' : 's'} ${namespaces.join(', ')}` : '';
}

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
  /**
   * What the cluster runs that hangar did not create, on a backend whose deletion destroys it
   * (asked through its manager's unmanaged scan); a cluster that cannot be asked is a 409 saying so.
   */
  async function unmanagedOn(cluster: ClusterRecord): Promise<UnmanagedResource[]> {
    if (!cluster.manager_node_id || !core.backend(cluster.backend).deleteChecksUnmanaged) return [];
    try {
      return (await core.callOn(cluster, ScanUnmanaged, {})).resources;
    } catch (err) {
      if (!(err instanceof OrchestratorError)) throw err;
      throw conflict(`${described(cluster)} could not be asked what it runs (${err.message}); deleting it destroys every workload on it: pass force=true to delete it anyway`);
    }
  }
  const refused = (c: ClusterRecord | null) => conflict(c ? `${described(c)} is ${c.status}` : `The ${def.noun} is gone`);
  return {
    lifecycle,
    refused,
    async requestDelete(cluster, force, view) {
      if (cluster.status === 'deleting') return Reply.accepted(await view(cluster));
      const running = await core.workloadsIn(cluster.id);
      // Refused already for hangar's own workloads: the manager is not asked (it may not answer at all).
      const unmanaged = force || running.length ? [] : await unmanagedOn(cluster);
      if ((running.length || unmanaged.length) && !force) {
        const parts = [
          ...(running.length ? [`still runs workloads: ${running.map((w) => `${w.type} ${w.name}`).join(', ')}`] : []),
          ...(unmanaged.length ? [`${running.length ? 'and ' : ''}runs workloads hangar did not create${namespacesOf(unmanaged)}: ${unmanaged.map((r) => `${r.kind} ${r.name}`).join(', ')} (deleting the ${def.noun} destroys them)`] : []),
        ];
        const details = [...running, ...unmanaged.map((r) => ({ type: r.kind, id: r.id, name: r.name, ...(r.namespace ? { namespace: r.namespace } : {}), managed: false }))];
        throw conflict(`${described(cluster)} ${parts.join('; ')}; remove them or pass force=true`, details);
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
 * Cordon, drain and uncordon of a node (the nodes API) passed on to the cluster of `backend` it is
 * a member of, as the nodes plugin's actor (core/node-availability.ts): the availability is
 * recorded once the cluster has done it. A drain cordons first (when the node is schedulable), so a
 * drain the cluster refuses (a PodDisruptionBudget) leaves the node cordoned, as hangar then says.
 * The request waits up to `clusters.availability_wait_seconds` for the cluster's answer: done (the
 * node's new availability), refused (409 with the cluster's reason), or still running (202 with
 * the call's task, read once; the outcome is recorded when it comes, in the background).
 */
export function nodeAvailabilityActor(core: Clusters, backend: string, describe: (cluster: ClusterRecord) => string): NodeAvailabilityActor {
  return async (change) => {
    const member = await core.members.findOne({ node_id: change.nodeId });
    if (!member?.runtime_node_id || member.status !== 'active') return null;
    const cluster = await core.clusters.get(member.cluster_id);
    if (!cluster?.manager_node_id || cluster.backend !== backend) return null;
    const verb = change.availability === 'active' ? 'uncordoning' : change.availability === 'cordoned' ? 'cordoning' : 'draining';
    const what = `${verb} node ${change.nodeId} in ${describe(cluster)}`;
    const drainSeconds = core.settings.drainTimeoutSeconds;
    const call = (availability: HangarAvailability, options: Omit<CallOptions, 'pickupTimeoutMs'> = {}) =>
      core.callOn(
        cluster,
        SetNodeAvailability,
        {
          runtime_node_id: member.runtime_node_id!,
          availability: DRIVER_AVAILABILITY[availability],
          ...(availability === 'drained' && drainSeconds ? { drain_timeout_seconds: drainSeconds } : {}),
        },
        {
          ...options,
          subject: change.nodeId,
          // A drain may wait for evictions, then for the evicted pods to go, each up to its timeout.
          ...(availability === 'drained' && drainSeconds ? { timeoutMs: Math.max(core.settings.callTimeoutMs, (2 * drainSeconds + 30) * 1000) } : {}),
        },
      );

    let answered = false;
    let reached = change.from;
    let asked = false;
    let onTask: (task: AvailabilityTask) => void = () => undefined;
    const queued = new Promise<AvailabilityTask>((resolve) => (onTask = resolve));
    const outcome = new Promise<AvailabilityOutcome>((resolve) => {
      core.jobs.run(
        what,
        async () => {
          if (change.availability === 'drained' && change.from === 'active') {
            await call('cordoned');
            await change.settle((reached = 'cordoned'));
          }
          asked = true;
          await call(change.availability, { onQueued: (task) => onTask(taskView(task)), keep: () => answered });
          await change.settle(change.availability);
          resolve({ status: 'done' });
        },
        async (err) => {
          const error = asHttpError(err, what);
          // The backend cordons a node before it drains it: a drain it ran and refused leaves the node cordoned.
          if (asked && change.availability === 'drained' && !(err instanceof OrchestratorError && err.unreachable)) reached = 'cordoned';
          await change.settle(reached, error.message);
          resolve({ status: 'failed', error });
        },
        { resumable: false },
      );
    });
    const early = await Promise.race([outcome, sleep(core.settings.availabilityWaitMs ?? 10_000).then(() => null)]);
    if (early) return early;
    const late = await Promise.race([outcome, queued]);
    if ('task_id' in late) {
      answered = true;
      return { status: 'running', task: late };
    }
    return late;
  };
}
