// What a benchmark reads of a server's processes from /proc: its CPU time and memory, its workers'
// (api.workers) included.
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';

const CLOCK_TICKS = Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout.trim()) || 100;

/** A process and its descendants (hangar's workers). */
export function processTree(pid: number): number[] {
  const children = readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim();
  return [pid, ...(children ? children.split(/\s+/).map(Number).flatMap(processTree) : [])];
}

/** CPU seconds a process used so far, its descendants' included. */
export function processCpu(pid: number): number {
  let ticks = 0;
  for (const p of processTree(pid)) {
    const fields = readFileSync(`/proc/${p}/stat`, 'utf8').split(') ')[1]!.split(' ');
    ticks += Number(fields[11]) + Number(fields[12]);
  }
  return ticks / CLOCK_TICKS;
}

/** A process's resident memory, its descendants' added (pages they share counted in each). */
export function rssMb(pid: number): number {
  let kb = 0;
  for (const p of processTree(pid)) kb += Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${p}/status`, 'utf8'))![1]);
  return kb / 1024;
}

/**
 * The resident part of a process's malloc main arena (the `[heap]` mapping), its descendants' added:
 * what glibc keeps of freed blocks that V8 no longer accounts for (docs/performance.md, "RSS after the whole duel").
 */
export function mallocArenaMb(pid: number): number {
  let kb = 0;
  for (const p of processTree(pid)) {
    const heap = /\[heap\]\n(?:.*\n)*?Rss:\s+(\d+) kB/.exec(readFileSync(`/proc/${p}/smaps`, 'utf8'));
    kb += heap ? Number(heap[1]) : 0;
  }
  return kb / 1024;
}
