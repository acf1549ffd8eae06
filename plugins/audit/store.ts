import type { Knex } from 'knex';
import type { Migration } from '../../core/db/migrations.js';
import { RowCodec, type Page, type Row } from '../../core/db/repository.js';
import type { Store } from '../../core/db/store.js';
import { bookkeeping } from '../../core/db/write-scope.js';
import type { PreparedTransaction } from '../../core/db/prepared-transaction.js';
import { quoted } from '../../core/db/writes.js';

export const AUDIT_LOG = 'audit_log';
// An entry is the record of a change, not one (core/db/write-scope.ts).
bookkeeping(AUDIT_LOG);

/** One write on either API: who asked, what, from where, and how it ended. Never a body or a secret. */
export interface AuditEntry {
  id: number;
  created_at: string;
  listener: string;
  method: string;
  /** The route template (`/v1/nodes/{id}/cordon`), never the raw path. */
  route: string;
  resource_id: string | null;
  principal_id: string | null;
  principal_name: string | null;
  /** How the caller authenticated: jwt, hmac, session… (null: anonymous). */
  auth_method: string | null;
  source_ip: string;
  status: number;
  request_id: string;
  user_agent: string | null;
  /** How many requests the entry stands for: 1, or more for anonymous requests counted together (a flood; see plugins/audit/flood.ts). */
  count: number;
}

/** An entry as written: `pending` while it went in with a write and its answer is not known yet. */
export type NewAuditEntry = Omit<AuditEntry, 'id'> & { pending?: boolean };

export const auditMigrations: Migration[] = [
  {
    id: '001_audit_log',
    async up(knex, store) {
      await knex.schema.createTable(AUDIT_LOG, (t) => {
        t.bigIncrements('id').primary();
        t.timestamp('created_at', { useTz: true }).notNullable();
        t.string('listener', 16).notNullable();
        t.string('method', 8).notNullable();
        t.string('route', 300).notNullable();
        t.string('resource_id', 200).nullable();
        t.string('principal_id', 100).nullable();
        t.string('principal_name', 200).nullable();
        t.string('auth_method', 32).nullable();
        t.string('source_ip', 64).notNullable();
        t.integer('status').notNullable();
        t.string('request_id', 128).notNullable();
        t.string('user_agent', 200).nullable();
        t.index(['created_at']);
        t.index(['principal_id', 'id']);
        t.index(['resource_id', 'id']);
      });
      // Append-only: an entry is never rewritten (retention deletes whole old entries).
      if (store.dialect === 'postgres') {
        await knex.raw(`create function ${AUDIT_LOG}_append_only() returns trigger language plpgsql as $$
          begin raise exception 'the audit log is append-only'; end $$`);
        await knex.raw(`create trigger ${AUDIT_LOG}_no_update before update on ${AUDIT_LOG} for each row execute function ${AUDIT_LOG}_append_only()`);
      } else {
        await knex.raw(`create trigger ${AUDIT_LOG}_no_update before update on ${AUDIT_LOG} begin select raise(abort, 'the audit log is append-only'); end`);
      }
    },
  },
  {
    // Entries that stand for many requests (a flood of anonymous ones: `count`), and entries written
    // with their write's transaction before the answer was known (`pending`): such an entry may be
    // settled once — its status and resource set, `pending` cleared —, and then never changed again.
    id: '002_audit_count_pending',
    async up(knex, store) {
      await knex.schema.alterTable(AUDIT_LOG, (t) => {
        t.integer('count').notNullable().defaultTo(1);
        t.boolean('pending').notNullable().defaultTo(false);
        t.index(['request_id']);
      });
      if (store.dialect === 'postgres') {
        await knex.raw(`create or replace function ${AUDIT_LOG}_append_only() returns trigger language plpgsql as $$
          begin
            if OLD.pending and not NEW.pending then return NEW; end if;
            raise exception 'the audit log is append-only';
          end $$`);
      } else {
        await knex.raw(`drop trigger ${AUDIT_LOG}_no_update`);
        await knex.raw(
          `create trigger ${AUDIT_LOG}_no_update before update on ${AUDIT_LOG} when not (OLD.pending = 1 and NEW.pending = 0) begin select raise(abort, 'the audit log is append-only'); end`,
        );
      }
    },
  },
  {
    // A pending entry is settled by its id (the request id is the client's, and two requests may
    // share one), with the answer's outcome only: what the entry is about — when, where, which route,
    // from where, which request — never changes. Entries left pending by a process that stopped
    // before its answer are looked for by age (the partial index).
    id: '003_audit_settle_by_id',
    async up(knex, store) {
      const same = ['id', 'created_at', 'listener', 'method', 'route', 'source_ip', 'request_id', 'user_agent', 'count'];
      if (store.dialect === 'postgres') {
        await knex.raw(`create or replace function ${AUDIT_LOG}_append_only() returns trigger language plpgsql as $$
          begin
            if OLD.pending and not NEW.pending and ${same.map((c) => `NEW.${c} is not distinct from OLD.${c}`).join(' and ')} then return NEW; end if;
            raise exception 'the audit log is append-only';
          end $$`);
        await knex.raw(`create index ${AUDIT_LOG}_pending on ${AUDIT_LOG} (created_at) where pending`);
      } else {
        await knex.raw(`drop trigger ${AUDIT_LOG}_no_update`);
        await knex.raw(
          `create trigger ${AUDIT_LOG}_no_update before update on ${AUDIT_LOG} when not (OLD.pending = 1 and NEW.pending = 0 and ${same.map((c) => `NEW.${c} is OLD.${c}`).join(' and ')}) begin select raise(abort, 'the audit log is append-only'); end`,
        );
        await knex.raw(`create index ${AUDIT_LOG}_pending on ${AUDIT_LOG} (created_at) where pending = 1`);
      }
      await knex.schema.alterTable(AUDIT_LOG, (t) => t.dropIndex(['request_id']));
    },
  },
];

export interface AuditFilter {
  principal?: string;
  resource?: string;
  route?: string;
  method?: string;
  status?: number;
  outcome?: 'success' | 'failure';
  since?: string;
  until?: string;
  limit?: number;
  cursor?: string;
}

const codec = new RowCodec({ dates: ['created_at'], bool: ['pending'] });

/** The audit table: append, page newest first, prune by age. */
export class AuditLog {
  constructor(private readonly store: Store) {}

  /** Appends entries whose answer is known. */
  async append(entries: NewAuditEntry | NewAuditEntry[], trx?: Knex.Transaction): Promise<void> {
    const rows = (Array.isArray(entries) ? entries : [entries]).map((e) => codec.encode({ ...e, pending: false }));
    if (rows.length) await (trx ?? this.store.knex)(AUDIT_LOG).insert(rows);
  }

  /** Writes the entry of a request in `trx`, with the write it records, pending until its answer settles it; answers its id. */
  async begin(entry: NewAuditEntry, trx: Knex.Transaction | PreparedTransaction): Promise<number> {
    const row = codec.encode({ ...entry, pending: true });
    const columns = Object.keys(row);
    const sql = `insert into ${quoted(AUDIT_LOG)} (${columns.map(quoted).join(', ')}) values (${columns.map(() => '?').join(', ')}) returning "id"`;
    const { rows } = await this.store.writes.run(AUDIT_LOG, sql, Object.values(row), trx);
    return Number((rows[0] as { id: number | string }).id);
  }

  /**
   * Settles the pending entry `id` with what its answer decided: status, resource, who (a login names
   * its account). Once: the mark goes, and the table refuses any later change. Answers whether the
   * entry was there, pending (an entry whose write's COMMIT was lost is there only if it committed).
   */
  async settle(id: number, outcome: Pick<AuditEntry, 'status' | 'resource_id' | 'principal_id' | 'principal_name' | 'auth_method'>, trx?: Knex.Transaction): Promise<boolean> {
    const sql = `update ${quoted(AUDIT_LOG)} set "status" = ?, "resource_id" = ?, "principal_id" = ?, "principal_name" = ?, "auth_method" = ?, "pending" = ? where "id" = ? and "pending" = ?`;
    const { status, resource_id, principal_id, principal_name, auth_method } = outcome;
    return (await this.store.writes.run(AUDIT_LOG, sql, [status, resource_id ?? null, principal_id ?? null, principal_name ?? null, auth_method ?? null, false, id, true], trx)).count > 0;
  }

  /**
   * Closes entries still pending that were written before `before`: their process stopped before
   * their answer was known (a crash). They keep what they were written with — their write committed
   * with them, so the route's success status —; answers how many.
   */
  async closeUnsettled(before: Date): Promise<number> {
    const pending = this.store.dialect === 'postgres' ? 'pending' : 'pending = 1';
    return this.store.knex(AUDIT_LOG).whereRaw(pending).andWhere('created_at', '<', before.toISOString()).update({ pending: false });
  }

  /** Entries still pending that were written before `before`, oldest first, at most `limit`. */
  async unsettledBefore(before: Date, limit: number): Promise<AuditEntry[]> {
    const pending = this.store.dialect === 'postgres' ? 'pending' : 'pending = 1';
    const rows: Row[] = await this.store.knex(AUDIT_LOG).whereRaw(pending).andWhere('created_at', '<', before.toISOString()).orderBy('id').limit(limit);
    return rows.map((r) => {
      const { pending: _pending, ...e } = codec.decode<AuditEntry & { pending: boolean }>(r);
      return { ...e, id: Number(e.id), status: Number(e.status), count: Number(e.count) };
    });
  }

  /** Closes one pending entry as written, in `trx`; answers whether it was still pending. */
  async close(id: number, trx: Knex.Transaction): Promise<boolean> {
    const pending = this.store.dialect === 'postgres' ? 'pending' : 'pending = 1';
    return (await trx(AUDIT_LOG).where({ id }).whereRaw(pending).update({ pending: false })) > 0;
  }

  /** Newest first; `next_cursor` continues with older entries. */
  async page(filter: AuditFilter): Promise<Page<AuditEntry>> {
    const limit = filter.limit ?? 100;
    const q = this.store.knex(AUDIT_LOG);
    if (filter.principal) q.where((w) => w.where('principal_id', filter.principal!).orWhere('principal_name', filter.principal!));
    if (filter.resource) q.where('resource_id', filter.resource);
    if (filter.route) q.where('route', filter.route);
    if (filter.method) q.where('method', filter.method);
    if (filter.status !== undefined) q.where('status', filter.status);
    if (filter.outcome) q.where('status', filter.outcome === 'success' ? '<' : '>=', 400);
    if (filter.since) q.where('created_at', '>=', new Date(filter.since).toISOString());
    if (filter.until) q.where('created_at', '<', new Date(filter.until).toISOString());
    if (filter.cursor) q.where('id', '<', Number(this.store.cursors.decode(AUDIT_LOG, filter.cursor, 1)[0]));
    const rows: Row[] = await q.orderBy('id', 'desc').limit(limit + 1);
    const items = rows.slice(0, limit).map((r) => {
      const { pending: _pending, ...e } = codec.decode<AuditEntry & { pending: boolean }>(r);
      return { ...e, id: Number(e.id), status: Number(e.status), count: Number(e.count) };
    });
    return { items, next_cursor: rows.length > limit ? this.store.cursors.encode(AUDIT_LOG, [items[items.length - 1]!.id]) : null };
  }

  /** Deletes entries older than `before`; answers how many went. */
  async prune(before: Date, trx?: Knex.Transaction): Promise<number> {
    return (trx ?? this.store.knex)(AUDIT_LOG).where('created_at', '<', before.toISOString()).delete();
  }
}
