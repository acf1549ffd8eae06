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

const NFS_CLIENT = /^[A-Za-z0-9.:*/_-]{1,255}$/;

const NO_CLIENTS = 'no member of its clusters to export it to yet';

/**
 * The export options of every client. `no_root_squash`: containers write as root by default (MinIO's
 * image, most others), and with root squashed to nobody the folder would have to be world-writable;
 * the export names the volume's cluster members only, so root stays root on those machines alone.
 */
const EXPORT_OPTIONS = 'rw,sync,no_subtree_check,no_root_squash';

function checkClients(clients: unknown): string[] {
  if (clients === undefined) return [];
  if (!Array.isArray(clients) || !clients.every((c) => typeof c === 'string' && NFS_CLIENT.test(c))) {
    throw new Error(`clients must be a list of addresses, networks or host names: ${JSON.stringify(clients)}`);
  }
  return [...new Set(clients as string[])];
}

/** The export entry of a volume: its folder for each client, or no entry at all while there is none. */
export function exportEntry(payload: Record<string, unknown>, folder: string, clients: string[]): string {
  const head = `# hangar volume ${payload.volume_id} (${payload.name})\n`;
  if (!clients.length) return `${head}# not exported: ${NO_CLIENTS}\n`;
  return `${head}${folder} ${clients.map((c) => `${c}(${EXPORT_OPTIONS})`).join(' ')}\n`;
}

/**
 * Creates a volume's folder (0755: root writes, others read) and, for an NFS volume, its export
 * entry for exactly the clients named; `exportfs -ra` makes it live where an NFS server runs. Run
 * again when the clients change. The result says whether the export is being served.
 */
export const prepareVolume: Executor = async ({ payload }) => {
  const folder = checkFolder(payload.folder);
  const clients = checkClients(payload.clients);
  mkdirSync(folder, { recursive: true, mode: 0o755 });
  if (payload.type !== 'nfs') return { folder, export: null };
  const file = exportsFile(String(payload.volume_id));
  mkdirSync(EXPORTS_DIR, { recursive: true });
  writeFileSync(file, exportEntry(payload, folder, clients));
  if (!onPath('exportfs')) return { folder, export: { file, served: false, reason: 'exportfs is not installed (apt-get install nfs-kernel-server)' } };
  const res = await runCommand('exportfs', ['-ra'], { timeoutMs: 60_000 });
  if (res.code !== 0) return { folder, export: { file, served: false, reason: res.stderr.trim().split('\n').pop() ?? `exportfs exited ${res.code}` } };
  return { folder, export: { file, served: clients.length > 0, reason: clients.length ? null : NO_CLIENTS } };
};

/** Removes an NFS volume's export entry; the folder and its data stay. */
export const releaseVolume: Executor = async ({ payload }) => {
  rmSync(exportsFile(String(payload.volume_id)), { force: true });
  if (onPath('exportfs')) await runCommand('exportfs', ['-ra'], { timeoutMs: 60_000 });
  return { released: true };
};
