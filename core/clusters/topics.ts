import { defineTopic } from '../events.js';
import type { ClusterRecord, MemberRecord } from './store.js';

/** A node became a member of a cluster (any backend), or stopped being one. */
export const ClusterMemberJoined = defineTopic<{ clusterId: string; nodeId: string }>('cluster.member.joined');
export const ClusterMemberLeft = defineTopic<{ clusterId: string; nodeId: string }>('cluster.member.left');
/** A member's record was removed with its node (the cluster as it is after). */
export const ClusterMemberRemoved = defineTopic<{ cluster: ClusterRecord; member: MemberRecord }>('cluster.member.removed');
/** What a cluster's load balancer routes to changed (an instance, service or object store came, went or moved). */
export const RoutesChanged = defineTopic<{ clusterId: string }>('routes.changed');
