import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, renameSync, rmSync, statSync } from 'node:fs';
import path from 'node:path';
import { onPath } from '../facts.js';
import { runCommand, type RunResult } from '../../core/process.js';
import type { Executor, ExecutorContext } from './types.js';

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
    AWS_ACCESS_KEY_ID: String(p.access_key_id),
    AWS_SECRET_ACCESS_KEY: String(p.secret_access_key),
    AWS_DEFAULT_REGION: String(p.region),
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

async function restic(ctx: ExecutorContext, args: string[]): Promise<RunResult> {
  return runCommand(requireRestic(), ['-o', `s3.region=${String(ctx.payload.region)}`, ...args], { env: resticEnv(ctx), timeoutMs: RESTIC_TIMEOUT_MS });
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
export const backupVolume: Executor = async (ctx) => {
  const folder = checkFolder(ctx.payload.folder);
  requireRestic();
  if (!existsSync(folder) || !statSync(folder).isDirectory()) throw new Error(`the volume's folder ${folder} does not exist on this machine`);
  await openRepository(ctx);
  const res = await restic(ctx, ['backup', '--json', '--tag', `hangar-volume=${ctx.payload.volume_id}`, '--tag', `hangar-backup=${ctx.payload.backup_id}`, folder]);
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
  return {
    snapshot_id: summary.snapshot_id,
    ...(forgotten ? { forgotten } : {}),
    ...(retentionError ? { retention_error: retentionError } : {}),
    files: Number(summary.total_files_processed ?? 0),
    bytes: Number(summary.total_bytes_processed ?? 0),
    bytes_added: Number(summary.data_added ?? 0),
    duration_seconds: Number(summary.total_duration ?? 0),
    restic_version: await resticVersion(),
  };
};

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
export const restoreVolume: Executor = async (ctx) => {
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
    const res = await restic(ctx, ['restore', String(ctx.payload.snapshot_id), '--target', scratch]);
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
