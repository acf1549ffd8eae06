import type { Notices } from './db/notices.js';

/**
 * A read-through cache of store records, for the reads every request makes (the caller's user, an
 * agent certificate's revocation state). An entry lives `ttlMs` at most and is dropped as soon as a
 * notice on `topic` names its key (or names none: everything goes); whoever changes such a record
 * publishes that notice (Notices reaches every control plane on the store). A load that was under
 * way while a notice arrived is returned but not kept. Misses (null) are never kept.
 */
export class NoticedCache<V> {
  private readonly entries = new Map<string, { value: V; until: number }>();
  /** Moves on with every notice: a load that started before one must not fill the cache. */
  private generation = 0;

  constructor(
    notices: Notices,
    readonly topic: string,
    private readonly options: { ttlMs: number; max: number; now?: () => number },
  ) {
    notices.subscribe(topic, (key) => this.forget(key));
  }

  private now(): number {
    return (this.options.now ?? Date.now)();
  }

  forget(key: string | null): void {
    this.generation++;
    if (key === null) this.entries.clear();
    else this.entries.delete(key);
  }

  async get(key: string, load: () => Promise<V | null>): Promise<V | null> {
    const hit = this.entries.get(key);
    if (hit && hit.until > this.now()) return hit.value;
    const generation = this.generation;
    const value = await load();
    if (value !== null && generation === this.generation) {
      if (this.entries.size >= this.options.max) this.entries.delete(this.entries.keys().next().value!);
      this.entries.delete(key);
      this.entries.set(key, { value, until: this.now() + this.options.ttlMs });
    }
    return value;
  }

  get size(): number {
    return this.entries.size;
  }
}
