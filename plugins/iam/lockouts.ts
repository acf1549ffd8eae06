import type { Attempt, RateLimit, RateLimiter } from '../../core/ratelimit.js';

/**
 * How many failed logins are allowed before attempts are refused (docs/security.md, "Lockouts"):
 * - `per_account_and_address`: one client address guessing one account's password: this pair is
 *   refused until its window ends. Someone else's guesses never lock the owner out.
 * - `per_address`: one client address, whatever accounts it tries.
 * - `per_account`: every address together against one account — the slower, global back-off. Past
 *   it, an address that has failed on the account in the pair's window is refused; one that has
 *   not (the owner at their own machine) may still try, and its right password logs in.
 */
export interface LoginLimits {
  per_account_and_address: RateLimit;
  per_address: RateLimit;
  per_account: RateLimit;
}

const KIND = 'login';

/**
 * Login lockouts counted in the store (every control plane together; core/ratelimit.ts
 * `attempt`). A place is reserved atomically before the password is hashed, so attempts sent
 * together cannot pass the limit while others are being checked, and given back when the password
 * was right.
 */
export class LoginLockouts {
  constructor(
    private readonly limiter: RateLimiter,
    private readonly limits: LoginLimits,
  ) {}

  /** The account an attempt counts against: the user's id when the identifier names one (by email or username alike), else the identifier itself. */
  static account(userid: string | null, identifier: string): string {
    return userid ? `user:${userid}` : `name:${identifier.toLowerCase()}`;
  }

  /** Takes the attempt's places, or throws the 429 (with Retry-After) when one of them is refused. */
  begin(account: string, address: string): Promise<Attempt> {
    const { per_account_and_address, per_address, per_account } = this.limits;
    return this.limiter.attempt(KIND, account, address, { perSubjectAndAddress: per_account_and_address, perAddress: per_address, perSubject: per_account }, 'failed logins');
  }

  /** Forgets an account's failures from every address and its global back-off (an admin's DELETE …/lockout); answers how many counters went. */
  clear(account: string): Promise<number> {
    return this.limiter.forgetSubject(KIND, account);
  }
}
