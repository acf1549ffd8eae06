import { expect } from 'chai';
import { QuietYoungGeneration } from '../../../core/young-generation.js';

const MB = 2 ** 20;
const rule = { quietMs: 6_000, bytesPerSecond: 1_000_000, minCapacity: 8 * MB };

/** Feeds samples every 2 s from t=0: [capacity MB, used MB] each; returns the times (s) it said collect. */
function collectsAt(samples: Array<[number, number]>): number[] {
  const quiet = new QuietYoungGeneration(rule);
  return samples.flatMap(([capacity, used], i) => (quiet.observe({ capacity: capacity * MB, used: used * MB }, i * 2_000) ? [i * 2] : []));
}

describe('young generation given back when quiet (core/young-generation.ts)', () => {
  it('collects a grown young generation once allocation has stayed low for the quiet period, then waits a whole period again', () => {
    // 128 MB after a burst, then 0.1 MB every 2 s.
    const samples = Array.from({ length: 10 }, (_, i): [number, number] => [128, 40 + i * 0.1]);
    expect(collectsAt(samples)).to.deep.equal([6, 12, 18]);
  });

  it('waits while the process allocates faster than V8 would shrink at (a burst goes on)', () => {
    const samples = Array.from({ length: 10 }, (_, i): [number, number] => [128, i * 3]);
    expect(collectsAt(samples)).to.deep.equal([]);
  });

  it('starts the quiet period again after a collection it did not ask for (used bytes fell)', () => {
    expect(collectsAt([[128, 40], [128, 40], [128, 10], [128, 10], [128, 10], [128, 10], [128, 10]])).to.deep.equal([10]);
  });

  it('leaves a young generation at or under its minimum alone', () => {
    expect(collectsAt(Array.from({ length: 10 }, (): [number, number] => [8, 1]))).to.deep.equal([]);
  });
});
