import type { Logger } from '../../core/log.js';
import type { DeliveryRecord, DeliveryStatus, Outbox, RetryPolicy } from './store.js';

/** Finished attempts recorded in one transaction at most. */
const SETTLE_BATCH = 64;
import type { AttemptResult } from './send.js';

/**
 * Sends what the outbox holds, on the control plane that leads `notifications:deliver`: at most
 * `concurrency` deliveries at once (`channelConcurrency` of one channel), each bounded by its own timeout, none awaited by the loop or
 * by anything a request or the event bus does. A slow or dead receiver holds one slot until its
 * timeout, never the API.
 */
export class Dispatcher {
  private readonly inFlight = new Map<string, AbortController>();
  /** Deliveries in flight by channel. */
  private readonly perChannel = new Map<string, number>();
  private claiming = false;
  private again = false;
  private closed = false;
  /** The turn that follows finished attempts, when one is scheduled. */
  private next: NodeJS.Timeout | NodeJS.Immediate | null = null;
  /** When the last claim started (epoch ms). */
  private lastClaim = 0;
  /** Finished attempts waiting to be recorded, with what to do once they are. */
  private finished: Array<{ delivery: DeliveryRecord; result: AttemptResult; done: (status: DeliveryStatus | null | Error) => void }> = [];
  private settling = false;
  /** A refill came while a claim ran. */
  private refillAfter = false;

  constructor(
    private readonly outbox: Outbox,
    private readonly send: (delivery: DeliveryRecord, signal: AbortSignal) => Promise<AttemptResult>,
    private readonly options: {
      concurrency: number;
      channelConcurrency: number;
      holdMs: number;
      retry: RetryPolicy;
      log: Logger;
      /** Whether this process holds the sending leadership now: a turn of one that lost it claims nothing. */
      isLeader: () => Promise<boolean>;
      /**
       * The least time between two claims (default 50 ms). A freed slot is filled at once — the
       * attempts that finish in the same turn of the event loop share one claim — unless a claim
       * started less than this ago; then when it has passed. A claim reads the outbox (on SQLite
       * synchronously, on the event loop): this bounds that work under a backlog, whatever the
       * receivers' speed.
       */
      refillMs?: number;
    },
  ) {}

  get sending(): number {
    return this.inFlight.size;
  }

  /** Takes due deliveries into free slots and starts them; returns without waiting for them. */
  async turn(refilling = false): Promise<void> {
    if (this.closed) return;
    if (this.claiming) {
      // A refill waits for this claim and then for refillMs (claims stay bounded); the loop's and a poke's turn follows at once.
      if (refilling) this.refillAfter = true;
      else this.again = true;
      return;
    }
    this.claiming = true;
    try {
      do {
        this.again = false;
        // Every turn (the loop's, a poke's, one after a delivery finished) asks: a control plane that
        // lost the lease to another one sends nothing more (what it has in flight finishes).
        if (!(await this.options.isLeader())) return;
        this.lastClaim = Date.now();
        const claimed = await this.outbox.claim(this.options.concurrency - this.inFlight.size, this.options.holdMs, {
          perChannel: this.options.channelConcurrency,
          busy: this.perChannel,
          ids: [...this.inFlight.keys()],
        });
        for (const delivery of claimed) this.start(delivery);
      } while (this.again && !this.closed);
    } finally {
      this.claiming = false;
      if (this.refillAfter) {
        this.refillAfter = false;
        this.refill();
      }
    }
  }

  private start(delivery: DeliveryRecord): void {
    const controller = new AbortController();
    this.inFlight.set(delivery.id, controller);
    this.perChannel.set(delivery.channel_id, (this.perChannel.get(delivery.channel_id) ?? 0) + 1);
    void (async () => {
      try {
        const started = Date.now();
        // Whatever fails on the way (a stored value that cannot be opened, a request that cannot be
        // made) is a failed attempt, recorded: backoff and giving up apply as to any other.
        const result = await this.send(delivery, controller.signal).catch(
          (err: Error): AttemptResult => ({ ok: false, status_code: null, latency_ms: Date.now() - started, error: `the attempt could not be made: ${err.message}`.slice(0, 500) }),
        );
        if (controller.signal.aborted) return;
        const status = await this.record(delivery, result);
        const line = { delivery_id: delivery.id, channel_id: delivery.channel_id, event_type: delivery.event_type, attempt: delivery.attempts + 1, status_code: result.status_code, latency_ms: result.latency_ms };
        if (status === null) this.options.log.info({ ...line }, 'notification attempt not recorded: the delivery was deleted or taken by another sender meanwhile');
        else if (status === 'failed') this.options.log.warn({ ...line, error: result.error }, 'notification given up: the retry period is over');
        else if (status === 'pending') this.options.log.info({ ...line, error: result.error }, 'notification attempt failed; it will be tried again');
        else this.options.log.debug(line, 'notification delivered');
      } catch (err) {
        this.options.log.warn({ delivery_id: delivery.id, err: { message: (err as Error).message } }, 'recording a notification attempt failed; the delivery is taken again after its hold');
      } finally {
        this.inFlight.delete(delivery.id);
        const left = (this.perChannel.get(delivery.channel_id) ?? 1) - 1;
        if (left > 0) this.perChannel.set(delivery.channel_id, left);
        else this.perChannel.delete(delivery.channel_id);
      }
      // A slot is free: what else is due goes soon rather than at the next turn of the loop.
      this.refill();
    })();
  }

  /**
   * Records a finished attempt with the others that finished meanwhile: one transaction per batch
   * (at most {@link SETTLE_BATCH}), one batch at a time, the event loop let go between two.
   */
  private record(delivery: DeliveryRecord, result: AttemptResult): Promise<DeliveryStatus | null> {
    return new Promise<DeliveryStatus | null>((resolve, reject) => {
      this.finished.push({ delivery, result, done: (status) => (status instanceof Error ? reject(status) : resolve(status)) });
      if (!this.settling) void this.settleFinished();
    });
  }

  private async settleFinished(): Promise<void> {
    this.settling = true;
    try {
      // The attempts that finish in this turn of the event loop join the first batch.
      await new Promise<void>((resolve) => setImmediate(resolve));
      while (this.finished.length) {
        const batch = this.finished.splice(0, SETTLE_BATCH);
        try {
          const statuses = await this.outbox.settleAll(batch, this.options.retry);
          batch.forEach((f, i) => f.done(statuses[i] ?? null));
        } catch (err) {
          for (const f of batch) f.done(err as Error);
        }
        await new Promise<void>((resolve) => setImmediate(resolve));
      }
    } finally {
      this.settling = false;
    }
  }

  /** Fills freed slots: at once (the attempts finishing in this turn of the event loop together), or once refillMs has passed since the last claim. */
  private refill(): void {
    if (this.closed || this.next) return;
    const wait = this.lastClaim + (this.options.refillMs ?? 50) - Date.now();
    const run = () => {
      this.next = null;
      void this.turn(true).catch(() => undefined);
    };
    if (wait > 0) {
      this.next = setTimeout(run, wait);
      this.next.unref?.();
    } else this.next = setImmediate(run);
  }

  /** Stops sending: attempts in flight are abandoned (not recorded) and their deliveries given back. */
  async close(): Promise<void> {
    this.closed = true;
    if (this.next) {
      clearTimeout(this.next as NodeJS.Timeout);
      clearImmediate(this.next as NodeJS.Immediate);
    }
    this.next = null;
    const ids = [...this.inFlight.keys()];
    for (const controller of this.inFlight.values()) controller.abort();
    await this.outbox.release(ids).catch((err: Error) => this.options.log.warn({ err: { message: err.message } }, 'giving back notifications in flight failed; they are taken again after their hold'));
  }
}
