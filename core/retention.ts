import type { Clock } from './clock.js';
import type { Logger } from './log.js';
import type { BackgroundLoop } from './plugin.js';

const DAY_MS = 86_400_000;
const HOURLY_MS = 3_600_000;

/**
 * The loop that deletes what is older than `days` (0 keeps everything: no loop): hourly (or every
 * `intervalMs`), by one control plane at a time, and once as the loops start. `prune` deletes what ended before the
 * cutoff and answers how many it deleted, which is logged as `<what> past their retention deleted`.
 */
export function retentionLoops(options: { name: string; days: number; clock: Clock; log: Logger; what: string; prune(before: Date): Promise<number>; intervalMs?: number }): BackgroundLoop[] {
  if (!options.days) return [];
  return [
    {
      name: options.name,
      once: true,
      immediately: true,
      intervalMs: options.intervalMs ?? HOURLY_MS,
      async run() {
        const before = new Date(options.clock.now().getTime() - options.days * DAY_MS);
        const pruned = await options.prune(before);
        if (pruned) options.log.info({ pruned, before: before.toISOString() }, `${options.what} past their retention deleted`);
      },
    },
  ];
}
