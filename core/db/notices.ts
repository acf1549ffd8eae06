import { randomUUID } from 'node:crypto';
import type { Knex } from 'knex';
import type pg from 'pg';
import { createTables, type Migration } from './migrations.js';
import type { Dialect } from './store.js';
import { alone, type Peers } from '../workers.js';

/** What a subscriber hears: the key that changed, or `null` for "anything may have changed". */
export type NoticeHandler = (key: string | null) => void;

interface Warner {
  warn(obj: object, msg: string): void;
}

/** SQLite's notices between processes: rows the other processes read (PostgreSQL uses NOTIFY). */
export const NOTICES_TABLE = 'store_notices';
/** How often a SQLite process looks for other processes' notices. */
const SQLITE_POLL_MS = 250;
/** The workers' channel for notices (core/workers.ts). */
const PEER_CHANNEL = 'notice';
/** How long a SQLite notice row is kept for processes to read. */
const SQLITE_KEEP_MS = 60_000;

export const noticesMigration: Migration = createTables('004_store_notices', {
  [NOTICES_TABLE]: (t) => {
    t.increments('id').primary();
    t.string('origin', 64).notNullable();
    t.string('topic', 100).notNullable();
    t.string('key', 200).nullable();
    t.bigInteger('created_ms').notNullable();
  },
});

/**
 * Notices between the processes sharing one store (control planes, and the runner's tools): a topic
 * (`iam.users`) and a key (a user id), for processes that keep something of the store in memory
 * (core/cache.ts) to drop it. Delivered to this process's subscribers at once, and to the other
 * processes: on PostgreSQL through LISTEN/NOTIFY on one channel per schema, on SQLite through a
 * table each serving process reads four times a second.
 *
 * The workers of one control plane (api.workers) also hear each other's notices through the primary
 * process (core/workers.ts), and `publish` returns once they all have: what one worker changes counts
 * in the others from the next request on. On SQLite they write no rows; on PostgreSQL they also
 * NOTIFY (other control planes on the store), so a worker hears its peers' notices twice.
 *
 * A notice is only a hint to read the store again, never data. When a process may have missed
 * notices (its PostgreSQL listening connection was lost), every subscriber hears `null` (forget
 * everything) once it listens again.
 */
export class Notices {
  private readonly handlers = new Map<string, Set<NoticeHandler>>();
  /** This process, so that it skips its own rows on SQLite. */
  private readonly origin = randomUUID();
  private client: pg.Client | null = null;
  private connected = false;
  private timer: NodeJS.Timeout | null = null;
  private closed = false;
  private log: Warner | null = null;
  private lastSeen = 0;
  private lastPurge = 0;
  private peers: Peers = alone;
  private started = false;

  private readonly channel: string;

  constructor(
    private readonly knex: Knex,
    private readonly dialect: Dialect,
    schema: string | null,
  ) {
    this.channel = `hangar_notices_${schema ?? 'public'}`;
  }

  /**
   * Whether other processes' notices reach this one now: always on SQLite; on PostgreSQL while the
   * listening connection is up (what a subscriber takes as known may be stale otherwise).
   */
  get listening(): boolean {
    return this.dialect === 'sqlite' || this.connected;
  }

  /**
   * Whether other processes serving this store hear this one's notices at once (PostgreSQL, or the
   * workers of one control plane): then a wake-up for a long-poll held elsewhere goes as a notice.
   */
  get reachesServers(): boolean {
    return this.dialect === 'postgres' || this.peers.active;
  }

  /** Whether this process serves the store (it hears the others' notices); the runner's tools only publish. */
  get serving(): boolean {
    return this.started;
  }

  subscribe(topic: string, handler: NoticeHandler): () => void {
    let set = this.handlers.get(topic);
    if (!set) this.handlers.set(topic, (set = new Set()));
    set.add(handler);
    return () => set.delete(handler);
  }

  /**
   * Tells this process's subscribers now, then the other processes; resolves once this control
   * plane's other workers have heard it (other control planes hear it through the store, as soon as
   * they read it). Call it once the change is committed.
   */
  async publish(topic: string, key: string | null): Promise<void> {
    this.deliver(topic, key);
    const workersHeard = this.peers.broadcast(PEER_CHANNEL, { topic, key });
    if (this.dialect === 'postgres') await this.knex.raw('select pg_notify(?, ?)', [this.channel, `${topic}\n${key ?? ''}`]);
    else if (!this.peers.active) await this.knex(NOTICES_TABLE).insert({ origin: this.origin, topic, key, created_ms: Date.now() });
    await workersHeard;
  }

  private deliver(topic: string, key: string | null): void {
    for (const handler of this.handlers.get(topic) ?? []) handler(key);
  }

  private forgetEverything(): void {
    for (const set of this.handlers.values()) for (const handler of set) handler(null);
  }

  /** Starts hearing the other processes' notices (hangar serve; tools only publish). */
  async start(databaseUrl: string | null, log: Warner, peers: Peers = alone): Promise<void> {
    this.log = log;
    this.started = true;
    if (peers.active) {
      this.peers = peers;
      peers.subscribe(PEER_CHANNEL, (payload) => {
        const { topic, key } = payload as { topic: string; key: string | null };
        this.deliver(topic, key);
      });
    }
    if (this.dialect === 'postgres') {
      if (databaseUrl) await this.listen(databaseUrl);
      return;
    }
    const [row] = await this.knex(NOTICES_TABLE).max({ id: 'id' });
    this.lastSeen = Number(row?.id ?? 0);
    const poll = () => {
      this.readRows()
        .catch((err: Error) => this.log?.warn({ err: { message: err.message } }, 'reading store notices failed'))
        .finally(() => {
          if (!this.closed) (this.timer = setTimeout(poll, SQLITE_POLL_MS)).unref();
        });
    };
    (this.timer = setTimeout(poll, SQLITE_POLL_MS)).unref();
  }

  private async readRows(): Promise<void> {
    const rows: { id: number; origin: string; topic: string; key: string | null }[] = await this.knex(NOTICES_TABLE)
      .where('id', '>', this.lastSeen)
      .orderBy('id')
      .select('id', 'origin', 'topic', 'key');
    for (const row of rows) {
      this.lastSeen = Number(row.id);
      if (row.origin !== this.origin) this.deliver(row.topic, row.key);
    }
    if (rows.length && Date.now() - this.lastPurge > SQLITE_KEEP_MS) {
      this.lastPurge = Date.now();
      await this.knex(NOTICES_TABLE).where('created_ms', '<', Date.now() - SQLITE_KEEP_MS).delete();
    }
  }

  private async listen(databaseUrl: string): Promise<void> {
    // pg is loaded when a PostgreSQL store listens (a SQLite control plane starts without it).
    const { default: pgDriver } = await import('pg');
    const client = new pgDriver.Client({ connectionString: databaseUrl });
    this.client = client;
    const lost = (err?: Error) => {
      if (this.client !== client) return;
      this.client = null;
      this.connected = false;
      client.end().catch(() => undefined);
      if (this.closed) return;
      this.log?.warn({ err: { message: err?.message ?? 'connection ended' } }, 'store notice listener lost; reconnecting');
      // A failed attempt calls lost() again, which schedules the next one.
      (this.timer = setTimeout(() => this.listen(databaseUrl).catch(() => undefined), 1000)).unref();
    };
    client.on('error', lost);
    client.on('end', () => lost());
    client.on('notification', (msg) => {
      if (msg.channel !== this.channel || msg.payload === undefined) return;
      const at = msg.payload.indexOf('\n');
      if (at < 0) return;
      const key = msg.payload.slice(at + 1);
      this.deliver(msg.payload.slice(0, at), key === '' ? null : key);
    });
    try {
      await client.connect();
      await client.query(`listen "${this.channel}"`);
      this.connected = true;
    } catch (err) {
      lost(err as Error);
      throw err;
    }
    // Whatever was announced while no connection listened is unknown: start from the store again.
    this.forgetEverything();
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    const client = this.client;
    this.client = null;
    await client?.end().catch(() => undefined);
  }
}
