import type { Knex } from 'knex';
import { defineTopic } from '../../core/events.js';
import { defineServiceRef, type Services } from '../../core/plugin.js';
import type { NodeEvent } from './events.js';
import type { NodeRecord } from './nodes.js';
import type { HeartbeatFacts } from './schemas.js';

/** The nodes plugin's contract: what other plugins import of it (importing this never loads the plugin). */

export type { NodeEvent } from './events.js';
export type { NodeRecord } from './nodes.js';
/** Request fields and the heartbeat's schema other plugins' routes share with nodes' (schemas only). */
export { heartbeatSchema, IpAddress, NodeName, NodeParams, type HeartbeatFacts } from './schemas.js';

/**
 * Node records as other plugins read and write them: these operations, not the store behind them
 * (its queries, transactions and other columns' writes stay the nodes plugin's own).
 */
export interface NodeRecords {
  get(id: string): Promise<NodeRecord | null>;
  /** 404 when unknown. */
  require(id: string): Promise<NodeRecord>;
  /** A node that can still take work: 404 when unknown, 409 while it is being removed. */
  requireLive(id: string): Promise<NodeRecord>;
  /** The nodes with these values (provisioning: a deploy retried on one address). */
  findAll(where: Partial<Pick<NodeRecord, 'ip_address' | 'removing'>>): Promise<NodeRecord[]>;
  /** Inserts a node (provisioning's machine before its agent joins); its status derives from what it is inserted with. */
  insert(values: Partial<NodeRecord>): Promise<NodeRecord>;
  /** The live node at an address, or one inserted with these values when there is none (a deploy): one request at a time per address. */
  atAddress(ipAddress: string, values: Partial<NodeRecord>): Promise<{ node: NodeRecord; made: boolean }>;
  /** Writes a patch and stamps `updated_at`; a patch of a column the status derives from writes the status too. */
  change(id: string, patch: Partial<NodeRecord>): Promise<NodeRecord>;
  /** Deletes the record only (provisioning's pending node of a machine that turned out to be a known one); false when there was none. */
  remove(id: string): Promise<boolean>;
  /** Locks the node's row until `trx` ends: what depends on the node (its grants to projects) written one at a time. */
  lock(id: string, trx: Knex.Transaction): Promise<void>;
}

/** The node event log as other plugins write it. */
export interface NodeEvents {
  record(event: { nodeId?: string | null; identifier?: string | null; kind: string; message?: string | null; data?: Record<string, unknown> | null }): Promise<NodeEvent>;
  /** Moves a machine's events to the node it turned out to be (a redeploy of a known machine). */
  reassign(fromNodeId: string, toNodeId: string): Promise<void>;
}

/** Overlay addresses, leased by holder (a node id). */
export interface OverlayLeases {
  /** The overlay subnet's prefix length. */
  readonly prefix: number;
  /** The holder's address, leased now if it has none. */
  reserve(holder: string): Promise<string>;
  /** Gives the holder's address back; how many were released. */
  release(holder: string): Promise<number>;
}

/** The heartbeat interval announced to agents, by fleet size. */
export interface HeartbeatCadence {
  readonly fleetSize: number;
  readonly intervalSeconds: number;
}

/** What other plugins (agent-internal, provisioning, the cluster plugins…) use of this one. */
export interface NodesApi {
  nodes: NodeRecords;
  events: NodeEvents;
  overlay: OverlayLeases;
  cadence: HeartbeatCadence;
  /** Applies an agent heartbeat to the node (as just read by the caller); returns the node after it. */
  heartbeat(node: NodeRecord, facts: HeartbeatFacts): Promise<NodeRecord>;
  /** Queues a fresh peer list to every overlay member. */
  publishPeers(): Promise<void>;
}

/** A node event was recorded (its record as stored). */
export const NodeEventRecorded = defineTopic<NodeEvent>('node.event');
/** A node's availability (active, cordoned, drained) changed. */
export const NodeAvailabilityChanged = defineTopic<{ node: NodeRecord; availability: NodeRecord['availability'] }>('node.availability');
/** A node's removal began (its record as it is then). */
export const NodeRemoving = defineTopic<NodeRecord>('node.removing');

export const NodesRef = defineServiceRef<NodesApi>('nodes', 'nodes and their events (the nodes plugin)');

export function nodesOf(services: Services): NodesApi {
  return services.provided.get(NodesRef);
}
