import { createHash } from 'node:crypto';
import { chmodSync, closeSync, existsSync, fstatSync, openSync, readSync, renameSync, writeFileSync } from 'node:fs';
import { versionInfo } from '../../core/version.js';
import { beginUpdate, startWatchdog } from '../update-guard.js';
import type { KindExecutor } from './types.js';
import type { AgentLogs, AgentStop, AgentUpdate } from '../../core/tasks/host-kinds.js';

/** How long a new executable has to reach the control plane before the previous one is put back, unless the task says. */
export const UPDATE_GRACE_SECONDS = 120;

/** Exit code that asks the supervisor (systemd Restart=on-failure, or the fallback loop) to start the agent again. */
export const EXIT_RESTART = 75;

/** How much of the log is read at a time, from its end backwards. */
const LOG_CHUNK_BYTES = 64 * 1024;

/**
 * The agent's own log: the last `lines`, or every line after `since`. The log gains a line with
 * every task and is read from its end, a chunk at a time, so a fetch costs what it answers rather
 * than the whole file (docs/performance.md, "The agent's soak, found").
 */
export const fetchLogs: KindExecutor<typeof AgentLogs> = async ({ payload, logFile }) => {
  if (!existsSync(logFile)) return { lines: [] };
  const newestFirst: string[] = [];
  if (payload.since) {
    const since = Date.parse(payload.since);
    for (const line of linesFromEnd(logFile)) {
      const time = timeOf(line);
      // The log is written in time order: the first line not after `since` ends the search.
      if (time !== null && time <= since) break;
      if (time !== null) newestFirst.push(line);
    }
  } else {
    const wanted = Math.max(1, Number(payload.lines ?? 100));
    for (const line of linesFromEnd(logFile)) {
      newestFirst.push(line);
      if (newestFirst.length >= wanted) break;
    }
  }
  return { lines: newestFirst.reverse() };
};

/** When a log line was written (pino's `time`), or null for a line that is not one of pino's. */
function timeOf(line: string): number | null {
  try {
    const time = Date.parse(JSON.parse(line).time);
    return Number.isNaN(time) ? null : time;
  } catch {
    return null;
  }
}

/** The file's non-empty lines, the last first. A newline byte never occurs inside a UTF-8 character, so chunks split on it safely. */
function* linesFromEnd(file: string): Generator<string> {
  const fd = openSync(file, 'r');
  try {
    let position = fstatSync(fd).size;
    // The bytes before the first newline seen so far: a line whose start is in an earlier chunk.
    let head = Buffer.alloc(0);
    while (position > 0) {
      const size = Math.min(LOG_CHUNK_BYTES, position);
      position -= size;
      const chunk = Buffer.allocUnsafe(size);
      readSync(fd, chunk, 0, size, position);
      const bytes = Buffer.concat([chunk, head]);
      let end = bytes.length;
      for (let newline = bytes.lastIndexOf(0x0a, end - 1); newline >= 0; newline = end > 0 ? bytes.lastIndexOf(0x0a, end - 1) : -1) {
        if (end > newline + 1) yield bytes.toString('utf8', newline + 1, end);
        end = newline;
      }
      head = bytes.subarray(0, end);
    }
    if (head.length) yield head.toString('utf8');
  } finally {
    closeSync(fd);
  }
}

/** Stops the agent once the result is reported; workloads on the machine keep running. */
export const stopAgent: KindExecutor<typeof AgentStop> = async ({ after, log, quiesce }) => {
  // A heartbeat after the stop is reported would show the node ready again.
  await quiesce();
  after(() => {
    log.info('stopping on request of the control plane');
    process.exit(0);
  });
  return { stopping: true };
};

function isSingleExecutable(): boolean {
  try {
    // node:sea exists from Node 20.12; a source checkout runs under plain node.
    return Boolean((process as unknown as { getBuiltinModule?: (n: string) => { isSea(): boolean } }).getBuiltinModule?.('node:sea')?.isSea());
  } catch {
    return false;
  }
}

/** Downloads the new executable, checks its checksum, replaces this one and restarts. */
export const updateAgent: KindExecutor<typeof AgentUpdate> = async ({ payload, download, after, log, dataDir }) => {
  if (!isSingleExecutable()) {
    throw new Error(`this agent runs from a source checkout (${process.execPath}); update it there, or install the agent executable`);
  }
  const res = await download(`/v1/agent/binary?arch=${encodeURIComponent(payload.architecture)}`);
  if (res.status !== 200) throw new Error(`downloading the agent executable failed with HTTP ${res.status}`);
  const sha256 = createHash('sha256').update(res.body).digest('hex');
  if (sha256 !== payload.sha256) throw new Error(`checksum mismatch: expected ${payload.sha256}, got ${sha256}; kept the current executable`);
  const target = process.execPath;
  writeFileSync(`${target}.new`, res.body, { mode: 0o755 });
  chmodSync(`${target}.new`, 0o755);
  const graceSeconds = Number(payload.grace_seconds ?? UPDATE_GRACE_SECONDS);
  const { previous, id } = beginUpdate({ dataDir, executable: target, version: payload.version, previousVersion: versionInfo.version, graceSeconds });
  renameSync(`${target}.new`, target);
  after(() => {
    // The previous executable watches the new one: not through within the grace period, it is put back.
    startWatchdog(previous, dataDir, id);
    log.info({ version: payload.version, grace_seconds: graceSeconds }, 'agent executable replaced (the previous one kept, and put back if this one does not reach the control plane in time); restarting');
    // The supervisor starts the new executable; exit 0 would mean "stopped on purpose".
    process.exit(EXIT_RESTART);
  });
  return { updated_to: payload.version, sha256, grace_seconds: graceSeconds };
};
