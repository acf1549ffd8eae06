import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { onPath } from '../facts.js';
import { ensureNfsPackage } from './nfs.js';
import { runCommand } from '../../core/process.js';
import type { KindExecutor } from './types.js';
import type { VolumePrepare, VolumeRelease } from '../../core/tasks/host-kinds.js';

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
 * Whether the NFS server serves `folder`: in its export table (`exportfs -v`) and, where showmount
 * is there, in what rpc.mountd answers (`showmount -e`). Null when it does; otherwise why not.
 */
async function notServed(folder: string): Promise<string | null> {
  const table = await runCommand('exportfs', ['-v'], { timeoutMs: 30_000 });
  const listed = (text: string) => text.split('\n').some((line) => line.trim().split(/\s+/)[0] === folder);
  if (table.code !== 0 || !listed(table.stdout)) return `the NFS server's export table (exportfs -v) does not list ${folder}`;
  if (!onPath('showmount')) return null;
  const shown = await runCommand('showmount', ['-e', '--no-headers', '127.0.0.1'], { timeoutMs: 30_000 });
  if (shown.code !== 0) return `the NFS server does not answer (showmount -e 127.0.0.1: ${shown.stderr.trim().split('\n').pop() || `exit ${shown.code}`}): is nfs-kernel-server running?`;
  return listed(shown.stdout) ? null : `the NFS server does not offer ${folder} (showmount -e 127.0.0.1)`;
}

/**
 * Creates a volume's folder (0755: root writes, others read) and, for an NFS volume, its export
 * entry for exactly the clients named; installs the NFS server (nfs-kernel-server) when it is
 * missing, and `exportfs -ra` makes the entry live. Run again when the clients change. The result
 * says whether the export is served: listed by the server (exportfs -v, showmount -e), not merely
 * written.
 */
export const prepareVolume: KindExecutor<typeof VolumePrepare> = async ({ payload, log }) => {
  const folder = checkFolder(payload.folder);
  const clients = checkClients(payload.clients);
  mkdirSync(folder, { recursive: true, mode: 0o755 });
  if (payload.type !== 'nfs') return { folder, export: null };
  const file = exportsFile(String(payload.volume_id));
  mkdirSync(EXPORTS_DIR, { recursive: true });
  writeFileSync(file, exportEntry(payload, folder, clients));
  const server = await ensureNfsPackage('server');
  if (server.installed) log.info({ package: server.package }, 'installed the NFS server for a volume');
  if (!server.present) return { folder, export: { file, served: false, reason: server.reason } };
  const res = await runCommand('exportfs', ['-ra'], { timeoutMs: 60_000 });
  if (res.code !== 0) return { folder, export: { file, served: false, reason: res.stderr.trim().split('\n').pop() ?? `exportfs exited ${res.code}` } };
  if (!clients.length) return { folder, export: { file, served: false, reason: NO_CLIENTS } };
  const why = await notServed(folder);
  return { folder, export: { file, served: !why, reason: why } };
};

/** Removes an NFS volume's export entry; the folder and its data stay. */
export const releaseVolume: KindExecutor<typeof VolumeRelease> = async ({ payload }) => {
  rmSync(exportsFile(String(payload.volume_id)), { force: true });
  if (onPath('exportfs')) await runCommand('exportfs', ['-ra'], { timeoutMs: 60_000 });
  return { released: true };
};
