import { randomInt } from 'node:crypto';
import type { JwtService } from '../../core/auth/jwt.js';
import { passwordProblems, type PasswordPolicy } from '../../core/auth/password-policy.js';
import { verifyPassword, type PasswordHasher } from '../../core/auth/passwords.js';
import { badRequest } from '../../core/errors.js';
import type { RateLimit, RateLimiter } from '../../core/ratelimit.js';
import type { LoginIdentifier, UserRecord, UserStore } from './users.js';

/** A hash of nothing anyone can type, verified for unknown users so both failures take as long. */
const DECOY_HASH = 'scrypt$16384$8$1$AAAAAAAAAAAAAAAAAAAAAA==$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=';

/**
 * Identity shared by the control API's IAM and the login API: users, password hashing and
 * policy, and tokens. Provided to other plugins as `services.provided.get('iam')`.
 */
/** How many failed logins an account and an address may have per window before they are refused. */
export interface LoginLimits {
  per_account: RateLimit;
  per_address: RateLimit;
}

export class Identity {
  constructor(
    readonly users: UserStore,
    readonly jwt: JwtService,
    readonly hasher: PasswordHasher,
    readonly policy: PasswordPolicy,
    private readonly limits: RateLimiter,
    private readonly loginLimits: LoginLimits,
  ) {}

  /** Throws the 400 that lists every rule the password breaks. */
  assertAcceptable(password: string, field = 'password'): void {
    const problems = passwordProblems(password, this.policy);
    if (!problems.length) return;
    throw badRequest(
      `Password does not meet the policy: it ${problems.join('; it ')}`,
      problems.map((message) => ({ path: `body.${field}`, message })),
    );
  }

  async hashAcceptable(password: string, field?: string): Promise<string> {
    this.assertAcceptable(password, field);
    return this.hasher.hash(password);
  }

  /** A random password that satisfies the configured policy. */
  generatePassword(): string {
    const sets = ['ABCDEFGHJKLMNPQRSTUVWXYZ', 'abcdefghijkmnopqrstuvwxyz', '23456789', '!#%+-=?@^_~'];
    const length = Math.max(20, this.policy.MINIMUM_CHARS + 4);
    for (;;) {
      const chars = sets.map((s) => s[randomInt(s.length)]!);
      const all = sets.join('');
      while (chars.length < length) chars.push(all[randomInt(all.length)]!);
      for (let i = chars.length - 1; i > 0; i--) {
        const j = randomInt(i + 1);
        [chars[i], chars[j]] = [chars[j]!, chars[i]!];
      }
      const candidate = chars.join('');
      if (!passwordProblems(candidate, this.policy).length) return candidate;
    }
  }

  /**
   * Checks credentials of a live user; upgrades a hash made by another mapper to the configured
   * one. Unknown user, deleted user, wrong or empty password all give null. Failures are counted
   * per account (the identifier as typed, known or not) and per client address; over either limit
   * every attempt, the right password too, is a 429 until the window ends. A success clears the
   * account's count.
   */
  async login(field: LoginIdentifier, identifier: string, password: string, address: string): Promise<UserRecord | null> {
    const checks: Array<[string, RateLimit]> = [
      [`login:account:${identifier.toLowerCase()}`, this.loginLimits.per_account],
      [`login:address:${address}`, this.loginLimits.per_address],
    ];
    await this.limits.assertAllowed(checks, 'failed logins');
    const user = identifier ? await this.users.findForLogin(field, identifier) : null;
    const { ok, rehash } = await verifyPassword(password, user?.password ?? DECOY_HASH, this.hasher);
    if (!user || !ok) {
      await this.limits.count(checks, 'failed logins').catch(() => undefined);
      return null;
    }
    await this.limits.reset(checks[0]![0]);
    if (rehash) await this.users.upgradeHash(user.userid, await this.hasher.hash(password));
    return user;
  }

  issueToken(user: Pick<UserRecord, 'userid' | 'name' | 'username' | 'role' | 'token_epoch'>) {
    return this.jwt.sign({ userid: user.userid, name: user.name ?? user.username, role: user.role, ep: user.token_epoch });
  }
}
