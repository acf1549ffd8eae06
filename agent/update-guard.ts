// The agent returns to its previous executable by itself when an update does not reach the control
// plane (issue 29, "Agents in waves"): before an update replaces the executable, the old one is kept
// beside it (`<executable>.previous`) and a marker names the update and its deadline; the new agent
// removes the marker once a heartbeat is answered. A watchdog — the previous executable, started
// detached by the agent that updates (`hangar-agent --update-watchdog <data dir>`) — waits for the
// deadline: when the marker is still there (the new agent never got through, or does not start at
// all), it puts the previous executable back and kills what runs the new one, so the supervisor
// (systemd's Restart=on-failure, or the fallback loop) starts the previous one again.
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { copyFileSync, existsSync, readFileSync, readdirSync, readlinkSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type { Logger } from '../core/log.js';

/** The option that runs the executable as the watchdog of an update. */
export const WATCHDOG_FLAG = '--update-watchdog';

interface PendingUpdate {
  /** Which update this is: a watchdog acts only on the marker of the update it was started for. */
  id: string;
  version: string;
  previous_version: string;
  executable: string;
  previous: string;
  deadline: string;
}

const markerOf = (dataDir: string) => path.join(dataDir, 'update-pending.json');
const noteOf = (dataDir: string) => path.join(dataDir, 'update-rolled-back.json');

function readJson<T>(file: string): T | null {
  try {
    return JSON.parse(readFileSync(file, 'utf8')) as T;
  } catch {
    return null;
  }
}

/** Keeps the running executable as `<executable>.previous` and writes the marker; answers the previous one's path and the update's id. */
export function beginUpdate(options: { dataDir: string; executable: string; version: string; previousVersion: string; graceSeconds: number; now?: Date }): { previous: string; id: string } {
  const previous = `${options.executable}.previous`;
  copyFileSync(options.executable, `${previous}.tmp`);
  renameSync(`${previous}.tmp`, previous);
  const deadline = new Date((options.now ?? new Date()).getTime() + options.graceSeconds * 1000).toISOString();
  const id = randomBytes(8).toString('hex');
  const pending: PendingUpdate = { id, version: options.version, previous_version: options.previousVersion, executable: options.executable, previous, deadline };
  writeFileSync(markerOf(options.dataDir), JSON.stringify(pending), { mode: 0o600 });
  return { previous, id };
}

/** Starts the previous executable as the update's watchdog, detached: it outlives this process. */
export function startWatchdog(previous: string, dataDir: string, id: string): void {
  spawn(previous, [WATCHDOG_FLAG, dataDir, id], { detached: true, stdio: 'ignore' }).unref();
}

/** After a heartbeat was answered: the update (if one is pending) reached the control plane. */
export function confirmUpdate(dataDir: string, log: Logger): void {
  const marker = markerOf(dataDir);
  if (!existsSync(marker)) return;
  const pending = readJson<PendingUpdate>(marker);
  rmSync(marker, { force: true });
  log.info({ version: pending?.version, previous: pending?.previous }, 'agent update confirmed: the control plane answered; the previous executable is kept beside this one');
}

/** What a watchdog left when it put the previous executable back (read once, then removed). */
export function takeRollbackNote(dataDir: string): { from_version: string; to_version: string; at: string } | null {
  const note = readJson<{ from_version: string; to_version: string; at: string }>(noteOf(dataDir));
  rmSync(noteOf(dataDir), { force: true });
  return note;
}

/** Processes running `executable` (its file replaced or not) for the agent of `dataDir`, this one excepted. */
function processesOf(executable: string, dataDir: string): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync('/proc')) {
    const pid = Number(entry);
    if (!Number.isInteger(pid) || pid === process.pid) continue;
    try {
      const exe = readlinkSync(`/proc/${pid}/exe`);
      if (exe !== executable && exe !== `${executable} (deleted)`) continue;
      // Another agent on the machine (another data dir) is not this update's.
      const args = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
      const dir = args.indexOf('--data-dir');
      if (dir < 0 || path.resolve(args[dir + 1] ?? '') === path.resolve(dataDir)) pids.push(pid);
    } catch {
      // Gone, or not ours to read.
    }
  }
  return pids;
}

/** The watchdog of update `id`: waits for its deadline, and rolls it back when it was not confirmed by then. */
export async function watchUpdate(dataDir: string, id: string): Promise<void> {
  const marker = markerOf(dataDir);
  const pending = readJson<PendingUpdate>(marker);
  if (pending?.id !== id) return;
  const wait = Date.parse(pending.deadline) - Date.now();
  if (wait > 0) await new Promise((r) => setTimeout(r, wait));
  // Confirmed (the new agent got through), or another update has begun since: not this watchdog's to undo.
  if (readJson<PendingUpdate>(marker)?.id !== id) return;
  copyFileSync(pending.previous, `${pending.executable}.rollback`);
  renameSync(`${pending.executable}.rollback`, pending.executable);
  writeFileSync(noteOf(dataDir), JSON.stringify({ from_version: pending.version, to_version: pending.previous_version, at: new Date().toISOString() }), { mode: 0o600 });
  rmSync(marker, { force: true });
  // The new agent, still running without having got through: the supervisor starts the previous one instead.
  for (const pid of processesOf(pending.executable, dataDir)) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // Already gone.
    }
  }
}
