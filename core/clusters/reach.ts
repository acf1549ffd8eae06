import { conflict } from '../errors.js';
import { overlayUnusable, type OverlayMember } from '../overlay.js';
import { NetworkConfirmPath, type PathTarget } from '../tasks/host-kinds.js';
import type { ClusterCalls } from './calls.js';

/** The parts of a node record that say how other members reach it. */
export interface AddressableNode extends OverlayMember {
  id: string;
  ip_address: string | null;
}

/** How other members reach a node: at `address` over `via`, and why not over the overlay when not. */
export interface Reach {
  address: string | null;
  via: 'overlay' | 'address' | null;
  /** Why the overlay is not used (null when it is, or when `advertise` is `address`). */
  overlayUnusable: string | null;
}

export interface ReachDeps {
  calls: ClusterCalls;
  settings(): { advertise: 'overlay' | 'address'; joinPathWaitMs: number };
}

/** How the members of a cluster reach each other: the address a node is advertised at, and the path a joining node confirms. */
export class MemberReach {
  constructor(private readonly deps: ReachDeps) {}

  /**
   * How other members reach a node. With `advertise: overlay`, at its overlay address only while
   * its agent reports the overlay interface up with that address and a peer answering (a live
   * WireGuard handshake): a key and an address alone do not make a path. Otherwise at its own
   * address (`ip_address`), or nowhere (null) when it has none.
   */
  reachOf(node: AddressableNode): Reach {
    const overlay = this.deps.settings().advertise === 'overlay';
    const unusable = overlay ? overlayUnusable(node) : null;
    if (overlay && !unusable) return { address: node.overlay_ip, via: 'overlay', overlayUnusable: null };
    return { address: node.ip_address, via: node.ip_address ? 'address' : null, overlayUnusable: unusable };
  }

  /** The address other members reach a node at (see reachOf), or null when there is none. */
  addressOf(node: AddressableNode): string | null {
    return this.reachOf(node).address;
  }

  /** The address other members reach a node at; a 409 naming what is missing when there is none. */
  requireAddressOf(node: AddressableNode): string {
    const reach = this.reachOf(node);
    if (reach.address) return reach.address;
    const overlay = reach.overlayUnusable ? `its overlay cannot be used (${reach.overlayUnusable}) and ` : '';
    throw conflict(`Node ${node.id} has no address other members can reach: ${overlay}it has no node address (set one with POST /v1/nodes/${node.id}/ip)`);
  }

  /**
   * The target a member confirms its path to before it joins: `node` at `address`:`port`, over the
   * overlay (its WireGuard peer must answer first) when that is the node's overlay address.
   */
  pathTarget(node: AddressableNode | null, address: string, port: number): PathTarget {
    const overlay = !!node && !!node.wg_public_key && address === node.overlay_ip;
    return { node_id: node?.id ?? null, address, port, wireguard_public_key: overlay ? node.wg_public_key : null };
  }

  /**
   * Waits (on the node's agent) until the node reaches one of the targets: a live WireGuard
   * handshake with the target's peer when it is reached over the overlay, then a TCP connection,
   * tried again with backoff for `clusters.join_path_wait_seconds`. Answers the target reached;
   * throws an OrchestratorError naming the part of each path that is missing.
   */
  async confirmPath(nodeId: string, targets: PathTarget[], options: { subject?: string } = {}) {
    const waitSeconds = Math.max(1, Math.round(this.deps.settings().joinPathWaitMs / 1000));
    return this.deps.calls.runTask(nodeId, NetworkConfirmPath, { targets, wait_seconds: waitSeconds }, { subject: options.subject, timeoutMs: waitSeconds * 1000 + 30_000 });
  }
}
