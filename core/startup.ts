/**
 * The steps of this process's start, each the time at which it was done (ms since the process
 * began) and the CPU the process had used by then (ms, user + system): `hangar serve` logs both with
 * "hangar started" (`start_ms`, `start_cpu_ms`), so that a slow start says where it went, and a start
 * on a busy machine tells its own work (CPU) from waiting for a core (docs/performance.md, "Start-up,
 * step by step"). Recording one is two clock reads.
 */
const wall: Record<string, number> = {};
const cpu: Record<string, number> = {};

/** Records that `step` is done now (the first time only: a later call keeps the first figures). */
export function startStep(step: string): void {
  if (step in wall) return;
  wall[step] = Math.round(performance.now());
  const { user, system } = process.cpuUsage();
  cpu[step] = Math.round((user + system) / 1000);
}

/** The steps recorded so far, in the order they were done: wall-clock and CPU ms since the process began. */
export function startSteps(): { start_ms: Record<string, number>; start_cpu_ms: Record<string, number> } {
  return { start_ms: { ...wall }, start_cpu_ms: { ...cpu } };
}
