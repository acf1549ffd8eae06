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
 * reserved ranges, IPv6 unique-local and link-local, and IPv4 inside IPv6 (mapped, NAT64) of those.
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
  ['::', 128],
  ['::1', 128],
  ['fc00::', 7],
  ['fe80::', 10],
  ['ff00::', 8],
] as const) {
  BLOCKED.addSubnet(address, prefix, 'ipv6');
}

/** Whether an IP address is one a webhook may not reach unless allowed. */
export function isPrivateAddress(address: string): boolean {
  const family = net.isIP(address);
  if (family === 4) return BLOCKED.check(address, 'ipv4');
  if (family !== 6) return true;
  const lower = address.toLowerCase();
  // IPv4 carried in IPv6: ::ffff:a.b.c.d (mapped), 64:ff9b::a.b.c.d (NAT64).
  const embedded = /^(?:::ffff:|64:ff9b::)(\d+\.\d+\.\d+\.\d+)$/.exec(lower)?.[1];
  if (embedded) return BLOCKED.check(embedded, 'ipv4');
  const mappedHex = /^::ffff:([0-9a-f]{1,4}):([0-9a-f]{1,4})$/.exec(lower);
  if (mappedHex) {
    const n = (parseInt(mappedHex[1]!, 16) << 16) | parseInt(mappedHex[2]!, 16);
    return BLOCKED.check([n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255].join('.'), 'ipv4');
  }
  return BLOCKED.check(address, 'ipv6');
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
  return ((hostname: string, options: any, callback: any) => {
    dnsLookup(hostname, { ...options, all: true }, (err, addresses) => {
      if (err) return callback(err, '', 0);
      const list = addresses as unknown as Array<{ address: string; family: number }>;
      const bad = list.find((a) => isPrivateAddress(a.address));
      if (bad) return callback(Object.assign(new Error(`${hostname} resolves to ${bad.address}, a private address (notifications.allow_private_addresses is false)`), { code: 'EPRIVATE' }), '', 0);
      if (options?.all) return callback(null, list);
      callback(null, list[0]!.address, list[0]!.family);
    });
  }) as LookupFunction;
}
