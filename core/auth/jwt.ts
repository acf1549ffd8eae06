import { createSecretKey, type KeyObject } from 'node:crypto';
import jwt from 'jsonwebtoken';
import type { Clock } from '../clock.js';
import { unauthorized } from '../errors.js';

/** The claims hangar puts in its tokens (plus iat, exp, iss). */
export interface TokenClaims {
  userid: string;
  name: string;
  role: string;
  /** The user's token epoch when the token was issued (a password change moves it on). */
  ep?: number;
}

export interface VerifiedToken extends TokenClaims {
  iat: number;
  exp: number;
  iss: string;
}

export const MIN_SECRET_BYTES = 64;

/** How many verified tokens JwtService remembers (a few hundred bytes each). */
const VERIFIED_TOKENS_KEPT = 4096;

/** Decodes a JWT_SECRET value; null when it is not base64 of at least 64 bytes. */
export function decodeJwtSecret(value: string): Buffer | null {
  const trimmed = value.trim();
  if (!/^[A-Za-z0-9+/_-]+={0,2}$/.test(trimmed)) return null;
  const bytes = Buffer.from(trimmed, 'base64');
  return bytes.length >= MIN_SECRET_BYTES ? bytes : null;
}

/** HS512 tokens, issuer checked; the only place that calls jsonwebtoken. */
export class JwtService {
  /**
   * The secret as a key object, made once: given bytes or a string, jsonwebtoken tries to parse them
   * as a public key on every call before falling back to a secret (most of a verify's cost).
   */
  private readonly key: KeyObject;

  constructor(
    secret: Buffer,
    readonly issuer: string,
    readonly lifetimeSeconds: number,
    private readonly clock: Clock,
  ) {
    if (secret.length < MIN_SECRET_BYTES) throw new Error(`JWT secret must be at least ${MIN_SECRET_BYTES} bytes`);
    this.key = createSecretKey(secret);
  }

  private nowSeconds(): number {
    return Math.floor(this.clock.now().getTime() / 1000);
  }

  sign(claims: TokenClaims): { token: string; expires_at: string } {
    const iat = this.nowSeconds();
    const exp = iat + this.lifetimeSeconds;
    const token = jwt.sign({ userid: claims.userid, name: claims.name, role: claims.role, ...(claims.ep ? { ep: claims.ep } : {}), iat, exp }, this.key, {
      algorithm: 'HS512',
      issuer: this.issuer,
    });
    return { token, expires_at: new Date(exp * 1000).toISOString() };
  }

  /**
   * Tokens whose signature and issuer were verified, by their exact text: a client sends the same
   * token with every request, and checking its HMAC again was a tenth of an authenticated list's
   * CPU. Expiry is checked on every use. Bounded; the oldest go first.
   */
  private readonly verified = new Map<string, VerifiedToken>();

  /** Verifies signature (HS512 only), issuer and expiry; throws a 401 otherwise. */
  verify(token: string): VerifiedToken {
    const known = this.verified.get(token);
    if (known) {
      if (known.exp > this.nowSeconds()) return known;
      this.verified.delete(token);
      throw unauthorized('The token has expired');
    }
    try {
      const claims = jwt.verify(token, this.key, {
        algorithms: ['HS512'],
        issuer: this.issuer,
        clockTimestamp: this.nowSeconds(),
      }) as VerifiedToken;
      if (typeof claims.userid !== 'string' || typeof claims.role !== 'string' || typeof claims.exp !== 'number') throw new Error('claims missing');
      if (this.verified.size >= VERIFIED_TOKENS_KEPT) this.verified.delete(this.verified.keys().next().value!);
      this.verified.set(token, Object.freeze(claims));
      return claims;
    } catch (err) {
      const expired = (err as Error).name === 'TokenExpiredError';
      throw unauthorized(expired ? 'The token has expired' : 'The token is not valid');
    }
  }
}

/** The bearer token of a request, if any. */
export function bearerToken(authorization: string | undefined): string | null {
  const m = /^Bearer\s+(\S+)\s*$/i.exec(authorization ?? '');
  return m ? m[1]! : null;
}
