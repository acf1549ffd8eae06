import { createHash } from 'node:crypto';
import { chmodSync, existsSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { versionInfo } from '../../core/version.js';
import { beginUpdate, startWatchdog } from '../update-guard.js';
import type { KindExecutor } from './types.js';
import type { AgentLogs, AgentStop, AgentUpdate } from '../../core/tasks/host-kinds.js';

/** How long a new executable has to reach the control plane before the previous one is put back, unless the task says. */
export const UPDATE_GRACE_SECONDS = 120;

/** Exit code that asks the supervisor (systemd Restart=on-failure, or the fallback loop) to start the agent again. */
export const EXIT_RESTART = 75;

/** The agent's own log: the last `lines`, or every line after `since`. */
export const fetchLogs: KindExecutor<typeof AgentLogs> = async ({ payload, logFile }) => {
  if (!existsSync(logFile)) return { lines: [] };
  const all = readFileSync(logFile, 'utf8').split('\n').filter(Boolean);
  if (payload.since) {
    const since = Date.parse(payload.since);
    return {
      lines: all.filter((line) => {
        try {
          return Date.parse(JSON.parse(line).time) > since;
        } catch {
          return false;
        }
      }),
    };
  }
  return { lines: all.slice(-Math.max(1, Number(payload.lines ?? 100))) };
};

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
