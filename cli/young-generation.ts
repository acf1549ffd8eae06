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

export const DEFAULT_QUIET_RULE: QuietRule = { quietMs: 5_000, bytesPerSecond: 1_000_000, minCapacity: 8 * 1024 * 1024, cpuShare: 0.03 };

/**
 * Decides, from samples of the young generation, when a collection would give it back. Allocation is
 * judged sample by sample (V8's shrink rule looks at the rate); the CPU over the last quiet period as a
 * whole, so that a few milliseconds in one second (a metrics scrape) do not start the period again.
 */
export class QuietYoungGeneration {
  private quietSince = 0;
  private last?: { used: number; cpuMicros: number; at: number };
  /** The samples of the last quiet period (the first at or before its start): the CPU used over it. */
  private trail: Array<{ at: number; cpuMicros: number }> = [];

  constructor(private readonly rule: QuietRule = DEFAULT_QUIET_RULE) {}

  /** Whether to collect now. After a yes it waits for a whole quiet period again before the next. */
  observe(sample: YoungGenerationSample, now: number): boolean {
    const last = this.last;
    this.last = { used: sample.used, cpuMicros: sample.cpuMicros, at: now };
    if (!last) {
      this.restart(sample, now);
      return false;
    }
    const allocated = sample.used - last.used;
    // Used bytes that fell: a collection ran in between, and what it took is unknown.
    if (allocated < 0 || allocated > (this.rule.bytesPerSecond * (now - last.at)) / 1000) this.restart(sample, now);
    else this.trail.push({ at: now, cpuMicros: sample.cpuMicros });
    while (this.trail.length > 1 && now - this.trail[1]!.at >= this.rule.quietMs) this.trail.shift();
    if (sample.capacity <= this.rule.minCapacity || now - this.quietSince < this.rule.quietMs) return false;
    const from = this.trail[0]!;
    if (sample.cpuMicros - from.cpuMicros > this.rule.cpuShare * (now - from.at) * 1000) return false;
    this.restart(sample, now);
    return true;
  }

  private restart(sample: YoungGenerationSample, now: number): void {
    this.quietSince = now;
    this.trail = [{ at: now, cpuMicros: sample.cpuMicros }];
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

/**
 * How often the young generation is sampled: each second, so that the collection comes 5-6 s into
 * the quiet rather than up to 8 s (V8's own collections in the first seconds after a burst start the
 * quiet period again; docs/performance.md, "RSS after the whole duel").
 */
const SAMPLE_EVERY_MS = 1_000;

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
