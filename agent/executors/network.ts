import net from 'node:net';
import { sleep } from '../../core/clock.js';
import type { Logger } from '../../core/log.js';
import { handshakeIsLive } from '../../core/overlay.js';
import type { PathTarget } from '../../core/tasks/host-kinds.js';
import { OVERLAY_INTERFACE, readPeers, type PeerHandshake } from './overlay.js';
import type { KindExecutor } from './types.js';
import type { NetworkConfirmPath } from '../../core/tasks/host-kinds.js';

/** The longest pause between two tries. */
const MAX_PAUSE_MS = 10_000;
/** How long one TCP connection attempt may take. */
const CONNECT_TIMEOUT_MS = 5000;

/** What the check asks of the machine; tests give their own. */
export interface PathProbes {
  /** The overlay interface's peers, or null when there is no such interface. */
  peers(): Promise<PeerHandshake[] | null>;
  /** Resolves when a TCP connection to address:port is accepted (then closed), rejects with why not. */
  connect(address: string, port: number, timeoutMs: number): Promise<void>;
  /** Unix milliseconds. */
  now(): number;
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
}

export const machineProbes: PathProbes = {
  peers: readPeers,
  connect: tcpConnect,
  now: () => Date.now(),
  sleep,
};

function tcpConnect(address: string, port: number, timeoutMs: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host: address, port });
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`no answer within ${Math.round(timeoutMs / 1000)} s`));
    }, timeoutMs);
    socket.once('connect', () => {
      clearTimeout(timer);
      socket.end();
      socket.destroy();
      resolve();
    });
    socket.once('error', (err: NodeJS.ErrnoException) => {
      clearTimeout(timer);
      socket.destroy();
      reject(new Error(err.code === 'ECONNREFUSED' ? 'connection refused' : err.code === 'EHOSTUNREACH' ? 'no route to host' : err.message));
    });
  });
}

/** What is missing on the way to one target, as the last try found it. */
type Missing = { part: 'handshake'; detail: string } | { part: 'tcp'; detail: string };

function who(target: PathTarget): string {
  return target.node_id ? `node ${target.node_id} (${target.address})` : `the machine at ${target.address}`;
}

/** One try at one target: null when it is reached, otherwise what is missing. */
async function tryTarget(target: PathTarget, probes: PathProbes, timeoutMs: number): Promise<Missing | null> {
  if (target.wireguard_public_key) {
    const peers = await probes.peers();
    if (!peers) return { part: 'handshake', detail: `this machine has no overlay interface ${OVERLAY_INTERFACE} (is its overlay up?)` };
    const peer = peers.find((p) => p.public_key === target.wireguard_public_key);
    if (!peer) return { part: 'handshake', detail: `its WireGuard peer is not configured on this machine's ${OVERLAY_INTERFACE} yet` };
    if (!handshakeIsLive(peer.latest_handshake, Math.floor(probes.now() / 1000))) {
      const port = peer.endpoint ? /:(\d+)$/.exec(peer.endpoint)?.[1] : null;
      const last = peer.latest_handshake ? `the last one was ${Math.floor(probes.now() / 1000) - peer.latest_handshake} s ago; ` : '';
      return {
        part: 'handshake',
        detail: `${last}its overlay is down or unreachable on UDP ${port ?? '(no endpoint known)'}${peer.endpoint ? ` (endpoint ${peer.endpoint})` : ''}`,
      };
    }
  }
  try {
    await probes.connect(target.address, target.port, timeoutMs);
    return null;
  } catch (err) {
    return { part: 'tcp', detail: (err as Error).message };
  }
}

function explain(target: PathTarget, missing: Missing, waitedSeconds: number): string {
  if (missing.part === 'handshake') return `no WireGuard handshake with ${who(target)} after ${waitedSeconds} s; ${missing.detail}`;
  const over = target.wireguard_public_key ? ' over the overlay' : '';
  return `${who(target)} did not accept a TCP connection on port ${target.port}${over} after ${waitedSeconds} s (${missing.detail})`;
}

/**
 * Confirms a path from this machine to one of the targets, trying again with a growing pause
 * (1 s, doubling, at most 10 s, with jitter) until `wait_seconds` have passed; then fails naming,
 * for each target, the part of the path that is missing.
 */
export async function confirmPath(
  payload: { targets: PathTarget[]; wait_seconds: number },
  options: { log: Logger; probes?: PathProbes; signal?: AbortSignal },
): Promise<{ node_id: string | null; address: string; port: number; via: 'overlay' | 'address'; attempts: number; waited_seconds: number }> {
  const probes = options.probes ?? machineProbes;
  const started = probes.now();
  const deadline = started + payload.wait_seconds * 1000;
  let missing: Missing[];
  for (let attempt = 1; ; attempt++) {
    missing = [];
    for (const target of payload.targets) {
      const timeoutMs = Math.max(1000, Math.min(CONNECT_TIMEOUT_MS, deadline - probes.now()));
      const found = await tryTarget(target, probes, timeoutMs);
      if (!found) {
        const waited = Math.round((probes.now() - started) / 100) / 10;
        if (attempt > 1) options.log.info({ target: `${target.address}:${target.port}`, attempts: attempt, waited_seconds: waited }, 'path confirmed after retrying');
        return { node_id: target.node_id, address: target.address, port: target.port, via: target.wireguard_public_key ? 'overlay' : 'address', attempts: attempt, waited_seconds: waited };
      }
      missing.push(found);
    }
    const left = deadline - probes.now();
    if (left <= 0 || options.signal?.aborted) break;
    const base = Math.min(MAX_PAUSE_MS, 1000 * 2 ** Math.min(attempt - 1, 10));
    const pause = Math.min(left, base / 2 + Math.random() * (base / 2));
    options.log.info(
      { attempt, missing: missing.map((m, i) => explain(payload.targets[i]!, m, Math.round((probes.now() - started) / 1000))), retry_in_ms: Math.round(pause) },
      'path not confirmed yet; retrying',
    );
    await probes.sleep(pause, options.signal);
  }
  const waited = payload.wait_seconds;
  throw new Error(missing.map((m, i) => explain(payload.targets[i]!, m, waited)).join('; '));
}

export const confirmPathExecutor: KindExecutor<typeof NetworkConfirmPath> = ({ payload, log }) => confirmPath(payload, { log });
