import { readFileSync } from 'node:fs';
import { isIP } from 'node:net';
import os from 'node:os';

/** The architectures an agent executable is built for (scripts/build.mjs). */
export const AGENT_ARCHITECTURES = ['amd64', 'arm64'] as const;

const urlOf = (host: string, port: number): string => `https://${isIP(host) === 6 ? `[${host}]` : host}:${port}`;

const DNS_NAME = /^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$/;

/** A word for a POSIX shell, single-quoted (a quote inside is closed, escaped and reopened). */
const shellWord = (text: string): string => `'${text.replace(/'/g, `'\\''`)}'`;

const isLoopback = (host: string): boolean => host === 'localhost' || host.startsWith('127.') || host === '::1';

/** The interfaces Linux routes the default route through (/proc/net/route), best first. */
function defaultRouteInterfaces(): string[] {
  try {
    return readFileSync('/proc/net/route', 'utf8')
      .split('\n')
      .slice(1)
      .map((line) => line.trim().split(/\s+/))
      .filter((cols) => cols[1] === '00000000' && cols[7] === '00000000')
      .sort((a, b) => Number(a[6]) - Number(b[6]))
      .map((cols) => cols[0]!);
  } catch {
    return [];
  }
}

/**
 * This host's own IPv4 addresses a machine elsewhere may reach: not loopback or link-local, those
 * of the default route's interface first, container bridges (docker, br-…, the overlay) last.
 */
export function reachableLocalAddresses(): string[] {
  const preferred = defaultRouteInterfaces();
  const bridge = /^(docker|br-|veth|virbr|cni|flannel|cali|hangar)/;
  const rank = (name: string): number => (preferred.includes(name) ? preferred.indexOf(name) : bridge.test(name) ? 1000 : 100);
  return Object.entries(os.networkInterfaces())
    .sort(([a], [b]) => rank(a) - rank(b))
    .flatMap(([, list]) => (list ?? []).filter((a) => a.family === 'IPv4' && !a.internal && !a.address.startsWith('169.254.')).map((a) => a.address));
}

/**
 * The URLs a machine should join with, best first: `api.public_url` when set; else each of
 * `api.public_addresses`; else the address the request came in on when it is not loopback (an
 * operator's browser or CLI that reached this control plane from elsewhere), then this host's own
 * reachable addresses. Loopback only when there is nothing else.
 */
export function joinUrls(api: { public_url: string | null; public_addresses: string[] }, port: number, requestHost: string): string[] {
  if (api.public_url) return [api.public_url.replace(/\/+$/, '')];
  if (api.public_addresses.length) return [...new Set(api.public_addresses.map((a) => urlOf(a, port)))];
  const host = requestHost.replace(/^\[(.*)\](:\d+)?$/, '$1').replace(/^([^:]+):\d+$/, '$1');
  // The request's Host header names an address only when it is one (an IP, or a DNS name): it goes into a command for a root shell.
  const named = host && !isLoopback(host) && (isIP(host) !== 0 || DNS_NAME.test(host));
  const candidates = [...(named ? [host] : []), ...reachableLocalAddresses()];
  return [...new Set((candidates.length ? candidates : [host || 'localhost']).map((a) => urlOf(a, port)))];
}

/**
 * The one command that joins a machine: download the agent executable (brotli-compressed when curl
 * can take it: a third of the size), then join with the token on stdin. `-k` because the machine
 * does not trust hangar's CA yet: the agent checks the CA against the fingerprint in the token
 * before it sends anything.
 */
export function joinCommand(apiUrl: string, architecture: (typeof AGENT_ARCHITECTURES)[number], token: string): string {
  return (
    `curl -fsSLk --compressed -o hangar-agent ${shellWord(`${apiUrl}/v1/agent/binary?arch=${architecture}`)} && chmod +x hangar-agent && ` +
    `echo ${shellWord(token)} | sudo ./hangar-agent --join --token-stdin --api ${shellWord(apiUrl)} --data-dir /var/lib/hangar-agent`
  );
}
