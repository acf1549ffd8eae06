import { expect } from 'chai';
import { QuietYoungGeneration } from '../../../cli/young-generation.js';

const MB = 2 ** 20;
const rule = { quietMs: 6_000, bytesPerSecond: 1_000_000, minCapacity: 8 * MB, cpuShare: 0.03 };

/**
 * Feeds samples every 2 s from t=0: [capacity MB, used MB, CPU ms used in the 2 s before (default 10)]
 * each; returns the times (s) it said collect.
 */
function collectsAt(samples: Array<[number, number, number?]>): number[] {
  const quiet = new QuietYoungGeneration(rule);
  let cpuMicros = 0;
  return samples.flatMap(([capacity, used, cpuMs = 10], i) => {
    cpuMicros += cpuMs * 1000;
    return quiet.observe({ capacity: capacity * MB, used: used * MB, cpuMicros }, i * 2_000) ? [i * 2] : [];
  });
}

describe('young generation given back when quiet (cli/young-generation.ts)', () => {
  it('collects a grown young generation once allocation has stayed low for the quiet period, then waits a whole period again', () => {
    // 128 MB after a burst, then 0.1 MB every 2 s.
    const samples = Array.from({ length: 10 }, (_, i): [number, number] => [128, 40 + i * 0.1]);
    expect(collectsAt(samples)).to.deep.equal([6, 12, 18]);
  });

  it('waits while the process allocates faster than V8 would shrink at (a burst goes on)', () => {
    const samples = Array.from({ length: 10 }, (_, i): [number, number] => [128, i * 3]);
    expect(collectsAt(samples)).to.deep.equal([]);
  });

  it('waits while the process uses more CPU than an idle one, however little it allocates (a fleet’s heartbeats)', () => {
    // 100 ms of CPU every 2 s (5 % of a core), 0.1 MB allocated.
    const busy = Array.from({ length: 10 }, (_, i): [number, number, number] => [128, 40 + i * 0.1, 100]);
    expect(collectsAt(busy)).to.deep.equal([]);
    // Then idle (20 ms every 2 s) from t=8 s on: collected once the 6 s before used under 3 % of a core
    // (6-12 s: 100 + 20 + 20 ms, 2.3 %), then a whole period later.
    expect(collectsAt([...busy.slice(0, 5), ...Array.from({ length: 5 }, (_, i): [number, number, number] => [128, 41 + i * 0.1, 20])])).to.deep.equal([12, 18]);
  });

  it('judges the CPU over the whole quiet period: a scrape of a few tens of milliseconds now and then does not end it', () => {
    // Idle (6 ms every 2 s) with an 80 ms scrape every 6 s: 4 % of a core in its sample, 1.5 % over 6 s.
    const samples = Array.from({ length: 10 }, (_, i): [number, number, number] => [128, 40 + i * 0.1, i % 3 === 1 ? 80 : 6]);
    expect(collectsAt(samples)).to.deep.equal([6, 12, 18]);
  });

  it('starts the quiet period again after a collection it did not ask for (used bytes fell)', () => {
    expect(collectsAt([[128, 40], [128, 40], [128, 10], [128, 10], [128, 10], [128, 10], [128, 10]])).to.deep.equal([10]);
  });

  it('leaves a young generation at or under its minimum alone', () => {
    expect(collectsAt(Array.from({ length: 10 }, (): [number, number] => [8, 1]))).to.deep.equal([]);
  });
});
