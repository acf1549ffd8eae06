import { Type, type Static } from '@sinclair/typebox';
import type { Knex } from 'knex';
import { addressHolder } from './addresses.js';
import type { Clock } from './clock.js';
import type { Store } from './db/store.js';
import { bookkeeping } from './db/write-scope.js';
import { HttpError } from './errors.js';

export const RATE_LIMITS = 'rate_limits';
// Counting an attempt is not a change a request asked for (core/db/write-scope.ts).
bookkeeping(RATE_LIMITS);

/** At most `max` counted events per `window_seconds` for one key (an account, an address…). */
export const RateLimitSchema = Type.Object(
  {
    max: Type.Integer({ minimum: 1, description: 'events counted in one window before the key is refused' }),
    window_seconds: Type.Integer({ minimum: 1, description: 'length of the window; the count starts again after it' }),
  },
  { additionalProperties: false },
);
export type RateLimit = Static<typeof RateLimitSchema>;

/** A rate-limit setting with its default, for plugin configuration schemas. */
export function rateLimitSetting(max: number, windowSeconds: number, description: string) {
  return Type.Object(RateLimitSchema.properties, { additionalProperties: false, default: { max, window_seconds: windowSeconds }, description });
}

export const rateLimitMigration = {
  id: '003_rate_limits',
  async up(knex: Knex) {
    await knex.schema.createTable(RATE_LIMITS, (t) => {
      t.string('key', 300).primary();
      t.bigInteger('window_start').notNullable();
      t.integer('hits').notNullable();
      t.index(['window_start']);
    });
  },
};

const ADDRESS_KEY = /^([^:]+):address:(.+)$/;

/**
 * The key of what is counted per client address for `kind` (`signature-failure`, `join-failure`…):
 * `<kind>:address:<address>`. The limiter counts such a key for the address's holder (an IPv6
 * address as its /64, core/addresses.ts), however the caller spelled it.
 */
export function addressKey(kind: string, address: string): string {
  return `${kind}:address:${addressHolder(address)}`;
}

/** A key as it is counted: one of {@link addressKey}'s shape counts the address's holder. */
function counted(key: string): string {
  const m = ADDRESS_KEY.exec(key);
  return m ? addressKey(m[1]!, m[2]!) : key;
}

/**
 * Counters of events per key in fixed windows, kept in the store so that every control plane on one
 * database counts together (a limit holds however requests are spread over replicas). Each
 * count is one statement (an upsert), so concurrent requests never slip past the limit. A client
 * address counts as its holder (an IPv6 address as its /64): keys made by {@link addressKey} (or of
 * its shape) and the addresses of {@link attempt}.
 */
export class RateLimiter {
  constructor(
    private readonly store: Store,
    private readonly clock: Clock,
  ) {}

  /** Seconds until `key` may be used again, or 0 when it is under its limit. */
  async blockedFor(key: string, limit: RateLimit): Promise<number> {
    key = counted(key);
    const row = await this.store.knex(RATE_LIMITS).where({ key }).first('window_start', 'hits');
    // Blocked when one more event would go over the limit.
    return row ? this.remaining(Number(row.window_start), Number(row.hits) + 1, limit) : 0;
  }

  /** Counts one event for `key`; answers seconds until it may be used again (0 while under the limit). */
  async hit(key: string, limit: RateLimit): Promise<number> {
    key = counted(key);
    const { windowStart, hits } = await this.countHit(key, limit, `else ${RATE_LIMITS}.hits + 1`, []);
    return this.remaining(windowStart, hits, limit);
  }

  /**
   * Counts `key` in one statement: a new key or a window older than `limit.window_seconds` starts
   * again at 1; in a window still open, `open` (SQL with its `bindings`) says what hits becomes.
   */
  private async countHit(key: string, limit: RateLimit, open: string, bindings: number[]): Promise<{ windowStart: number; hits: number }> {
    const now = this.clock.now().getTime();
    const expired = now - limit.window_seconds * 1000;
    const result = await this.store.knex.raw(
      `insert into ${RATE_LIMITS} (key, window_start, hits) values (?, ?, 1)
       on conflict (key) do update set
         hits = case when ${RATE_LIMITS}.window_start <= ? then 1 ${open} end,
         window_start = case when ${RATE_LIMITS}.window_start <= ? then excluded.window_start else ${RATE_LIMITS}.window_start end
       returning window_start, hits`,
      [key, now, expired, ...bindings, expired],
    );
    const row = (Array.isArray(result) ? result[0] : result.rows[0]) as { window_start: string | number; hits: number };
    return { windowStart: Number(row.window_start), hits: Number(row.hits) };
  }

  /**
   * Takes one of the `max` places of `key`'s window before the work it limits is done (a password
   * hashed, a signature checked), in one statement: of requests arriving together exactly `max`
   * get a place, whatever the store. A refused request leaves the count at `max + 1` (the mark of a
   * full window), so `blockedFor` refuses too. `hits` is the count including this request.
   */
  async reserve(key: string, limit: RateLimit): Promise<Reservation> {
    key = counted(key);
    const { windowStart, hits } = await this.countHit(key, limit, `when ${RATE_LIMITS}.hits <= ? then ${RATE_LIMITS}.hits + 1 else ${RATE_LIMITS}.hits`, [limit.max]);
    const reserved = hits <= limit.max;
    return { key, windowStart, hits, reserved, wait: reserved ? 0 : this.remaining(windowStart, hits, limit) };
  }

  /** Gives a reserved place back (the attempt succeeded, or was not made): the count goes down by one in the same window. */
  async release(reservation: Pick<Reservation, 'key' | 'windowStart' | 'reserved'>): Promise<void> {
    if (!reservation.reserved) return;
    await this.store
      .knex(RATE_LIMITS)
      .where({ key: reservation.key, window_start: reservation.windowStart })
      .andWhere('hits', '>', 0)
      .update({ hits: this.store.knex.raw('hits - 1') });
  }

  /** Forgets a key's count (a successful login clears the account's failures). */
  async reset(key: string): Promise<number> {
    return this.store.knex(RATE_LIMITS).where({ key }).delete();
  }

  /** Forgets every key that starts with `prefix` (an admin clearing an account's lockouts); answers how many. */
  async resetPrefix(prefix: string): Promise<number> {
    // substr, not LIKE: the prefix may hold % or _.
    return this.store.knex(RATE_LIMITS).whereRaw('substr(key, 1, ?) = ?', [prefix.length, prefix]).delete();
  }

  /**
   * Takes the places of one attempt on `subject` (an account, an email address) from `address`,
   * before the work it limits is done, or throws the 429 (with Retry-After). The address counts as its
   * holder (an IPv6 address as its /64: core/addresses.ts). Three counts, so that
   * nobody can lock someone else out (see {@link SubjectLimits}): the pair (subject, address), the
   * address, and the subject from every address together. Past the subject's count an address
   * with no attempt on the subject in its pair window may still try (the owner, at their own
   * machine), others are refused. `kind` names the counters (`login`, `reset-request`…).
   */
  async attempt(kind: string, subject: string, address: string, limits: SubjectLimits, what: string): Promise<Attempt> {
    const holder = addressHolder(address);
    const pairKey = `${kind}:pair:${subject}:${holder}`;
    const pair = await this.reserve(pairKey, limits.perSubjectAndAddress);
    if (!pair.reserved) throw tooMany(what, pair.wait);
    const held = [pair];
    const refuse = async (wait: number) => {
      for (const r of held) await this.release(r).catch(() => undefined);
      return tooMany(what, wait);
    };
    const fromAddress = await this.reserve(addressKey(kind, holder), limits.perAddress);
    if (!fromAddress.reserved) throw await refuse(fromAddress.wait);
    held.push(fromAddress);
    const everyone = await this.reserve(`${kind}:subject:${subject}`, limits.perSubject);
    if (everyone.reserved) held.push(everyone);
    // Past the subject's back-off only an address whose own count is this attempt alone may try.
    else if (pair.hits > 1) throw await refuse(everyone.wait);
    return new Attempt(this, held, pairKey);
  }

  /** Forgets every count on `subject` of {@link attempt}: from each address, and the back-off of all together; answers how many. */
  async forgetSubject(kind: string, subject: string): Promise<number> {
    return (await this.resetPrefix(`${kind}:pair:${subject}:`)) + (await this.reset(`${kind}:subject:${subject}`));
  }

  /** Drops counters whose window ended more than `olderThanMs` ago. */
  async prune(olderThanMs = 86_400_000): Promise<number> {
    return this.store.knex(RATE_LIMITS).where('window_start', '<', this.clock.now().getTime() - olderThanMs).delete();
  }

  /**
   * Throws the 429 (with Retry-After) when any of the keys is over its limit. `what` says what was
   * refused, e.g. "failed logins".
   */
  async assertAllowed(checks: Array<[string, RateLimit]>, what: string): Promise<void> {
    let wait = 0;
    for (const [key, limit] of checks) wait = Math.max(wait, await this.blockedFor(key, limit));
    if (wait) throw tooMany(what, wait);
  }

  /** Counts one event for each key; throws the 429 when one of them went over its limit. */
  async count(checks: Array<[string, RateLimit]>, what: string): Promise<void> {
    let wait = 0;
    for (const [key, limit] of checks) wait = Math.max(wait, await this.hit(key, limit));
    if (wait) throw tooMany(what, wait);
  }

  /** Seconds left in the window when `count` events go over the limit, else 0. */
  private remaining(windowStart: number, count: number, limit: RateLimit): number {
    const now = this.clock.now().getTime();
    const ends = windowStart + limit.window_seconds * 1000;
    if (ends <= now || count <= limit.max) return 0;
    return Math.max(1, Math.ceil((ends - now) / 1000));
  }
}

/**
 * The limits of {@link RateLimiter.attempt}: attempts on one subject (an account, an email address)
 * per client address, per address whatever the subject, and per subject from every address
 * together (the slower, global back-off, which refuses only addresses that have tried already).
 */
export interface SubjectLimits {
  perSubjectAndAddress: RateLimit;
  perAddress: RateLimit;
  perSubject: RateLimit;
}

/** The places one attempt holds (RateLimiter.attempt), until it is settled. */
export class Attempt {
  private settled = false;

  constructor(
    private readonly limiter: RateLimiter,
    private readonly held: Reservation[],
    private readonly pairKey: string,
  ) {}

  /** The attempt succeeded (a right password): the pair's count is forgotten, the other places given back. */
  async succeeded(): Promise<void> {
    if (this.settled) return;
    this.settled = true;
    await this.limiter.reset(this.pairKey);
    for (const r of this.held) if (r.key !== this.pairKey) await this.limiter.release(r);
  }

  /** The attempt counts (a wrong password, a request made): its places stay taken. */
  counted(): void {
    this.settled = true;
  }

  /** Nothing was decided (an error): every place is given back. */
  async abandon(): Promise<void> {
    if (this.settled) return;
    this.settled = true;
    for (const r of this.held) await this.limiter.release(r).catch(() => undefined);
  }
}

/** A place taken in a key's window by {@link RateLimiter.reserve}. */
export interface Reservation {
  key: string;
  windowStart: number;
  /** The count of the window with this request (max + 1 when it was refused). */
  hits: number;
  reserved: boolean;
  /** Seconds until the window ends, when refused. */
  wait: number;
}

/** The 429 with the seconds to wait in `Retry-After`. */
export function tooMany(what: string, seconds: number): HttpError {
  return new HttpError(429, `Too many ${what}; try again in ${seconds} s`, undefined, { 'Retry-After': String(seconds) });
}
