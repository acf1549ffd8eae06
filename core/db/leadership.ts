import { createHash } from 'node:crypto';
import os from 'node:os';
import { workerIndex } from '../workers.js';
import { createTables, type Migration } from './migrations.js';
import type { Store } from './store.js';

/** One row per piece of work that runs in a single control plane at a time: who holds it, until when. */
export const LEADER_LEASES_TABLE = 'leader_leases';

export const leadershipMigration: Migration = createTables('006_leader_leases', {
  [LEADER_LEASES_TABLE]: (t) => {
    t.string('name', 200).primary();
    t.string('holder', 200).notNullable();
    t.bigInteger('expires_ms').notNullable();
  },
});

/**
 * Leadership for work that must run once across the control planes sharing a store (observation,
 * offline detection, removals, purges…): a lease row per name, taken when free or expired and
 * renewed by its holder. One process holds a name at a time; when it stops, {@link releaseAll}
 * frees its names at once, and when it dies its leases run out and another process takes over.
 * The same code runs on SQLite, where the one serving process always leads (or, with workers,
 * one of them: each holds leases under its own name, `…/worker-<n>`).
 *
 * The holder is named after the machine and the data dir, so a control plane that restarts (even
 * after `kill -9`) leads again at once instead of waiting for its old lease. Lease times are wall
 * clock milliseconds: control planes on several machines need synchronised clocks (NTP), well
 * within the lease.
 */
export class Leadership {
  constructor(
    private readonly store: Store,
    /** This control plane, as other processes see it in the table. */
    readonly holder: string,
  ) {}

  /** The holder name of the control plane whose data dir is `dataDir` on this machine (and of its worker, api.workers). */
  static holderFor(dataDir: string): string {
    const worker = workerIndex();
    return `${os.hostname()}/${createHash('sha256').update(dataDir).digest('hex').slice(0, 16)}${worker === null ? '' : `/worker-${worker}`}`;
  }

  /**
   * Takes `name` for `leaseMs` if it is free, expired or already ours (then renews it), in one
   * statement; answers whether this control plane holds it now.
   */
  async lead(name: string, leaseMs: number): Promise<boolean> {
    const now = Date.now();
    const { knex } = this.store;
    await knex.raw(
      `insert into ${LEADER_LEASES_TABLE} (name, holder, expires_ms) values (?, ?, ?)
       on conflict (name) do update set holder = excluded.holder, expires_ms = excluded.expires_ms
       where ${LEADER_LEASES_TABLE}.holder = excluded.holder or ${LEADER_LEASES_TABLE}.expires_ms < ?`,
      [name, this.holder, now + leaseMs, now],
    );
    const row = await knex(LEADER_LEASES_TABLE).where({ name }).first('holder');
    return row?.holder === this.holder;
  }

  /** Who holds `name` now (null when nobody does or the lease ran out). */
  async leader(name: string): Promise<string | null> {
    const row = await this.store.knex(LEADER_LEASES_TABLE).where({ name }).where('expires_ms', '>=', Date.now()).first('holder');
    return (row?.holder as string | undefined) ?? null;
  }

  /** Gives up every name this control plane holds (graceful shutdown): the others take over at their next turn. */
  async releaseAll(): Promise<void> {
    await this.store.knex(LEADER_LEASES_TABLE).where({ holder: this.holder }).delete();
  }
}

/** How long a loop's leadership lasts: three of its turns (renewed at each), never under 15 s. */
export function loopLeaseMs(intervalMs: number): number {
  return Math.max(3 * intervalMs, 15_000);
}
