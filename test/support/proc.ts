import { readdirSync, readFileSync, readlinkSync } from 'node:fs';

/** A process's children (Linux /proc): those of each of its threads. */
export function childrenOf(pid: number): number[] {
  try {
    return readdirSync(`/proc/${pid}/task`).flatMap((task) => {
      const children = readFileSync(`/proc/${pid}/task/${task}/children`, 'utf8').trim();
      return children ? children.split(/\s+/).map(Number) : [];
    });
  } catch {
    return []; // gone meanwhile
  }
}

/**
 * The worker processes `hangar serve` forked (api.workers): its children that carry HANGAR_WORKER
 * in their environment, not a helper such as tsx's esbuild service when it runs from sources.
 */
export function workersOf(pid: number): number[] {
  return childrenOf(pid).filter((child) => {
    try {
      return readFileSync(`/proc/${child}/environ`, 'utf8').split('\0').some((entry) => entry.startsWith('HANGAR_WORKER='));
    } catch {
      return false; // gone meanwhile
    }
  });
}

/** A process and its descendants, the process first. */
export function processTree(pid: number): number[] {
  const all = [pid];
  for (let i = 0; i < all.length; i++) all.push(...childrenOf(all[i]!));
  return all;
}

/** The socket inodes a process holds open. */
function socketInodes(pid: number): Set<string> {
  const inodes = new Set<string>();
  try {
    for (const fd of readdirSync(`/proc/${pid}/fd`)) {
      try {
        const target = readlinkSync(`/proc/${pid}/fd/${fd}`);
        if (target.startsWith('socket:[')) inodes.add(target.slice(8, -1));
      } catch {
        // closed meanwhile
      }
    }
  } catch {
    // gone meanwhile
  }
  return inodes;
}

/** Established IPv4 TCP connections: local port, remote port, socket inode. */
function tcpConnections(): Array<{ local: number; remote: number; inode: string }> {
  return readFileSync('/proc/net/tcp', 'utf8')
    .split('\n')
    .slice(1)
    .map((line) => line.trim().split(/\s+/))
    .filter((f) => f[3] === '01')
    .map((f) => ({ local: parseInt(f[1]!.split(':')[1]!, 16), remote: parseInt(f[2]!.split(':')[1]!, 16), inode: f[9]! }));
}

/** How many established TCP connections the process (or one of its descendants) has to `remotePort`. */
export function connectionsTo(pid: number, remotePort: number): number {
  const held = new Set(processTree(pid).flatMap((p) => [...socketInodes(p)]));
  return tcpConnections().filter((c) => c.remote === remotePort && held.has(c.inode)).length;
}

/** Which of `candidates` holds the server end of the connection from `clientPort` to `serverPort`. */
export function serverProcessOf(serverPort: number, clientPort: number, candidates: number[]): number | null {
  const entry = tcpConnections().find((c) => c.local === serverPort && c.remote === clientPort);
  if (!entry) return null;
  return candidates.find((pid) => socketInodes(pid).has(entry.inode)) ?? null;
}
