/**
 * The WireGuard overlay as the control plane judges it: what an agent reports of its interface and
 * peers (each heartbeat), what the nodes plugin keeps of it, and whether a node can be reached over
 * it. A node has an overlay address and a WireGuard key as soon as it joins; that does not make the
 * overlay usable: the interface must be up with that address, and a peer must have answered.
 */
import { Type, type Static } from '@sinclair/typebox';
import { Nullable } from './validation.js';

/**
 * A handshake younger than this means the peer answers: WireGuard throws a session's keys away
 * 180 s after its handshake (REJECT_AFTER_TIME) and a tunnel in use (hangar's peers keep theirs
 * alive every 25 s) makes a new one before that.
 */
export const LIVE_HANDSHAKE_SECONDS = 180;

/** How many peers without a live handshake a node's overlay state names (it counts them all). */
const NAMED_UNANSWERED = 16;

/**
 * What an agent older than the summary reports of its overlay interface in a heartbeat: every peer
 * with its latest handshake (up to 4096, sent and validated each heartbeat). The control plane keeps
 * only the summary of it ({@link summarizeOverlay}), which agents now send instead ({@link OverlaySummary}).
 */
export const OverlayPeersReport = Type.Object(
  {
    interface: Type.String({ minLength: 1, maxLength: 15 }),
    up: Type.Boolean({ description: 'the interface exists and is up' }),
    address: Nullable(Type.String({ maxLength: 64, description: 'its IPv4 address, without the prefix length' })),
    checked_at: Type.Integer({ minimum: 0, description: 'when the agent looked, in Unix seconds of the machine’s clock (handshake ages are taken against it)' }),
    peers: Type.Array(
      Type.Object({
        public_key: Type.String({ maxLength: 64 }),
        node_id: Nullable(Type.String({ maxLength: 64, description: 'the node this peer is, from the last peer list the agent applied' })),
        latest_handshake: Type.Integer({ minimum: 0, description: 'Unix seconds of the latest handshake, 0 for none (`wg show hangar0 latest-handshakes`)' }),
      }),
      { maxItems: 4096 },
    ),
  },
  { description: 'the WireGuard overlay interface (hangar0) as an agent older than the summary reports it: each peer' },
);
export type OverlayPeersReport = Static<typeof OverlayPeersReport>;

/** What the control plane keeps of a node's overlay (the `overlay` of a node record and its view). */
export const OverlayState = Type.Object({
  interface: Type.String(),
  up: Type.Boolean({ description: 'the interface exists and is up' }),
  address: Nullable(Type.String({ description: 'the address the interface has (it should be the node’s overlay_ip)' })),
  peers: Type.Integer({ minimum: 0, description: 'WireGuard peers configured on it' }),
  handshakes: Type.Integer({ minimum: 0, description: `peers with a handshake in the last ${LIVE_HANDSHAKE_SECONDS} s (they answer)` }),
  without_handshake: Type.Array(Type.String(), { description: `the first ${NAMED_UNANSWERED} peers that have not answered, by node id (or public key)` }),
});
export type OverlayState = Static<typeof OverlayState>;

/**
 * What an agent reports of its overlay interface in a heartbeat: the summary the control plane keeps
 * ({@link OverlayState}), judged on the machine's clock ({@link summarizeOverlay}), a few hundred
 * bytes whatever the number of peers.
 */
export const OverlaySummary = Type.Object(
  {
    interface: Type.String({ minLength: 1, maxLength: 15 }),
    up: Type.Boolean({ description: 'the interface exists and is up' }),
    address: Nullable(Type.String({ maxLength: 64, description: 'its IPv4 address, without the prefix length' })),
    peers: Type.Integer({ minimum: 0, description: 'WireGuard peers configured on it' }),
    handshakes: Type.Integer({ minimum: 0, description: `peers with a handshake in the last ${LIVE_HANDSHAKE_SECONDS} s (they answer)` }),
    without_handshake: Type.Array(Type.String({ maxLength: 64 }), {
      maxItems: NAMED_UNANSWERED,
      description: `the first ${NAMED_UNANSWERED} peers (sorted) that have not answered, by node id (or public key)`,
    }),
  },
  { additionalProperties: false, description: 'the WireGuard overlay interface (hangar0) as the agent sees it, summarised' },
);
export type OverlaySummary = Static<typeof OverlaySummary>;

/** What a heartbeat's `overlay` may be (absent without `wg`): the summary, or an older agent's peers. */
export const OverlayReport = Type.Union([OverlaySummary, OverlayPeersReport], { description: 'the WireGuard overlay interface (hangar0) as the agent sees it' });
export type OverlayReport = Static<typeof OverlayReport>;

/**
 * What is kept of a report: counts and the peers that do not answer, not the handshake times, so
 * that a heartbeat changes the stored state only when a peer starts or stops answering. The agent
 * makes it of its peers (handshake ages taken against the machine's clock); a summary it sent is
 * kept as it is.
 */
export function summarizeOverlay(report: OverlayReport): OverlayState {
  if (!Array.isArray(report.peers)) {
    const summary = report as OverlaySummary;
    return {
      interface: summary.interface,
      up: summary.up,
      address: summary.address,
      peers: summary.peers,
      handshakes: summary.handshakes,
      without_handshake: [...summary.without_handshake].sort().slice(0, NAMED_UNANSWERED),
    };
  }
  return summarizePeers(report as OverlayPeersReport);
}

function summarizePeers(report: OverlayPeersReport): OverlayState {
  const unanswered: string[] = [];
  let handshakes = 0;
  for (const peer of report.peers) {
    if (handshakeIsLive(peer.latest_handshake, report.checked_at)) handshakes++;
    else unanswered.push(peer.node_id ?? peer.public_key);
  }
  return {
    interface: report.interface,
    up: report.up,
    address: report.address,
    peers: report.peers.length,
    handshakes,
    without_handshake: unanswered.sort().slice(0, NAMED_UNANSWERED),
  };
}

/** Whether a handshake at `latest` (Unix seconds, 0 for none) is live at `now` (the same clock). */
export function handshakeIsLive(latest: number, now: number): boolean {
  return latest > 0 && now - latest <= LIVE_HANDSHAKE_SECONDS;
}

/** The parts of a node record the overlay judgement reads. */
export interface OverlayMember {
  overlay_ip: string | null;
  wg_public_key: string | null;
  overlay?: OverlayState | null;
}

/**
 * Why a node cannot be reached at its overlay address, or null when it can: it has the address and
 * a key, its agent reports the interface up with that address, and a peer has answered.
 */
export function overlayUnusable(node: OverlayMember): string | null {
  if (!node.overlay_ip) return 'it has no overlay address';
  if (!node.wg_public_key) return 'it has no WireGuard key (wg was not installed when it joined)';
  const state = node.overlay;
  if (!state) return `its agent has not reported an overlay interface for ${node.overlay_ip} (no wg on the machine, or an agent older than the overlay reports)`;
  if (!state.up) return `its overlay interface ${state.interface} is down`;
  if (state.address !== node.overlay_ip) return `its overlay interface ${state.interface} has ${state.address ? `the address ${state.address}` : 'no address'}, not ${node.overlay_ip}`;
  if (!state.handshakes) {
    return state.peers
      ? `its overlay (${node.overlay_ip}) has had no WireGuard handshake with any of its ${state.peers} peer${state.peers === 1 ? '' : 's'} in the last ${LIVE_HANDSHAKE_SECONDS} s`
      : `its overlay (${node.overlay_ip}) has no WireGuard peer yet`;
  }
  return null;
}
