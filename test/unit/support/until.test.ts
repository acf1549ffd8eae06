import { expect } from 'chai';
import { backoff, FailNow, until } from '../../support/agents.js';

// until() of test/support/agents.ts, which the lab suites wait with: a probe's definite failure must
// end the wait with that failure, not a timeout minutes later that no longer says what went wrong.
describe('until (test/support/agents.ts): waiting for a system that comes up', () => {
  it('ends at once with a failed assertion or a FailNow the probe throws, not at its deadline', async () => {
    let calls = 0;
    const assertion = await until('a status', async () => {
      calls++;
      expect('failed', 'the status').to.equal('ready');
      return null;
    }, 60_000, 5).catch((err: Error) => err);
    expect(assertion).to.have.property('name', 'AssertionError');
    expect((assertion as Error).message).to.contain("the status: expected 'failed' to equal 'ready'");
    expect(calls, 'asked once').to.equal(1);

    calls = 0;
    const failed = await until('the install', async () => {
      calls++;
      throw new FailNow('installing k3s on node-1 failed: no binary');
    }, 60_000, 5).catch((err: Error) => err);
    expect(failed).to.be.instanceOf(FailNow);
    expect((failed as Error).message).to.equal('installing k3s on node-1 failed: no binary');
    expect(calls, 'asked once').to.equal(1);
  });

  it('takes other errors as "not yet", and at the deadline names the last one with its stack', async () => {
    let calls = 0;
    const up = await until('the service', async () => {
      calls++;
      if (calls < 3) throw new Error('connect ECONNREFUSED 127.0.0.1:22');
      return 'up';
    }, 60_000, 1);
    expect(up).to.equal('up');
    expect(calls).to.equal(3);

    let attempt = 0;
    const timedOut = (await until('the service', async () => {
      attempt++;
      throw new Error(`connect ECONNREFUSED (attempt ${attempt})`);
    }, 30, 5).catch((err: Error) => err)) as Error;
    expect(timedOut.message).to.match(/^timed out after 0\.03 s \(\d+ attempts\) waiting for the service; the last error: connect ECONNREFUSED \(attempt \d+\)/);
    expect(timedOut.message).to.contain(`(attempt ${attempt})`);
    expect(timedOut.stack).to.contain("the last error's stack").and.contain('until.test.ts');
    expect(timedOut.cause).to.be.instanceOf(Error);
  });

  it('pauses 100 ms between its first probes, twice as long each time, up to the interval asked for', () => {
    const second = backoff(1000);
    expect(Array.from({ length: 7 }, second)).to.deep.equal([100, 200, 400, 800, 1000, 1000, 1000]);
    const quick = backoff(50);
    expect(Array.from({ length: 3 }, quick), 'an interval below 100 ms is kept').to.deep.equal([50, 50, 50]);
    const odd = backoff(250);
    expect(Array.from({ length: 4 }, odd)).to.deep.equal([100, 200, 250, 250]);
  });
});
