/**
 * The steps of this process's start, each the time (ms since the process began) at which it was
 * done: `hangar serve` logs them with "hangar started" (`start_ms`), so that a slow start says where
 * it went (docs/performance.md, "Start-up, step by step"). Recording one is a clock read.
 */
const steps: Record<string, number> = {};

/** Records that `step` is done now (the first time only: a later call keeps the first figure). */
export function startStep(step: string): void {
  steps[step] ??= Math.round(performance.now());
}

/** The steps recorded so far, in the order they were done. */
export function startSteps(): Record<string, number> {
  return { ...steps };
}
