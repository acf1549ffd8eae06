import { expect } from 'chai';
import { systemClock } from '../../../core/clock.js';
import { runMigrations } from '../../../core/db/migrations.js';
import { openStore, type Store } from '../../../core/db/store.js';
import { CHANNELS, DELIVERIES, notificationMigrations } from '../../../plugins/notifications/migrations.js';
import { Outbox, type DeliveryStatus } from '../../../plugins/notifications/store.js';
import { describeEachDialect } from '../../support/dialects.js';

/**
 * The outbox's claim (plugins/notifications/store.ts): each channel's oldest due deliveries, at most
 * perChannel of a channel counting those in flight, never one in flight, the oldest first across
 * channels, and a delivery taken by one sender only.
 */
describeEachDialect('notifications: the outbox claim', (dialect) => {
  let store: Store;
  let outbox: Outbox;
  const HOLD = 60_000;
  const now = () => Date.now();
  let seq = 0;

  async function channel(id: string): Promise<void> {
    const at = new Date().toISOString();
    await store.knex(CHANNELS).insert({ id, name: id, kind: 'webhook', url_sealed: null, headers_sealed: null, header_names: '[]', recipients: '[]', secret_sealed: null, created_at: at, updated_at: at });
  }

  /** A delivery of `channelId`, `ageMs` old (due then), in `status`. */
  async function delivery(id: string, channelId: string, dueMs: number, status: DeliveryStatus = 'pending'): Promise<void> {
    const at = new Date().toISOString();
    seq += 1;
    await store.knex(DELIVERIES).insert({
      id,
      channel_id: channelId,
      subscription_id: null,
      event_id: `evt-${seq}`,
      event_type: 'node.created',
      event: JSON.stringify({ id: `evt-${seq}`, type: 'node.created' }),
      status,
      attempts: 0,
      due_ms: dueMs,
      give_up_ms: now() + 3_600_000,
      last_error: null,
      delivered_at: null,
      created_at: at,
      updated_at: at,
    });
  }

  const ids = (rows: Array<{ id: string }>) => rows.map((r) => r.id);

  beforeEach(async function () {
    this.timeout(60_000);
    store = await openStore(dialect.config());
    await runMigrations(store, [{ owner: 'notifications', migrations: notificationMigrations }]);
    outbox = new Outbox(store, systemClock);
  });
  afterEach(async () => {
    await store.close();
  });

  it('takes each channel’s oldest due deliveries, at most perChannel of one, the oldest first across channels', async () => {
    const t = now();
    await channel('ch-a');
    await channel('ch-b');
    await channel('ch-c');
    for (let i = 0; i < 5; i++) await delivery(`ndl-a${i}`, 'ch-a', t - 10_000 + i);
    await delivery('ndl-b0', 'ch-b', t - 20_000);
    await delivery('ndl-b1', 'ch-b', t - 5_000);
    await delivery('ndl-b-later', 'ch-b', t + 60_000);
    await delivery('ndl-b-done', 'ch-b', t - 30_000, 'delivered');
    await delivery('ndl-b-failed', 'ch-b', t - 30_000, 'failed');
    await delivery('ndl-c-held', 'ch-c', t + 60_000, 'sending');

    // Three slots: the oldest due of all, two of a channel at most.
    const first = await outbox.claim(3, HOLD, { perChannel: 2, busy: new Map(), ids: [] });
    expect(ids(first)).to.deep.equal(['ndl-b0', 'ndl-a0', 'ndl-a1']);
    expect(first.every((d) => d.status === 'sending' && d.due_ms > t)).to.equal(true);

    // What is taken is not taken again; not due, delivered, failed and held ones never are.
    const rest = await outbox.claim(10, HOLD, { perChannel: 2, busy: new Map(), ids: [] });
    expect(ids(rest)).to.deep.equal(['ndl-a2', 'ndl-a3', 'ndl-b1']);
    // A delivery whose channel row is gone (deleted while its event was matched) is taken too: its attempt fails it at once.
    await delivery('ndl-gone', 'ch-gone', t - 1_000);
    expect(await outbox.claim(10, HOLD, { perChannel: 10, busy: new Map(), ids: [] }).then(ids)).to.deep.equal(['ndl-a4', 'ndl-gone']);
    const stored = await store.knex(DELIVERIES).select('id', 'status').whereIn('id', ['ndl-b-later', 'ndl-b-done', 'ndl-b-failed', 'ndl-c-held']).orderBy('id');
    expect(stored).to.deep.equal([
      { id: 'ndl-b-done', status: 'delivered' },
      { id: 'ndl-b-failed', status: 'failed' },
      { id: 'ndl-b-later', status: 'pending' },
      { id: 'ndl-c-held', status: 'sending' },
    ]);
  });

  it('counts the deliveries in flight against their channel, and never takes one of them', async () => {
    const t = now();
    await channel('ch-a');
    await channel('ch-b');
    for (let i = 0; i < 3; i++) await delivery(`ndl-a${i}`, 'ch-a', t - 10_000 + i);
    // Held by this sender past its deadline (its attempt is slow): due again, but in flight here.
    await delivery('ndl-b-inflight', 'ch-b', t - 30_000, 'sending');
    // Held by a sender that died: due again for whoever sends.
    await delivery('ndl-b-orphan', 'ch-b', t - 20_000, 'sending');
    await delivery('ndl-b0', 'ch-b', t - 10_000);

    const busy = new Map([
      ['ch-a', 2],
      ['ch-b', 1],
    ]);
    // ch-a is full (2 in flight); ch-b has one slot left: its oldest due that is not in flight.
    expect(ids(await outbox.claim(10, HOLD, { perChannel: 2, busy, ids: ['ndl-b-inflight'] }))).to.deep.equal(['ndl-b-orphan']);
    busy.set('ch-a', 1);
    busy.set('ch-b', 2);
    expect(ids(await outbox.claim(10, HOLD, { perChannel: 2, busy, ids: ['ndl-b-inflight', 'ndl-b-orphan'] }))).to.deep.equal(['ndl-a0']);
  });

  it('gives a delivery to one of two senders claiming at once, over more channels than one statement reads', async function () {
    this.timeout(60_000);
    const t = now();
    const CHANNEL_COUNT = 150;
    for (let c = 0; c < CHANNEL_COUNT; c++) {
      const id = `ch-${String(c).padStart(3, '0')}`;
      await channel(id);
      await delivery(`ndl-${id}-0`, id, t - 10_000 + c);
      await delivery(`ndl-${id}-1`, id, t - 5_000 + c);
    }
    const other = new Outbox(store, systemClock);
    const [one, two] = await Promise.all([
      outbox.claim(200, HOLD, { perChannel: 1, busy: new Map(), ids: [] }),
      other.claim(200, HOLD, { perChannel: 1, busy: new Map(), ids: [] }),
    ]);
    const taken = [...ids(one), ...ids(two)];
    expect(new Set(taken).size).to.equal(taken.length);
    // Each sender takes at most one of a channel; together at most the 300, every channel served.
    for (const claimed of [one, two]) expect(new Set(claimed.map((d) => d.channel_id)).size).to.equal(claimed.length);
    expect(new Set(taken.map((id) => id.slice(4, 10))).size).to.equal(CHANNEL_COUNT);
    const sending = await store.knex(DELIVERIES).where({ status: 'sending' }).count({ n: '*' });
    expect(Number(sending[0]!.n)).to.equal(taken.length);
    // The rest is taken afterwards, none twice.
    const more = await outbox.claim(400, HOLD, { perChannel: 2, busy: new Map(), ids: [] });
    expect(taken.length + more.length).to.equal(2 * CHANNEL_COUNT);
    expect(new Set([...taken, ...ids(more)]).size).to.equal(2 * CHANNEL_COUNT);
  });
});
