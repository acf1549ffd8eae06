import { expect } from 'chai';
import { Journal } from '../../../plugins/events/journal.js';

const at = '2026-11-27T00:00:00.000Z';
const now = () => new Date(at);

describe('plugins/events journal: numbered by the workers’ primary', () => {
  it('keeps the numbers it is given, so an id from one worker resumes on another with the same run', () => {
    const a = new Journal(10, now, 'run1');
    const b = new Journal(10, now, 'run1');
    for (const journal of [a, b]) for (let seq = 1; seq <= 3; seq++) journal.append('resource.changed', { id: `thing-${seq}` }, {}, { seq, at });
    const seen = a.after(undefined);
    expect('events' in seen && seen.events.map((e) => e.id)).to.deep.equal(['run1-1', 'run1-2', 'run1-3']);
    const missed = b.after('run1-1');
    expect('events' in missed && missed.events.map((e) => e.data.id)).to.deep.equal(['thing-2', 'thing-3']);
  });

  it('answers a reset, never a replay with a hole, for an id from before numbers it did not get', () => {
    const journal = new Journal(10, now, 'run1');
    journal.append('resource.changed', { id: 'thing-1' }, {}, { seq: 1, at });
    journal.append('resource.changed', { id: 'thing-2' }, {}, { seq: 2, at });
    // 3 and 4 never reached this worker.
    journal.append('resource.changed', { id: 'thing-5' }, {}, { seq: 5, at });
    expect(journal.after('run1-2')).to.have.property('reset');
    const after4 = journal.after('run1-4');
    expect('events' in after4 && after4.events.map((e) => e.data.id)).to.deep.equal(['thing-5']);
    expect(journal.after('run1-5')).to.deep.equal({ events: [] });
  });

  it('numbers its own events when it is given none (a control plane of one process)', () => {
    const journal = new Journal(2, now);
    for (let i = 0; i < 3; i++) journal.append('node.status', { i });
    const kept = journal.after(undefined);
    expect('events' in kept && kept.events.map((e) => e.id.split('-').pop())).to.deep.equal(['2', '3']);
    expect(journal.after(`${journal.boot}-0`), 'the oldest is no longer kept').to.have.property('reset');
  });

  it('keeps each event’s frame and tells a stream how many bytes it has still to send after a number', () => {
    const journal = new Journal(3, now, 'run1');
    for (let i = 1; i <= 4; i++) journal.append('node.status', { i });
    const entry = journal.entry(4)!;
    expect(entry.frame).to.equal(`id: run1-4\nevent: node.status\ndata: {"i":4,"at":"${at}"}\n\n`);
    expect(journal.entry(1), 'no longer kept').to.equal(undefined);
    expect(journal.bytesAfter(4)).to.equal(0);
    expect(journal.bytesAfter(3)).to.equal(Buffer.byteLength(entry.frame));
    expect(journal.bytesAfter(1)).to.equal(Buffer.byteLength(journal.entry(2)!.frame) + Buffer.byteLength(journal.entry(3)!.frame) + Buffer.byteLength(entry.frame));
    expect(journal.bytesAfter(0), 'some no longer kept').to.equal(Infinity);
    expect(journal.resumeAfter('run1-2')).to.deep.equal({ seq: 2 });
    expect(journal.resumeAfter(undefined)).to.deep.equal({ seq: 4 });
    expect(journal.resumeAfter('run1-0')).to.have.property('reset');
    expect(journal.resumeAfter('other-3')).to.have.property('reset');
  });
});
