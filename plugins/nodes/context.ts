import type { PluginParts, Services } from '../../core/plugin.js';
import { OverlayPeers } from '../../core/tasks/host-kinds.js';
import { HeartbeatCadence } from './cadence.js';
import type { NodesConfig } from './config.js';
import { NotificationsRef } from '../notifications/api.js';
import { EventLog } from './events.js';
import { NodeStore, nodeStatus, nodeView, type NodeRecord } from './nodes.js';
import { OverlayAddresses } from './overlay.js';

/**
 * What the parts of the nodes plugin share (each part is a file: joining, node records, removal,
 * scheduling, operations, certificates, events, presence): the stores, the settings, and the few
 * operations more than one part needs.
 */
export interface NodesContext {
  services: Services;
  settings: NodesConfig;
  nodes: NodeStore;
  events: EventLog;
  overlay: OverlayAddresses;
  cadence: HeartbeatCadence;
  /** The control plane's clock, as the ISO text the store holds. */
  now(): string;
  /** The facts agents report of each loaded backend's runtime on their machine (`docker`, `k3s`), by name. */
  runtimeFacts: string[];
  /** A node as the API shows it (nodes.ts nodeView with the runtime facts). */
  view(node: NodeRecord): ReturnType<typeof nodeView>;
  /** Changes a node; a change of its status (pending → ready, ready → needs_reboot…) is a node_status_changed event. */
  changeNode(node: NodeRecord, patch: Partial<NodeRecord>, why: string): Promise<NodeRecord>;
  /** Sets what the agent's heartbeats say of the node (online, offline, stopped), through changeNode. */
  setConnection(node: NodeRecord, connection: NodeRecord['connection'], why: string): Promise<NodeRecord>;
  /** Queues a fresh peer list to every overlay member. */
  publishPeers(): Promise<void>;
}

/** A part of the plugin: its routes and loops, in the shape setup() answers. */
export type NodesPart = Pick<PluginParts, 'routes' | 'loops'>;

export function createNodesContext(services: Services, settings: NodesConfig): NodesContext {
  const { db, clock, tasks } = services;
  const nodes = new NodeStore(db, clock);
  const events = new EventLog(db, clock, services.events, () => services.provided.find(NotificationsRef) ?? null, services.log);
  const overlay = new OverlayAddresses(db, clock, settings.overlay_subnet);
  const cadence = new HeartbeatCadence({
    floorSeconds: settings.heartbeat_interval_seconds,
    offlineAfterSeconds: settings.offline_after_seconds,
    maxPerSecond: settings.max_heartbeats_per_second,
    ceilingSeconds: Math.floor(tasks.heartbeatCeilingMs / 1000),
  });

  async function changeNode(node: NodeRecord, patch: Partial<NodeRecord>, why: string): Promise<NodeRecord> {
    const before = nodeStatus(node);
    const after = await nodes.change(node.id, patch);
    if (nodeStatus(after) !== before) {
      await events.record({ nodeId: node.id, kind: 'node_status_changed', message: `${before} → ${nodeStatus(after)}: ${why}`, data: { from: before, to: nodeStatus(after) } });
    }
    return after;
  }

  async function setConnection(node: NodeRecord, connection: NodeRecord['connection'], why: string): Promise<NodeRecord> {
    if (node.connection === connection) return node;
    return changeNode(node, { connection }, why);
  }

  async function publishPeers(): Promise<void> {
    const members = (await nodes.findAll({ removing: false })).filter((n): n is NodeRecord & { wg_public_key: string; overlay_ip: string } => Boolean(n.wg_public_key && n.overlay_ip));
    const peers = members.map((n) => ({
      node_id: n.id,
      public_key: n.wg_public_key,
      endpoint: n.ip_address ? `${n.ip_address.includes(':') ? `[${n.ip_address}]` : n.ip_address}:${n.wg_port ?? settings.overlay_port}` : null,
      allowed_ips: [`${n.overlay_ip}/32`],
    }));
    for (const member of members) {
      await tasks.enqueue({
        nodeId: member.id,
        kind: OverlayPeers,
        payload: { address: `${member.overlay_ip}/${overlay.prefix}`, listen_port: member.wg_port ?? settings.overlay_port, peers: peers.filter((p) => p.node_id !== member.id) },
        replacePending: true,
      });
    }
  }

  const runtimeFacts = services.clusters.backends().flatMap((b) => (b.nodeFact ? [b.nodeFact.name] : []));
  const view = (node: NodeRecord) => nodeView(node, runtimeFacts);
  return { services, settings, nodes, events, overlay, cadence, now: () => clock.now().toISOString(), runtimeFacts, view, changeNode, setConnection, publishPeers };
}
