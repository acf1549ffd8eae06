import type { Knex } from 'knex';
import type { Row } from '../../core/db/repository.js';

/** Most nodes one statement names (well under SQLite's and PostgreSQL's parameter limits). */
const CHUNK = 400;

/**
 * The heartbeats of nodes already online, written together: a large fleet sends hundreds a second,
 * and each would otherwise be a transaction of its own. Whatever arrives within one flush interval
 * is written in one transaction: the nodes whose facts did not change as one statement per few
 * hundred nodes (their `last_heartbeat_at` only), the others one update each (their new facts).
 * A later heartbeat of the same node in the same interval replaces the earlier one. None of what
 * it writes is a column the node's status derives from (a heartbeat that changes the status is
 * written at once through NodeStore.change, which writes the status column too: presence.ts).
 *
 * What readers see lags by at most one interval (a flush runs every `nodes:heartbeat-writes` loop
 * turn, and at shutdown); a heartbeat lost to a crash is repeated by the agent's next one.
 *
 * On PostgreSQL each statement is a transaction of its own, committed without waiting for the WAL's
 * flush to disk (`synchronous_commit` off for it alone): a crash of the database server may lose the
 * last fraction of a second of heartbeat times, which the agents' next heartbeats write again. The
 * times of the nodes whose row another transaction holds (an API write, a status change) are not
 * waited for (`skip locked`) but kept for the next flush: heartbeats never hold a row lock across a
 * round trip, and never wait behind the API's writes or make them wait.
 */
export class HeartbeatWrites {
  /** Node id → when its latest heartbeat came (facts unchanged). */
  private seen = new Map<string, string>();
  /** Node id → its latest heartbeat's columns, encoded (facts changed). */
  private changed = new Map<string, Row>();

  constructor(
    private readonly knex: Knex,
    private readonly dialect: 'sqlite' | 'postgres',
    private readonly table: string,
  ) {}

  /** Queues a heartbeat: `columns` are the changed columns (encoded), or null when only the time moves. */
  add(nodeId: string, at: string, columns: Row | null): void {
    if (columns) {
      this.seen.delete(nodeId);
      this.changed.set(nodeId, { ...this.changed.get(nodeId), ...columns, last_heartbeat_at: at });
    } else if (this.changed.has(nodeId)) {
      this.changed.get(nodeId)!.last_heartbeat_at = at;
    } else {
      this.seen.set(nodeId, at);
    }
  }

  get pending(): number {
    return this.seen.size + this.changed.size;
  }

  /** Writes what was queued; what arrives meanwhile waits for the next flush. Answers how many nodes' heartbeats were written. */
  async flush(): Promise<number> {
    if (!this.pending) return 0;
    const seen = [...this.seen];
    const changed = [...this.changed];
    this.seen = new Map();
    this.changed = new Map();
    if (this.dialect === 'postgres') return this.flushPostgres(seen, changed);
    await this.knex.transaction(async (trx) => {
      for (let i = 0; i < seen.length; i += CHUNK) {
        const chunk = seen.slice(i, i + CHUNK);
        await trx.raw(
          `update "${this.table}" set "last_heartbeat_at" = case "id" ${chunk.map(() => 'when ? then ?').join(' ')} end where "id" in (${chunk.map(() => '?').join(', ')})`,
          [...chunk.flat(), ...chunk.map(([id]) => id)],
        );
      }
      for (const [id, columns] of changed) await trx(this.table).where({ id }).update(columns);
    });
    return seen.length + changed.length;
  }

  /** PostgreSQL: one statement (its own transaction, see the class) per chunk of times, one per node whose facts changed. */
  private async flushPostgres(seen: Array<[string, string]>, changed: Array<[string, Row]>): Promise<number> {
    let written = 0;
    for (let i = 0; i < seen.length; i += CHUNK) {
      const chunk = seen.slice(i, i + CHUNK);
      const { rows } = (await this.knex.raw(
        `with due ("id", "at") as (values ${chunk.map(() => '(?, ?::timestamptz)').join(', ')}),
        relaxed as (select set_config('synchronous_commit', 'off', true)),
        free as (select n."id", due."at" from "${this.table}" n join due on due."id" = n."id" for update of n skip locked),
        done as (update "${this.table}" n set "last_heartbeat_at" = free."at" from free, relaxed where n."id" = free."id" returning n."id")
        select due."id", due."at", exists (select 1 from done where done."id" = due."id") as "written", exists (select 1 from "${this.table}" n where n."id" = due."id") as "present" from due`,
        chunk.flat(),
      )) as { rows: Array<{ id: string; written: boolean; present: boolean }> };
      const at = new Map(chunk);
      for (const row of rows) {
        if (row.written) written++;
        // Held by another transaction: kept for the next flush, unless a later heartbeat came meanwhile.
        else if (row.present && !this.seen.has(row.id) && !this.changed.has(row.id)) this.seen.set(row.id, at.get(row.id)!);
      }
    }
    for (const [id, columns] of changed) {
      await this.knex(this.table).where({ id }).update(columns);
      written++;
    }
    return written;
  }
}
