import type { Knex } from 'knex';
import type { Clock } from '../../core/clock.js';
import { StampedRepository, type Row } from '../../core/db/repository.js';
import type { Store } from '../../core/db/store.js';
import { newId } from '../../core/ids.js';
import type { NotificationEvent, Severity } from './events.js';
import { ATTEMPTS, CHANNELS, DELIVERIES, SUBSCRIPTIONS } from './migrations.js';
import type { AttemptResult, ChannelKind } from './send.js';

export interface ChannelRecord {
  id: string;
  name: string;
  kind: ChannelKind;
  url_sealed: string | null;
  headers_sealed: string | null;
  header_names: string[];
  recipients: string[];
  secret_sealed: string | null;
  created_at: string;
  updated_at: string;
  [key: string]: unknown;
}

export interface SubscriptionRecord {
  id: string;
  channel_id: string;
  event_types: string[];
  resource_ids: string[];
  tags: Record<string, string>;
  min_severity: Severity;
  /** Only events about resources of this project (null: any). */
  project_id: string | null;
  created_at: string;
  updated_at: string;
  [key: string]: unknown;
}

export type DeliveryStatus = 'pending' | 'sending' | 'delivered' | 'failed';

export interface DeliveryRecord {
  id: string;
  channel_id: string;
  subscription_id: string | null;
  event_id: string;
  event_type: string;
  event: NotificationEvent;
  status: DeliveryStatus;
  attempts: number;
  due_ms: number;
  give_up_ms: number;
  last_error: string | null;
  delivered_at: string | null;
  created_at: string;
  updated_at: string;
  [key: string]: unknown;
}

export interface AttemptRecord {
  delivery_id: string;
  at: string;
  status_code: number | null;
  latency_ms: number;
  error: string | null;
}

/**
 * Channels and subscriptions are admin-only records: their writes are not announced on the change
 * feed (the live event stream tells every user of the changes it hears of).
 */
export class ChannelStore extends StampedRepository<ChannelRecord> {
  constructor(store: Store, clock: Clock) {
    super(store, CHANNELS, { json: ['header_names', 'recipients'], dates: ['created_at', 'updated_at'] }, clock);
  }

  override changed(): void {}
}

export class SubscriptionStore extends StampedRepository<SubscriptionRecord> {
  constructor(store: Store, clock: Clock) {
    super(store, SUBSCRIPTIONS, { json: ['event_types', 'resource_ids', 'tags'], dates: ['created_at', 'updated_at'] }, clock);
  }

  override changed(): void {}
}

/** When a failed attempt is tried again, and when the outbox gives up. */
export interface RetryPolicy {
  baseMs: number;
  maxMs: number;
  periodMs: number;
}

/** The wait after the n-th failed attempt: base × 2^(n−1), at most max. */
export const backoffMs = (policy: RetryPolicy, attempts: number) => Math.min(policy.maxMs, policy.baseMs * 2 ** Math.max(0, attempts - 1));

/** Channels read per claim statement: two arms each, under SQLite's 500 selects in one compound select. */
const CLAIM_CHANNELS_PER_QUERY = 100;

/** Oldest first: by due time, then by id (of the delivery, or of a channel's oldest one). */
const byAge = (a: { due_ms: number; id: string; first?: string }, b: { due_ms: number; id: string; first?: string }) => {
  const x = a.first ?? a.id;
  const y = b.first ?? b.id;
  return a.due_ms - b.due_ms || (x < y ? -1 : x > y ? 1 : 0);
};

/**
 * The outbox: the deliveries still to make and those made, with each attempt. A delivery is
 * claimed by setting it `sending` until a deadline (one statement, guarded by the state read, so
 * two senders never take the same row); a sender that dies leaves it to be taken again after the
 * deadline. Rows are never announced on the change feed.
 */
export class Outbox extends StampedRepository<DeliveryRecord> {
  constructor(
    store: Store,
    private readonly clockOf: Clock,
  ) {
    super(store, DELIVERIES, { json: ['event'], dates: ['delivered_at', 'created_at', 'updated_at'] }, clockOf);
  }

  override changed(): void {}

  override decode = (row: Row): DeliveryRecord => {
    const r = this.codec.decode<DeliveryRecord>(row);
    return { ...r, attempts: Number(r.attempts), due_ms: Number(r.due_ms), give_up_ms: Number(r.give_up_ms) };
  };

  /** Writes one delivery per channel for an event, all in `trx` (or a transaction of their own). */
  async enqueue(event: NotificationEvent, targets: Array<{ channel_id: string; subscription_id: string }>, periodMs: number, trx?: Knex.Transaction): Promise<string[]> {
    if (!targets.length) return [];
    const now = this.clockOf.now();
    const rows = targets.map((t) => ({
      id: newId('ndl'),
      channel_id: t.channel_id,
      subscription_id: t.subscription_id,
      event_id: event.id,
      event_type: event.type,
      event: JSON.stringify(event),
      status: 'pending',
      attempts: 0,
      due_ms: now.getTime(),
      give_up_ms: now.getTime() + periodMs,
      last_error: null,
      delivered_at: null,
      created_at: now.toISOString(),
      updated_at: now.toISOString(),
    }));
    const insert = (k: Knex.Transaction) => k(DELIVERIES).insert(rows);
    if (trx) await insert(trx);
    else await this.store.knex.transaction(insert);
    return rows.map((r) => r.id);
  }

  /**
   * Takes up to `limit` due deliveries (pending and due, or held by a sender whose deadline passed)
   * until `holdMs` from now, the oldest first: at most `perChannel` of one channel counting the
   * `busy` ones this sender has in flight (a channel whose receiver is slow or down does not take
   * every slot, nor hide the others' deliveries behind its backlog), never one of `busy`'s ids.
   * Read from the index (channel_id, status, due_ms, id), a few rows at a time: each channel's oldest
   * due delivery (a probe per channel and status), then the oldest `perChannel` of each status of the
   * `limit` channels whose oldest is oldest (no other channel can be among the `limit` oldest). The
   * claim's cost follows the number of channels, not the backlog: a window over every due delivery
   * held SQLite's event loop for seconds under a backlog of thousands. Each is taken by an update
   * guarded by the state read.
   */
  async claim(limit: number, holdMs: number, sending: { perChannel: number; busy: Map<string, number>; ids: string[] } = { perChannel: limit, busy: new Map(), ids: [] }): Promise<DeliveryRecord[]> {
    if (limit <= 0) return [];
    const now = Date.now();
    const { perChannel, busy, ids } = sending;
    const knex = this.store.knex;
    // Each channel with room: its oldest due delivery of each status (when, and its id), an index probe each.
    const oldest = (status: 'pending' | 'sending', column: 'due_ms' | 'id') =>
      knex(DELIVERIES)
        .select(column)
        .where('channel_id', knex.ref('ch.id'))
        .where({ status })
        .where('due_ms', '<=', now)
        .modify((q) => {
          if (ids.length) void q.whereNotIn('id', ids);
        })
        .orderBy('due_ms')
        .orderBy('id')
        .limit(1)
        .as(`${status}_${column}`);
    const full = [...busy].filter(([, n]) => n >= perChannel).map(([channel]) => channel);
    // The channels of the outbox's rows, one index probe each (a loose index scan): a delivery whose
    // channel row is gone (deleted by another control plane while the event was matched) is claimed
    // too, and fails at once.
    const heads: Row[] = await knex
      .withRecursive('ch', ['id'], knex.raw(`select min(channel_id) from ${DELIVERIES} union all select (select min(channel_id) from ${DELIVERIES} where channel_id > ch.id) from ch where ch.id is not null`))
      .from('ch')
      .select('id', oldest('pending', 'due_ms'), oldest('pending', 'id'), oldest('sending', 'due_ms'), oldest('sending', 'id'))
      .whereNotNull('id')
      .modify((q) => {
        if (full.length) void q.whereNotIn('id', full);
      });
    const channels = heads
      .flatMap((c) => {
        const firsts = (['pending', 'sending'] as const).filter((s) => c[`${s}_id`] !== null && c[`${s}_id`] !== undefined).map((s) => ({ id: String(c.id), due_ms: Number(c[`${s}_due_ms`]), first: String(c[`${s}_id`]) }));
        return firsts.sort(byAge).slice(0, 1);
      })
      .sort(byAge);
    // The oldest `limit` deliveries (at most perChannel of a channel) all come from the `limit` channels whose oldest due delivery is oldest.
    const chosen = channels.slice(0, limit).map((c) => c.id);
    const candidates: Row[] = [];
    for (let i = 0; i < chosen.length; i += CLAIM_CHANNELS_PER_QUERY) {
      const arms = chosen.slice(i, i + CLAIM_CHANNELS_PER_QUERY).flatMap((channel) =>
        (['pending', 'sending'] as const).map((status) =>
          knex(DELIVERIES)
            .where({ channel_id: channel, status })
            .where('due_ms', '<=', now)
            .modify((q) => {
              if (ids.length) void q.whereNotIn('id', ids);
            })
            .orderBy('due_ms')
            .orderBy('id')
            .limit(perChannel),
        ),
      );
      // select * from (…) union all select * from (…): SQLite takes no parenthesised select in a compound one.
      const [first, ...rest] = arms.map((arm, n) => knex.select('*').from(arm.as(`c${n}`)));
      candidates.push(...((await (rest.length ? first!.unionAll(rest) : first!)) as Row[]));
    }
    const due = candidates.map((row) => this.decode(row)).sort(byAge);
    const claimed: DeliveryRecord[] = [];
    const taking = new Map<string, number>();
    for (const row of due) {
      if (claimed.length >= limit) break;
      const already = taking.get(row.channel_id) ?? 0;
      if (already + (busy.get(row.channel_id) ?? 0) >= perChannel) continue;
      const taken = await this.query()
        .where({ id: row.id, status: row.status, due_ms: row.due_ms })
        .update({ status: 'sending', due_ms: now + holdMs, updated_at: new Date(now).toISOString() });
      if (!taken) continue;
      claimed.push({ ...row, status: 'sending', due_ms: now + holdMs });
      taking.set(row.channel_id, already + 1);
    }
    return claimed;
  }

  /**
   * Records an attempt and what follows: delivered, due again after the backoff, or failed past the
   * retry period; null (nothing recorded) when the delivery is no longer this sender's.
   */
  async settle(delivery: DeliveryRecord, result: AttemptResult, policy: RetryPolicy): Promise<DeliveryStatus | null> {
    return (await this.settleAll([{ delivery, result }], policy))[0]!;
  }

  /**
   * {@link settle} for several finished attempts in one transaction (one COMMIT, on SQLite one
   * fsync, instead of one each): each update guarded as there; the attempts in one insert. Answers
   * each one's status (null: no longer this sender's) in order.
   */
  async settleAll(finished: Array<{ delivery: DeliveryRecord; result: AttemptResult }>, policy: RetryPolicy): Promise<Array<DeliveryStatus | null>> {
    if (!finished.length) return [];
    const now = Date.now();
    return this.store.knex.transaction(async (trx) => {
      const out: Array<DeliveryStatus | null> = [];
      const attempts: Row[] = [];
      for (const { delivery, result } of finished) {
        const count = delivery.attempts + 1;
        const next = now + backoffMs(policy, count);
        const status: DeliveryStatus = result.ok ? 'delivered' : result.final || next > delivery.give_up_ms ? 'failed' : 'pending';
        const ours = await trx(DELIVERIES)
          .where({ id: delivery.id, status: 'sending', due_ms: delivery.due_ms })
          .update({
            status,
            attempts: count,
            due_ms: status === 'pending' ? next : now,
            last_error: result.ok ? null : result.error,
            delivered_at: result.ok ? new Date(now).toISOString() : null,
            updated_at: new Date(now).toISOString(),
          });
        out.push(ours ? status : null);
        if (ours) attempts.push({ delivery_id: delivery.id, at: new Date(now - result.latency_ms).toISOString(), status_code: result.status_code, latency_ms: result.latency_ms, error: result.error });
      }
      if (attempts.length) await trx(ATTEMPTS).insert(attempts);
      return out;
    });
  }

  /** Gives deliveries held by this sender back (it stops): due at once for whoever sends next. */
  async release(ids: string[]): Promise<void> {
    if (ids.length) await this.query().whereIn('id', ids).where({ status: 'sending' }).update({ status: 'pending', due_ms: Date.now(), updated_at: new Date().toISOString() });
  }

  /** A delivered or failed delivery due again at once, with a new retry period; null when it is still on its way. */
  async redeliver(id: string, periodMs: number): Promise<DeliveryRecord | null> {
    const now = Date.now();
    const changed = await this.query()
      .where({ id })
      .whereIn('status', ['delivered', 'failed'])
      .update({ status: 'pending', due_ms: now, give_up_ms: now + periodMs, delivered_at: null, updated_at: new Date(now).toISOString() });
    return changed ? this.get(id) : null;
  }

  /** The attempts of some deliveries, oldest first, by delivery. */
  async attemptsOf(ids: string[]): Promise<Map<string, AttemptRecord[]>> {
    const out = new Map<string, AttemptRecord[]>(ids.map((id) => [id, []]));
    if (!ids.length) return out;
    const rows: Row[] = await this.store.knex(ATTEMPTS).whereIn('delivery_id', ids).orderBy('id');
    for (const r of rows) {
      const at = r.at instanceof Date ? r.at.toISOString() : typeof r.at === 'number' ? new Date(r.at).toISOString() : String(r.at);
      out.get(String(r.delivery_id))?.push({ delivery_id: String(r.delivery_id), at, status_code: r.status_code === null ? null : Number(r.status_code), latency_ms: Number(r.latency_ms), error: (r.error as string | null) ?? null });
    }
    return out;
  }

  /** Deletes delivered and failed deliveries (with their attempts) last changed before `before`; answers how many. */
  async prune(before: Date): Promise<number> {
    const pruned = await this.store.knex.transaction(async (trx) => {
      const old = trx(DELIVERIES).select('id').whereIn('status', ['delivered', 'failed']).where('updated_at', '<', before.toISOString());
      await trx(ATTEMPTS).whereIn('delivery_id', old).delete();
      return trx(DELIVERIES).whereIn('status', ['delivered', 'failed']).where('updated_at', '<', before.toISOString()).delete();
    });
    return Number(pruned ?? 0);
  }

  /** Forgets a channel's deliveries and their attempts (the channel is deleted). */
  async forgetChannel(channelId: string, trx: Knex.Transaction): Promise<void> {
    await trx(ATTEMPTS).whereIn('delivery_id', trx(DELIVERIES).select('id').where({ channel_id: channelId })).delete();
    await trx(DELIVERIES).where({ channel_id: channelId }).delete();
  }
}
