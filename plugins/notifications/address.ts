import { lookup as dnsLookup } from 'node:dns';
import { promises as dns } from 'node:dns';
import net, { type LookupFunction } from 'node:net';
import { badRequest } from '../../core/errors.js';

/** What the receivers of a control plane may be (notifications.allow_http, notifications.allow_private_addresses). */
export interface AddressPolicy {
  allowHttp: boolean;
  allowPrivate: boolean;
}

/**
 * Addresses a webhook may not reach unless allowed (server-side request forgery): loopback,
 * private, carrier-grade NAT, link-local (cloud metadata services), unspecified, multicast and
 * reserved ranges; in IPv6 also unique-local, link-local, the old site-local, multicast, discard-only,
 * local-use NAT64, Teredo and documentation ranges, IPv4-compatible addresses, and any IPv4 address
 * carried inside IPv6 (mapped, translated, NAT64 64:ff9b::/96, 6to4) that is one of the IPv4 ranges.
 */
const BLOCKED = new net.BlockList();
for (const [address, prefix] of [
  ['0.0.0.0', 8],
  ['10.0.0.0', 8],
  ['100.64.0.0', 10],
  ['127.0.0.0', 8],
  ['169.254.0.0', 16],
  ['172.16.0.0', 12],
  ['192.0.0.0', 24],
  ['192.168.0.0', 16],
  ['198.18.0.0', 15],
  ['224.0.0.0', 4],
  ['240.0.0.0', 4],
] as const) {
  BLOCKED.addSubnet(address, prefix, 'ipv4');
}
for (const [address, prefix] of [
  ['100::', 64],
  ['64:ff9b:1::', 48],
  ['2001::', 32],
  ['2001:db8::', 32],
  ['fc00::', 7],
  ['fe80::', 10],
  ['fec0::', 10],
  ['ff00::', 8],
] as const) {
  BLOCKED.addSubnet(address, prefix, 'ipv6');
}

/** The eight 16-bit groups of a valid IPv6 address (a trailing dotted IPv4 part and a %zone allowed). */
function groupsOf(address: string): number[] {
  let text = address.toLowerCase().replace(/%.*$/, '');
  const dotted = /(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(text);
  if (dotted) {
    const [a, b, c, d] = dotted.slice(1).map(Number) as [number, number, number, number];
    text = `${text.slice(0, dotted.index)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const [head, tail] = text.includes('::') ? text.split('::') : [text, undefined];
  const parse = (part: string | undefined) => (part ? part.split(':').map((g) => parseInt(g, 16)) : []);
  const front = parse(head);
  const back = parse(tail);
  return tail === undefined ? front : [...front, ...Array<number>(8 - front.length - back.length).fill(0), ...back];
}

const ipv4Of = (high: number, low: number) => [high >>> 8, high & 255, low >>> 8, low & 255].join('.');

/** Whether an IP address is one a webhook may not reach unless allowed. */
export function isPrivateAddress(address: string): boolean {
  const family = net.isIP(address.replace(/%.*$/, ''));
  if (family === 4) return BLOCKED.check(address, 'ipv4');
  if (family !== 6) return true;
  const g = groupsOf(address);
  const zero = (from: number, to: number) => g.slice(from, to).every((x) => x === 0);
  // ::ffff:a.b.c.d (mapped) and ::ffff:0:a.b.c.d (translated): the IPv4 address is what is reached.
  if (zero(0, 5) && g[5] === 0xffff) return BLOCKED.check(ipv4Of(g[6]!, g[7]!), 'ipv4');
  if (zero(0, 4) && g[4] === 0xffff && g[5] === 0) return BLOCKED.check(ipv4Of(g[6]!, g[7]!), 'ipv4');
  // ::/96: unspecified, loopback and the deprecated IPv4-compatible addresses, none a receiver.
  if (zero(0, 6)) return true;
  // 64:ff9b::/96 (NAT64, RFC 6052): a translator reaches the embedded IPv4 address.
  if (g[0] === 0x64 && g[1] === 0xff9b && zero(2, 6)) return BLOCKED.check(ipv4Of(g[6]!, g[7]!), 'ipv4');
  // 2002::/16 (6to4): the relay reaches the IPv4 address in groups 1 and 2.
  if (g[0] === 0x2002) return BLOCKED.check(ipv4Of(g[1]!, g[2]!), 'ipv4');
  return BLOCKED.check(address.replace(/%.*$/, ''), 'ipv6');
}

const refused = (field: string, message: string) => badRequest(`Validation failed: ${field} ${message}`, [{ path: field, message }]);

/**
 * Checks a receiver's URL as given (400 naming `field`): a URL, https (or http when allowed), no
 * credentials in it, and a host whose every address is public (unless private ones are allowed).
 * Answers the URL normalised.
 */
export async function checkReceiverUrl(value: string, field: string, policy: AddressPolicy): Promise<string> {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw refused(field, 'is not a URL');
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:') throw refused(field, `must be an https:// URL (not ${url.protocol})`);
  if (url.protocol === 'http:' && !policy.allowHttp) throw refused(field, 'must be an https:// URL: plain http is refused unless notifications.allow_http is true');
  if (url.username || url.password) throw refused(field, 'must not carry a user name or password: give credentials as headers');
  if (url.hash) throw refused(field, 'must not have a #fragment');
  if (!policy.allowPrivate) {
    const host = url.hostname.replace(/^\[|\]$/g, '');
    let addresses: string[];
    if (net.isIP(host)) addresses = [host];
    else {
      try {
        addresses = (await dns.lookup(host, { all: true, verbatim: true })).map((a) => a.address);
      } catch (err) {
        throw refused(field, `names a host that does not resolve (${host}: ${(err as NodeJS.ErrnoException).code ?? 'lookup failed'})`);
      }
    }
    const bad = addresses.find(isPrivateAddress);
    if (bad !== undefined) {
      throw refused(field, `resolves to ${bad}, a private, loopback or link-local address: refused unless notifications.allow_private_addresses is true`);
    }
  }
  return url.toString();
}

/**
 * A DNS lookup for outgoing requests that refuses private addresses at connect time too (a name
 * that resolved to a public address when the channel was made and to a private one now: DNS rebinding).
 */
export function guardedLookup(policy: AddressPolicy): LookupFunction | undefined {
  if (policy.allowPrivate) return undefined;
  const lookup: LookupFunction = (hostname, options, callback) => {
    dnsLookup(hostname, { ...options, all: true }, (err, list) => {
      if (err) return callback(err, '', 0);
      const bad = list.find((a) => isPrivateAddress(a.address));
      if (bad) return callback(Object.assign(new Error(`${hostname} resolves to ${bad.address}, a private address (notifications.allow_private_addresses is false)`), { code: 'EPRIVATE' }), '', 0);
      if (options?.all) return callback(null, list);
      callback(null, list[0]!.address, list[0]!.family);
    });
  };
  return lookup;
}
