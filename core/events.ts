import { EventEmitter } from 'node:events';
import type { Knex } from 'knex';
import type { Logger } from './log.js';

/**
 * A topic of the in-process event bus and the payload it carries: publishers and subscribers name
 * the same declared topic, so a payload's shape is checked at both ends, never cast.
 */
export interface Topic<T> {
  readonly name: string;
  /** Never set: carries the payload's type. */
  readonly payload?: T;
}

export function defineTopic<T>(name: string): Topic<T> {
  return { name };
}

/** What a durable listener writes about a change in the transaction that records the change (a notification's outbox rows). */
export type DurableWrite = (trx: Knex.Transaction) => Promise<void>;

/** A topic and a payload on it, for {@link EventBus.keepWith}. */
export interface Notice<T = unknown> {
  topic: Topic<T>;
  payload: T;
}

export const notice = <T>(topic: Topic<T>, payload: T): Notice => ({ topic, payload }) as Notice;

/**
 * In-process publish/subscribe between core and plugins (e.g. {@link ResourceDeleted}).
 * Subscribers must not throw; a failing subscriber is logged by the bus owner.
 *
 * A listener that must not miss a change (the notifications plugin's outbox) listens durably
 * ({@link keep}): the publisher writes what it answers in the transaction of the change
 * ({@link keepWith}), so a crash between the change and the in-process publish loses nothing; the
 * publish that follows is for the in-process listeners (the event stream, reactions).
 */
export class EventBus {
  private readonly emitter = new EventEmitter();
  private readonly durable = new Map<string, Array<(payload: unknown) => Promise<DurableWrite | null>>>();

  constructor() {
    this.emitter.setMaxListeners(0);
  }

  publish<T>(topic: Topic<T>, payload: T): void {
    this.emitter.emit(topic.name, payload);
  }

  subscribe<T>(topic: Topic<T>, listener: (payload: T) => void): () => void {
    const heard = listener as (payload: unknown) => void;
    this.emitter.on(topic.name, heard);
    return () => this.emitter.off(topic.name, heard);
  }

  /**
   * Listens to a topic durably: `prepare` answers what to write about a payload in the transaction
   * of the change it reports (null: nothing). It is called before that transaction and may read the
   * store, never inside one (on SQLite the one connection is the transaction's). Publishers of the
   * topic call {@link keepWith} with their change; the in-process publish does not reach it.
   */
  keep<T>(topic: Topic<T>, prepare: (payload: T) => Promise<DurableWrite | null>): () => void {
    const listener = prepare as (payload: unknown) => Promise<DurableWrite | null>;
    this.durable.set(topic.name, [...(this.durable.get(topic.name) ?? []), listener]);
    return () => this.durable.set(topic.name, (this.durable.get(topic.name) ?? []).filter((l) => l !== listener));
  }

  /** What the durable listeners write about these notices, as one write (null: none wants any). */
  async prepare(notices: readonly Notice[]): Promise<DurableWrite | null> {
    const prepared = await Promise.all(notices.flatMap(({ topic, payload }) => (this.durable.get(topic.name) ?? []).map((prepare) => prepare(payload))));
    const writes = prepared.filter((w): w is DurableWrite => w !== null);
    if (!writes.length) return null;
    return async (trx) => {
      for (const write of writes) await write(trx);
    };
  }

  /**
   * `change` and what the durable listeners write about `notices` in one transaction
   * ({@link keepWithWrite}; a loss is logged as an error naming the topics). The caller publishes
   * the notices on the bus once this answered, for the in-process listeners.
   */
  keepWith<R>(knex: Knex, notices: readonly Notice[], change: (trx?: Knex.Transaction) => Promise<R>, options: { log: Logger; wanted?: (done: R) => boolean }): Promise<R> {
    if (!notices.some(({ topic }) => this.durable.get(topic.name)?.length)) return change();
    const topics = notices.map(({ topic }) => topic.name);
    return keepWithWrite(
      knex,
      () => this.prepare(notices),
      change,
      (err) => options.log.error({ topics, err: { message: err.message } }, `what durable listeners keep of a change (${topics.join(', ')}: its notification) was not written; the change is`),
      options.wanted,
    );
  }
}

/**
 * For a change that must be kept even when what is written with it cannot be (a notification's
 * outbox rows): `change` and `write` in one transaction (both or neither); when `prepare` or the
 * write fails, `change` alone, and `lost` is told why (log it: the change is kept, the write is not).
 * `change` answers what it did; `wanted` says from that whether the write is wanted (a guarded
 * change that changed nothing: not). A failure of `change` itself, or of the COMMIT, is thrown as it
 * is (the COMMIT's may have committed: running `change` again could apply it twice).
 */
export async function keepWithWrite<R>(
  knex: Knex,
  prepare: () => Promise<DurableWrite | null>,
  change: (trx?: Knex.Transaction) => Promise<R>,
  lost: (err: Error) => void,
  wanted: (done: R) => boolean = () => true,
): Promise<R> {
  let write: DurableWrite | null = null;
  try {
    write = await prepare();
  } catch (err) {
    lost(err as Error);
  }
  if (!write) return change();
  const durable = write;
  let failed: Error | null = null;
  try {
    return await knex.transaction(async (trx) => {
      const done = await change(trx);
      if (wanted(done)) {
        try {
          await durable(trx);
        } catch (err) {
          failed = err as Error;
          throw err;
        }
      }
      return done;
    });
  } catch (err) {
    if (!failed) throw err;
    lost(failed);
    return change();
  }
}

/** A record was removed (`type` as the tags plugin and the API name it): who holds something about it drops it. */
export const ResourceDeleted = defineTopic<{ type: string; id: string }>('resource.deleted');

/**
 * How a plugin forgets one of its records: removes it and, when it was there, publishes
 * `resource.deleted` {type, id} so that other plugins (tags) drop what they hold about it.
 */
export function recordRemover(bus: EventBus, type: string, repository: { remove(id: string): Promise<boolean> }): (id: string) => Promise<boolean> {
  return async (id) => {
    const removed = await repository.remove(id);
    if (removed) bus.publish(ResourceDeleted, { type, id });
    return removed;
  };
}
