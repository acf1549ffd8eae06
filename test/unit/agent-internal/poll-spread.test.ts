import { expect } from 'chai';
import { PollSpread } from '../../../plugins/agent-internal/poll-spread.js';

describe('long-polls answered anywhere in their wait (PollSpread)', () => {
  it('a node’s first poll since the start; not the ones after it of the same wait', () => {
    const spread = new PollSpread();
    expect(spread.firstOfItsWait('node-a', 30_000)).to.equal(true);
    expect(spread.firstOfItsWait('node-a', 30_000)).to.equal(false);
    expect(spread.firstOfItsWait('node-b', 30_000), 'each node has its own first').to.equal(true);
  });

  it('the first poll of a newly told wait (a fleet that grew), once', () => {
    const spread = new PollSpread();
    spread.firstOfItsWait('node-a', 30_000); // the agent's default, before any heartbeat reply
    spread.tell('node-a', 100_000);
    expect(spread.firstOfItsWait('node-a', 30_000), 'a poll of the old wait still in flight is not it').to.equal(false);
    expect(spread.firstOfItsWait('node-a', 100_000)).to.equal(true);
    expect(spread.firstOfItsWait('node-a', 100_000)).to.equal(false);
    spread.tell('node-a', 100_000);
    expect(spread.firstOfItsWait('node-a', 100_000), 'told the same wait again: nothing new').to.equal(false);
    spread.tell('node-a', 60_000);
    expect(spread.firstOfItsWait('node-a', 60_000), 'a shorter wait is new too').to.equal(true);
  });

  it('after a restart, the wait another process told is no news: only the first poll since the start is spread', () => {
    const spread = new PollSpread();
    expect(spread.firstOfItsWait('node-a', 100_000), 'first since the start').to.equal(true);
    spread.tell('node-a', 100_000);
    expect(spread.firstOfItsWait('node-a', 100_000)).to.equal(false);
  });

  it('a node told a wait before it ever polled has only its first poll since the start spread', () => {
    const spread = new PollSpread();
    spread.tell('node-a', 100_000);
    expect(spread.firstOfItsWait('node-a', 100_000)).to.equal(true);
    expect(spread.firstOfItsWait('node-a', 100_000)).to.equal(false);
  });
});
