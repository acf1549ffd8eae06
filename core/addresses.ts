/**
 * Who a client address is, for what is counted or capped per address (rate limits, lockouts, body
 * slots, event streams, the anonymous audit flood): an IPv4 address is itself; an IPv6 address is
 * its /64, since one machine, or one customer of a provider, usually has a whole /64 to pick
 * addresses from (counted one by one, a /64 is 2^64 fresh addresses).
 */
export function addressHolder(address: string): string {
  if (!address.includes(':')) return address;
  const [head = '', tail = ''] = address.split('%')[0]!.split('::');
  const left = head ? head.split(':') : [];
  const right = tail ? tail.split(':') : [];
  const groups = address.includes('::') ? [...left, ...Array(Math.max(0, 8 - left.length - right.length)).fill('0'), ...right] : left;
  return `${groups.slice(0, 4).map((g) => g.toLowerCase().replace(/^0+(?=.)/, '')).join(':')}::/64`;
}
