import { randomFillSync } from 'node:crypto';

const ALPHABET = '0123456789abcdefghjkmnpqrstvwxyz';

/** Random bytes drawn from a buffer the CSPRNG refills when used up (ids are made on every request). */
const pool = Buffer.alloc(4096);
let used = pool.length;

/** Random lowercase Crockford base32 string of the given length. */
export function randomToken(length: number): string {
  if (length > pool.length) throw new RangeError(`randomToken: at most ${pool.length} characters`);
  if (used + length > pool.length) {
    randomFillSync(pool);
    used = 0;
  }
  let out = '';
  for (let i = 0; i < length; i++) out += ALPHABET[pool[used + i]! & 31];
  used += length;
  return out;
}

/** A prefixed resource id, e.g. `node-3k9x…`. 80 bits of randomness. */
export function newId(prefix: string): string {
  return `${prefix}-${randomToken(16)}`;
}
