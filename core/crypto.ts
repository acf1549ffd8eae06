import { createCipheriv, createDecipheriv, hkdfSync, randomBytes, timingSafeEqual, createHash } from 'node:crypto';

const VERSION = 'v1';

/**
 * Authenticated encryption at rest (AES-256-GCM) with a key derived for one purpose. Seals with
 * `key`; opens with `key` or, for values sealed before a change of root secret, any of `older`
 * (GCM's tag tells which one sealed a value).
 */
export class SecretBox {
  constructor(
    private readonly key: Buffer,
    private readonly older: Buffer[] = [],
  ) {
    if ([key, ...older].some((k) => k.length !== 32)) throw new Error('SecretBox needs 32-byte keys');
  }

  seal(plaintext: string | Buffer): string {
    const iv = randomBytes(12);
    const cipher = createCipheriv('aes-256-gcm', this.key, iv);
    const body = Buffer.concat([cipher.update(plaintext), cipher.final()]);
    return `${VERSION}:${Buffer.concat([iv, cipher.getAuthTag(), body]).toString('base64')}`;
  }

  open(sealed: string): Buffer {
    const [version, payload] = sealed.split(':', 2);
    if (version !== VERSION || !payload) throw new Error('unknown sealed-value format');
    const raw = Buffer.from(payload, 'base64');
    let failure: unknown;
    for (const key of [this.key, ...this.older]) {
      try {
        return openWith(key, raw);
      } catch (err) {
        failure ??= err;
      }
    }
    throw failure;
  }

  openString(sealed: string): string {
    return this.open(sealed).toString('utf8');
  }
}

function openWith(key: Buffer, raw: Buffer): Buffer {
  const decipher = createDecipheriv('aes-256-gcm', key, raw.subarray(0, 12));
  decipher.setAuthTag(raw.subarray(12, 28));
  return Buffer.concat([decipher.update(raw.subarray(28)), decipher.final()]);
}

/** HKDF-SHA256 of a root secret for one named purpose: the same root never yields the same key twice. */
export function deriveKey(root: Buffer, purpose: string): Buffer {
  return Buffer.from(hkdfSync('sha256', root, 'hangar-key-derivation', purpose, 32));
}

export function sha256Hex(value: string | Buffer): string {
  return createHash('sha256').update(value).digest('hex');
}

/** Constant-time string comparison that tolerates different lengths. */
export function safeEqual(a: string, b: string): boolean {
  const ab = Buffer.from(a);
  const bb = Buffer.from(b);
  return ab.length === bb.length && timingSafeEqual(ab, bb);
}
