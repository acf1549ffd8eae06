import { expect } from 'chai';
import { ManualClock, systemClock } from '../../../core/clock.js';
import { leaseColumns } from '../../../core/clusters/migrations.js';
import { StampedRepository } from '../../../core/db/repository.js';
import { openStore, type Store } from '../../../core/db/store.js';
import { BackgroundJobs } from '../../../core/jobs.js';
import { changes, defineLifecycle, Lifecycle, REMOVED, type LeasedRecord, type LifecycleEnv } from '../../../core/lifecycle.js';
import { createLogger } from '../../../core/log.js';
import { describeEachDialect } from '../../support/dialects.js';

interface Thing extends LeasedRecord {
  wanted: number;
  seen: number | null;
  error: string | null;
  created_at: string;
  updated_at: string;
}

/** A resource whose deploy "applies" `wanted` (recorded in `applied`), and whose observation reports `seen`. */
const aborted = (signal: AbortSignal) => new Promise<never>((_, reject) => signal.addEventListener('abort', () => reject(new Error('cut short')), { once: true }));

/** `passes` gets what each pass of a deploy was told its earlier passes did but could not record. */
const lifecycleOf = (applied: number[], gate: { wait?: Promise<void>; fail?: string }, repo?: () => StampedRepository<Thing>, passes: unknown[] = []) =>
  defineLifecycle<Thing, { running: number | null }>({
    noun: 'thing',
    operations: {
      deploy: {
        from: ['ready', 'failed', 'deploying'],
        during: 'deploying',
        joins: true,
        label: (t) => `deploy thing ${t.name}`,
        async run(t, ctx) {
          await Promise.race([gate.wait, aborted(ctx.signal)]);
          if (gate.fail) throw new Error(gate.fail);
          applied.push(t.wanted);
          passes.push(ctx.unrecorded);
          return { status: 'ready', error: null };
        },
        failed: (_t, err) => ({ status: 'failed', error: `deploying failed: ${err.message}` }),
      },
      remove: {
        from: '*',
        during: 'removing',
        preempts: true,
        label: (t) => `remove thing ${t.name}`,
        async run(t) {
          await repo?.().remove(t.id);
          return REMOVED;
        },
        failed: (_t, err) => ({ status: 'failed', error: err.message }),
      },
    },
    reconcile: (_t, observed) => (observed.running === null ? { status: 'failed', error: 'gone' } : { seen: observed.running }),
  });

describe('core/lifecycle: changes (what an observation would write)', () => {
  it('keeps only the fields whose values differ, JSON-compared; null when none does', () => {
    const record = { a: 1, b: [1, 2], c: null as string | null };
    expect(changes(record, { a: 1, b: [1, 2] })).to.equal(null);
    expect(changes(record, { a: 2, b: [1, 2], c: null })).to.deep.equal({ a: 2 });
    expect(changes(record, { c: 'x' })).to.deep.equal({ c: 'x' });
    expect(changes(record, null)).to.equal(null);
  });
});

describeEachDialect('core/lifecycle: operation leases on a record', (dialect) => {
  let store: Store;
  let repo: StampedRepository<Thing>;
  const log = createLogger('silent');
  const lifecycles: Array<{ jobs: BackgroundJobs; shutdown: AbortController }> = [];

  /** A lifecycle as one control plane has it (its own jobs and shutdown signal). */
  function controlPlane(def: ReturnType<typeof lifecycleOf>, clock = systemClock, leaseMs = 1000) {
    const shutdown = new AbortController();
    const jobs = new BackgroundJobs(log, shutdown.signal);
    lifecycles.push({ jobs, shutdown });
    const env: LifecycleEnv = { knex: store.knex, clock, log, jobs, shutdown: shutdown.signal, leaseMs };
    return { lifecycle: new Lifecycle(repo, def, env), jobs, shutdown };
  }

  const insert = (name: string, status = 'ready') =>
    repo.insert({ id: `thing-${name}`, name, status, wanted: 1, seen: null, error: null, op: null, op_id: null, op_lease_until: null, op_rev: 0, created_at: new Date().toISOString(), updated_at: new Date().toISOString() });

  before(async () => {
    store = await openStore(dialect.config());
    await store.knex.schema.createTable('things', (t) => {
      t.string('id', 64).primary();
      t.string('name', 63).notNullable();
      t.string('status', 20).notNullable();
      t.integer('wanted').notNullable();
      t.integer('seen').nullable();
      t.text('error').nullable();
      t.timestamp('created_at', { useTz: true }).notNullable();
      t.timestamp('updated_at', { useTz: true }).notNullable();
      leaseColumns(t);
    });
    repo = new StampedRepository<Thing>(store, 'things', { dates: ['created_at', 'updated_at', 'op_lease_until'] }, systemClock);
  });
  after(async () => {
    for (const { shutdown, jobs } of lifecycles) {
      shutdown.abort();
      await jobs.drain();
    }
    await store?.close();
  });

  it('runs an operation under a lease and settles the record; the status says what runs meanwhile', async () => {
    const applied: number[] = [];
    let release!: () => void;
    const { lifecycle, jobs } = controlPlane(lifecycleOf(applied, { wait: new Promise((r) => (release = r)) }));
    await insert('a');
    const begun = await lifecycle.start('thing-a', 'deploy', { wanted: 5 }, () => new Error('refused'));
    expect(begun).to.include({ status: 'deploying', op: 'deploy', wanted: 5 });
    expect(begun.op_id).to.match(/^op-/);
    release();
    await jobs.drain();
    expect(await repo.get('thing-a')).to.include({ status: 'ready', op: null, op_id: null, op_lease_until: null });
    expect(applied).to.deep.equal([5]);
  });

  it('announces every write it makes on the store’s change feed (live views see the begin, the settled record and an observation)', async () => {
    const applied: number[] = [];
    let release!: () => void;
    const { lifecycle, jobs } = controlPlane(lifecycleOf(applied, { wait: new Promise((r) => (release = r)) }));
    await insert('live');
    const heard: string[] = [];
    const unsubscribe = store.changes.subscribe((c) => c.table === 'things' && c.id === 'thing-live' && heard.push(c.op));
    try {
      await lifecycle.start('thing-live', 'deploy', { wanted: 4 }, () => new Error('refused'));
      expect(heard, 'the begin').to.deep.equal(['update']);
      release();
      await jobs.drain();
      expect(heard, 'the settled record').to.deep.equal(['update', 'update']);
      await lifecycle.observe((await repo.get('thing-live'))!, { running: 4 });
      expect(heard, 'the observation').to.deep.equal(['update', 'update', 'update']);
      expect(await repo.get('thing-live')).to.include({ status: 'ready', seen: 4 });
    } finally {
      unsubscribe();
    }
  });

  it('a request while the operation runs joins it: the running one works again on the newer revision, and settles once', async () => {
    const applied: number[] = [];
    const passes: unknown[] = [];
    let release!: () => void;
    const { lifecycle, jobs } = controlPlane(lifecycleOf(applied, { wait: new Promise((r) => (release = r)) }, undefined, passes));
    await insert('b');
    await lifecycle.start('thing-b', 'deploy', { wanted: 2 }, () => new Error('refused'));
    const joined = await lifecycle.begin('thing-b', 'deploy', { wanted: 3 });
    expect(joined?.run, 'nothing new starts').to.equal(false);
    release();
    await jobs.drain();
    expect(applied, 'the first run applied the revision it read, then the newer one').to.deep.equal([2, 3]);
    // The second pass knows what the first did to the runtime though it was never recorded (the gateway skips a re-apply by it).
    expect(passes).to.deep.equal([null, { status: 'ready', error: null }]);
    expect(await repo.get('thing-b')).to.include({ status: 'ready', wanted: 3, op_id: null });
  });

  it('refuses an operation the status does not allow, and one another live operation holds; a removal takes the record from a running deploy', async () => {
    const applied: number[] = [];
    let release!: () => void;
    const { lifecycle, jobs } = controlPlane(lifecycleOf(applied, { wait: new Promise((r) => (release = r)) }, () => repo));
    await insert('c', 'frozen');
    expect(await lifecycle.begin('thing-c', 'deploy')).to.equal(null);
    await insert('d');
    await lifecycle.start('thing-d', 'deploy', {}, () => new Error('refused'));
    const removal = await lifecycle.begin('thing-d', 'remove');
    expect(removal?.run).to.equal(true);
    expect(removal?.record).to.include({ status: 'removing', op: 'remove' });
    release();
    await jobs.drain();
    expect(applied, 'the deploy ran, but it no longer held the record: its result was not written').to.deep.equal([1]);
    expect(await repo.get('thing-d'), 'still the removal’s').to.include({ status: 'removing', op: 'remove' });
    await repo.remove('thing-d');
  });

  it('records a failure with the operation’s own patch and frees the record', async () => {
    const { lifecycle, jobs } = controlPlane(lifecycleOf([], { fail: 'No such image' }));
    await insert('e');
    await lifecycle.start('thing-e', 'deploy', {}, () => new Error('refused'));
    await jobs.drain();
    expect(await repo.get('thing-e')).to.include({ status: 'failed', error: 'deploying failed: No such image', op_id: null });
  });

  it('an observation never overwrites a record an operation holds, nor one changed since it was read; otherwise it applies reconcile', async () => {
    let release!: () => void;
    const { lifecycle, jobs } = controlPlane(lifecycleOf([], { wait: new Promise((r) => (release = r)) }));
    await insert('f');
    await lifecycle.start('thing-f', 'deploy', {}, () => new Error('refused'));
    const held = (await repo.get('thing-f'))!;
    expect(await lifecycle.observe(held, { running: null }), 'held: not written').to.equal(null);
    release();
    await jobs.drain();
    const settled = (await repo.get('thing-f'))!;
    await repo.change('thing-f', { wanted: 9, op_rev: settled.op_rev + 1 });
    expect(await lifecycle.observe(settled, { running: 2 }), 'stale read: not written').to.equal(null);
    const fresh = (await repo.get('thing-f'))!;
    expect(await lifecycle.observe(fresh, { running: fresh.seen ?? 0 })).to.include({ seen: 0 });
    expect(await lifecycle.observe((await repo.get('thing-f'))!, { running: 0 }), 'nothing changes: nothing written').to.equal(null);
    expect(await lifecycle.observe((await repo.get('thing-f'))!, { running: null })).to.include({ status: 'failed', error: 'gone' });
  });

  it('an observation judges the record as read before the backend was asked: not one an operation held then, nor one an operation began on since (whatever the clocks say)', async () => {
    let release!: () => void;
    const { lifecycle, jobs } = controlPlane(lifecycleOf([], { wait: new Promise((r) => (release = r)) }));
    await insert('late');
    await lifecycle.start('thing-late', 'deploy', {}, () => new Error('refused'));
    // Read while the deploy runs (the cluster is asked now); the deploy settles before the answer comes.
    const readWhileHeld = (await repo.get('thing-late'))!;
    expect(readWhileHeld.op_id).to.be.a('string');
    release();
    await jobs.drain();
    expect(await lifecycle.observe(readWhileHeld, { running: null }), 'held when read: not written').to.equal(null);
    expect((await repo.get('thing-late'))!.status).not.to.equal('failed');
    // Read settled; a new operation begins and settles before the answer comes.
    const readSettled = (await repo.get('thing-late'))!;
    await lifecycle.start('thing-late', 'deploy', {}, () => new Error('refused'));
    await jobs.drain();
    expect((await repo.get('thing-late'))!.op_id).to.equal(null);
    expect(await lifecycle.observe(readSettled, { running: null }), 'an operation began since: not written').to.equal(null);
    expect((await repo.get('thing-late'))!.status).not.to.equal('failed');
    expect(await lifecycle.observe((await repo.get('thing-late'))!, { running: null })).to.include({ status: 'failed', error: 'gone' });
  });

  it('a lease whose process died is taken over by another once it expires, not before; the work then completes once', async () => {
    const clock = new ManualClock();
    const appliedA: number[] = [];
    const appliedB: number[] = [];
    const a = controlPlane(lifecycleOf(appliedA, { wait: new Promise(() => undefined) }), clock, 30_000);
    const b = controlPlane(lifecycleOf(appliedB, {}), clock, 30_000);
    await insert('g');
    await a.lifecycle.start('thing-g', 'deploy', { wanted: 7 }, () => new Error('refused'));
    // Process A is stuck (as good as dead: it never renews once its clock has moved on).
    expect(await b.lifecycle.takeOver(), 'the lease still holds').to.deep.equal([]);
    clock.advance(31_000);
    expect(await b.lifecycle.takeOver()).to.deep.equal(['thing g: deploying']);
    await b.jobs.drain();
    expect(await repo.get('thing-g')).to.include({ status: 'ready', op_id: null });
    expect(appliedB).to.deep.equal([7]);
    expect(await b.lifecycle.takeOver(), 'nothing left').to.deep.equal([]);
  });

  it('a shutdown hands an interrupted operation’s lease over at once, so the next start takes it without waiting', async () => {
    await insert('h');
    // The work waits for the shutdown (as a task waiting for an agent does).
    const def = lifecycleOf([], {});
    def.operations.deploy!.run = (_t, ctx) => new Promise((_, reject) => ctx.signal.addEventListener('abort', () => reject(new Error('cut short'))));
    const cut = controlPlane(def, systemClock, 60_000);
    await cut.lifecycle.start('thing-h', 'deploy', {}, () => new Error('refused'));
    cut.shutdown.abort();
    await cut.jobs.drain();
    const left = (await repo.get('thing-h'))!;
    expect(left).to.include({ status: 'deploying', op: 'deploy' });
    const next = controlPlane(lifecycleOf([], {}), systemClock, 60_000);
    expect(await next.lifecycle.takeOver()).to.deep.equal(['thing h: deploying']);
    await next.jobs.drain();
    expect(await repo.get('thing-h')).to.include({ status: 'ready', op_id: null });
  });
});
