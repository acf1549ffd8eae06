/**
 * The seal: nothing a lab (or any docker network a test makes) sends may leave this machine.
 *
 * A lab machine that dials an address no lab route covers (an overlay address before its
 * WireGuard peer is up, say) follows its default route: the lab container → the host → the host's
 * uplink. The seal stops that at the host: a chain per docker bridge, jumped to from the host's
 * `DOCKER-USER` chain for every packet forwarded *from* that bridge, lets through only packets that
 * go back out of the same bridge (the network's own machines) and DNS to the host's resolvers
 * (from /etc/resolv.conf), and refuses the rest at once: a TCP reset for TCP (the caller sees
 * "connection refused"), an ICMP "administratively prohibited" otherwise. Packets to the host
 * itself are not forwarded, so the host stays reachable.
 *
 *   HANGAR-SEAL-<bridge>:  -o <bridge> RETURN · DNS to each resolver RETURN · tcp REJECT (reset) · REJECT
 *   DOCKER-USER:           -i <bridge> -j HANGAR-SEAL-<bridge>
 *
 * Sealing is idempotent (the chain is rebuilt, the jump added once) and synchronous, so it also
 * runs from exit handlers; unsealing removes the jump and the chain. Needs root and iptables.
 * docs/lab.md ("The seal") says what it allows.
 */
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';

const CHAIN_PREFIX = 'HANGAR-SEAL-';

export class SealError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'SealError';
  }
}

/** Where the rules go: the host's own network namespace unless a named one (`ip netns`) is given. */
export interface SealTarget {
  netns?: string;
}

function iptables(args: string[], target: SealTarget = {}): { code: number; stderr: string; stdout: string } {
  const argv = ['iptables', '-w', '10', ...args];
  const [file, ...rest] = target.netns ? ['ip', 'netns', 'exec', target.netns, ...argv] : argv;
  const result = spawnSync(file!, rest, { encoding: 'utf8', timeout: 30_000 });
  return { code: result.status ?? 1, stdout: result.stdout ?? '', stderr: (result.stderr ?? '') || String(result.error ?? '') };
}

function must(args: string[], target: SealTarget): void {
  const result = iptables(args, target);
  if (result.code !== 0) throw new SealError(`iptables ${args.join(' ')} failed (exit code ${result.code}): ${result.stderr.trim()}`);
}

/** The chain that seals one bridge (iptables allows 28 characters; bridge names have at most 15). */
export function sealChainOf(bridge: string): string {
  if (!/^[\w.-]{1,15}$/.test(bridge)) throw new SealError(`not a network interface name: ${bridge}`);
  return `${CHAIN_PREFIX}${bridge}`;
}

/** The IPv4 name servers of this host (/etc/resolv.conf), loopback ones left out (never forwarded to). */
export function hostResolvers(resolvConf = '/etc/resolv.conf'): string[] {
  let text: string;
  try {
    text = readFileSync(resolvConf, 'utf8');
  } catch {
    return [];
  }
  const found = [...text.matchAll(/^\s*nameserver\s+(\d{1,3}(?:\.\d{1,3}){3})\s*$/gm)].map((m) => m[1]!);
  return [...new Set(found.filter((ip) => !ip.startsWith('127.')))];
}

/** The rules of a bridge's seal chain, in order (each an iptables argument list after `-A <chain>`). */
export function sealRules(bridge: string, resolvers: string[]): string[][] {
  return [
    ['-o', bridge, '-j', 'RETURN'],
    ...resolvers.flatMap((ip) => ['udp', 'tcp'].map((proto) => ['-d', `${ip}/32`, '-p', proto, '--dport', '53', '-j', 'RETURN'])),
    ['-p', 'tcp', '-j', 'REJECT', '--reject-with', 'tcp-reset'],
    ['-j', 'REJECT', '--reject-with', 'icmp-admin-prohibited'],
  ];
}

/** Whether this process can change the host's firewall (root with iptables and docker's DOCKER-USER chain). */
export function sealAvailable(): { ok: boolean; why?: string } {
  if (typeof process.getuid === 'function' && process.getuid() !== 0) return { ok: false, why: 'root (the lab seals its networks with iptables)' };
  const listed = iptables(['-S', 'DOCKER-USER']);
  if (listed.code === 127 || /ENOENT/.test(listed.stderr)) return { ok: false, why: 'iptables (apt-get install iptables), to seal the lab networks' };
  if (listed.code !== 0) return { ok: false, why: `docker's DOCKER-USER chain (iptables -S DOCKER-USER: ${listed.stderr.trim()}), to seal the lab networks` };
  return { ok: true };
}

/** Seals a bridge: only its own network and DNS to the host's resolvers are forwarded. Idempotent. */
export function sealBridge(bridge: string, { resolvers = hostResolvers(), ...target }: SealTarget & { resolvers?: string[] } = {}): void {
  const chain = sealChainOf(bridge);
  if (iptables(['-S', chain], target).code !== 0) must(['-N', chain], target);
  must(['-F', chain], target);
  for (const rule of sealRules(bridge, resolvers)) must(['-A', chain, ...rule], target);
  const jump = ['DOCKER-USER', '-i', bridge, '-j', chain];
  if (iptables(['-C', ...jump], target).code !== 0) must(['-I', ...jump], target);
}

/** Removes a bridge's seal (its jump and chain); nothing happens when there is none. */
export function unsealBridge(bridge: string, target: SealTarget = {}): void {
  const chain = sealChainOf(bridge);
  while (iptables(['-D', 'DOCKER-USER', '-i', bridge, '-j', chain], target).code === 0);
  if (iptables(['-S', chain], target).code === 0) {
    must(['-F', chain], target);
    must(['-X', chain], target);
  }
}

/** The bridges sealed now (from the jumps in DOCKER-USER). */
export function sealedBridges(target: SealTarget = {}): string[] {
  const listed = iptables(['-S', 'DOCKER-USER'], target);
  if (listed.code !== 0) return [];
  return [...listed.stdout.matchAll(new RegExp(`^-A DOCKER-USER -i (\\S+) -j ${CHAIN_PREFIX}\\S+$`, 'gm'))].map((m) => m[1]!);
}

/** The packets a bridge's seal has refused so far (the counters of its REJECT rules). */
export function refusedBy(bridge: string, target: SealTarget = {}): number {
  const listed = iptables(['-L', sealChainOf(bridge), '-n', '-v', '-x'], target);
  if (listed.code !== 0) return 0;
  return listed.stdout
    .split('\n')
    .filter((line) => /\bREJECT\b/.test(line))
    .reduce((sum, line) => sum + Number(line.trim().split(/\s+/)[0] ?? 0), 0);
}

/**
 * The Linux bridge of a docker network, from `docker network inspect` output: its
 * `com.docker.network.bridge.name` option (docker0, docker_gwbridge), else `br-<first 12 of id>`.
 */
export function bridgeOfNetwork(network: { Id: string; Driver?: string; Options?: Record<string, string> | null }): string {
  const named = network.Options?.['com.docker.network.bridge.name'];
  return named || `br-${network.Id.slice(0, 12)}`;
}

/** The bridge of a docker network by name or id (`docker network inspect`, synchronous). */
export function bridgeOf(network: string): string {
  const result = spawnSync('docker', ['network', 'inspect', network], { encoding: 'utf8', timeout: 30_000 });
  if (result.status !== 0) throw new SealError(`docker network inspect ${network} failed: ${(result.stderr ?? '').trim()}`);
  const [inspected] = JSON.parse(result.stdout) as { Id: string; Driver: string; Options?: Record<string, string> | null }[];
  if (!inspected) throw new SealError(`no docker network ${network}`);
  if (inspected.Driver !== 'bridge') throw new SealError(`docker network ${network} is a ${inspected.Driver} network; only bridges are sealed here (an overlay's traffic leaves through docker_gwbridge)`);
  return bridgeOfNetwork(inspected);
}

/** Seals a docker bridge network by name or id; resolves to its bridge. */
export function sealNetwork(network: string): string {
  const bridge = bridgeOf(network);
  sealBridge(bridge);
  return bridge;
}
