/**
 * The swarm driver's contract: what the control plane's plugins import of it. Nothing here loads
 * dockerode or runs the driver: the membership calls are typed task declarations the swarms plugin
 * queues and the agent's swarm driver answers (membership-calls.ts holds them).
 */
export {
  RuntimeAvailability,
  SWARM_MEMBERSHIP_CALLS,
  SwarmInit,
  SwarmJoin,
  SwarmJoinTokens,
  SwarmLeave,
  SwarmMember,
  SwarmMembers,
  SwarmRemoveMember,
  type SwarmMembership,
} from './membership-calls.js';
