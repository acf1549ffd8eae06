import { randomBytes } from 'node:crypto';
import { existsSync, lstatSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statfsSync, statSync, writeFileSync, type Stats } from 'node:fs';
import path from 'node:path';
import { onPath } from '../facts.js';
import { runCommand, type RunResult } from '../../core/process.js';
import type { ExecutorContext, KindExecutor } from './types.js';
import type { BackupFolderCheck, VolumeBackup, VolumeRestore } from '../../core/tasks/backup-kinds.js';

/** What the control plane says when a node has no restic; the agent says the same when it is gone meanwhile. */
export const RESTIC_MISSING = 'restic is not installed on this machine: install Debian’s restic package (apt-get install restic) — the agent reports it at its next heartbeat';

/** The longest one backup or restore may run. */
const RESTIC_TIMEOUT_MS = 12 * 3600_000;

function checkFolder(folder: unknown): string {
  if (typeof folder !== 'string' || !path.isAbsolute(folder) || folder.split('/').includes('..') || path.resolve(folder) === '/') {
    throw new Error(`folder must be an absolute path without "..", not the root: ${JSON.stringify(folder)}`);
  }
  return path.resolve(folder);
}

/**
 * restic's environment: the repository, its password and the S3 keys are passed here, never on the
 * command line (where `ps` shows them). Whatever RESTIC_ or AWS_ variables the agent inherited are
 * left out, so that nothing but the payload decides where restic writes.
 */
function resticEnv(ctx: ExecutorContext): NodeJS.ProcessEnv {
  const p = ctx.payload;
  const inherited = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^(RESTIC_|AWS_)/.test(k)));
  const cache = path.join(ctx.dataDir, 'restic-cache');
  mkdirSync(cache, { recursive: true, mode: 0o700 });
  return {
    ...inherited,
    RESTIC_REPOSITORY: String(p.repository),
    RESTIC_PASSWORD: String(p.password),
    // An S3 repository's keys (a local target has none).
    ...(p.access_key_id ? { AWS_ACCESS_KEY_ID: String(p.access_key_id), AWS_SECRET_ACCESS_KEY: String(p.secret_access_key), AWS_DEFAULT_REGION: String(p.region) } : {}),
    RESTIC_CACHE_DIR: cache,
    HOME: process.env.HOME ?? ctx.dataDir,
  };
}

function requireRestic(): string {
  const restic = onPath('restic');
  if (!restic) throw new Error(RESTIC_MISSING);
  return restic;
}

/** The last lines of restic's error output (never the environment it ran with). */
const said = (res: RunResult) => (res.timedOut ? 'timed out' : res.stderr.trim().split('\n').slice(-3).join(' / ') || `exited with ${res.code}`);

async function restic(ctx: ExecutorContext, args: string[], options: { onStdoutLine?: (line: string) => boolean | void; onSpawn?: (pid: number) => void; env?: NodeJS.ProcessEnv } = {}): Promise<RunResult> {
  return runCommand(requireRestic(), [...(ctx.payload.region ? ['-o', `s3.region=${String(ctx.payload.region)}`] : []), ...args], { env: { ...resticEnv(ctx), ...options.env }, timeoutMs: RESTIC_TIMEOUT_MS, onStdoutLine: options.onStdoutLine, onSpawn: options.onSpawn });
}

/** How often restic writes a status line while it backs up (RESTIC_PROGRESS_FPS; its default with --json is 60 a second). */
const STATUS_LINES_PER_SECOND = '2';

/** Which figures of restic's `--json` status lines are the bytes and files done and their totals: a backup's, and a restore's (restic 0.16 and later; Debian bookworm's 0.14 writes none while it restores). */
export const BACKUP_STATUS = { bytesDone: 'bytes_done', filesDone: 'files_done' } as const;
export const RESTORE_STATUS = { bytesDone: 'bytes_restored', filesDone: 'files_restored' } as const;

/**
 * Hears restic's `--json` status lines and tells the control plane the bytes done of the total (and
 * the files), as the task's progress; the status lines are not kept (only the summary and the
 * errors are read after). `heard` is called at each one.
 */
export function statusReporter(ctx: ExecutorContext, keys: typeof BACKUP_STATUS | typeof RESTORE_STATUS, heard?: () => void): (line: string) => boolean {
  return (line) => {
    if (!line.startsWith('{') || !line.includes('"message_type":"status"')) return true;
    try {
      const status = JSON.parse(line) as Record<string, unknown>;
      const figure = (key: string) => (typeof status[key] === 'number' ? (status[key] as number) : null);
      ctx.progress({ bytes_done: figure(keys.bytesDone) ?? 0, bytes_total: figure('total_bytes'), files_done: figure(keys.filesDone) ?? 0, files_total: figure('total_files') });
      heard?.();
    } catch {
      return true;
    }
    return false;
  };
}

/** The bytes a process has written so far (Linux's I/O accounting, `wchar` of /proc/<pid>/io); null once it is gone. */
function writtenBytes(pid: number): number | null {
  try {
    const written = /^wchar: (\d+)$/m.exec(readFileSync(`/proc/${pid}/io`, 'utf8'));
    return written ? Number(written[1]) : null;
  } catch {
    return null;
  }
}

/** How often a restore's written bytes are read while restic says nothing of its progress. */
const RESTORE_PROGRESS_MS = 1000;

/**
 * restic restore, reporting the task's progress in bytes of the snapshot's size (`restic stats`):
 * restic's own status lines when it writes them (0.16 and later), else the bytes the restic process
 * has written so far (the files' contents, and its cache of the repository's index and trees: at
 * most the total is reported).
 */
async function restoreReporting(ctx: ExecutorContext, snapshotId: string, target: string): Promise<RunResult> {
  const stats = await restic(ctx, ['stats', '--json', snapshotId]);
  const line = stats.code === 0 ? stats.stdout.split('\n').find((l) => l.startsWith('{')) : undefined;
  // The size is for the progress only: a line that does not parse leaves it unknown, the restore goes on.
  const size = (line ? parsedOr(line, {}) : {}) as { total_size?: number; total_file_count?: number };
  const total = typeof size.total_size === 'number' ? size.total_size : null;
  const report = (written: number) => ctx.progress({ bytes_done: total === null ? written : Math.min(written, total), bytes_total: total, files_done: null, files_total: size.total_file_count ?? null });
  report(0);
  let pid: number | undefined;
  let resticReports = false;
  const poll = setInterval(() => {
    const written = pid === undefined || resticReports ? null : writtenBytes(pid);
    if (written !== null) report(written);
  }, RESTORE_PROGRESS_MS);
  try {
    return await restic(ctx, ['restore', '--json', snapshotId, '--target', target], {
      onStdoutLine: statusReporter(ctx, RESTORE_STATUS, () => (resticReports = true)),
      onSpawn: (child) => (pid = child),
      env: { RESTIC_PROGRESS_FPS: STATUS_LINES_PER_SECOND },
    });
  } finally {
    clearInterval(poll);
  }
}

/** Opens the repository, initialising it when there is none yet (another agent may do so at the same time). */
async function openRepository(ctx: ExecutorContext): Promise<void> {
  const config = await restic(ctx, ['cat', 'config']);
  if (config.code === 0) return;
  if (!/Is there a repository at the following location/i.test(config.stderr)) throw new Error(`opening the restic repository failed: ${said(config)}`);
  const init = await restic(ctx, ['init']);
  if (init.code === 0) return;
  // Another agent initialised it meanwhile.
  if ((await restic(ctx, ['cat', 'config'])).code === 0) return;
  throw new Error(`initialising the restic repository failed: ${said(init)}`);
}

async function resticVersion(): Promise<string | null> {
  const res = await runCommand(requireRestic(), ['version'], { timeoutMs: 30_000 });
  return /^restic (\S+)/.exec(res.stdout)?.[1] ?? null;
}

/**
 * Applies a retention policy to the volume's snapshots (those tagged with it): restic forget with
 * the keep rules and --prune (the data only they used is removed). Answers the short ids removed.
 */
async function applyRetention(ctx: ExecutorContext, retention: Record<string, number | undefined>): Promise<string[]> {
  const rules = (['last', 'daily', 'weekly', 'monthly'] as const).flatMap((r) => (retention[`keep_${r}`] ? [`--keep-${r}`, String(retention[`keep_${r}`])] : []));
  if (!rules.length) return [];
  const res = await restic(ctx, ['forget', '--json', '--tag', `hangar-volume=${ctx.payload.volume_id}`, ...rules, '--prune']);
  if (res.code !== 0) throw new Error(`restic forget (retention) failed: ${said(res)}`);
  const line = res.stdout.split('\n').find((l) => l.startsWith('['));
  const groups = line ? (JSON.parse(line) as Array<{ remove?: Array<{ short_id?: string; id?: string }> | null }>) : [];
  return groups.flatMap((g) => (g.remove ?? []).map((s) => s.short_id ?? String(s.id).slice(0, 8)));
}

/** Backs a volume's folder up (tagged with the volume and the backup's ids); answers restic's summary. */
export const backupVolume: KindExecutor<typeof VolumeBackup> = async (ctx) => {
  const folder = checkFolder(ctx.payload.folder);
  requireRestic();
  if (!existsSync(folder) || !statSync(folder).isDirectory()) throw new Error(`the volume's folder ${folder} does not exist on this machine`);
  await openRepository(ctx);
  const res = await restic(ctx, ['backup', '--json', '--tag', `hangar-volume=${ctx.payload.volume_id}`, '--tag', `hangar-backup=${ctx.payload.backup_id}`, folder], {
    onStdoutLine: statusReporter(ctx, BACKUP_STATUS),
    env: { RESTIC_PROGRESS_FPS: STATUS_LINES_PER_SECOND },
  });
  const lines = res.stdout.split('\n').filter((l) => l.startsWith('{'));
  const summary = lines.map((l) => JSON.parse(l) as Record<string, unknown>).find((m) => m.message_type === 'summary');
  // restic exits with 3 when some files could not be read: the snapshot exists but is incomplete.
  if (res.code !== 0 || !summary || typeof summary.snapshot_id !== 'string') throw new Error(`restic backup failed: ${said(res)}`);
  // The snapshot exists whatever the retention does: a failed forget is reported beside it.
  let forgotten: string[] | undefined;
  let retentionError: string | undefined;
  if (ctx.payload.retention) {
    try {
      forgotten = await applyRetention(ctx, ctx.payload.retention as Record<string, number | undefined>);
    } catch (err) {
      retentionError = (err as Error).message;
    }
  }
  // The drill runs after the retention: what it proves is the snapshot as the repository now holds it.
  const drill = ctx.payload.verify === true ? await verifySnapshot(ctx, folder, summary.snapshot_id, Number(summary.total_bytes_processed ?? 0)) : undefined;
  return {
    snapshot_id: summary.snapshot_id,
    ...(drill ?? {}),
    ...(forgotten ? { forgotten } : {}),
    ...(retentionError ? { retention_error: retentionError } : {}),
    files: Number(summary.total_files_processed ?? 0),
    bytes: Number(summary.total_bytes_processed ?? 0),
    bytes_added: Number(summary.data_added ?? 0),
    duration_seconds: Number(summary.total_duration ?? 0),
    restic_version: await resticVersion(),
  };
};

/** How often, and how long apart, a drill's restic check is tried again when it failed while another process held a lock on the repository. */
const CHECK_TRIES = 20;
const CHECK_WAIT_MS = 3000;

/** Whether any process holds a lock on the repository now (another volume's backup, a retention's prune). */
async function repositoryLocked(ctx: ExecutorContext): Promise<boolean> {
  const res = await restic(ctx, ['list', 'locks', '--no-lock']);
  return res.code === 0 && res.stdout.trim() !== '';
}

/**
 * restic check without taking restic's exclusive lock: with it, the backups of other volumes to the
 * same target that start meanwhile would fail. Packs that a concurrent backup adds are reported as
 * unreferenced, which restic does not count as an error; a concurrent prune (another volume's
 * retention) may remove what the check had listed, so a check that fails while another process
 * holds a lock is tried again once the repository is quiet (a minute at most) before the drill fails.
 */
async function checkRepository(ctx: ExecutorContext): Promise<RunResult> {
  const check = () => restic(ctx, ['check', '--no-lock', '--read-data-subset=5%']);
  let res = await check();
  for (let i = 1; i < CHECK_TRIES && res.code !== 0 && (await repositoryLocked(ctx)); i++) {
    await new Promise((resolve) => setTimeout(resolve, CHECK_WAIT_MS));
    if (!(await repositoryLocked(ctx))) res = await check();
  }
  return res;
}

/** What restic ls --json lists of a snapshot: one node per entry, by absolute path. */
interface ListedNode {
  path: string;
  type: string;
  size?: number;
}

/**
 * A restore drill of a snapshot just taken: proves it restorable, never throws (the backup stands
 * either way), and always removes its scratch folder.
 *
 * 1. `restic check --read-data-subset=5%` (without restic's exclusive lock: {@link checkRepository}): the repository's structure (every index, pack and tree
 *    the snapshots need exists) and a random twentieth of its pack files read and their blobs'
 *    hashes checked.
 * 2. `restic restore <snapshot> --verify` into a scratch folder beside the volume's (same file
 *    system): every blob of the snapshot is downloaded and authenticated, and --verify reads each
 *    restored file back and compares its content with the snapshot's blob hashes (SHA-256).
 * 3. The restored tree is compared with restic's listing of the snapshot (`restic ls --json`):
 *    every entry there with the same type (and size for files), nothing more.
 *
 * Not against the volume's folder: it is live, and anything written since the snapshot would be
 * reported as a failure of a good backup.
 */
async function verifySnapshot(ctx: ExecutorContext, folder: string, snapshotId: string, bytes: number): Promise<{ verified: boolean; verified_at: string; verify_error?: string }> {
  const prefix = `.hangar-verify-${path.basename(folder)}-`;
  const scratch = path.join(path.dirname(folder), `${prefix}${randomBytes(4).toString('hex')}`);
  try {
    // A drill of this volume that an agent killed mid-way left its copy behind: gone first (one operation runs on a volume at a time).
    // Exactly the names a drill of this volume makes (not another volume's folder or scratch that merely starts alike: `web` vs `web-2`).
    const ours = new RegExp(`^${prefix.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}[0-9a-f]{8}$`);
    for (const left of readdirSync(path.dirname(folder)).filter((n) => ours.test(n))) rmSync(path.join(path.dirname(folder), left), { recursive: true, force: true });
    // The copy goes on the volume's file system, beside its live data: never filled by a drill.
    const free = freeBytes(path.dirname(folder));
    const wanted = Math.ceil(bytes * 1.1) + 64 * 2 ** 20;
    if (free !== null && free < wanted) throw new Error(`not enough free space for the drill's copy beside ${folder}: ${free} bytes free, the snapshot needs ${bytes} (and a margin); the backup itself stands`);
    const check = await checkRepository(ctx);
    if (check.code !== 0) throw new Error(`restic check failed: ${said(check)}`);
    const restored = await restic(ctx, ['restore', snapshotId, '--target', scratch, '--verify']);
    if (restored.code !== 0) throw new Error(`restoring snapshot ${snapshotId} into a scratch folder failed: ${said(restored)}`);
    const listed = await restic(ctx, ['ls', '--json', snapshotId]);
    if (listed.code !== 0) throw new Error(`listing snapshot ${snapshotId} failed: ${said(listed)}`);
    const nodes = listed.stdout
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as ListedNode & { struct_type?: string })
      .filter((n) => n.struct_type === 'node');
    const mismatch = compareRestored(scratch, nodes);
    if (mismatch) throw new Error(`the restored snapshot ${snapshotId} differs from restic’s listing of it: ${mismatch}`);
    return { verified: true, verified_at: new Date().toISOString() };
  } catch (err) {
    return { verified: false, verified_at: new Date().toISOString(), verify_error: (err as Error).message.slice(0, 2000) };
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
}

/** Bytes an unprivileged writer may still use on the file system holding `dir` (null: not known). */
function freeBytes(dir: string): number | null {
  try {
    const fs = statfsSync(dir);
    return Number(fs.bavail) * Number(fs.bsize);
  } catch {
    return null;
  }
}

/** The first difference between a restored tree and the snapshot's listing (null: none). */
function compareRestored(scratch: string, nodes: ListedNode[]): string | null {
  const kinds: Record<string, (s: Stats) => boolean> = {
    file: (s) => s.isFile(),
    dir: (s) => s.isDirectory(),
    symlink: (s) => s.isSymbolicLink(),
  };
  const expected = new Set<string>();
  for (const node of nodes) {
    const at = path.join(scratch, node.path);
    expected.add(at);
    const stat = lstatSync(at, { throwIfNoEntry: false });
    if (!stat) return `${node.path} is missing`;
    const is = kinds[node.type];
    if (is && !is(stat)) return `${node.path} is not a ${node.type}`;
    if (node.type === 'file' && node.size !== undefined && stat.size !== node.size) return `${node.path} has ${stat.size} bytes, the snapshot ${node.size}`;
  }
  const extra = (dir: string): string | null => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const at = path.join(dir, entry.name);
      if (!expected.has(at)) return `${path.relative(scratch, at)} is not in the snapshot`;
      if (entry.isDirectory()) {
        const found = extra(at);
        if (found) return found;
      }
    }
    return null;
  };
  return nodes.length ? extra(scratch) : 'the snapshot lists nothing';
}

/** The one folder a volume's snapshot holds (what it was backed up from): restic's record of it. */
async function snapshotFolder(ctx: ExecutorContext): Promise<string> {
  const res = await restic(ctx, ['snapshots', '--json', String(ctx.payload.snapshot_id)]);
  if (res.code !== 0) throw new Error(`reading snapshot ${ctx.payload.snapshot_id} failed: ${said(res)}`);
  const line = res.stdout.split('\n').find((l) => l.startsWith('['));
  const paths = line ? ((JSON.parse(line) as Array<{ paths?: string[] }>)[0]?.paths ?? []) : [];
  if (paths.length !== 1) throw new Error(`snapshot ${ctx.payload.snapshot_id} holds ${paths.length} folders (${paths.join(', ')}), not one volume's`);
  return checkFolder(paths[0]);
}

/**
 * Restores a snapshot into a volume's folder: first into a scratch folder beside it (same file
 * system), then the folder's entries are moved aside and the restored ones moved in, then what was
 * moved aside is removed. A restore that fails leaves the folder untouched.
 */
export const restoreVolume: KindExecutor<typeof VolumeRestore> = async (ctx) => {
  const folder = checkFolder(ctx.payload.folder);
  requireRestic();
  const newVolume = ctx.payload.new_volume === true;
  // A new volume is made in a missing or empty folder: nothing there is replaced.
  if (newVolume && existsSync(folder) && (!statSync(folder).isDirectory() || readdirSync(folder).length)) {
    throw new Error(`the new volume's folder ${folder} exists on this machine and is not empty: a volume restored from a backup is made in a missing or empty folder`);
  }
  const started = Date.now();
  const tag = `${path.basename(folder)}-${randomBytes(4).toString('hex')}`;
  const scratch = path.join(path.dirname(folder), `.hangar-restore-${tag}`);
  const aside = path.join(path.dirname(folder), `.hangar-replaced-${tag}`);
  let movedAside = false;
  try {
    const res = await restoreReporting(ctx, String(ctx.payload.snapshot_id), scratch);
    if (res.code !== 0) throw new Error(`restic restore failed: ${said(res)}`);
    // restic restores a snapshot's absolute paths under the target: the volume's folder, or a new volume's the snapshot's own.
    const from = newVolume ? await snapshotFolder(ctx) : folder;
    const restored = path.join(scratch, from);
    if (!existsSync(restored)) throw new Error(`snapshot ${ctx.payload.snapshot_id} holds no folder ${from}`);
    mkdirSync(folder, { recursive: true });
    mkdirSync(aside);
    movedAside = true;
    for (const entry of readdirSync(folder)) renameSync(path.join(folder, entry), path.join(aside, entry));
    const entries = readdirSync(restored);
    for (const entry of entries) renameSync(path.join(restored, entry), path.join(folder, entry));
    rmSync(aside, { recursive: true, force: true });
    return { snapshot_id: String(ctx.payload.snapshot_id), entries: entries.length, duration_seconds: (Date.now() - started) / 1000 };
  } catch (err) {
    // Half swapped: the folder gets back what it held.
    if (movedAside && existsSync(aside)) {
      for (const entry of readdirSync(folder)) rmSync(path.join(folder, entry), { recursive: true, force: true });
      for (const entry of readdirSync(aside)) renameSync(path.join(aside, entry), path.join(folder, entry));
      rmSync(aside, { recursive: true, force: true });
    }
    throw err;
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
};

/**
 * Checks a local target's folder: made when missing (0700: it will hold an encrypted repository),
 * then a probe file written, read back and deleted. The error names the step that failed.
 */
export const checkBackupFolder: KindExecutor<typeof BackupFolderCheck> = async (ctx) => {
  const folder = checkFolder(ctx.payload.path);
  const step = <T>(what: string, act: () => T): T => {
    try {
      return act();
    } catch (err) {
      throw new Error(`${what} failed: ${(err as Error).message}`, { cause: err });
    }
  };
  step(`making the folder ${folder}`, () => mkdirSync(folder, { recursive: true, mode: 0o700 }));
  if (!statSync(folder).isDirectory()) throw new Error(`${folder} is not a folder`);
  const probe = path.join(folder, `.hangar-probe-${randomBytes(8).toString('hex')}`);
  const written = randomBytes(64);
  step(`writing the probe file ${probe}`, () => writeFileSync(probe, written, { mode: 0o600, flag: 'wx' }));
  let read: Buffer;
  try {
    read = step(`reading the probe file ${probe} back`, () => readFileSync(probe));
  } finally {
    step(`deleting the probe file ${probe}`, () => rmSync(probe));
  }
  if (!read.equals(written)) throw new Error(`reading the probe file ${probe} back gave other bytes than were written`);
  return { path: folder };
};

function parsedOr<T>(text: string, otherwise: T): T | unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return otherwise;
  }
}
