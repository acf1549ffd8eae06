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
 */
export class HeartbeatWrites {
  /** Node id → when its latest heartbeat came (facts unchanged). */
  private seen = new Map<string, string>();
  /** Node id → its latest heartbeat's columns, encoded (facts changed). */
  private changed = new Map<string, Row>();

  /** A time parameter in SQL: PostgreSQL types a CASE branch's text as text, not as the column's type. */
  private readonly time: string;

  constructor(
    private readonly knex: Knex,
    dialect: 'sqlite' | 'postgres',
    private readonly table: string,
  ) {
    this.time = dialect === 'postgres' ? '?::timestamptz' : '?';
  }

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

  /** Writes what was queued; what arrives meanwhile waits for the next flush. */
  async flush(): Promise<number> {
    if (!this.pending) return 0;
    const seen = [...this.seen];
    const changed = [...this.changed];
    this.seen = new Map();
    this.changed = new Map();
    await this.knex.transaction(async (trx) => {
      for (let i = 0; i < seen.length; i += CHUNK) {
        const chunk = seen.slice(i, i + CHUNK);
        await trx.raw(
          `update "${this.table}" set "last_heartbeat_at" = case "id" ${chunk.map(() => `when ? then ${this.time}`).join(' ')} end where "id" in (${chunk.map(() => '?').join(', ')})`,
          [...chunk.flat(), ...chunk.map(([id]) => id)],
        );
      }
      for (const [id, columns] of changed) await trx(this.table).where({ id }).update(columns);
    });
    return seen.length + changed.length;
  }
}
