import { expect } from 'chai';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fetchLogs } from '../../../agent/executors/agent.js';

// The agent.logs task reads the agent's log from its end (agent/executors/agent.ts): these logs are
// several of its 64 KiB chunks long, with lines of every length and non-ASCII text across the chunk edges.
describe('agent: fetching its own log (agent.logs)', () => {
  let dir: string;
  let logFile: string;
  const lines = Array.from({ length: 3000 }, (_, i) => JSON.stringify({ level: 'info', time: new Date(Date.UTC(2026, 10, 29) + i * 1000).toISOString(), msg: `tâche ${i} ${'é'.repeat(i % 200)}` }));
  const fetch = (payload: { lines?: number; since?: string }, file = logFile) => fetchLogs({ payload, logFile: file } as Parameters<typeof fetchLogs>[0]);

  before(() => {
    dir = mkdtempSync(path.join(os.tmpdir(), 'hangar-agent-log-'));
    logFile = path.join(dir, 'agent.log');
    writeFileSync(logFile, `${lines.join('\n')}\n\n`);
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('answers the last lines, 100 unless asked, and the whole log when it is shorter than asked', async () => {
    expect((await fetch({ lines: 3 })).lines).to.deep.equal(lines.slice(-3));
    expect((await fetch({})).lines).to.deep.equal(lines.slice(-100));
    expect((await fetch({ lines: 10_000 })).lines).to.deep.equal(lines);
  });

  it('answers every line written after `since`, in order', async () => {
    const since = JSON.parse(lines[2000]!).time as string;
    expect((await fetch({ since })).lines).to.deep.equal(lines.slice(2001));
    expect((await fetch({ since: '2030-01-01T00:00:00Z' })).lines).to.deep.equal([]);
  });

  it('answers a log without a final newline, and no lines for a log not written yet', async () => {
    writeFileSync(path.join(dir, 'short.log'), 'one\ntwo');
    expect((await fetch({ lines: 5 }, path.join(dir, 'short.log'))).lines).to.deep.equal(['one', 'two']);
    expect((await fetch({}, path.join(dir, 'none.log'))).lines).to.deep.equal([]);
  });
});
