import { createHash, randomBytes, scrypt as scryptCb, timingSafeEqual, type ScryptOptions } from 'node:crypto';

/**
 * A password hashing mapper. Each recognises its own stored format, so a store may hold hashes of
 * several mappers at once (imported users) and upgrade them to the configured one on login.
 */
export interface PasswordHasher {
  name: string;
  hash(password: string): Promise<string>;
  verify(password: string, stored: string): Promise<boolean>;
  recognises(stored: string): boolean;
}

function scrypt(password: string, salt: Buffer, keylen: number, options: ScryptOptions): Promise<Buffer> {
  return new Promise((resolve, reject) =>
    scryptCb(password, salt, keylen, options, (err, key) => (err ? reject(err) : resolve(key))),
  );
}

/** Salted scrypt (node:crypto): `scrypt$N$r$p$salt$hash`, base64 parts. The default. */
export const scryptHasher: PasswordHasher = {
  name: 'scrypt',
  async hash(password) {
    const N = 16384;
    const r = 8;
    const p = 1;
    const salt = randomBytes(16);
    const key = await scrypt(password, salt, 32, { N, r, p });
    return ['scrypt', N, r, p, salt.toString('base64'), key.toString('base64')].join('$');
  },
  async verify(password, stored) {
    const [tag, N, r, p, salt, hash] = stored.split('$');
    if (tag !== 'scrypt' || !salt || !hash) return false;
    const expected = Buffer.from(hash, 'base64');
    const key = await scrypt(password, Buffer.from(salt, 'base64'), expected.length, { N: Number(N), r: Number(r), p: Number(p), maxmem: 64 * 1024 * 1024 });
    return timingSafeEqual(key, expected);
  },
  recognises: (stored) => stored.startsWith('scrypt$'),
};

/** Unsalted SHA-1 hex (40 characters): the older PHP login API's format, for imported users. */
export const sha1Hasher: PasswordHasher = {
  name: 'sha1',
  async hash(password) {
    return createHash('sha1').update(password).digest('hex');
  },
  async verify(password, stored) {
    const actual = Buffer.from(createHash('sha1').update(password).digest('hex'));
    const expected = Buffer.from(stored.toLowerCase());
    return actual.length === expected.length && timingSafeEqual(actual, expected);
  },
  recognises: (stored) => /^[0-9a-f]{40}$/i.test(stored),
};

export const PASSWORD_HASHERS: Record<string, PasswordHasher> = { scrypt: scryptHasher, sha1: sha1Hasher };

/** Whether `stored` is a hash one of the mappers made (an SSO user's `!sso` is not). */
export function isPasswordHash(stored: string | null | undefined): stored is string {
  return Boolean(stored) && Object.values(PASSWORD_HASHERS).some((h) => h.recognises(stored!));
}

/** Verifies with whichever mapper made the stored hash; says whether it should be rehashed with `preferred`. */
export async function verifyPassword(
  password: string,
  stored: string | null | undefined,
  preferred: PasswordHasher,
): Promise<{ ok: boolean; rehash: boolean }> {
  if (!password || !stored) return { ok: false, rehash: false };
  const maker = Object.values(PASSWORD_HASHERS).find((h) => h.recognises(stored));
  if (!maker) return { ok: false, rehash: false };
  const ok = await maker.verify(password, stored);
  return { ok, rehash: ok && maker.name !== preferred.name };
}
