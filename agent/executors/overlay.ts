import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { onPath } from '../facts.js';
import { runCommand, startDetached } from '../../core/process.js';
import type { Executor } from './types.js';

export const OVERLAY_INTERFACE = 'hangar0';

async function must(command: string, args: string[], what: string): Promise<string> {
  const res = await runCommand(command, args, { timeoutMs: 30_000 });
  if (res.code !== 0) throw new Error(`${what} failed: ${(res.stderr || res.stdout).trim()}`);
  return res.stdout;
}

/** Brings the WireGuard overlay interface in line with the control plane's peer list. */
export const applyPeers: Executor = async ({ payload, dataDir }) => {
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
