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
    const invalid = badRequest('The reset token is invalid or has expired; request a new one');
    if (!userid) throw invalid;
    const row: ResetRow | undefined = await this.store.knex(PASSWORD_RESETS).where({ userid }).first();
    if (!row || new Date(row.expires_at).getTime() <= this.clock.now().getTime()) throw invalid;
    if (safeEqual(sha256Hex(token), row.token_hash) && safeEqual(codeHash(token, code), row.code_hash)) {
      return { confirmed: Boolean(row.confirmed_at) };
    }
    // Counted atomically, so guesses sent at the same time cannot slip past the cap.
    const [counted] = await this.store.knex(PASSWORD_RESETS).where({ userid }).increment('attempts', 1).returning('attempts');
    const attempts = Number((counted as { attempts: number } | undefined)?.attempts ?? this.maxAttempts);
    if (attempts >= this.maxAttempts) {
      await this.store.knex(PASSWORD_RESETS).where({ userid }).delete();
      throw badRequest('Too many wrong attempts: this reset token is no longer valid; request a new one');
    }
    throw badRequest(`The token or code is wrong; ${this.maxAttempts - attempts} attempt(s) left`);
  }

  async confirm(userid: string): Promise<void> {
    await this.store.knex(PASSWORD_RESETS).where({ userid }).update({ confirmed_at: this.clock.now().toISOString() });
  }

  async clear(userid: string): Promise<void> {
    await this.store.knex(PASSWORD_RESETS).where({ userid }).delete();
  }
}
