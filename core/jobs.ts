import type { Logger } from './log.js';

/**
 * Work a request starts and answers 202 for: runs in the background of this process, never
 * rejects into the void (failures go to `onError`), and is awaited on shutdown.
 *
 * A job that fails once `shutdown` has fired was cut short, not refused: `onError` is skipped (an
 * operation's lease is handed over instead: core/lifecycle.ts, and the next start takes it over).
 * A job no `resume` picks up (it leaves no record in a transitional state) says `resumable: false`,
 * and its `onError` runs whatever the cause.
 */
export class BackgroundJobs {
  private readonly running = new Set<Promise<void>>();

  constructor(
    private readonly log: Logger,
    private readonly shutdown?: AbortSignal,
  ) {}

  run(label: string, work: () => Promise<void>, onError: (err: Error) => Promise<void> | void = () => undefined, options: { resumable?: boolean } = {}): void {
    const job = (async () => {
      try {
        await work();
      } catch (err) {
        if (this.stopping && options.resumable !== false) {
          this.log.info({ job: label, error: (err as Error).message }, 'background job cut short by the shutdown; the next start resumes it');
          return;
        }
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

  /** True once the shutdown has fired: a failure now is an interruption, not a verdict to record. */
  get stopping(): boolean {
    return this.shutdown?.aborted ?? false;
  }

  get size(): number {
    return this.running.size;
  }

  /** Waits for every job still running (they see the shutdown signal and stop early). */
  async drain(): Promise<void> {
    while (this.running.size) await Promise.allSettled([...this.running]);
  }
}
