import { Type, type Static } from '@sinclair/typebox';
import type { Knex } from 'knex';
import type { Clock } from './clock.js';
import type { Store } from './db/store.js';
import { HttpError } from './errors.js';

export const RATE_LIMITS = 'rate_limits';

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

/**
 * Counters of events per key in fixed windows, kept in the store so that every control plane on one
 * database counts together (a limit holds however requests are spread over replicas). Each
 * count is one statement (an upsert), so concurrent requests never slip past the limit.
 */
export class RateLimiter {
  constructor(
    private readonly store: Store,
    private readonly clock: Clock,
  ) {}

  /** Seconds until `key` may be used again, or 0 when it is under its limit. */
  async blockedFor(key: string, limit: RateLimit): Promise<number> {
    const row = await this.store.knex(RATE_LIMITS).where({ key }).first('window_start', 'hits');
    // Blocked when one more event would go over the limit.
    return row ? this.remaining(Number(row.window_start), Number(row.hits) + 1, limit) : 0;
  }

  /** Counts one event for `key`; answers seconds until it may be used again (0 while under the limit). */
  async hit(key: string, limit: RateLimit): Promise<number> {
    const now = this.clock.now().getTime();
    const expired = now - limit.window_seconds * 1000;
    const result = await this.store.knex.raw(
      `insert into ${RATE_LIMITS} (key, window_start, hits) values (?, ?, 1)
       on conflict (key) do update set
         hits = case when ${RATE_LIMITS}.window_start <= ? then 1 else ${RATE_LIMITS}.hits + 1 end,
         window_start = case when ${RATE_LIMITS}.window_start <= ? then excluded.window_start else ${RATE_LIMITS}.window_start end
       returning window_start, hits`,
      [key, now, expired, expired],
    );
    const row = (Array.isArray(result) ? result[0] : result.rows[0]) as { window_start: string | number; hits: number };
    return this.remaining(Number(row.window_start), Number(row.hits), limit);
  }

  /** Forgets a key's count (a successful login clears the account's failures). */
  async reset(key: string): Promise<void> {
    await this.store.knex(RATE_LIMITS).where({ key }).delete();
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

/** The 429 with the seconds to wait in `Retry-After`. */
export function tooMany(what: string, seconds: number): HttpError {
  return new HttpError(429, `Too many ${what}; try again in ${seconds} s`, undefined, { 'Retry-After': String(seconds) });
}
