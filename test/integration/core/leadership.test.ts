import { expect } from 'chai';
import { Leadership } from '../../../core/db/leadership.js';
import { FAST_NODES, NODE_PLUGINS, waitFor } from '../../support/agents.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const SCRAPE_TOKEN = 'scrape-token-for-the-leadership-test-0123456789';

describeEachDialect('leadership: loops that run in one control plane at a time', (dialect) => {
  it('a lease is held by one holder, renewed by it, taken by another once it runs out or is released', async () => {
    const t = await startHangar(dialect, { plugins: ['system'] });
    try {
      const one = new Leadership(t.hangar.store, 'one');
      const two = new Leadership(t.hangar.store, 'two');
      expect(await one.lead('job', 600)).to.equal(true);
      expect(await two.lead('job', 600)).to.equal(false);
      expect(await one.lead('job', 600), 'renewed by its holder').to.equal(true);
      expect(await two.leader('job')).to.equal('one');
      await sleep(700);
      expect(await two.leader('job'), 'ran out').to.equal(null);
      expect(await two.lead('job', 60_000), 'taken once it ran out').to.equal(true);
      expect(await one.lead('job', 600)).to.equal(false);
      await two.releaseAll();
      expect(await one.lead('job', 600), 'taken at once after a release').to.equal(true);
    } finally {
      await t.stop();
    }
  });

  it('two control planes on one store: a `once` loop runs in one of them, the other takes over when it stops; other loops run in both', async function () {
    this.timeout(60_000);
    const storage = dialect.freshStorage();
    const database = dialect.name === 'sqlite' ? { sqlite_file: `${storage.dataDir}/hangar.db` } : {};
    const overrides = { ...FAST_NODES, database, metrics: { scrape_token: SCRAPE_TOKEN } };
    const plugins = [...NODE_PLUGINS, 'metrics'];
    const planes: TestHangar[] = [await startHangar(dialect, { plugins, overrides, storage })];
    planes.push(await startHangar(dialect, { plugins, overrides, storage: { ...dialect.freshStorage(), schema: storage.schema } }));
    /** hangar_loop_runs_total{loop, outcome="ok"} as a control plane's /metrics reports it. */
    const runs = async (t: TestHangar, loop: string) => {
      const res = await t.request('GET', '/metrics', { headers: { authorization: `Bearer ${SCRAPE_TOKEN}` } });
      expect(res.status, res.text).to.equal(200);
      const line = res.text.split('\n').find((l) => l.startsWith(`hangar_loop_runs_total{loop="${loop}",outcome="ok"}`));
      return line ? Number(line.split(' ').pop()) : 0;
    };
    try {
      // offline detection turns every second with FAST_NODES; lease expiry every 200 ms.
      await sleep(3500);
      const counts = await Promise.all(planes.map((t) => runs(t, 'nodes:offline-detection')));
      const leaderIndex = counts[0]! > 0 ? 0 : 1;
      expect(counts[leaderIndex], `offline detection ran in one of them: ${counts}`).to.be.at.least(2);
      expect(counts[1 - leaderIndex], `and not in the other: ${counts}`).to.equal(0);
      for (const t of planes) expect(await runs(t, 'tasks:expire-leases'), 'lease expiry runs everywhere').to.be.at.least(2);

      const [leader, follower] = [planes[leaderIndex]!, planes[1 - leaderIndex]!];
      await leader.stop();
      planes.splice(leaderIndex, 1);
      // The stopped leader released its lease: the other takes over at its next turn, not after the 15 s lease.
      await waitFor(async () => (await runs(follower, 'nodes:offline-detection')) >= 2, { timeoutMs: 8000, what: 'the other control plane to take over' });
    } finally {
      for (const t of planes) await t.stop();
    }
  });
});
