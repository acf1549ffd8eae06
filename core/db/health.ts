import type { Knex } from 'knex';
import type { Logger } from '../log.js';
import { createTables, type Migration } from './migrations.js';

/** One row per control plane (its leadership holder name): the write a health check makes while the store refuses writes. */
export const STORE_PROBE = 'store_probe';

export const storeProbeMigration: Migration = createTables('009_store_probe', {
  [STORE_PROBE]: (t) => {
    t.string('holder', 200).primary();
    t.string('written_at', 40).notNullable();
  },
});

/**
 * Whether a store error says its disk is full: SQLite's SQLITE_FULL (the database, its WAL or a
 * temporary file could not grow), PostgreSQL's disk_full (53100), or the system's ENOSPC.
 */
export function isStoreFull(err: unknown): boolean {
  const e = err as { code?: unknown; message?: unknown } | null;
  const code = typeof e?.code === 'string' ? e.code : '';
  if (code.startsWith('SQLITE_FULL') || code === '53100' || code === 'ENOSPC') return true;
  // A driver's error (it has a code) whose code is less precise than its message (SQLITE_IOERR_WRITE…).
  return Boolean(code) && typeof e?.message === 'string' && /database or disk is full|No space left on device/i.test(e.message);
}

/** The message of a store error without the statement knex puts before it (`insert into … - reason`). */
export function storeReason(err: unknown): string {
  const message = String((err as { message?: unknown } | null)?.message ?? err);
  const cut = message.lastIndexOf(' - ');
  return cut >= 0 ? message.slice(cut + 3) : message;
}

/**
 * Whether the store takes writes, as the writes tell: a write refused because the disk is full
 * marks it unwritable, and the condition is logged once per interval with how many writes were
 * refused meanwhile (not once per failed statement: a busy control plane logged 1.7 MB/s of the
 * same error). Only the health check's probe clears it (`GET /healthz` tries one small write, at most
 * once a second, while the store is unwritable: plugins/system); other writes that succeed meanwhile
 * are not watched, so the condition, and the 503 of /healthz, last until a health check looks.
 */
export class StoreHealth {
  private full: { since: Date; reason: string } | null = null;
  private loggedAt = -Infinity;
  private refused = 0;
  private log?: Logger;

  constructor(private readonly intervalMs = 60_000) {}

  /** Where the condition is logged (the store opens before the logger is handed around). */
  logTo(log: Logger): void {
    this.log = log;
  }

  /** When the store refuses writes, since when and why; null while it takes them. */
  get unwritable(): { since: string; reason: string } | null {
    return this.full && { since: this.full.since.toISOString(), reason: this.full.reason };
  }

  /** A failed statement: counts it when it failed for want of space. Answers whether it did. */
  noteError(err: unknown): boolean {
    if (!isStoreFull(err)) return false;
    this.full ??= { since: new Date(), reason: storeReason(err) };
    this.refused++;
    const now = performance.now();
    if (now - this.loggedAt >= this.intervalMs) {
      this.log?.error(
        { since: this.full.since.toISOString(), reason: this.full.reason, refused: this.refused, interval_seconds: this.intervalMs / 1000 },
        'store: its disk is full, writes are refused (logged once per interval; free space on the disk that holds it)',
      );
      this.loggedAt = now;
      this.refused = 0;
    }
    return true;
  }

  /** The probe's write went through: the store takes writes again. */
  noteWritable(): void {
    if (!this.full) return;
    this.log?.info({ since: this.full.since.toISOString(), refused: this.refused }, 'store: writes succeed again');
    this.full = null;
    this.refused = 0;
    this.loggedAt = -Infinity;
  }

  /** Tries one small write (the health check's, while the store is unwritable); answers whether it went through. */
  async probe(knex: Knex, holder: string, at: Date): Promise<boolean> {
    try {
      await knex(STORE_PROBE).insert({ holder, written_at: at.toISOString() }).onConflict('holder').merge();
      this.noteWritable();
      return true;
    } catch (err) {
      this.noteError(err);
      return false;
    }
  }
}
