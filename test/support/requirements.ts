import knexFactory from 'knex';

/** Set by .ci/run: every suite that would be skipped for a missing service fails instead. */
export const REQUIRE_ALL = process.env.HANGAR_REQUIRE_ALL === '1';

export const PG_URL = process.env.HANGAR_TEST_PG_URL ?? 'postgres://hangar:hangar@127.0.0.1:5432/hangar_test';

/** What the loud skips and the declared exclusions leave for the summary reporter (test/support/summary-reporter.cjs). */
interface Registry {
  exclusions: Array<{ title: string; because: string }>;
}
const REGISTRY = Symbol.for('hangar.test.registry');
const registry = (): Registry => ((globalThis as Record<symbol, Registry>)[REGISTRY] ??= { exclusions: [] });

/** The property the summary reporter looks for on a test or suite skipped here (see its forbid-pending note). */
const LOUD_SKIP = 'hangarLoudSkip';

/**
 * Skips the calling suite (from a `before` hook) or test (from the test or a `beforeEach`) loudly:
 * a SKIPPED line saying why, counted as skipped by the summary reporter; or fails it when
 * HANGAR_REQUIRE_ALL=1. The only way to skip: .mocharc.yml forbids pending tests, so a bare
 * `this.skip()`, `it.skip` or `xit` fails the run.
 */
export function skipLoudly(ctx: Mocha.Context, why: string, requiredMessage = `HANGAR_REQUIRE_ALL=1 but this cannot run: ${why}`): never {
  const runnable = ctx.test as (Mocha.Runnable & { type?: string; originalTitle?: string }) | undefined;
  const inBeforeAll = runnable?.type === 'hook' && /^"before all" hook/.test(runnable.originalTitle ?? runnable.title);
  // From a before-all hook: its suite (mocha marks every test in it pending); from a beforeEach: the
  // test about to run; from a test: the test itself.
  const target: Mocha.Runnable | Mocha.Suite | undefined = inBeforeAll ? runnable?.parent : runnable?.type === 'hook' ? ctx.currentTest : runnable;
  const title = target?.fullTitle() || 'suite';
  if (REQUIRE_ALL) throw new Error(`${requiredMessage} (${title})`);
  console.log(`SKIPPED: ${title} — ${why}`);
  if (target) (target as unknown as Record<string, string>)[LOUD_SKIP] = why;
  ctx.skip();
}

/**
 * Skips the calling suite or test loudly (a SKIPPED line naming what is missing), or fails it
 * when HANGAR_REQUIRE_ALL=1.
 */
export function requireService(ctx: Mocha.Context, available: boolean, what: string): void {
  if (available) return;
  skipLoudly(ctx, `needs ${what}`, `HANGAR_REQUIRE_ALL=1 but ${what} is not available`);
}

/**
 * Declares a case that a target cannot run, instead of the case: the summary reporter lists it as
 * `excluded: <title> because <because>` and counts it. For cases that cannot mean anything on a
 * target (reading a process's output where no process runs), never for a missing service.
 */
export function exclude(title: string, because: string): void {
  registry().exclusions.push({ title, because });
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
