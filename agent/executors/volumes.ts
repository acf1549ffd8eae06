import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { onPath } from '../facts.js';
import { runCommand } from '../../core/process.js';
import type { Executor } from './types.js';

const EXPORTS_DIR = process.env.HANGAR_EXPORTS_DIR ?? '/etc/exports.d';
const exportsFile = (volumeId: string) => path.join(EXPORTS_DIR, `hangar-${volumeId}.exports`);

function checkFolder(folder: unknown): string {
  if (typeof folder !== 'string' || !path.isAbsolute(folder) || folder.split('/').includes('..')) throw new Error(`folder must be an absolute path without "..": ${JSON.stringify(folder)}`);
  return folder;
}

/**
 * Creates a volume's folder and, for an NFS volume, its export entry; `exportfs -ra` makes it live
 * where an NFS server runs. The result says whether the export is being served.
 */
export const prepareVolume: Executor = async ({ payload }) => {
  const folder = checkFolder(payload.folder);
  mkdirSync(folder, { recursive: true, mode: 0o777 });
  if (payload.type !== 'nfs') return { folder, export: null };
  const clients = String(payload.clients ?? '*');
  const file = exportsFile(String(payload.volume_id));
  mkdirSync(EXPORTS_DIR, { recursive: true });
  writeFileSync(file, `# hangar volume ${payload.volume_id} (${payload.name})\n${folder} ${clients}(rw,sync,no_subtree_check,no_root_squash)\n`);
  if (!onPath('exportfs')) return { folder, export: { file, served: false, reason: 'exportfs is not installed (apt-get install nfs-kernel-server)' } };
  const res = await runCommand('exportfs', ['-ra'], { timeoutMs: 60_000 });
  return { folder, export: { file, served: res.code === 0, reason: res.code === 0 ? null : res.stderr.trim().split('\n').pop() ?? `exportfs exited ${res.code}` } };
};

/** Removes an NFS volume's export entry; the folder and its data stay. */
export const releaseVolume: Executor = async ({ payload }) => {
  rmSync(exportsFile(String(payload.volume_id)), { force: true });
  if (onPath('exportfs')) await runCommand('exportfs', ['-ra'], { timeoutMs: 60_000 });
  return { released: true };
};
