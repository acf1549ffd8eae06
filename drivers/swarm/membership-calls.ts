/**
 * How machines join and leave a swarm: the swarm backend's membership interface. Each call runs on
 * the machine it concerns (init and join on the joining machine, the others on a manager), as a
 * typed task like the workload calls of core/orchestrator.ts. No plugin but the swarms plugin
 * queues them; the Kubernetes backend has its own (K3sMembership).
 */
import { Type, type Static } from '@sinclair/typebox';
import { TYPED_TASKS_VERSION } from '../../core/orchestrator.js';
import { defineDriverCall, sensitive, type DriverMethods } from '../../core/tasks/kinds.js';

const Nullable = <T extends Parameters<typeof Type.Union>[0][number]>(schema: T) => Type.Union([schema, Type.Null()]);

/** A swarm node's availability as the engine has it (hangar's schedulable / cordoned / drained). */
export const RuntimeAvailability = Type.Union([Type.Literal('active'), Type.Literal('pause'), Type.Literal('drain')]);
export type RuntimeAvailability = Static<typeof RuntimeAvailability>;

export const SwarmMember = Type.Object({
  runtime_node_id: Type.String(),
  hostname: Type.String(),
  address: Nullable(Type.String()),
  role: Type.Union([Type.Literal('manager'), Type.Literal('worker')]),
  state: Type.String(),
  availability: RuntimeAvailability,
  leader: Type.Boolean(),
});
export type SwarmMember = Static<typeof SwarmMember>;

const Advertise = Nullable(Type.String({ minLength: 1 }));
const Name = Type.String({ minLength: 1 });

export const SwarmInit = defineDriverCall({
  name: 'swarm.init',
  description: 'make this engine a single-node swarm (answers the swarm it already manages)',
  lane: 'orchestrator',
  minAgentVersion: TYPED_TASKS_VERSION,
  method: 'init',
  input: Type.Object({ advertise_address: Advertise }),
  result: Type.Object({ cluster_id: Type.String({ minLength: 1 }), runtime_node_id: Type.String({ minLength: 1 }) }),
});

export const SwarmJoinTokens = defineDriverCall({
  name: 'swarm.join-tokens',
  description: 'the swarm’s join tokens and manager addresses',
  lane: 'orchestrator',
  minAgentVersion: TYPED_TASKS_VERSION,
  method: 'joinTokens',
  input: Type.Object({}),
  result: Type.Object({ worker: sensitive(Type.String({ minLength: 1 })), manager: sensitive(Type.String({ minLength: 1 })), managers: Type.Array(Type.String()) }),
});

export const SwarmJoin = defineDriverCall({
  name: 'swarm.join',
  description: 'join this engine to a swarm (answers its node id when it already is in one)',
  lane: 'orchestrator',
  minAgentVersion: TYPED_TASKS_VERSION,
  method: 'join',
  input: Type.Object({ remote_addresses: Type.Array(Type.String({ minLength: 1 }), { minItems: 1 }), token: sensitive(Type.String({ minLength: 1 })), advertise_address: Advertise }),
  result: Type.Object({ runtime_node_id: Type.String({ minLength: 1 }) }),
});

export const SwarmLeave = defineDriverCall({
  name: 'swarm.leave',
  description: 'make this engine leave its swarm',
  lane: 'orchestrator',
  minAgentVersion: TYPED_TASKS_VERSION,
  method: 'leave',
  input: Type.Object({ force: Type.Boolean() }),
  result: Type.Object({ left: Type.Boolean() }),
});

export const SwarmMembers = defineDriverCall({
  name: 'swarm.members',
  description: 'the swarm’s nodes as the manager reports them',
  lane: 'reads',
  minAgentVersion: TYPED_TASKS_VERSION,
  method: 'members',
  input: Type.Object({}),
  result: Type.Object({ members: Type.Array(SwarmMember) }),
});

export const SwarmRemoveMember = defineDriverCall({
  name: 'swarm.remove-member',
  description: 'remove a node entry (after it left, or when it is gone) from the manager’s list',
  lane: 'orchestrator',
  minAgentVersion: TYPED_TASKS_VERSION,
  method: 'removeMember',
  input: Type.Object({ runtime_node_id: Name, force: Type.Boolean() }),
  result: Type.Object({ removed: Type.Boolean() }),
});

export const SWARM_MEMBERSHIP_CALLS = [SwarmInit, SwarmJoinTokens, SwarmJoin, SwarmLeave, SwarmMembers, SwarmRemoveMember] as const;
export type SwarmMembership = DriverMethods<typeof SWARM_MEMBERSHIP_CALLS>;
