import type { Logger } from './log.js';

/**
 * Work a request starts and answers 202 for: runs in the background of this process, never
 * rejects into the void (failures go to `onError`), and is awaited on shutdown.
 */
export class BackgroundJobs {
  private readonly running = new Set<Promise<void>>();

  constructor(private readonly log: Logger) {}

  run(label: string, work: () => Promise<void>, onError: (err: Error) => Promise<void> | void = () => undefined): void {
    const job = (async () => {
      try {
        await work();
      } catch (err) {
        this.log.warn({ job: label, error: (err as Error).message }, 'background job failed');
        try {
          await onError(err as Error);
        } catch (inner) {
          this.log.error({ job: label, error: (inner as Error).message }, 'recording a job failure failed');
        }
      }
    })();
    this.running.add(job);
    void job.finally(() => this.running.delete(job));
  }

  get size(): number {
    return this.running.size;
  }

  /** Waits for every job still running (they see the shutdown signal and stop early). */
  async drain(): Promise<void> {
    while (this.running.size) await Promise.allSettled([...this.running]);
  }
}
