import { existsSync, readdirSync, readFileSync, statfsSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { versionInfo } from '../core/version.js';
import { runtimeFacts } from './executors/orchestrator.js';

const ARCH: Record<string, string> = { x64: 'amd64', arm64: 'arm64', arm: 'arm' };

/** Whether an executable is on PATH (no child process needed). */
export function onPath(command: string): string | null {
  for (const dir of (process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin').split(':')) {
    const file = path.join(dir, command);
    if (existsSync(file)) return file;
  }
  return null;
}

function osRelease(): { id?: string; version?: string; pretty_name?: string } {
  try {
    const text = readFileSync('/etc/os-release', 'utf8');
    const get = (key: string) => new RegExp(`^${key}="?([^"\\n]*)"?$`, 'm').exec(text)?.[1];
    return { id: get('ID'), version: get('VERSION_ID'), pretty_name: get('PRETTY_NAME') };
  } catch {
    return { id: os.platform() };
  }
}

function gpus(): { index: number; name: string }[] {
  const dir = '/proc/driver/nvidia/gpus';
  if (!existsSync(dir)) return [];
  return readdirSync(dir).map((bus, index) => {
    let name = 'NVIDIA GPU';
    try {
      name = /^Model:\s*(.+)$/m.exec(readFileSync(path.join(dir, bus, 'information'), 'utf8'))?.[1]?.trim() ?? name;
    } catch {
      /* keep the generic name */
    }
    return { index, name };
  });
}

export interface MachineState {
  pendingUpdates: number | null;
}

/** Filesystems that hold no data of the machine's own: left out of the per-mount disk use (except at /: a container's root is an overlay). */
const VIRTUAL_FS = new Set(['proc', 'sysfs', 'tmpfs', 'devtmpfs', 'devpts', 'cgroup', 'cgroup2', 'securityfs', 'pstore', 'bpf', 'debugfs', 'tracefs', 'mqueue', 'hugetlbfs', 'configfs', 'fusectl', 'autofs', 'binfmt_misc', 'nsfs', 'rpc_pipefs', 'ramfs', 'squashfs', 'overlay', 'efivarfs', 'selinuxfs']);

/**
 * Space of each mounted filesystem (one entry per device, at most 32), for the disk alert rule:
 * from /proc/mounts; none where it cannot be read (older control planes ignore the field).
 */
export function mountedDisks(mounts = '/proc/mounts'): Array<{ mount: string; fs_type: string; total_bytes: number; free_bytes: number }> {
  let text: string;
  try {
    text = readFileSync(mounts, 'utf8');
  } catch {
    return [];
  }
  const seen = new Set<string>();
  const disks: Array<{ mount: string; fs_type: string; total_bytes: number; free_bytes: number }> = [];
  for (const line of text.split('\n')) {
    const [device, rawMount, fsType] = line.split(' ');
    if (!device || !rawMount || !fsType || (rawMount !== '/' && VIRTUAL_FS.has(fsType)) || seen.has(device) || disks.length >= 32) continue;
    // /proc/mounts escapes spaces and the like as octal (\040).
    const mount = rawMount.replace(/\\([0-7]{3})/g, (_m, o: string) => String.fromCharCode(Number.parseInt(o, 8)));
    try {
      const s = statfsSync(mount);
      if (!s.blocks) continue;
      seen.add(device);
      disks.push({ mount, fs_type: fsType, total_bytes: s.blocks * s.bsize, free_bytes: s.bavail * s.bsize });
    } catch {
      /* unreadable mount: left out */
    }
  }
  return disks;
}

/** Everything a heartbeat tells the control plane about this machine. */
export function collectFacts(state: MachineState) {
  let disk: { disk_total_bytes?: number; disk_free_bytes?: number } = {};
  try {
    const s = statfsSync('/');
    disk = { disk_total_bytes: s.blocks * s.bsize, disk_free_bytes: s.bavail * s.bsize };
  } catch {
    /* statfs unsupported: leave disk out */
  }
  const addresses = Object.entries(os.networkInterfaces()).flatMap(([name, list]) =>
    (list ?? []).filter((a) => !a.internal).map((a) => ({ interface: name, address: a.address, family: a.family })),
  );
  return {
    hostname: os.hostname(),
    architecture: ARCH[os.arch()] ?? os.arch(),
    os: osRelease(),
    kernel: os.release(),
    agent_version: versionInfo.version,
    resources: {
      cpus: os.cpus().length,
      load_1m: os.loadavg()[0],
      memory_total_bytes: os.totalmem(),
      memory_free_bytes: os.freemem(),
      ...disk,
      disks: mountedDisks(),
    },
    addresses,
    // What each orchestrator driver of this agent says of its runtime here (docker, k3s…).
    ...runtimeFacts(),
    wireguard: { present: Boolean(onPath('wg')) },
    // Volume backups run restic (Debian's package): a node without it is refused them.
    restic: { present: Boolean(onPath('restic')) },
    // NFS volumes: the client a cluster member mounts them with, the server of the node that holds one (Debian's nfs-common, nfs-kernel-server).
    nfs: { client: Boolean(onPath('mount.nfs')), server: Boolean(onPath('exportfs')) },
    pending_updates: state.pendingUpdates,
    reboot_required: existsSync('/var/run/reboot-required'),
    gpus: gpus(),
  };
}
