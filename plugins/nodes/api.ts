import { defineServiceRef, type Services } from '../../core/plugin.js';
import type { HeartbeatCadence } from './cadence.js';
import type { NodesConfig } from './config.js';
import type { EventLog } from './events.js';
import type { NodeRecord, NodeStore } from './nodes.js';
import type { OverlayAddresses } from './overlay.js';

/** The nodes plugin's contract: what other plugins import of it (importing this never loads the plugin). */

export type { NodeRecord } from './nodes.js';
/** Request fields and the heartbeat's schema other plugins' routes share with nodes' (schemas only). */
export { heartbeatSchema, IpAddress, NodeName, NodeParams } from './schemas.js';

/** What other plugins (agent-internal, ssh deploy, swarms…) use of this one. */
export interface NodesApi {
  nodes: NodeStore;
  events: EventLog;
  overlay: OverlayAddresses;
  settings: NodesConfig;
  /** The heartbeat interval announced to agents, by fleet size. */
  cadence: HeartbeatCadence;
  /** Applies an agent heartbeat to the node (as just read by the caller); returns the node after it. */
  heartbeat(node: NodeRecord, facts: Record<string, any>): Promise<NodeRecord>;
  /** Queues a fresh peer list to every overlay member. */
  publishPeers(): Promise<void>;
}

export const NodesRef = defineServiceRef<NodesApi>('nodes', 'nodes and their events (the nodes plugin)');

export function nodesOf(services: Services): NodesApi {
  return services.provided.get(NodesRef);
}
