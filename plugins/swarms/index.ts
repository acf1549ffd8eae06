import { Type, type Static } from '@sinclair/typebox';
import { conflict } from '../../core/errors.js';
import { SetNodeAvailability } from '../../core/orchestrator.js';
import { SwarmInit, SwarmJoin, SwarmJoinTokens, SwarmLeave, SwarmMembers, SwarmRemoveMember } from '../../drivers/swarm/api.js';
import { defineClusterApi } from '../../core/clusters/api.js';
import { definePlugin } from '../../core/plugin.js';
import type { ClusterRecord, MemberRecord } from '../../core/clusters/store.js';
import type { DriverCall } from '../../core/tasks/kinds.js';
import { NetworkConfirmPath, type PathTarget } from '../../core/tasks/host-kinds.js';
import { NodesRef, nodesOf } from '../nodes/api.js';
import { SwarmsConfigSchema, SwarmsRef, type SwarmsApi, type SwarmsConfig } from './api.js';
import { DnsName } from '../../core/http/resources.js';
import { sleep } from '../../core/clock.js';
import { TaggableResources } from '../tags/api.js';
import { ClusterMemberJoined, ClusterMemberLeft, ClusterMemberRemoved } from '../../core/clusters/topics.js';
import { defineReaction } from '../../core/reactions.js';

const BACKEND = 'swarm';
/** The port a swarm manager takes joins on (its listen address is 0.0.0.0:2377). */
const SWARM_PORT = 2377;

/** `10.0.0.1:2377` or `[fd00::1]:2377` → host and port (the swarm's port when none is given). */
function splitHostPort(remote: string): { host: string; port: number } {
  const m = /^\[([^\]]+)\](?::(\d+))?$/.exec(remote) ?? /^([^:]+)(?::(\d+))?$/.exec(remote);
  if (!m) return { host: remote, port: SWARM_PORT };
  return { host: m[1]!, port: m[2] ? Number(m[2]) : SWARM_PORT };
}

function joinHostPort(host: string, port: number): string {
  return host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
}

/** A swarm node's availability as the engine has it, in hangar's terms. */
const HANGAR_AVAILABILITY = { active: 'active', pause: 'cordoned', drain: 'drained' } as const;

function memberView(m: MemberRecord) {
  return { node_id: m.node_id, role: m.role, status: m.status, runtime_node_id: m.runtime_node_id, advertise_address: m.advertise_address, error: m.error, joined_at: m.created_at };
}

/**
 * Swarm groups: clusters of backend swarm (`/v1/swarms`, core/clusters/api.ts), whose membership
 * hangar drives through the agents: the first node initialises the swarm, the others join with its
 * token once their path to a manager is confirmed; a worker is drained before it leaves.
 */
export default definePlugin({
  name: 'swarms',
  description: 'Docker Swarm groups: membership through the agents, node availability',
  configSchema: SwarmsConfigSchema,
  deps: [NodesRef],
  provides: [SwarmsRef],
  setup(services) {
    const { clusters: core } = services;
    const settings = services.config.swarms as SwarmsConfig;
    core.tune({
      callTimeoutMs: settings.call_timeout_seconds && settings.call_timeout_seconds * 1000,
      observeIntervalMs: settings.observe_interval_seconds && settings.observe_interval_seconds * 1000,
      localDomain: settings.local_domain,
      advertise: settings.advertise,
    });
    const { nodes, events } = nodesOf(services);
    const { clusters: swarms, members } = core;
    const call = <C extends DriverCall>(nodeId: string, kind: C, input: Static<C['input']>, options: { subject: string; timeoutMs?: number }) =>
      core.call(nodeId, kind, input, { ...options, backend: BACKEND });

    async function recordNodeEvent(nodeId: string, kind: string, message: string, data?: Record<string, unknown>) {
      await events.record({ nodeId, kind, message, data });
    }

    /**
     * Where a joining node reaches the swarm's managers: the addresses the swarm gives (its remote
     * managers), the current manager first, each with the hangar node it belongs to (so that an
     * overlay address is confirmed by a WireGuard handshake with that node's peer).
     */
    async function managerTargets(swarm: ClusterRecord, remotes: string[]): Promise<PathTarget[]> {
      const managers = (await members.of(swarm.id)).filter((m) => m.role === 'manager' && m.status === 'active');
      const known = (await Promise.all(managers.map(async (m) => ({ member: m, node: await nodes.get(m.node_id) })))).sort(
        (a, b) => Number(b.member.node_id === swarm.manager_node_id) - Number(a.member.node_id === swarm.manager_node_id),
      );
      const listed = remotes.length ? remotes : known.filter((k) => k.member.advertise_address).map((k) => `${k.member.advertise_address}:${SWARM_PORT}`);
      const targets = listed.map((remote) => {
        const { host, port } = splitHostPort(remote);
        const owner = known.find((k) => k.member.advertise_address === host || k.node?.overlay_ip === host || k.node?.ip_address === host);
        return { rank: owner ? known.indexOf(owner) : known.length, target: core.pathTarget(owner?.node ?? null, host, port) };
      });
      return targets.sort((a, b) => a.rank - b.rank).map((t) => t.target);
    }

    /** A join: the first node initialises the swarm and manages it; the others join with the manager's token. */
    async function join(swarm: ClusterRecord, member: MemberRecord): Promise<void> {
      const node = await nodes.get(member.node_id);
      if (!node) throw new Error(`node ${member.node_id} is gone`);
      // The overlay address only while the node's overlay works; otherwise its own address, or a refusal saying what is missing.
      const reach = core.reachOf(node);
      const advertise = core.requireAddressOf(node);
      const advertised = reach.overlayUnusable ? `, advertising its node address ${advertise} (its overlay is not used: ${reach.overlayUnusable})` : `, advertising ${advertise}`;
      if (!swarm.manager_node_id) {
        if (member.role !== 'manager' || (await members.of(swarm.id)).some((m) => m.status === 'active')) {
          throw new Error(`swarm ${swarm.name} has no manager to join (its first node did not initialise it); join this node again once the swarm is active`);
        }
        try {
          const result = await call(node.id, SwarmInit, { advertise_address: advertise }, { subject: swarm.id });
          await core.memberJoined(member, { role: 'manager', runtime_node_id: result.runtime_node_id, advertise_address: advertise, error: null });
          await swarms.change(swarm.id, { status: 'active', manager_node_id: node.id, runtime_id: result.cluster_id, error: null });
        } catch (err) {
          await swarms.change(swarm.id, { status: 'failed', error: `initialising the swarm on ${node.id} failed: ${(err as Error).message}` });
          throw err;
        }
      } else {
        const tokens = await core.callOn(swarm, SwarmJoinTokens, {});
        const targets = await managerTargets(swarm, tokens.managers);
        if (!targets.length) throw new Error(`swarm ${swarm.name}'s managers advertise no address to join at`);
        // The path to a manager first (the overlay's handshake, then the swarm port), retried for a while:
        // a join attempted before the path exists fails at once and leaves the engine half joined.
        const reached = await core.confirmPath(node.id, targets, { subject: swarm.id });
        const first = targets.find((t) => t.address === reached.address && t.port === reached.port) ?? targets[0]!;
        await recordNodeEvent(
          node.id,
          'swarm_join_path',
          `reached ${first.node_id ? `manager ${first.node_id}` : 'the manager'} at ${joinHostPort(first.address, first.port)} over ${first.wireguard_public_key ? 'the overlay' : 'the node network'} after ${reached.attempts} attempt${reached.attempts === 1 ? '' : 's'} (${reached.waited_seconds} s)`,
          { swarm_id: swarm.id, attempts: reached.attempts, waited_seconds: reached.waited_seconds },
        );
        const remotes = [first, ...targets.filter((t) => t !== first)].map((t) => joinHostPort(t.address, t.port));
        const token = member.role === 'manager' ? tokens.manager : tokens.worker;
        const result = await call(node.id, SwarmJoin, { remote_addresses: remotes, token, advertise_address: advertise }, { subject: swarm.id });
        await core.memberJoined(member, { runtime_node_id: result.runtime_node_id, advertise_address: advertise, error: null });
      }
      await recordNodeEvent(node.id, 'swarm_joined', `joined swarm ${swarm.name} as ${member.role}${advertised}`, { swarm_id: swarm.id, advertise_address: advertise });
      services.events.publish(ClusterMemberJoined, { clusterId: swarm.id, nodeId: node.id });
    }

    /** A leave: a worker is drained first; the manager leaves last. */
    async function leave(swarm: ClusterRecord, member: MemberRecord, signal: AbortSignal): Promise<void> {
      const isManager = swarm.manager_node_id === member.node_id;
      if (member.runtime_node_id && !isManager && swarm.manager_node_id) {
        // Best effort: a node the manager no longer knows (a leave taken over after removeMember) has nothing to drain.
        const drained = await core.callOn(swarm, SetNodeAvailability, { runtime_node_id: member.runtime_node_id, availability: 'drained' }).then(
          () => true,
          async (err: Error) => {
            await recordNodeEvent(member.node_id, 'swarm_drain_failed', `draining before leaving swarm ${swarm.name} failed: ${err.message}`, { swarm_id: swarm.id });
            return false;
          },
        );
        if (drained) await sleep(settings.drain_wait_seconds * 1000, signal);
      }
      if (member.status !== 'failed' || member.runtime_node_id) {
        await call(member.node_id, SwarmLeave, { force: isManager }, { subject: swarm.id }).catch(async (err: Error) => {
          // A machine that is gone cannot leave by itself; the manager forgets it below.
          await recordNodeEvent(member.node_id, 'swarm_leave_failed', `leaving swarm ${swarm.name} on the machine failed: ${err.message}`, { swarm_id: swarm.id });
        });
      }
      if (!isManager && member.runtime_node_id && swarm.manager_node_id) {
        await core.callOn(swarm, SwarmRemoveMember, { runtime_node_id: member.runtime_node_id, force: true });
      }
      await core.memberLeft(member);
      if (isManager) {
        const rest = await members.of(swarm.id);
        const next = rest.find((m) => m.role === 'manager' && m.status === 'active');
        await swarms.change(swarm.id, next ? { manager_node_id: next.node_id } : { manager_node_id: null, runtime_id: null, status: swarm.status === 'deleting' ? 'deleting' : 'empty' });
      }
      await recordNodeEvent(member.node_id, 'swarm_left', `left swarm ${swarm.name}`, { swarm_id: swarm.id });
      services.events.publish(ClusterMemberLeft, { clusterId: swarm.id, nodeId: member.node_id });
    }

    const clusterApi = defineClusterApi(services, {
      backend: BACKEND,
      nodes: { nodes, events },
      memberView,
      view: (swarm, list) => {
        const manager = list.find((m) => m.node_id === swarm.manager_node_id) ?? null;
        return { manager: manager ? memberView(manager) : null, members: list.map(memberView), load_balancer: null };
      },
      create: { summary: 'Create an empty swarm group', body: Type.Object({ name: DnsName }, { additionalProperties: false }), status: 201 },
      summaries: {
        list: 'List swarm groups',
        get: 'Get a swarm group: manager, members, load balancer, status',
        delete: 'Delete a swarm group: 202 while its nodes leave, 200 when nothing was left; 409 while workloads run unless forced',
      },
      members: {
        path: 'members',
        summary: 'List members with their state and availability as the swarm reports them',
        report: { call: SwarmMembers, members: (answer) => answer.members, by: 'manager' },
        fields: (r, unanswered) => ({ hostname: r?.hostname ?? null, state: r?.state ?? (unanswered ? 'unknown' : null), availability: r?.availability ?? null, leader: r?.leader ?? false }),
        // The engine's node availability is the truth: active, pause (cordoned), drain (drained).
        availability: (r) => HANGAR_AVAILABILITY[r.availability],
        readiness: (r) => ({ ready: r.state === 'ready', reason: r.state === 'ready' ? null : `the swarm reports its node ${r.state}` }),
      },
      join: { path: 'join', summary: 'Add a node: the first initialises the swarm and manages it, later ones join as workers (or managers)', roles: true },
      leave: {
        method: 'POST',
        path: 'leave',
        summary: 'Remove a node: a worker is drained and leaves; the last manager may leave only an empty swarm',
        async refuse(swarm, member) {
          if (swarm.manager_node_id !== member.node_id) return;
          const others = (await members.of(swarm.id)).filter((m) => m.id !== member.id);
          const otherManagers = others.filter((m) => m.role === 'manager' && m.status === 'active');
          if (!otherManagers.length && others.length) {
            throw conflict(`Node ${member.node_id} is the last manager of swarm ${swarm.name}; remove the other members first: ${others.map((m) => m.node_id).join(', ')}`);
          }
          if (!otherManagers.length) {
            const running = await core.workloadsIn(swarm.id);
            if (running.length) throw conflict(`Swarm ${swarm.name} still runs workloads: ${running.map((w) => `${w.type} ${w.name}`).join(', ')}; remove them first`, running);
          }
        },
      },
      joinKinds: [SwarmInit, SwarmJoin, SwarmLeave, NetworkConfirmPath],
      // Members reach each other at this address (its overlay's while it works): a 409 naming what is missing.
      checkNode: (node) => core.requireAddressOf(node),
      // init and join answer what the engine already has, leave is a no-op off a swarm.
      joinMember: (swarm, member) => join(swarm, member),
      leaveMember: leave,
      // Workers leave, then the manager.
      async removeMembers(swarm, signal) {
        const list = await members.of(swarm.id);
        const ordered = [...list.filter((m) => m.node_id !== swarm.manager_node_id), ...list.filter((m) => m.node_id === swarm.manager_node_id)];
        for (const m of ordered) await leave((await swarms.get(swarm.id))!, m, signal);
      },
      // Forced: every member's engine leaves the swarm at once, wherever it still answers.
      async abandon(swarm) {
        for (const m of await members.of(swarm.id)) {
          if (m.runtime_node_id) await call(m.node_id, SwarmLeave, { force: true }, { subject: swarm.id, timeoutMs: 30_000 }).catch(() => undefined);
        }
      },
    });

    const api: SwarmsApi = { settings };
    services.provided.provide(SwarmsRef, api);
    services.provided.contribute(TaggableResources, {
      type: 'swarm',
      resolve: async (ref) => {
        const swarm = await swarms.findByIdOrName(ref);
        return swarm?.backend === BACKEND ? swarm.id : null;
      },
    });

    // A member node deleted by force: the manager forgets it too, where there is still a manager to ask (the one it has when the reaction runs).
    defineReaction(services, {
      name: 'swarms:forget-removed-member',
      on: {
        topic: ClusterMemberRemoved,
        keep: ({ cluster, member }) => (cluster.backend === BACKEND && member.runtime_node_id ? { swarmId: cluster.id, nodeId: member.node_id, runtimeNodeId: member.runtime_node_id } : null),
      },
      label: ({ swarmId, nodeId }) => `forget ${nodeId} in swarm ${swarmId}`,
      async run({ swarmId, runtimeNodeId }) {
        const swarm = await swarms.get(swarmId);
        if (!swarm?.manager_node_id) return;
        await core.callOn(swarm, SwarmRemoveMember, { runtime_node_id: runtimeNodeId, force: true });
      },
      failure: 'removing a deleted node from the swarm’s list failed',
    });

    return { routes: clusterApi.routes };
  },
});
