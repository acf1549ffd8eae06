import cluster, { type Worker } from 'node:cluster';
import { EventEmitter } from 'node:events';
import { randomToken } from './ids.js';

/**
 * Several worker processes of one control plane on one machine (`api.workers`), with node:cluster:
 * the primary process forks the workers, listens on their ports and hands each new connection to
 * the next worker; each worker is a whole control plane on the same data dir and store. What one worker holds in memory and
 * another must hear of goes through the primary as a message to the other workers ({@link Peers}):
 * store notices on SQLite (cache invalidation, task wake-ups), live events, a reissued server
 * certificate. Metrics are summed over the workers by the primary when one of them is scraped.
 */

/** The environment variable that tells a worker the primary's run token ({@link Peers.run}). */
const RUN_VARIABLE = 'HANGAR_WORKERS_RUN';

/** This process's worker number (1…N) when it is one of `hangar serve`'s workers, else null. */
export function workerIndex(): number | null {
  const index = process.env.HANGAR_WORKER;
  return cluster.isWorker && index ? Number(index) : null;
}

/**
 * Whether this process says what every worker would say alike (a start-up warning): a control plane
 * of one process, or worker 1 of several.
 */
export function speaksForWorkers(): boolean {
  const index = workerIndex();
  return index === null || index === 1;
}

/** The other worker processes of this control plane, as one worker sees them. */
export interface Peers {
  /** Whether there are other workers (false in a control plane of one process). */
  readonly active: boolean;
  /**
   * Sends `payload` to every other worker's subscribers of `channel` (not to this process's).
   * Resolves once every other serving worker has handed it to its subscribers (or has exited, or has
   * not confirmed within {@link RELAY_WAIT_MS}): a change announced this way counts in every worker
   * from the next request on, whichever worker that request reaches.
   */
  broadcast(channel: string, payload: unknown): Promise<void>;
  /**
   * Sends `payload` to the subscribers of `channel` in every worker, this one's included, numbered
   * by the primary (1, 2, … in its {@link run}): every worker gets the same payloads in the same
   * order with the same numbers. The subscriber's second argument is the number.
   */
  sequence(channel: string, payload: unknown): void;
  subscribe(channel: string, handler: (payload: unknown, seq?: number) => void): () => void;
  /** A token naming this run of the primary (the numbers of {@link sequence} are counted in it); null alone. */
  readonly run: string | null;
  /**
   * The metrics of every worker as JSON (prom-client's getMetricsAsJSON), collected by the primary,
   * or null in a control plane of one process.
   */
  collectMetrics(own: () => Promise<unknown[]>): Promise<unknown[][] | null>;
}

/** What workers and the primary say to each other. */
type Message =
  | { hangar: 'ready' }
  | { hangar: 'stop' }
  /** To the primary, `ack` is the sender's id for its `relay-done`; from it, the id to confirm with `relayed`. */
  | { hangar: 'relay'; channel: string; payload: unknown; seq?: number; ack?: number }
  | { hangar: 'relayed'; id: number }
  | { hangar: 'relay-done'; id: number }
  | { hangar: 'sequence'; channel: string; payload: unknown }
  | { hangar: 'metrics'; id: number }
  | { hangar: 'metrics-of'; id: number }
  | { hangar: 'metrics-json'; id: number; json: unknown[] }
  | { hangar: 'metrics-all'; id: number; jsons: unknown[][] };

function isMessage(value: unknown): value is Message {
  return typeof value === 'object' && value !== null && typeof (value as { hangar?: unknown }).hangar === 'string';
}

/** A control plane of one process: nobody to tell. */
export const alone: Peers = {
  active: false,
  run: null,
  broadcast: async () => undefined,
  sequence() {},
  subscribe: () => () => undefined,
  collectMetrics: async () => null,
};

let workerPeers: Peers | undefined;

/**
 * This worker's peers (one object per process), or {@link alone} when the process is not a worker.
 * A worker also answers the primary's request for its metrics, with the `own` function the first
 * caller of collectMetrics gave.
 */
export function peers(): Peers {
  if (workerIndex() === null) return alone;
  if (workerPeers) return workerPeers;
  const relayed = new EventEmitter().setMaxListeners(0);
  /** What this worker asked the primary and waits for, by id: a relay's confirmation, the metrics. */
  const waiting = new Map<number, (answer: unknown) => void>();
  let ownMetrics: (() => Promise<unknown[]>) | null = null;
  let nextId = 0;
  const send = (message: Message) => {
    if (process.connected) process.send!(message);
  };
  const answered = (id: number, answer: unknown) => {
    waiting.get(id)?.(answer);
    waiting.delete(id);
  };
  const ask = <T>(message: (id: number) => Message, alone: T): Promise<T> => {
    if (!process.connected) return Promise.resolve(alone);
    const id = ++nextId;
    return new Promise((resolve) => {
      waiting.set(id, resolve as (answer: unknown) => void);
      send(message(id));
    });
  };
  process.on('message', (message: unknown) => {
    if (!isMessage(message)) return;
    if (message.hangar === 'relay') {
      relayed.emit(message.channel, message);
      if (message.ack !== undefined) send({ hangar: 'relayed', id: message.ack });
    } else if (message.hangar === 'metrics-of') {
      const reply = (json: unknown[]) => send({ hangar: 'metrics-json', id: message.id, json });
      if (!ownMetrics) reply([]);
      else ownMetrics().then(reply, () => reply([]));
    } else if (message.hangar === 'metrics-all') answered(message.id, message.jsons);
    else if (message.hangar === 'relay-done') answered(message.id, undefined);
  });
  // Nobody will answer once the primary is gone.
  process.on('disconnect', () => {
    for (const id of [...waiting.keys()]) answered(id, null);
  });
  workerPeers = {
    active: true,
    run: process.env[RUN_VARIABLE] ?? null,
    broadcast: (channel, payload) => ask((ack) => ({ hangar: 'relay', channel, payload, ack }), undefined),
    sequence: (channel, payload) => send({ hangar: 'sequence', channel, payload }),
    subscribe: (channel, handler) => {
      const relay = ({ payload, seq }: Extract<Message, { hangar: 'relay' }>) => handler(payload, seq);
      relayed.on(channel, relay);
      return () => relayed.off(channel, relay);
    },
    collectMetrics(own) {
      ownMetrics ??= own;
      return ask((id) => ({ hangar: 'metrics', id }), null);
    },
  };
  return workerPeers;
}

/** Tells the primary this worker serves (after Hangar.start), and calls `stop` when the primary asks or goes away. */
export function reportReady(stop: (why: string) => void): void {
  process.send!({ hangar: 'ready' } satisfies Message);
  process.on('message', (message: unknown) => {
    if (isMessage(message) && message.hangar === 'stop') stop('the primary process asked');
  });
  process.on('disconnect', () => stop('the primary process is gone'));
}

interface Log {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
  error(obj: object, msg: string): void;
}

/** How long a worker has to answer the primary's request for its metrics before it is left out. */
const METRICS_WAIT_MS = 5_000;
/** How long a broadcast waits for the other workers to confirm it before its sender goes on without them. */
const RELAY_WAIT_MS = 2_000;
/** A worker that dies within this long of its start counts as failing to start: the next try waits longer. */
const QUICK_DEATH_MS = 10_000;

/** A question the primary put to some workers: over when each has answered or exited, or the wait is up. */
interface Gathering {
  waiting: Set<number>;
  answers: unknown[];
  timer: NodeJS.Timeout;
  finish(): void;
}

/**
 * The primary process of `hangar serve` with `api.workers` > 1: forks worker 1 and waits until it
 * serves (it applies migrations and makes the CA, the JWT secret and the bootstrap secret at a first
 * start, alone), then the others. A worker that exits before it serves stops the start with its exit
 * code (a configuration error is the same in every worker); one that dies later is replaced, after
 * a pause that grows while replacements die quickly. SIGINT/SIGTERM ask each worker to stop (each
 * finishes its requests); a second signal kills them. Resolves with the exit code.
 */
export function superviseWorkers(count: number, log: Log): Promise<number> {
  const workers = new Map<number, Worker>();
  const ready = new Set<number>();
  let stopping = false;
  let gatheringId = 0;
  const run = randomToken(8).toLowerCase();
  const sequences = new Map<string, number>();
  const gatherings = new Map<number, Gathering>();
  let finish: (code: number) => void;
  const done = new Promise<number>((resolve) => (finish = resolve));

  const sendTo = (worker: Worker, message: Message) => {
    if (worker.isConnected()) worker.send(message);
  };

  /**
   * Sends `question(id)` to `recipients` and calls `done` with the answers of those `awaited` (by
   * number) and the numbers of those that did not answer in time.
   */
  const gather = (recipients: Array<[number, Worker]>, awaited: (index: number) => boolean, waitMs: number, question: (id: number) => Message, done: (answers: unknown[], silent: number[]) => void) => {
    const id = ++gatheringId;
    const gathering: Gathering = {
      waiting: new Set(recipients.map(([index]) => index).filter(awaited)),
      answers: [],
      timer: setTimeout(() => gathering.finish(), waitMs),
      finish() {
        if (!gatherings.delete(id)) return;
        clearTimeout(gathering.timer);
        done(gathering.answers, [...gathering.waiting]);
      },
    };
    gatherings.set(id, gathering);
    for (const [, peer] of recipients) sendTo(peer, question(id));
    if (!gathering.waiting.size) gathering.finish();
  };
  const answer = (index: number, id: number, value?: unknown) => {
    const gathering = gatherings.get(id);
    if (!gathering?.waiting.delete(index)) return;
    if (value !== undefined) gathering.answers.push(value);
    if (!gathering.waiting.size) gathering.finish();
  };

  const onMessage = (index: number, worker: Worker, message: unknown) => {
    if (!isMessage(message)) return;
    switch (message.hangar) {
      // To every worker, those still starting too: one subscribes to a channel as it starts and must
      // hear what happens from then on (its cache, its events), not only once it serves.
      case 'relay': {
        const { channel, payload, ack } = message;
        const others = [...workers].filter(([other]) => other !== index);
        // A worker still starting is told but not waited for: it takes no requests yet.
        gather(
          others,
          (other) => ready.has(other),
          RELAY_WAIT_MS,
          (id) => ({ hangar: 'relay', channel, payload, ack: id }),
          (_answers, silent) => {
            if (silent.length) log.warn({ workers: silent, channel, wait_ms: RELAY_WAIT_MS }, 'workers did not confirm a broadcast in time; going on without them');
            if (ack !== undefined) sendTo(worker, { hangar: 'relay-done', id: ack });
          },
        );
        break;
      }
      case 'relayed':
        answer(index, message.id);
        break;
      case 'sequence': {
        // One counter per channel, and every worker's messages leave the primary in one order.
        const seq = (sequences.get(message.channel) ?? 0) + 1;
        sequences.set(message.channel, seq);
        const relay: Message = { hangar: 'relay', channel: message.channel, payload: message.payload, seq };
        for (const peer of workers.values()) sendTo(peer, relay);
        break;
      }
      case 'metrics': {
        const asked = [...workers].filter(([i]) => ready.has(i) || i === index);
        const replyId = message.id;
        gather(
          asked,
          () => true,
          METRICS_WAIT_MS,
          (id) => ({ hangar: 'metrics-of', id }),
          (jsons) => sendTo(worker, { hangar: 'metrics-all', id: replyId, jsons: jsons as unknown[][] }),
        );
        break;
      }
      case 'metrics-json':
        answer(index, message.id, message.json);
        break;
      default:
        break;
    }
  };

  const fork = (index: number, attempt = 0): Promise<void> =>
    new Promise((resolve) => {
      const started = Date.now();
      const worker = cluster.fork({ HANGAR_WORKER: String(index), [RUN_VARIABLE]: run });
      workers.set(index, worker);
      worker.on('message', (message: unknown) => {
        if (isMessage(message) && message.hangar === 'ready') {
          ready.add(index);
          resolve();
        } else onMessage(index, worker, message);
      });
      worker.on('exit', (code, signal) => {
        const wasReady = ready.delete(index);
        workers.delete(index);
        for (const gathering of gatherings.values()) if (gathering.waiting.delete(index) && !gathering.waiting.size) gathering.finish();
        if (stopping) {
          if (!workers.size) finish(0);
          return;
        }
        if (!wasReady && attempt === 0 && ready.size === 0) {
          // The first start failed: the others would fail the same way (configuration, port, store).
          log.error({ worker: index, exit_code: code, signal }, 'worker exited before serving; stopping');
          finish(code || 1);
          stopAll();
          return;
        }
        const quick = Date.now() - started < QUICK_DEATH_MS;
        const delay = quick ? Math.min(30_000, 1000 * 2 ** attempt) : 1000;
        log.error({ worker: index, pid: worker.process.pid, exit_code: code, signal, restart_in_ms: delay }, 'worker exited; starting a new one');
        setTimeout(() => {
          if (!stopping) void fork(index, quick ? attempt + 1 : 1);
        }, delay).unref();
        resolve();
      });
    });

  const stopAll = () => {
    stopping = true;
    for (const worker of workers.values()) sendTo(worker, { hangar: 'stop' });
    if (!workers.size) finish(0);
  };

  let signals = 0;
  const onSignal = (signal: string) => {
    if (++signals > 1) {
      for (const worker of workers.values()) worker.process.kill('SIGKILL');
      finish(1);
      return;
    }
    log.info({ signal }, 'shutdown requested; stopping the workers');
    stopAll();
  };
  process.on('SIGINT', () => onSignal('SIGINT'));
  process.on('SIGTERM', () => onSignal('SIGTERM'));

  // Connections are handed to the workers in turn by the primary (node:cluster's round robin, its
  // default here): the kernel left to itself gives a burst of new connections (a fleet reconnecting,
  // a load generator) mostly to one worker. One that comes in the instant a worker dies, before the
  // primary has heard of it, is lost with that worker: its client sees no answer and retries.
  cluster.schedulingPolicy = cluster.SCHED_RR;
  void (async () => {
    await fork(1);
    if (stopping) return;
    await Promise.all(Array.from({ length: count - 1 }, (_, i) => fork(i + 2)));
    if (stopping) return;
    log.info({ workers: count, pids: [...workers.values()].map((w) => w.process.pid) }, 'hangar workers serving');
  })();
  return done;
}
