/**
 * One expensive test service (a Kubernetes control plane, an S3 server) shared by the suites of a
 * mocha process instead of one per suite: mocha runs every test file in one process, one after
 * the other, so consecutive suites that need the same service start it once.
 *
 *   const shared = new SharedService('the S3 server', () => S3Server.start(), (s) => s.stop());
 *   before(async () => (s3 = await shared.acquire()));
 *   after(() => shared.release());
 *
 * acquire() starts it when nothing runs (a failed start is not kept: the next acquire tries again);
 * release() hands it back, and once no suite holds it, it is stopped a moment later unless another
 * suite acquires it meanwhile (the next file's before hook, milliseconds later). Whatever still runs
 * when the process exits is ended by the service's own exit hook. Suites that share one must not
 * depend on it being pristine: each uses names of its own (buckets, namespaces, objects).
 */
export class SharedService<T> {
  private users = 0;
  private current: Promise<T> | undefined;
  private stopping: Promise<void> | undefined;
  private idleTimer: NodeJS.Timeout | undefined;

  constructor(
    readonly what: string,
    private readonly startService: () => Promise<T>,
    private readonly stopService: (service: T) => Promise<void>,
    /** How long it stays up with no user, for the next suite to pick it up. */
    private readonly idleMs = 5_000,
  ) {}

  async acquire(): Promise<T> {
    clearTimeout(this.idleTimer);
    this.idleTimer = undefined;
    if (this.stopping) await this.stopping;
    this.users++;
    this.current ??= this.startService().catch((error: unknown) => {
      this.current = undefined;
      throw error;
    });
    try {
      return await this.current;
    } catch (error) {
      this.users--;
      throw error;
    }
  }

  /** Hands back what acquire() gave (call it once per successful acquire, in an after hook). */
  release(): void {
    if (this.users === 0) return;
    this.users--;
    if (this.users > 0 || !this.current) return;
    this.idleTimer = setTimeout(() => {
      this.idleTimer = undefined;
      const running = this.current;
      this.current = undefined;
      if (!running) return;
      this.stopping = running
        .then((service) => this.stopService(service))
        .catch(() => undefined)
        .finally(() => (this.stopping = undefined));
    }, this.idleMs);
    this.idleTimer.unref();
  }
}
