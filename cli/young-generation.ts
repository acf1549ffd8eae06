import v8 from 'node:v8';

/**
 * Gives V8's heap back once a burst of load is over.
 *
 * Under load V8 grows the young generation up to its maximum (`hangar serve` is launched with a
 * 64 MB semi-space, so up to 128 MB; docs/performance.md, "The HTTP/2 tail, found"), and it
 * shrinks it only at a collection that finds the allocation rate of the last seconds low. A
 * process that goes quiet after a burst collects nothing more, so it kept the whole young
 * generation for good. The old generation, grown by the burst, was V8's memory reducer's to
 * shrink, which the launcher turns off (its compacting collections paused a large fleet's control
 * plane; "The memory reducer's pause"). This watches the young generation's use, and when the
 * process has allocated almost nothing and used almost no CPU for a while, runs a young-generation
 * collection, which shrinks that space to what is live, then a full one for the old generation
 * (docs/performance.md, "Memory given back after load"). A quiet process has no requests for the
 * full collection to pause; a fleet's steady trickle of heartbeats can allocate under V8's rate, so
 * the CPU is what tells it from quiet (a full collection paused a 5 000-agent fleet's 301 ms).
 */
export interface YoungGenerationSample {
  /** Bytes the young generation holds (both semi-spaces), `new_space.space_size`. */
  capacity: number;
  /** Bytes allocated in it since its last collection, `new_space.space_used_size`. */
  used: number;
  /** CPU time the process has used since it started (user and system), microseconds. */
  cpuMicros: number;
}

export interface QuietRule {
  /** How long the allocation rate must stay under {@link bytesPerSecond} (V8 measures the last 5 s). */
  quietMs: number;
  /** The allocation rate under which V8 shrinks the space at a collection (its own rule: 1 000 bytes/ms). */
  bytesPerSecond: number;
  /** A young generation this size or smaller is not worth a collection. */
  minCapacity: number;
  /** The share of one core the process may use and still count as quiet (an idle `hangar serve` uses under 1 %). */
  cpuShare: number;
}

export const DEFAULT_QUIET_RULE: QuietRule = { quietMs: 6_000, bytesPerSecond: 1_000_000, minCapacity: 8 * 1024 * 1024, cpuShare: 0.03 };

/** Decides, from samples of the young generation, when a collection would give it back. */
export class QuietYoungGeneration {
  private quietSince = 0;
  private last?: { used: number; cpuMicros: number; at: number };

  constructor(private readonly rule: QuietRule = DEFAULT_QUIET_RULE) {}

  /** Whether to collect now. After a yes it waits for a whole quiet period again before the next. */
  observe(sample: YoungGenerationSample, now: number): boolean {
    const last = this.last;
    this.last = { used: sample.used, cpuMicros: sample.cpuMicros, at: now };
    if (!last) {
      this.quietSince = now;
      return false;
    }
    const allocated = sample.used - last.used;
    const elapsedMs = now - last.at;
    // Used bytes that fell: a collection ran in between, and what it took is unknown.
    const busy =
      allocated < 0 || allocated > (this.rule.bytesPerSecond * elapsedMs) / 1000 || sample.cpuMicros - last.cpuMicros > this.rule.cpuShare * elapsedMs * 1000;
    if (busy) this.quietSince = now;
    if (sample.capacity <= this.rule.minCapacity || now - this.quietSince < this.rule.quietMs) return false;
    this.quietSince = now;
    return true;
  }
}

/** The young generation as V8 reports it now, and the process's CPU time. */
export function sampleYoungGeneration(): YoungGenerationSample {
  const space = v8.getHeapSpaceStatistics().find((s) => s.space_name === 'new_space');
  const cpu = process.cpuUsage();
  return { capacity: space?.space_size ?? 0, used: space?.space_used_size ?? 0, cpuMicros: cpu.user + cpu.system };
}

/** What `--expose-gc` gives: a full collection without options, the young generation's with `{ type: 'minor' }`. */
export type Collect = (options?: { type: 'minor' }) => void;

/** How often the young generation is sampled. */
const SAMPLE_EVERY_MS = 2_000;

/**
 * Samples the young generation and collects the heap when the process has gone quiet; returns
 * what stops it. `onReturn` hears of each time (the young generation's capacity before and after, bytes).
 */
export function giveHeapBackWhenQuiet(collect: Collect, onReturn: (before: number, after: number) => void): () => void {
  const quiet = new QuietYoungGeneration();
  const timer = setInterval(() => {
    const sample = sampleYoungGeneration();
    if (!quiet.observe(sample, Date.now())) return;
    collect({ type: 'minor' });
    // V8 judges the rate by the collections before this one: the first after a burst may still
    // see the burst, the second sees the quiet the first closed.
    if (sampleYoungGeneration().capacity >= sample.capacity) collect({ type: 'minor' });
    const young = sampleYoungGeneration().capacity;
    collect();
    onReturn(sample.capacity, young);
  }, SAMPLE_EVERY_MS);
  timer.unref();
  return () => clearInterval(timer);
}
