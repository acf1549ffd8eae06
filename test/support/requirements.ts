import knexFactory from 'knex';

/** Set by .ci/run: every suite that would be skipped for a missing service fails instead. */
export const REQUIRE_ALL = process.env.HANGAR_REQUIRE_ALL === '1';

export const PG_URL = process.env.HANGAR_TEST_PG_URL ?? 'postgres://hangar:hangar@127.0.0.1:5432/hangar_test';

/**
 * Skips the calling suite or test loudly (a SKIPPED line naming what is missing), or fails it
 * when HANGAR_REQUIRE_ALL=1.
 */
export function requireService(ctx: Mocha.Context, available: boolean, what: string): void {
  if (available) return;
  const title = ctx.currentTest?.fullTitle() ?? ctx.test?.parent?.fullTitle() ?? 'suite';
  if (REQUIRE_ALL) throw new Error(`HANGAR_REQUIRE_ALL=1 but ${what} is not available (${title})`);
  console.log(`SKIPPED: ${title} — needs ${what}`);
  ctx.skip();
}

let pgProbe: Promise<boolean> | undefined;

/** Whether the test PostgreSQL answers (asked once per run). */
export function postgresAvailable(): Promise<boolean> {
  pgProbe ??= (async () => {
    const knex = knexFactory({ client: 'pg', connection: { connectionString: PG_URL, connectionTimeoutMillis: 3000 }, pool: { min: 0, max: 1 } });
    try {
      await knex.raw('select 1');
      return true;
    } catch {
      return false;
    } finally {
      await knex.destroy();
    }
  })();
  return pgProbe;
}
