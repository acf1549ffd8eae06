import { randomBytes, randomInt } from 'node:crypto';
import type { Clock } from '../../core/clock.js';
import { safeEqual, sha256Hex } from '../../core/crypto.js';
import type { Store } from '../../core/db/store.js';
import { badRequest } from '../../core/errors.js';

/** The table of the first version: one pair per user (login migration 001), replaced by PASSWORD_RESET_PAIRS. */
export const PASSWORD_RESETS = 'password_resets';
/** Pending pairs, several per user (login migration 002). */
export const PASSWORD_RESET_PAIRS = 'password_reset_pairs';

interface PairRow {
  id: number;
  userid: string;
  token_hash: string;
  code_hash: string;
  expires_at: string | Date;
  attempts: number;
  confirmed_at: string | Date | null;
  /** sha256 of the address the pair was mailed to, lower-cased (null for pairs of before login migration 003). */
  mailed_to_hash: string | null;
}

const codeHash = (token: string, code: string) => sha256Hex(`${token}:${code}`);
const addressHash = (email: string) => sha256Hex(email.toLowerCase());

/** The one refusal of a reset token and code, whatever the reason. */
export const RESET_REFUSED = 'The reset token or code is wrong, used up or expired; request a new one';

/**
 * Password reset state: token/code pairs, stored hashed, expiring, each with a cap on wrong codes
 * after which it is burnt. A new request adds a pair and never takes an earlier one away: every
 * pair was mailed to the owner and stays usable until it is used, expires or is burnt, so nobody
 * else's requests can make the owner's code stop working. A password reset ends them all. A pair
 * works only while the account's email is the address it was mailed to: a changed email ends the
 * pairs mailed to the old one (whoever reads that mailbox no longer owns the account's resets).
 */
export class PasswordResets {
  constructor(
    private readonly store: Store,
    private readonly clock: Clock,
    private readonly ttlSeconds: number,
    private readonly maxAttempts: number,
  ) {}

  private get pairs() {
    return this.store.knex<PairRow>(PASSWORD_RESET_PAIRS);
  }

  /** A fresh pair for the user, mailed to `email`, beside any pending one. Returned in clear once, for the email. */
  async issue(userid: string, email: string): Promise<{ token: string; code: string; expiresAt: Date }> {
    const token = randomBytes(24).toString('base64url');
    const code = String(randomInt(0, 1_000_000)).padStart(6, '0');
    const now = this.clock.now();
    const expiresAt = new Date(now.getTime() + this.ttlSeconds * 1000);
    // Expired pairs of the user go as a new one comes (the rest stay until they are used or expire).
    await this.pairs.where({ userid }).andWhere('expires_at', '<=', now.toISOString()).delete();
    await this.pairs.insert({
      userid,
      token_hash: sha256Hex(token),
      code_hash: codeHash(token, code),
      expires_at: expiresAt.toISOString(),
      attempts: 0,
      confirmed_at: null,
      mailed_to_hash: addressHash(email),
      created_at: now.toISOString(),
    } as never);
    return { token, code, expiresAt };
  }

  /**
   * Checks the token and code; counts a wrong code and burns the pair at the cap. Returns the pair's
   * id and whether it had been confirmed before.
   */
  async check(user: { userid: string; email: string | null } | null, token: string, code: string): Promise<{ id: number; confirmed: boolean }> {
    // One answer for every refusal: unknown address, no pending reset, expired, wrong, burnt. A
    // different one would tell an address with a pending reset (anyone can start one) from others.
    const refused = badRequest(RESET_REFUSED);
    // Found by its token: a wrong token matches no pair, so someone who knows only the address
    // cannot burn the owner's code (the caller counts the refusal against its client address).
    const row: PairRow | undefined = user ? await this.pairs.where({ userid: user.userid, token_hash: sha256Hex(token) }).first() : undefined;
    if (!row || new Date(row.expires_at).getTime() <= this.clock.now().getTime()) throw refused;
    // Mailed to an address the account no longer has: it ends, as a used-up pair does.
    if (!user?.email || row.mailed_to_hash !== addressHash(user.email)) {
      await this.pairs.where({ id: row.id }).delete();
      throw refused;
    }
    if (safeEqual(codeHash(token, code), row.code_hash)) return { id: row.id, confirmed: Boolean(row.confirmed_at) };
    // A wrong code with the right token, counted atomically, so guesses sent at the same time cannot slip past the cap.
    const [counted] = await this.pairs.where({ id: row.id }).increment('attempts', 1).returning('attempts');
    const attempts = Number((counted as { attempts: number } | undefined)?.attempts ?? this.maxAttempts);
    if (attempts >= this.maxAttempts) await this.pairs.where({ id: row.id }).delete();
    throw refused;
  }

  async confirm(id: number): Promise<void> {
    await this.pairs.where({ id }).update({ confirmed_at: this.clock.now().toISOString() } as never);
  }

  /** Ends every pending pair of the user (its password was reset). */
  async clear(userid: string): Promise<void> {
    await this.pairs.where({ userid }).delete();
  }

  /** Forgets the pair issued with `token` (its mail could not be sent). */
  async discard(userid: string, token: string): Promise<void> {
    await this.pairs.where({ userid, token_hash: sha256Hex(token) }).delete();
  }
}
