import { randomToken } from '../../core/ids.js';
import type { Audience } from './audience.js';

export type LiveEventType = 'resource.changed' | 'node.status' | 'node.event' | 'task.state' | 'alert.firing' | 'alert.resolved';
export const LIVE_EVENT_TYPES: readonly LiveEventType[] = ['resource.changed', 'node.status', 'node.event', 'task.state', 'alert.firing', 'alert.resolved'];

/** One event of the live stream; `id` is `<boot>-<seq>` (boot: this run of the control plane). */
export interface LiveEvent {
  id: string;
  type: LiveEventType;
  at: string;
  data: Record<string, unknown>;
  /** Who may receive it (audience.ts): what reading it needs, and the project of what it is about. */
  audience: Audience;
}

/** What a reconnecting client gets: the events after its last one, or `reset` when they are no longer kept. */
export type Replay = { events: LiveEvent[] } | { reset: string };

/** A kept event with its Server-Sent Events frame (made once, for every stream). */
export interface JournalEntry {
  seq: number;
  event: LiveEvent;
  /** `id: …\nevent: …\ndata: …\n\n`. */
  frame: string;
  /** Bytes of every frame appended before this one in this run (so the bytes between two entries are a subtraction). */
  start: number;
}

/** Splits an event id into its run and number; null when it is not one. */
export function parseEventId(id: string): { boot: string; seq: number } | null {
  const dash = id.lastIndexOf('-');
  const seq = Number(id.slice(dash + 1));
  if (dash < 1 || !Number.isInteger(seq) || seq < 0) return null;
  return { boot: id.slice(0, dash), seq };
}

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
  /** Bytes of every frame appended so far. */
  private bytes = 0;
  private readonly ring: JournalEntry[] = [];
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
  append(type: LiveEventType, data: Record<string, unknown>, audience: Audience = {}, numbered?: { seq: number; at: string }): LiveEvent {
    const seq = numbered?.seq ?? this.seq + 1;
    // Numbers missing in between (none should be): what came before is not to be replayed as whole.
    if (seq !== this.seq + 1) this.ring.length = 0;
    this.seq = seq;
    const event: LiveEvent = { id: `${this.boot}-${seq}`, type, at: numbered?.at ?? this.now().toISOString(), data, audience };
    const frame = `id: ${event.id}\nevent: ${type}\ndata: ${JSON.stringify({ ...data, at: event.at })}\n\n`;
    this.ring.push({ seq, event, frame, start: this.bytes });
    this.bytes += Buffer.byteLength(frame);
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

  /** The number of the newest event (0 before the first). */
  get last(): number {
    return this.seq;
  }

  /** The kept entry numbered `seq`, or undefined when it is not kept (older than the ring, or lost in a gap). */
  entry(seq: number): JournalEntry | undefined {
    const first = this.ring[0];
    const entry = first ? this.ring[seq - first.seq] : undefined;
    return entry?.seq === seq ? entry : undefined;
  }

  /**
   * Bytes of the frames after event `seq` (what a stream that has been sent up to `seq` has still to
   * send); Infinity when some of them are no longer kept.
   */
  bytesAfter(seq: number): number {
    if (seq >= this.seq) return 0;
    const next = this.entry(seq + 1);
    return next ? this.bytes - next.start : Infinity;
  }

  /**
   * The number after which a client that last saw `lastId` resumes (the newest when it is undefined),
   * or `reset` when what it missed is no longer kept.
   */
  resumeAfter(lastId: string | undefined): { seq: number } | { reset: string } {
    if (lastId === undefined) return { seq: this.seq };
    const parsed = parseEventId(lastId);
    if (!parsed || parsed.boot !== this.boot || parsed.seq > this.seq) {
      return { reset: 'the event id is not from this run of this control plane (it restarted, or the id is another’s): reload what you show' };
    }
    const oldest = this.ring[0]?.seq ?? this.seq + 1;
    if (parsed.seq + 1 < oldest) return { reset: `events after ${lastId} are no longer kept: reload what you show` };
    return { seq: parsed.seq };
  }

  /** Events after `lastId` (all kept events when it is undefined). */
  after(lastId: string | undefined): Replay {
    if (lastId === undefined) return { events: this.ring.map((r) => r.event) };
    const resume = this.resumeAfter(lastId);
    if ('reset' in resume) return resume;
    return { events: this.ring.filter((r) => r.seq > resume.seq).map((r) => r.event) };
  }
}
