import { randomBytes } from 'node:crypto';
import type { Authenticator, Principal } from '../../core/auth/index.js';
import { bearerToken } from '../../core/auth/jwt.js';
import { HEADER_ACCESS_KEY, HEADER_NONCE, HEADER_SIGNATURE, HEADER_TIMESTAMP, signature } from '../../core/auth/hmac.js';
import type { Clock } from '../../core/clock.js';
import { safeEqual } from '../../core/crypto.js';
import type { Store } from '../../core/db/store.js';
import { addressKey, tooMany, type RateLimit, type RateLimiter } from '../../core/ratelimit.js';
import { unauthorized } from '../../core/errors.js';
import type { Identity } from './identity.js';
import { HMAC_NONCES } from './migrations.js';
import { MEMBER_CHANGES as PROJECT_MEMBER_CHANGES, type ProjectsApi } from '../projects/api.js';
import { ALWAYS_HELD, expired, fromNetworks, projectHoldings } from './keys.js';
import { KEY_CHANGES, USER_CHANGES, type ApiKeyRecord, type UserRecord } from './users.js';

/**
 * `Authorization: Bearer <JWT>`: valid signature, issuer and expiry, a user that still exists, and
 * issued since the user's last password change (its token epoch).
 */
export function jwtAuthenticator(identity: Identity): Authenticator {
  return {
    name: 'jwt',
    async authenticate({ ctx }) {
      const token = bearerToken(ctx.get('authorization'));
      if (!token) return null;
      const claims = identity.jwt.verify(token);
      const user = await identity.users.current(claims.userid);
      if (!user) throw unauthorized('The token belongs to a user that no longer exists');
      if ((claims.ep ?? 0) !== user.token_epoch) throw unauthorized('The token was issued before the user’s password or role changed; log in again');
      return { id: claims.userid, name: claims.name, role: claims.role, method: 'jwt', exp: claims.exp, token_epoch: user.token_epoch };
    },
    // A token's principal holds while its user lives, in the same token epoch, with the role it names.
    revokedBy: [USER_CHANGES],
    async revalidate(principal) {
      const user = await identity.users.get(principal.id);
      if (!user) throw unauthorized('The token belongs to a user that no longer exists');
      if (user.token_epoch !== principal.token_epoch) throw unauthorized('The token was issued before the user’s password or role changed; log in again');
      if (user.role !== principal.role) throw unauthorized(`The user's role is now ${user.role}; log in again`);
      return principal;
    },
  };
}

/**
 * The one answer to a signed request whose access key is unknown (or deleted, or its user's) and to
 * one whose signature is wrong: which of the two is not told, so access key ids cannot be found by trying.
 */
export const SIGNATURE_REFUSED = 'The access key or the signature is not valid: sign the request with a live access key and its secret (docs/api-auth.md)';

/**
 * HMAC-signed requests (docs/api-auth.md): timestamp within the allowed skew, signature over the
 * canonical string, each signature accepted once (replays are refused, across control planes too).
 * An unknown key is handled as a known one whose signature is wrong: its body is read the same way
 * (with the same limits and deadline; in a slot of the client address, since it names nobody) and
 * checked against a decoy secret, and both get the same 401. Each failure takes a place among the
 * client address's `failuresPerAddress` (one atomic statement, on the failure path only: a good
 * signature never reads the counts); past them a failure is answered 429 until the window ends,
 * while a right signature from that address still goes through.
 */
export function hmacAuthenticator(
  identity: Identity,
  store: Store,
  clock: Clock,
  skewSeconds: number,
  limits: RateLimiter,
  failuresPerAddress: RateLimit,
  scopes: { projects(): ProjectsApi | undefined },
): Authenticator {
  /** What an unknown key's signature is checked against: a secret nobody has. */
  const decoy = randomBytes(32).toString('base64url');
  return {
    name: 'hmac',
    async authenticate({ ctx, body, listener }) {
      const accessKey = ctx.get(HEADER_ACCESS_KEY);
      // API keys are for the control API; the login API speaks JWT only.
      if (!accessKey || listener !== 'control') return null;
      const timestamp = ctx.get(HEADER_TIMESTAMP);
      const sent = ctx.get(HEADER_SIGNATURE).toLowerCase();
      if (!timestamp || !sent) throw unauthorized('HMAC-signed requests need X-Access-Key, X-Timestamp and X-Signature');
      const ts = Number(timestamp);
      const now = Math.floor(clock.now().getTime() / 1000);
      if (!/^\d+$/.test(timestamp) || Math.abs(now - ts) > skewSeconds) {
        throw unauthorized(`X-Timestamp must be the current unix time in seconds, within ±${skewSeconds} s of the server's clock`);
      }
      const found = await identity.users.keyForSigning(accessKey);
      // A key that does not exist goes the way of a known one: its body is read (in a slot of the
      // client address: it names nobody) and checked against a secret nobody has.
      const expected = signature(found?.secret ?? decoy, {
        method: ctx.method,
        pathAndQuery: ctx.originalUrl,
        body: await body(found ? found.user.userid : null),
        timestamp: ts,
        nonce: ctx.get(HEADER_NONCE),
      });
      if (!found || !safeEqual(expected, sent)) {
        const place = await limits.reserve(addressKey('signature', String(ctx.state.clientIp ?? ctx.ip)), failuresPerAddress);
        throw place.reserved ? unauthorized(SIGNATURE_REFUSED) : tooMany('failed signatures', place.wait);
      }
      // The key's own limits, once the signature shows the caller holds it: before the signature is
      // spent, so a refused request leaves nothing behind.
      const address = String(ctx.state.clientIp ?? ctx.ip);
      const principal = await keyPrincipal(found, address);
      try {
        await store.knex(HMAC_NONCES).insert({ signature: expected, expires_at: new Date((ts + skewSeconds + 1) * 1000).toISOString() });
      } catch (err) {
        const seen = await store.knex(HMAC_NONCES).where({ signature: expected }).first();
        if (seen) throw unauthorized('This signed request has already been used; sign each request anew');
        throw err;
      }
      await identity.users.touchKey(found.key);
      return principal;
    },
    // A key's principal holds while the key and its user live, with the user's role of the moment,
    // until the key expires, and (a project's key) while its owner is a member of the project.
    revokedBy: [USER_CHANGES, KEY_CHANGES, PROJECT_MEMBER_CHANGES],
    async revalidate(principal) {
      const found = await identity.users.liveKey(principal.id, String(principal.key_id));
      if (!found) throw unauthorized('Unknown or deleted access key');
      return keyPrincipal(found, String(principal.address));
    },
  };

  /**
   * Who a live key's requests act as, now: its owner with the owner's current role, limited to the
   * key's permissions (within the owner's of the moment) and project. 401 saying why for a key that
   * expired, one used from outside its source networks, and a project's key whose owner is no
   * longer a member of it (read from the store at every request: a removal counts at once).
   */
  async function keyPrincipal(found: { key: ApiKeyRecord; user: UserRecord }, address: string): Promise<Principal> {
    const { key, user } = found;
    const now = clock.now();
    if (expired(key, now)) throw unauthorized(`The API key ${key.access_key_id} expired at ${key.expires_at}: make a new one`);
    if (key.source_networks && !fromNetworks(key.source_networks, address)) {
      throw unauthorized(`The API key ${key.access_key_id} is not valid from this address (${address}): it is accepted from its source networks only`);
    }
    const principal: Principal = { id: user.userid, name: user.name ?? user.username, role: user.role, method: 'hmac', key_id: key.id, address };
    if (key.expires_at) Object.assign(principal, { expires_at: key.expires_at, exp: Math.floor(Date.parse(key.expires_at) / 1000) });
    if (key.project_id) {
      const projects = scopes.projects();
      const holds = projects ? await projectHoldings(projects, key.project_id, user) : null;
      if (!holds) throw unauthorized(`The API key ${key.access_key_id} is limited to a project its owner is no longer a member of (or that no longer exists)`);
      const limited = key.permissions ?? holds;
      principal.project_id = key.project_id;
      principal.permissions = [...new Set([ALWAYS_HELD, ...limited.filter((p) => holds.includes(p))])].sort();
    } else if (key.permissions) {
      principal.permissions = key.permissions;
    }
    return principal;
  }
}
