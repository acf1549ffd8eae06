import { onPath } from '../facts.js';
import { runCommand } from '../../core/process.js';
import type { KindExecutor } from './types.js';
import type { NfsClientInstall } from '../../core/tasks/host-kinds.js';

/**
 * The NFS packages a machine needs for hangar's volumes (Debian's): the client on every member of a
 * cluster (mount.nfs, which kubelets and Docker's NFS volumes mount with), the server on the node
 * that holds an NFS volume (exportfs, rpc.mountd, the kernel server).
 */
export const NFS_PACKAGES = {
  client: { command: 'mount.nfs', package: 'nfs-common' },
  server: { command: 'exportfs', package: 'nfs-kernel-server' },
} as const;

export interface NfsPackageState {
  package: string;
  present: boolean;
  /** Installed by this call. */
  installed: boolean;
  /** Why it is not present. */
  reason: string | null;
}

const APT_ENV = () => ({ ...process.env, DEBIAN_FRONTEND: 'noninteractive' });
/** Fail fast where the package mirror cannot be reached (a sealed network) rather than wait on it. */
const APT_OPTIONS = ['-o', 'Acquire::Retries=0', '-o', 'Acquire::http::Timeout=20', '-o', 'Acquire::https::Timeout=20'];
const lastLine = (text: string) => text.trim().split('\n').pop() ?? '';

/**
 * Installs the NFS client or server with apt-get unless its program is there already (a package
 * index without it is refreshed once, then the install tried again). Never throws: the answer says
 * what is missing and why.
 */
export async function ensureNfsPackage(role: keyof typeof NFS_PACKAGES): Promise<NfsPackageState> {
  const { command, package: pkg } = NFS_PACKAGES[role];
  if (onPath(command)) return { package: pkg, present: true, installed: false, reason: null };
  if (!onPath('apt-get')) return { package: pkg, present: false, installed: false, reason: `${command} is not installed and this machine has no apt-get: install ${pkg}` };
  const install = () => runCommand('apt-get', [...APT_OPTIONS, 'install', '-y', '-q', '--no-install-recommends', pkg], { env: APT_ENV(), timeoutMs: 600_000 });
  let res = await install();
  if (res.code !== 0 && /Unable to locate package|has no installation candidate/.test(res.stderr)) {
    const refresh = await runCommand('apt-get', [...APT_OPTIONS, 'update', '-q'], { env: APT_ENV(), timeoutMs: 300_000 });
    if (refresh.code !== 0) return { package: pkg, present: false, installed: false, reason: `installing ${pkg}: apt-get update failed: ${lastLine(refresh.stderr)}` };
    res = await install();
  }
  if (res.code !== 0) return { package: pkg, present: false, installed: false, reason: `installing ${pkg} failed: ${lastLine(res.stderr) || `apt-get exited ${res.code}`}` };
  if (!onPath(command)) return { package: pkg, present: false, installed: false, reason: `${pkg} was installed but ${command} is not on the agent's PATH` };
  return { package: pkg, present: true, installed: true, reason: null };
}

/** host.nfs-client: the NFS client on a cluster member an NFS volume is staged for, installed when missing (never asked of a cluster without NFS volumes: nfs-common brings rpcbind, port 111). */
export const ensureNfsClient: KindExecutor<typeof NfsClientInstall> = async () => ensureNfsPackage('client');
