import { randomInt } from 'node:crypto';
import type { JwtService } from '../../core/auth/jwt.js';
import { passwordProblems, type PasswordPolicy } from '../../core/auth/password-policy.js';
import { isPasswordHash, verifyPassword, type PasswordHasher } from '../../core/auth/passwords.js';
import { badRequest } from '../../core/errors.js';
import { LoginLockouts } from './lockouts.js';
import type { LoginIdentifier, UserRecord, UserStore } from './users.js';

/** A hash of nothing anyone can type, verified for unknown users so both failures take as long. */
const DECOY_HASH = 'scrypt$16384$8$1$AAAAAAAAAAAAAAAAAAAAAA==$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=';

/**
 * Identity shared by the control API's IAM and the login API: users, password hashing and
 * policy, and tokens. Provided to other plugins as `services.provided.get('iam')`.
 */
export class Identity {
  constructor(
    readonly users: UserStore,
    readonly jwt: JwtService,
    readonly hasher: PasswordHasher,
    readonly policy: PasswordPolicy,
    private readonly lockouts: LoginLockouts,
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
   * one. Unknown user, deleted user, wrong or empty password all give null. The attempt counts
   * against the account (the user, however it was named: email or username; an identifier no user
   * has counts for itself) and the client address, and takes its place in the counters before the
   * password is hashed ({@link LoginLockouts}); over a limit it is a 429 whatever the password.
   */
  async login(field: LoginIdentifier, identifier: string, password: string, address: string): Promise<UserRecord | null> {
    const user = identifier ? await this.users.findForLogin(field, identifier) : null;
    const ok = await this.checkPassword(user, identifier, password, address);
    return ok ? user : null;
  }

  /**
   * The user's own password confirming a change it asks for (PATCH of its name or email): counted
   * and limited as a login is, so a stolen token cannot guess the password through it.
   */
  async confirmPassword(user: UserRecord, password: string, address: string): Promise<boolean> {
    return this.checkPassword(user, user.username, password, address);
  }

  private async checkPassword(user: UserRecord | null, identifier: string, password: string, address: string): Promise<boolean> {
    const attempt = await this.lockouts.begin(LoginLockouts.account(user?.userid ?? null, identifier), address);
    let verdict: { ok: boolean; rehash: boolean };
    try {
      // No user, or one with no password hash (an SSO user's `!sso`): the decoy is hashed all the
      // same, so the answer's time does not tell which usernames exist or sign on through SSO.
      const real = isPasswordHash(user?.password);
      verdict = await verifyPassword(password, real ? user!.password : DECOY_HASH, this.hasher);
      if (!real) verdict = { ok: false, rehash: false };
    } catch (err) {
      await attempt.abandon();
      throw err;
    }
    if (!user || !verdict.ok) {
      attempt.counted();
      return false;
    }
    await attempt.succeeded();
    if (verdict.rehash) await this.users.upgradeHash(user.userid, await this.hasher.hash(password));
    return true;
  }

  /** Forgets the failed logins counted against a user from every address (an admin's DELETE /v1/iam/users/{id}/lockout). */
  async clearLockout(userid: string): Promise<number> {
    return this.lockouts.clear(LoginLockouts.account(userid, ''));
  }

  issueToken(user: Pick<UserRecord, 'userid' | 'name' | 'username' | 'role' | 'token_epoch'>) {
    return this.jwt.sign({ userid: user.userid, name: user.name ?? user.username, role: user.role, ep: user.token_epoch });
  }
}
