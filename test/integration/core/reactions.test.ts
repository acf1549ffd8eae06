import { expect } from 'chai';
import { REACTIONS } from '../../../core/reactions.js';
import { waitFor } from '../../support/agents.js';
import { describeEachDialect } from '../../support/dialects.js';
import { notice } from '../../../core/events.js';
import { REACTION_PLUGIN, reacting, TestChanged } from '../../support/fixtures/reaction-plugin.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';

// Leases long enough that no renewal or take-over loop runs during a case: each lease change is the test's.
const OVERRIDES = { clusters: { op_lease_seconds: 60 } };

/** A gate a scripted run waits on, and what opens it. */
function gate(): { wait: Promise<void>; open: () => void } {
  let open!: () => void;
  const wait = new Promise<void>((resolve) => (open = resolve));
  return { wait, open };
}

/**
 * Reactions (core/reactions.ts) run under an operation lease on their row, and a failed one runs
 * again once its lease runs out. A control plane in this process with a test plugin whose reaction
 * the test requests and scripts.
 */
describeEachDialect('core/reactions: a reaction’s row under its lease', (dialect) => {
  const started: TestHangar[] = [];
  const start = async (storage = dialect.freshStorage(), overrides: Record<string, unknown> = OVERRIDES) => {
    const hangar = await startHangar(dialect, { storage, plugins: ['system', REACTION_PLUGIN], overrides });
    started.push(hangar);
    return hangar;
  };
  const rowOf = (hangar: TestHangar, n: number) => hangar.hangar.services.db.knex(REACTIONS).where({ name: `test reaction ${n}` }).first();

  beforeEach(() => reacting.reset());
  afterEach(async () => {
    for (const hangar of started.splice(0)) await hangar.stop();
  });

  it('a run that lost its lease and then ends leaves the row to the process that took it over: that one’s failure is retried', async function () {
    this.timeout(30_000);
    const hangar = await start();
    const { clusters, db } = hangar.hangar.services;
    const first = gate();
    const second = gate();
    reacting.steps.push({ gate: first.wait }, { gate: second.wait, fail: 'the second run failed' });
    await reacting.reaction!.request({ n: 1 });
    await waitFor(() => reacting.runs.length === 1, { what: 'the first run' });
    const held = await rowOf(hangar, 1);

    // Its renewal stalled: the lease runs out, and the take-over (another process's, as any may) runs it again.
    await db.knex(REACTIONS).where({ id: held.id }).update({ op_lease_until: new Date(Date.now() - 1000).toISOString() });
    await clusters.takeOverExpired();
    await waitFor(() => reacting.runs.length === 2, { what: 'the run that took it over' });
    const takenOver = await rowOf(hangar, 1);
    expect(takenOver.op_id).not.to.equal(held.op_id);

    // The first run ends well; then the second fails.
    first.open();
    await waitFor(() => clusters.jobs.size === 1, { what: 'the first run to end' });
    expect(await rowOf(hangar, 1), 'the row of the run that took it over').to.include({ id: held.id, op_id: takenOver.op_id });
    second.open();
    await waitFor(() => clusters.jobs.size === 0, { what: 'the second run to end' });
    const retried = await rowOf(hangar, 1);
    expect(retried, 'its retry recorded').to.include({ id: held.id, attempts: 1, error: 'the second run failed' });
    expect(Date.parse(retried.op_lease_until)).to.be.greaterThan(Date.now());
  });

  it('a reaction waiting for its retry is not run again at once by a restart of the control plane', async function () {
    this.timeout(30_000);
    const storage = dialect.freshStorage();
    const before = await start(storage);
    reacting.steps.push({ fail: 'the first run failed' });
    await reacting.reaction!.request({ n: 2 });
    const waiting = await waitFor(async () => {
      const row = await rowOf(before, 2);
      return row?.attempts === 1 ? row : null;
    }, { what: 'the first run to fail' });
    await started.splice(0)[0]!.stop();

    const after = await start(storage);
    expect(await rowOf(after, 2), 'still waiting, with the same lease').to.include({ id: waiting.id, attempts: 1, op_id: waiting.op_id });
    expect(reacting.runs).to.deep.equal([2]);
    expect(after.logs.join('')).not.to.include('test reaction 2');
  });

  it('a change whose publish never came: its reaction runs once its lease runs out, and a later change of the same kind starts only its own', async function () {
    this.timeout(30_000);
    const hangar = await start(undefined, { clusters: { op_lease_seconds: 2 } });
    const { db, events, log } = hangar.hangar.services;
    const change = () => events.keepWith(db.knex, [notice(TestChanged, { n: 3 })], async () => 1, { log });
    const pending = () => db.knex(REACTIONS).where({ op: 'test:on-change' }).first();

    // Written with its change, never published (as when the publisher fails after its commit): the take-over loop runs it.
    await change();
    await waitFor(async () => reacting.runs.length === 1 && !(await pending()), { timeoutMs: 15_000, what: 'the take-over to run the reaction' });

    // The same change again, published: only its own reaction is started.
    await change();
    events.publish(TestChanged, { n: 3 });
    await waitFor(async () => reacting.runs.length === 2 && !(await pending()), { what: 'the second change’s reaction' });
    expect(reacting.runs).to.deep.equal([3, 3]);
    expect(hangar.logs.join(''), 'nothing left of the first change to start').not.to.include('a reaction was not started here');
  });
});
