import { randomBytes } from 'node:crypto';

const ALPHABET = '0123456789abcdefghjkmnpqrstvwxyz';

/** Random lowercase Crockford base32 string of the given length. */
export function randomToken(length: number): string {
  const bytes = randomBytes(length);
  let out = '';
  for (let i = 0; i < length; i++) out += ALPHABET[bytes[i]! & 31];
  return out;
}

/** A prefixed resource id, e.g. `node-3k9x…`. 80 bits of randomness. */
export function newId(prefix: string): string {
  return `${prefix}-${randomToken(16)}`;
}
