import cluster, { type Worker } from 'node:cluster';
import { EventBus } from './events.js';
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
  /** Sends `payload` to every other worker's subscribers of `channel` (not to this process's). */
  broadcast(channel: string, payload: unknown): void;
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
  | { hangar: 'relay'; channel: string; payload: unknown; seq?: number }
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
  broadcast() {},
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
  const relayed = new EventBus();
  const waiting = new Map<number, (jsons: unknown[][]) => void>();
  let ownMetrics: (() => Promise<unknown[]>) | null = null;
  let nextId = 0;
  const send = (message: Message) => {
    if (process.connected) process.send!(message);
  };
  process.on('message', (message: unknown) => {
    if (!isMessage(message)) return;
    if (message.hangar === 'relay') relayed.publish(message.channel, message);
    else if (message.hangar === 'metrics-of') {
      const reply = (json: unknown[]) => send({ hangar: 'metrics-json', id: message.id, json });
      if (!ownMetrics) reply([]);
      else ownMetrics().then(reply, () => reply([]));
    } else if (message.hangar === 'metrics-all') {
      waiting.get(message.id)?.(message.jsons);
      waiting.delete(message.id);
    }
  });
  workerPeers = {
    active: true,
    run: process.env[RUN_VARIABLE] ?? null,
    broadcast: (channel, payload) => send({ hangar: 'relay', channel, payload }),
    sequence: (channel, payload) => send({ hangar: 'sequence', channel, payload }),
    subscribe: (channel, handler) =>
      relayed.subscribe(channel, (message) => {
        const { payload, seq } = message as Extract<Message, { hangar: 'relay' }>;
        handler(payload, seq);
      }),
    collectMetrics(own) {
      ownMetrics ??= own;
      const id = ++nextId;
      return new Promise((resolve) => {
        waiting.set(id, resolve);
        send({ hangar: 'metrics', id });
      });
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
/** A worker that dies within this long of its start counts as failing to start: the next try waits longer. */
const QUICK_DEATH_MS = 10_000;

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
  let metricsId = 0;
  const run = randomToken(8).toLowerCase();
  const sequences = new Map<string, number>();
  const pendingMetrics = new Map<number, { from: Worker; jsons: unknown[][]; waiting: Set<number>; timer: NodeJS.Timeout; replyId: number }>();
  let finish: (code: number) => void;
  const done = new Promise<number>((resolve) => (finish = resolve));

  const sendTo = (worker: Worker, message: Message) => {
    if (worker.isConnected()) worker.send(message);
  };

  const answerMetrics = (id: number) => {
    const pending = pendingMetrics.get(id);
    if (!pending) return;
    pendingMetrics.delete(id);
    clearTimeout(pending.timer);
    sendTo(pending.from, { hangar: 'metrics-all', id: pending.replyId, jsons: pending.jsons });
  };

  const onMessage = (index: number, worker: Worker, message: unknown) => {
    if (!isMessage(message)) return;
    switch (message.hangar) {
      // To every worker, those still starting too: one subscribes to a channel as it starts and must
      // hear what happens from then on (its cache, its events), not only once it serves.
      case 'relay':
        for (const [other, peer] of workers) if (other !== index) sendTo(peer, message);
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
        const id = ++metricsId;
        const asked = [...workers].filter(([i]) => ready.has(i) || i === index);
        const timer = setTimeout(() => answerMetrics(id), METRICS_WAIT_MS);
        pendingMetrics.set(id, { from: worker, jsons: [], waiting: new Set(asked.map(([i]) => i)), timer, replyId: message.id });
        for (const [, peer] of asked) sendTo(peer, { hangar: 'metrics-of', id });
        break;
      }
      case 'metrics-json': {
        const pending = pendingMetrics.get(message.id);
        if (!pending) break;
        pending.jsons.push(message.json);
        pending.waiting.delete(index);
        if (!pending.waiting.size) answerMetrics(message.id);
        break;
      }
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
        for (const [id, pending] of pendingMetrics) if (pending.waiting.delete(index) && !pending.waiting.size) answerMetrics(id);
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
