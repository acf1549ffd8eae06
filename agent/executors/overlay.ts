import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { onPath } from '../facts.js';
import { summarizeOverlay, type OverlaySummary } from '../../core/overlay.js';
import { runCommand, startDetached } from '../../core/process.js';
import type { KindExecutor } from './types.js';
import type { OverlayPeers } from '../../core/tasks/host-kinds.js';

export const OVERLAY_INTERFACE = 'hangar0';

async function must(command: string, args: string[], what: string): Promise<string> {
  const res = await runCommand(command, args, { timeoutMs: 30_000 });
  if (res.code !== 0) throw new Error(`${what} failed: ${(res.stderr || res.stdout).trim()}`);
  return res.stdout;
}

/** Brings the WireGuard overlay interface in line with the control plane's peer list. */
export const applyPeers: KindExecutor<typeof OverlayPeers> = async ({ payload, dataDir }) => {
  if (!onPath('wg')) throw new Error('WireGuard is not present on this machine (wg not found); the overlay is unavailable here');
  const links = await runCommand('ip', ['link', 'show', OVERLAY_INTERFACE]);
  if (links.code !== 0) {
    const kernel = await runCommand('ip', ['link', 'add', OVERLAY_INTERFACE, 'type', 'wireguard']);
    if (kernel.code !== 0) {
      if (!onPath('wireguard-go')) throw new Error('no WireGuard kernel module and no wireguard-go to fall back to');
      // In the foreground, detached from us: its own daemonizing hands pipes to the child and can hang.
      // wireguard-go refuses to run where the kernel could have WireGuard, unless told otherwise.
      startDetached('wireguard-go', ['--foreground', OVERLAY_INTERFACE], { WG_I_PREFER_BUGGY_USERSPACE_TO_POLISHED_KMOD: '1' });
      const deadline = Date.now() + 10_000;
      while ((await runCommand('ip', ['link', 'show', OVERLAY_INTERFACE])).code !== 0) {
        if (Date.now() > deadline) throw new Error(`wireguard-go did not create ${OVERLAY_INTERFACE} within 10 s`);
        await new Promise((r) => setTimeout(r, 100));
      }
    }
  }
  const keyFile = path.join(dataDir, 'wireguard.key');
  await must('wg', ['set', OVERLAY_INTERFACE, 'private-key', keyFile, 'listen-port', String(payload.listen_port)], 'wg set');
  await must('ip', ['address', 'replace', payload.address, 'dev', OVERLAY_INTERFACE], 'assigning the overlay address');
  await must('ip', ['link', 'set', OVERLAY_INTERFACE, 'up'], 'bringing the overlay up');
  const wanted = new Map<string, { endpoint: string | null; allowed_ips: string[] }>(
    (payload.peers as { public_key: string; endpoint: string | null; allowed_ips: string[] }[]).map((p) => [p.public_key, p]),
  );
  const current = (await must('wg', ['show', OVERLAY_INTERFACE, 'peers'], 'listing peers')).split('\n').filter(Boolean);
  for (const key of current) if (!wanted.has(key)) await must('wg', ['set', OVERLAY_INTERFACE, 'peer', key, 'remove'], 'removing a peer');
  for (const [key, peer] of wanted) {
    const args = ['set', OVERLAY_INTERFACE, 'peer', key, 'allowed-ips', peer.allowed_ips.join(','), 'persistent-keepalive', '25'];
    if (peer.endpoint) args.push('endpoint', peer.endpoint);
    await must('wg', args, `configuring peer ${key.slice(0, 8)}…`);
  }
  writeFileSync(path.join(dataDir, 'peers.json'), JSON.stringify(payload.peers, null, 2));
  return { interface: OVERLAY_INTERFACE, address: payload.address, peers: wanted.size };
};

/** A WireGuard key pair made with `wg`, when it is installed. */
export async function wireguardKeys(): Promise<{ privateKey: string; publicKey: string } | null> {
  if (!onPath('wg')) return null;
  const privateKey = (await must('wg', ['genkey'], 'wg genkey')).trim();
  const publicKey = (await runCommand('wg', ['pubkey'], { input: privateKey })).stdout.trim();
  return { privateKey, publicKey };
}

/** One peer of the overlay interface as `wg show` has it. */
export interface PeerHandshake {
  public_key: string;
  /** Unix seconds of the latest handshake, 0 for none. */
  latest_handshake: number;
  /** `ip:port` it was last heard from or is configured with, null when none. */
  endpoint: string | null;
}

/**
 * The overlay interface's peers with their latest handshakes and endpoints, or null when the
 * interface is not there (or wg is missing).
 */
export async function readPeers(): Promise<PeerHandshake[] | null> {
  if (!onPath('wg')) return null;
  const handshakes = await runCommand('wg', ['show', OVERLAY_INTERFACE, 'latest-handshakes'], { timeoutMs: 5000 });
  if (handshakes.code !== 0) return null;
  const endpoints = await runCommand('wg', ['show', OVERLAY_INTERFACE, 'endpoints'], { timeoutMs: 5000 });
  const endpointOf = new Map(parseColumns(endpoints.code === 0 ? endpoints.stdout : '').map(([key, value]) => [key, value && value !== '(none)' ? value : null]));
  return parseColumns(handshakes.stdout).map(([key, value]) => ({ public_key: key, latest_handshake: Number(value) || 0, endpoint: endpointOf.get(key) ?? null }));
}

/** `wg show <if> <field>` lines: `<public key>\t<value>`. */
function parseColumns(text: string): Array<[string, string]> {
  return text
    .split('\n')
    .map((line) => line.trim().split(/\s+/))
    .filter((cols) => cols.length >= 2 && cols[0])
    .map((cols) => [cols[0]!, cols[1]!]);
}

/** The node of each peer key, from the last peer list applied (peers.json). */
function peerNodes(dataDir: string): Map<string, string> {
  try {
    const peers = JSON.parse(readFileSync(path.join(dataDir, 'peers.json'), 'utf8')) as Array<{ public_key: string; node_id?: string }>;
    return new Map(peers.filter((p) => p.node_id).map((p) => [p.public_key, p.node_id!]));
  } catch {
    return new Map();
  }
}

/**
 * What the heartbeat says of the overlay: the interface up or not, its address, and of its peers
 * (`wg show hangar0 latest-handshakes`) how many there are, how many answer (a live handshake on
 * this machine's clock) and the first that do not — the summary the control plane keeps
 * (core/overlay.ts summarizeOverlay), whatever the number of peers; null when wg is not installed.
 */
export async function overlayReport(dataDir: string): Promise<OverlaySummary | null> {
  if (!onPath('wg') || !onPath('ip')) return null;
  const checkedAt = Math.floor(Date.now() / 1000);
  const link = await runCommand('ip', ['-o', 'link', 'show', 'dev', OVERLAY_INTERFACE], { timeoutMs: 5000 });
  if (link.code !== 0) return summarizeOverlay({ interface: OVERLAY_INTERFACE, up: false, address: null, checked_at: checkedAt, peers: [] });
  const flags = /<([^>]*)>/.exec(link.stdout)?.[1]?.split(',') ?? [];
  const inet = await runCommand('ip', ['-o', '-4', 'address', 'show', 'dev', OVERLAY_INTERFACE], { timeoutMs: 5000 });
  const address = /\binet\s+([0-9.]+)/.exec(inet.stdout)?.[1] ?? null;
  const nodes = peerNodes(dataDir);
  const peers = ((await readPeers()) ?? []).map((p) => ({ public_key: p.public_key, node_id: nodes.get(p.public_key) ?? null, latest_handshake: p.latest_handshake }));
  return summarizeOverlay({ interface: OVERLAY_INTERFACE, up: flags.includes('UP'), address, checked_at: checkedAt, peers });
}
