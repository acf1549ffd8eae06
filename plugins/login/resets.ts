import { randomBytes, randomInt } from 'node:crypto';
import type { Clock } from '../../core/clock.js';
import { safeEqual, sha256Hex } from '../../core/crypto.js';
import type { Store } from '../../core/db/store.js';
import { badRequest } from '../../core/errors.js';

export const PASSWORD_RESETS = 'password_resets';

interface ResetRow {
  userid: string;
  token_hash: string;
  code_hash: string;
  expires_at: string | Date;
  attempts: number;
  confirmed_at: string | Date | null;
}

const codeHash = (token: string, code: string) => sha256Hex(`${token}:${code}`);

/** The one refusal of a reset token and code, whatever the reason. */
export const RESET_REFUSED = 'The reset token or code is wrong, used up or expired; request a new one';

/**
 * Password reset state: one pending token/code pair per user, stored hashed, expiring, with a
 * cap on wrong attempts after which the pair is burnt.
 */
export class PasswordResets {
  constructor(
    private readonly store: Store,
    private readonly clock: Clock,
    private readonly ttlSeconds: number,
    private readonly maxAttempts: number,
  ) {}

  /** A fresh pair for the user, replacing any earlier one. Returned in clear once, for the email. */
  async issue(userid: string): Promise<{ token: string; code: string; expiresAt: Date }> {
    const token = randomBytes(24).toString('base64url');
    const code = String(randomInt(0, 1_000_000)).padStart(6, '0');
    const now = this.clock.now();
    const expiresAt = new Date(now.getTime() + this.ttlSeconds * 1000);
    const row = {
      userid,
      token_hash: sha256Hex(token),
      code_hash: codeHash(token, code),
      expires_at: expiresAt.toISOString(),
      attempts: 0,
      confirmed_at: null,
      created_at: now.toISOString(),
    };
    await this.store.knex(PASSWORD_RESETS).insert(row).onConflict('userid').merge();
    return { token, code, expiresAt };
  }

  /**
   * Checks the token and code; counts a wrong one and burns the pair at the cap. Returns whether
   * the pair had been confirmed before.
   */
  async check(userid: string | null, token: string, code: string): Promise<{ confirmed: boolean }> {
    // One answer for every refusal: unknown address, no pending reset, expired, wrong, burnt. A
    // different one would tell an address with a pending reset (anyone can start one) from others.
    const refused = badRequest(RESET_REFUSED);
    const row: ResetRow | undefined = userid ? await this.store.knex(PASSWORD_RESETS).where({ userid }).first() : undefined;
    const tokenHash = sha256Hex(token);
    const pairHash = codeHash(token, code);
    if (!row || new Date(row.expires_at).getTime() <= this.clock.now().getTime()) throw refused;
    if (safeEqual(tokenHash, row.token_hash) && safeEqual(pairHash, row.code_hash)) {
      return { confirmed: Boolean(row.confirmed_at) };
    }
    // Counted atomically, so guesses sent at the same time cannot slip past the cap.
    const [counted] = await this.store.knex(PASSWORD_RESETS).where({ userid }).increment('attempts', 1).returning('attempts');
    const attempts = Number((counted as { attempts: number } | undefined)?.attempts ?? this.maxAttempts);
    if (attempts >= this.maxAttempts) await this.store.knex(PASSWORD_RESETS).where({ userid }).delete();
    throw refused;
  }

  async confirm(userid: string): Promise<void> {
    await this.store.knex(PASSWORD_RESETS).where({ userid }).update({ confirmed_at: this.clock.now().toISOString() });
  }

  async clear(userid: string): Promise<void> {
    await this.store.knex(PASSWORD_RESETS).where({ userid }).delete();
  }
}
