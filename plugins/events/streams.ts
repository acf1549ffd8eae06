import { PassThrough } from 'node:stream';
import type { Counter } from 'prom-client';
import { addressHolder } from '../../core/addresses.js';
import type { AuthRegistry, Principal } from '../../core/auth/index.js';
import { MEMBER_CHANGES } from '../projects/api.js';
import type { Viewer } from './audience.js';
import type { Notices } from '../../core/db/notices.js';
import { HttpError } from '../../core/errors.js';
import type { Metrics } from '../../core/metrics.js';
import type { Journal, LiveEvent } from './journal.js';

/** The limits on live event streams (the events plugin's settings). */
export interface StreamLimits {
  /** Streams one principal (a user, by id) may hold open on this process. */
  streams_per_principal: number;
  /** Streams one client address (an IPv6 address: its /64) may hold open on this process. */
  streams_per_address: number;
  /** How far behind (bytes of events not yet taken by the client) a stream may fall before it is dropped. */
  stream_buffer_bytes: number;
}

/** Why the server ended a stream, as its final `end` event says. */
export type EndReason = 'revoked' | 'role_changed' | 'expired' | 'shutdown';

/** The connection a stream's response goes out on: what it still holds, and how to cut it. */
export interface StreamConnection {
  /** Bytes written to the connection and not yet handed to the operating system. */
  buffered(): number;
  /** Closes the connection at once, discarding what it holds. */
  cut(): void;
}

interface Logger {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
}

/**
 * One open `GET /v1/events/stream`. It sends from the journal's ring, never from copies of its own:
 * `sent` is the number of the last event handed to the response, and events are handed over only
 * while the response takes them (backpressure), so a stream holds at most the response's buffers
 * (a few tens of kB) whatever its client does. A client that does not read falls behind; once
 * `stream_buffer_bytes` of the events since it connected wait for it (or the ring no longer holds
 * the next one) the stream is dropped: the connection is cut, and the client resumes with
 * `Last-Event-ID`. A replay after `Last-Event-ID` goes out the same way, as the client takes it.
 */
export class EventStream {
  readonly body = new PassThrough();
  private sent: number;
  /**
   * The newest event when the stream opened: a replay up to it (after Last-Event-ID) is what the
   * client missed while away, not what it fails to take now, so only later events count towards the bound.
   */
  private readonly liveFrom: number;
  /** The response's buffer is full: wait for it to drain before handing over more. */
  private blocked = false;
  private closed = false;
  /** A revalidation is under way; `again`: a notice came meanwhile, so check once more after it. */
  checking = false;
  again = false;
  private readonly cleanups: Array<() => void> = [];

  constructor(
    private readonly owner: EventStreams,
    /** Who reads the stream, as last revalidated: its role and its memberships decide what it sees. */
    public viewer: Viewer,
    readonly address: string,
    private readonly connection: StreamConnection,
    private readonly types: ReadonlySet<string> | null,
    after: number,
  ) {
    this.sent = after;
    this.liveFrom = owner.journal.last;
    this.body.on('drain', () => {
      this.blocked = false;
      this.pump();
    });
  }

  get open(): boolean {
    return !this.closed;
  }

  get principal(): Principal {
    return this.viewer.principal;
  }

  /** Runs `fn` when the stream closes, however it does. */
  onClose(fn: () => void): void {
    this.cleanups.push(fn);
  }

  private visible(event: LiveEvent): boolean {
    return this.viewer.sees(event.audience) && (!this.types || this.types.has(event.type));
  }

  /**
   * Bytes the client has not taken: events that happened since it connected and were not handed
   * over yet, and what the response and the connection still hold.
   */
  get unsent(): number {
    return this.owner.journal.bytesAfter(Math.max(this.sent, this.liveFrom)) + this.body.writableLength + this.body.readableLength + this.connection.buffered();
  }

  /** Writes a frame that is not a journal event (the preamble, a comment, a reset). */
  write(text: string): void {
    if (!this.closed) this.body.write(text);
  }

  /** Hands the response the events after `sent` while it takes them; drops the stream when it has fallen too far behind. */
  pump(): void {
    if (this.closed) return;
    const { journal } = this.owner;
    while (!this.blocked && this.sent < journal.last) {
      const entry = journal.entry(this.sent + 1);
      // No longer kept (the client fell behind the whole ring): it must resume, and will be told to reset.
      if (!entry) return this.owner.drop(this, Infinity);
      this.sent = entry.seq;
      if (this.visible(entry.event) && !this.body.write(entry.frame)) this.blocked = true;
    }
    const unsent = this.unsent;
    if (unsent > this.owner.limits.stream_buffer_bytes) this.owner.drop(this, unsent);
  }

  /** Ends the stream with a final `end` event saying why. */
  end(reason: EndReason, message: string): void {
    if (this.closed) return;
    this.body.write(`event: end\ndata: ${JSON.stringify({ reason, message })}\n\n`);
    this.body.end();
    this.close();
  }

  /** Cuts the connection: what it had not sent is discarded. */
  cut(): void {
    if (this.closed) return;
    this.close();
    this.body.destroy();
    this.connection.cut();
  }

  /** The client went (or the stream ended): stop. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    for (const fn of this.cleanups.splice(0)) fn();
  }
}

/**
 * The open event streams of this process: admission against the limits per principal and per
 * address (429 past them), the drop of streams whose client does not read, and revalidation of
 * each stream's principal when a store notice says its credentials may have changed (a deleted
 * user, a removed API key, a logout, a new password or role; core/auth `revokedBy`) and, as a
 * backstop, every `events.revalidate_seconds`. A principal that would be refused now ends its
 * streams with `event: end` `{"reason":"revoked"}`, one whose role changed with `role_changed`.
 */
export class EventStreams {
  private readonly streams = new Set<EventStream>();
  private readonly perPrincipal = new Map<string, number>();
  private readonly perAddress = new Map<string, number>();
  private watching = false;
  private readonly unsubscribers: Array<() => void> = [];
  private readonly dropped: Counter<string>;
  private readonly ended: Counter<'reason'>;
  private readonly refused: Counter<'limit'>;

  constructor(
    readonly journal: Journal,
    readonly limits: StreamLimits,
    private readonly auth: AuthRegistry,
    private readonly notices: Notices,
    metrics: Metrics,
    private readonly log: Logger,
    /** What a principal may see, read anew (its memberships) when a notice says it may have changed. */
    private readonly viewerOf: (principal: Principal) => Promise<Viewer>,
  ) {
    metrics.gauge('hangar_event_streams_open', 'Server-Sent Events streams (GET /v1/events/stream) open on this control plane', [], (set) => set({}, this.streams.size));
    this.dropped = metrics.counter(
      'hangar_event_streams_dropped_total',
      'Event streams dropped because their client did not read: more than events.stream_buffer_bytes of events not taken (the client resumes with Last-Event-ID)',
    );
    this.ended = metrics.counter('hangar_event_streams_ended_total', 'Event streams the control plane ended with an end event, by reason (revoked, role_changed, expired, shutdown)', ['reason']);
    this.refused = metrics.counter('hangar_event_streams_refused_total', 'Event streams refused (429) past a limit: streams_per_principal or streams_per_address', ['limit']);
  }

  get size(): number {
    return this.streams.size;
  }

  /**
   * Opens a stream for `principal` from `address`, sending the events after number `after`; throws
   * the 429 naming the limit when the principal or the address holds as many as allowed. An IPv6
   * address counts as its /64 (core/addresses.ts).
   */
  open(viewer: Viewer, address: string, connection: StreamConnection, types: ReadonlySet<string> | null, after: number): EventStream {
    const { principal } = viewer;
    const holder = addressHolder(address);
    const byPrincipal = this.perPrincipal.get(principal.id) ?? 0;
    if (byPrincipal >= this.limits.streams_per_principal) {
      this.refused.inc({ limit: 'streams_per_principal' });
      throw new HttpError(429, `Too many event streams: this user has ${byPrincipal} open, the limit (events.streams_per_principal) is ${this.limits.streams_per_principal}; close one first`);
    }
    const byAddress = this.perAddress.get(holder) ?? 0;
    if (byAddress >= this.limits.streams_per_address) {
      this.refused.inc({ limit: 'streams_per_address' });
      throw new HttpError(429, `Too many event streams: ${byAddress} are open from ${holder}, the limit (events.streams_per_address) is ${this.limits.streams_per_address}; close one first`);
    }
    this.watch();
    const stream = new EventStream(this, viewer, address, connection, types, after);
    this.streams.add(stream);
    this.perPrincipal.set(principal.id, byPrincipal + 1);
    this.perAddress.set(holder, byAddress + 1);
    // Each stream is a listener of the journal: every new event is handed over when the response takes it.
    stream.onClose(this.journal.subscribe(() => stream.pump()));
    stream.onClose(() => {
      this.streams.delete(stream);
      decrement(this.perPrincipal, principal.id);
      decrement(this.perAddress, holder);
    });
    return stream;
  }

  /** Ends a stream with its reason, counted. */
  end(stream: EventStream, reason: EndReason, message: string): void {
    if (!stream.open) return;
    this.ended.inc({ reason });
    stream.end(reason, message);
  }

  /** Drops a stream whose client has not taken `unsent` bytes (over the bound). */
  drop(stream: EventStream, unsent: number): void {
    if (!stream.open) return;
    this.dropped.inc();
    this.log.info(
      { principal: stream.principal.id, ip: stream.address, unsent_bytes: Number.isFinite(unsent) ? unsent : null, bound: this.limits.stream_buffer_bytes },
      'event stream dropped: its client did not take the events (over events.stream_buffer_bytes); it resumes with Last-Event-ID',
    );
    stream.cut();
  }

  /** Hears the notices that may revoke a principal (subscribed at the first stream: every authenticator is registered by then). */
  private watch(): void {
    if (this.watching) return;
    this.watching = true;
    // A change of a user's memberships (projects.members) changes what its streams carry, whatever its credential.
    for (const topic of new Set([...this.auth.revocationTopics, MEMBER_CHANGES])) {
      this.unsubscribers.push(
        this.notices.subscribe(topic, (key) => {
          const concerned = [...this.streams].filter((s) => key === null || s.principal.id === key);
          if (concerned.length) void this.revalidate(concerned);
        }),
      );
    }
  }

  /** Revalidates every open stream (the backstop loop). */
  revalidateAll(): Promise<void> {
    return this.revalidate([...this.streams]);
  }

  /**
   * Asks each stream's authenticator whether its principal would still be accepted (once per
   * distinct principal); ends the streams of those that would not (`revoked`) and of those whose
   * role changed (`role_changed`: the client reconnects and sees what the new role may see).
   */
  async revalidate(streams: EventStream[]): Promise<void> {
    let verdicts = new Map<string, Promise<Principal>>();
    let viewers = new Map<Principal, Promise<Viewer>>();
    const check = async (stream: EventStream): Promise<void> => {
      if (stream.checking) {
        stream.again = true;
        return;
      }
      stream.checking = true;
      try {
        do {
          if (stream.again) {
            verdicts = new Map();
            viewers = new Map();
          }
          stream.again = false;
          const key = JSON.stringify(stream.principal);
          let verdict = verdicts.get(key);
          if (!verdict) verdicts.set(key, (verdict = this.auth.revalidate(stream.principal)));
          const now = await verdict;
          if (!stream.open) return;
          if (now.role !== stream.principal.role) {
            // What a stream carries depends on the role: the client reconnects and sees what the new one may.
            this.log.info({ principal: now.id, method: now.method, ip: stream.address, role: now.role }, 'event stream ended: its user’s role changed');
            return this.end(stream, 'role_changed', `the user’s role is now ${now.role}: reconnect (with Last-Event-ID) to see what it may see`);
          }
          // What it may see now: its memberships, read again (a member removed from a project stops receiving its events).
          let viewer = viewers.get(now);
          if (!viewer) viewers.set(now, (viewer = this.viewerOf(now)));
          const seeing = await viewer;
          if (!stream.open) return;
          stream.viewer = seeing;
        } while (stream.again);
      } catch (err) {
        if (err instanceof HttpError && err.status === 401) {
          this.log.info({ principal: stream.principal.id, method: stream.principal.method, ip: stream.address, reason: err.message }, 'event stream ended: its credentials are no longer accepted');
          this.end(stream, 'revoked', err.message);
        } else {
          // The store could not tell (unreachable): the stream stays, and is checked again at the next notice or turn.
          this.log.warn({ principal: stream.principal.id, err: { message: (err as Error).message } }, 'revalidating an event stream failed');
        }
      } finally {
        stream.checking = false;
      }
    };
    await Promise.all(streams.map(check));
  }

  /** Stops hearing notices (the control plane stops; its streams end with their requests). */
  close(): void {
    for (const unsubscribe of this.unsubscribers.splice(0)) unsubscribe();
  }
}

function decrement(counts: Map<string, number>, key: string): void {
  const n = (counts.get(key) ?? 1) - 1;
  if (n > 0) counts.set(key, n);
  else counts.delete(key);
}
