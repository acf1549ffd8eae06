import { randomToken } from '../../core/ids.js';

export type LiveEventType = 'resource.changed' | 'node.status' | 'node.event' | 'task.state';
export const LIVE_EVENT_TYPES: readonly LiveEventType[] = ['resource.changed', 'node.status', 'node.event', 'task.state'];

/** One event of the live stream; `id` is `<boot>-<seq>` (boot: this run of the control plane). */
export interface LiveEvent {
  id: string;
  type: LiveEventType;
  at: string;
  data: Record<string, unknown>;
  /** Only admins see it (e.g. a change to an SSH profile, a task). */
  adminOnly: boolean;
}

/** What a reconnecting client gets: the events after its last one, or `reset` when they are no longer kept. */
export type Replay = { events: LiveEvent[] } | { reset: string };

/**
 * The recent events of this control plane, in order, in a bounded ring: live subscribers get each
 * one as it is appended, and a client that reconnects with `Last-Event-ID` gets what it missed while
 * the ring still holds it. Ids carry the run's boot token, so an id from before a restart (or
 * from another control plane) is recognised as such and answered with a reset.
 *
 * The workers of one control plane (api.workers) share the boot token and the numbers: the primary
 * numbers every worker's events and each worker's journal appends them all with those numbers, so
 * an id from one worker resumes on another.
 */
export class Journal {
  readonly boot: string;
  private seq = 0;
  private readonly ring: Array<{ seq: number; event: LiveEvent }> = [];
  private readonly subscribers = new Set<(event: LiveEvent) => void>();

  constructor(
    private readonly capacity: number,
    private readonly now: () => Date,
    /** The workers' shared run token (core/workers.ts), or null for a token of this journal's own. */
    boot: string | null = null,
  ) {
    this.boot = boot ?? randomToken(8).toLowerCase();
  }

  /**
   * Appends an event, numbered next; a worker's journal is given the primary's number (they only
   * grow) and the time it happened in the worker where it did.
   */
  append(type: LiveEventType, data: Record<string, unknown>, adminOnly = false, numbered?: { seq: number; at: string }): LiveEvent {
    const seq = numbered?.seq ?? this.seq + 1;
    // Numbers missing in between (none should be): what came before is not to be replayed as whole.
    if (seq !== this.seq + 1) this.ring.length = 0;
    this.seq = seq;
    const event: LiveEvent = { id: `${this.boot}-${seq}`, type, at: numbered?.at ?? this.now().toISOString(), data, adminOnly };
    this.ring.push({ seq, event });
    if (this.ring.length > this.capacity) this.ring.shift();
    for (const subscriber of this.subscribers) subscriber(event);
    return event;
  }

  subscribe(subscriber: (event: LiveEvent) => void): () => void {
    this.subscribers.add(subscriber);
    return () => this.subscribers.delete(subscriber);
  }

  get listeners(): number {
    return this.subscribers.size;
  }

  /** Events after `lastId` (all kept events when it is undefined). */
  after(lastId: string | undefined): Replay {
    if (lastId === undefined) return { events: this.ring.map((r) => r.event) };
    const dash = lastId.lastIndexOf('-');
    const boot = lastId.slice(0, dash);
    const seq = Number(lastId.slice(dash + 1));
    if (dash < 1 || boot !== this.boot || !Number.isInteger(seq) || seq < 0 || seq > this.seq) {
      return { reset: 'the event id is not from this run of this control plane (it restarted, or the id is another’s): reload what you show' };
    }
    const oldest = this.ring[0]?.seq ?? this.seq + 1;
    if (seq + 1 < oldest) return { reset: `events after ${lastId} are no longer kept: reload what you show` };
    return { events: this.ring.filter((r) => r.seq > seq).map((r) => r.event) };
  }
}
