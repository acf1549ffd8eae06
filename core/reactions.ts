import { alterColumns, createTables } from './db/migrations.js';
import { recordId, recordTimes } from './db/columns.js';
import { StampedRepository } from './db/repository.js';
import { leaseColumns } from './clusters/migrations.js';
import type { Topic } from './events.js';
import { newId, randomToken } from './ids.js';
import { defineLifecycle, LEASE_DATES, REMOVED, type LeasedRecord } from './lifecycle.js';
import type { Services } from './plugin.js';

export const REACTIONS = 'reactions';

export const reactionsMigration = createTables('014_reactions', {
  [REACTIONS]: (t) => {
    recordId(t);
    /** What the log and a resume line call it: `forget node-… in swarm web`. */
    t.string('name', 255).notNullable();
    /** What it reacts on: what its definition kept of the change (JSON). */
    t.text('payload').notNullable();
    recordTimes(t);
    /** `op` is the reaction's name: each runs as the one operation of its own lifecycle. */
    leaseColumns(t);
  },
});

export const reactionAttemptsMigration = alterColumns('015_reaction_attempts', REACTIONS, (t) => {
  /** How many times it failed, and why the last time: it runs again later, a few times. */
  t.integer('attempts').notNullable().defaultTo(0);
  t.text('error').nullable();
});

/** How many times a reaction runs before its failure is its outcome. */
export const REACTION_ATTEMPTS = 5;

/** A reaction not yet done: its row lives from the change it reacts to until it ran. */
interface ReactionRecord extends LeasedRecord {
  payload: Record<string, unknown>;
  attempts: number;
  error: string | null;
  created_at: string;
  updated_at: string;
}

export interface ReactionDef<T, K extends Record<string, unknown>> {
  /** Unique among reactions, at most 40 characters: `volumes:member-joined`. */
  name: string;
  /**
   * The change it reacts to, when it reacts to one: its publishers write it with
   * {@link EventBus.keepWith} (core/events.ts); `keep` says what the reaction needs of it, kept as
   * JSON until it has run (null: nothing to do for this one). Without it, it runs when requested.
   */
  on?: { topic: Topic<T>; keep(payload: T): K | null };
  /** Its name in the log: `volumes for node-… in cls-…`. */
  label(kept: K): string;
  /** The work; idempotent, since a reaction a control plane died in runs again from its start. */
  run(kept: K, signal: AbortSignal): Promise<void>;
  /** The warning logged when it fails for the last time (after {@link REACTION_ATTEMPTS} runs). */
  failure: string;
}

export interface Reaction<K> {
  /**
   * Records the reaction and starts it in this process (it is taken over when this process dies
   * first); not when one of the same label has not run yet (it does the same).
   */
  request(kept: K): Promise<void>;
}

export function defineReaction<K extends Record<string, unknown>, T = never>(services: Services, def: ReactionDef<T, K>): Reaction<K> {
  const { db, clock, log, events, clusters } = services;
  const rows = new StampedRepository<ReactionRecord>(db, REACTIONS, { json: ['payload'], dates: ['created_at', 'updated_at', ...LEASE_DATES] }, clock);
  const lifecycle = clusters.lifecycle(
    rows,
    defineLifecycle<ReactionRecord>({
      noun: 'reaction',
      operations: {
        [def.name]: {
          from: '*',
          label: (row) => row.name,
          async run(row, ctx) {
            try {
              await def.run(row.payload as K, ctx.signal);
            } catch (err) {
              // Cut short (a shutdown, or another process took it over): run again from its start, elsewhere or later.
              if (ctx.signal.aborted) throw err;
              const error = (err as Error).message;
              const attempts = row.attempts + 1;
              if (attempts < REACTION_ATTEMPTS) {
                // Again once a lease of its own has run out (the take-over loop, any control plane): one lease length, doubled each time.
                const retryAt = new Date(clock.now().getTime() + clusters.settings.opLeaseMs * 2 ** (attempts - 1));
                log.info({ reaction: def.name, ...row.payload, attempts, retry_at: retryAt.toISOString(), error }, `${def.failure}; it runs again`);
                await rows.query().where({ id: row.id, op_id: ctx.opId }).update(rows.codec.encode({ attempts, error, op_id: `op-${randomToken(12)}`, op_lease_until: retryAt.toISOString(), updated_at: clock.now().toISOString() }));
                return REMOVED;
              }
              log.warn({ reaction: def.name, ...row.payload, attempts, error }, def.failure);
            }
            // Only while it is still this run's: a process that took it over meanwhile keeps its row (and its retry).
            await rows.removeIf(row.id, { op_id: ctx.opId });
            return REMOVED;
          },
          failed: () => ({}),
        },
      },
      // A reaction that failed holds its row until its next attempt is due.
      waitsForLease: (row) => row.attempts > 0,
    }),
  );

  /** Its row, held by this process from the start (its lease runs out when this process dies before it ran). */
  const rowOf = (kept: K) => {
    const now = clock.now();
    return {
      id: newId('rct'),
      name: def.label(kept),
      payload: kept,
      op: def.name,
      op_id: `op-${randomToken(12)}`,
      op_lease_until: new Date(now.getTime() + clusters.settings.opLeaseMs).toISOString(),
      op_rev: 0,
      attempts: 0,
      error: null,
      created_at: now.toISOString(),
      updated_at: now.toISOString(),
    };
  };
  const start = (row: { id: string; op_id: string }) =>
    lifecycle
      .runHeld(row.id, row.op_id)
      .then((started) => started || log.info({ reaction: def.name, id: row.id }, 'a reaction was not started here (gone, or held by another process)'))
      .catch((err: Error) => log.warn({ reaction: def.name, id: row.id, error: err.message }, 'starting a reaction failed; once its lease runs out, the take-over loop starts it'));

  if (def.on) {
    const { topic, keep } = def.on;
    /**
     * The reactions this process wrote with their change and has not started yet, by what they kept:
     * a publish starts those of its own change (another change's may not be committed, or done, yet),
     * each once its transaction has committed; a change rolled back takes its row with it.
     */
    const written = new Map<string, Array<{ row: { id: string; op_id: string; op_lease_until: string }; committed: Promise<unknown> }>>();
    const forget = (key: string, row: { id: string }) => {
      const left = (written.get(key) ?? []).filter((w) => w.row.id !== row.id);
      if (left.length) written.set(key, left);
      else written.delete(key);
    };
    /**
     * Drops those whose lease has run out: handed over to the take-over loop, which runs them (an
     * error between their commit and their publish left them here), never started by a later publish.
     */
    const dropHandedOver = () => {
      const now = clock.now().toISOString();
      for (const [key, entries] of written) for (const { row } of entries) if (row.op_lease_until <= now) forget(key, row);
    };
    events.keep(topic, async (payload) => {
      dropHandedOver();
      const kept = keep(payload);
      if (!kept) return null;
      const row = rowOf(kept);
      const key = JSON.stringify(kept);
      return async (trx) => {
        await trx(REACTIONS).insert(rows.codec.encode(row));
        const committed = trx.executionPromise;
        committed.catch(() => forget(key, row));
        written.set(key, [...(written.get(key) ?? []), { row, committed }]);
      };
    });
    // The change is published once committed (with its reaction's row): this process starts what it wrote for it.
    events.subscribe(topic, (payload) => {
      dropHandedOver();
      const kept = keep(payload);
      const key = kept && JSON.stringify(kept);
      const mine = key ? written.get(key) : undefined;
      if (!key || !mine) return;
      written.delete(key);
      for (const { row, committed } of mine) void committed.then(() => start(row), () => undefined);
    });
  }

  return {
    async request(kept) {
      const row = rowOf(kept);
      if (await db.knex(REACTIONS).where({ op: def.name, name: row.name }).first('id')) return;
      await db.knex(REACTIONS).insert(rows.codec.encode(row));
      await start(row);
    },
  };
}
