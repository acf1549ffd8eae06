import { readFileSync } from 'node:fs';
import path from 'node:path';
import { serveControlPlane, type ControlPlane } from '../support/control-plane.js';
import type { TestDialect } from '../support/dialects.js';

/** Resident memory of a process (VmRSS), in MB. */
export function rssMb(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  return Number(/VmRSS:\s+(\d+) kB/.exec(status)![1]) / 1024;
}

/** `hangar serve` in a process of its own on the dialect (for what is measured in that process: its memory). */
export async function serveOwnProcess(dialect: TestDialect, name: string, env: Record<string, string>): Promise<ControlPlane> {
  let dataDir = '';
  const { schema } = dialect.freshStorage();
  const cp = await serveControlPlane({
    name,
    schema,
    caPem: () => readFileSync(path.join(dataDir, 'pki', 'ca.crt'), 'utf8'),
    env,
  });
  dataDir = cp.dataDir;
  return cp;
}

/**
 * Waits until `n` of `promises` have settled in a way `counts` accepts (by default any); answers
 * those settled results. Which ones settle first depends on the machine's load, not their order.
 */
export async function settledCount<T>(
  promises: Array<Promise<T>>,
  n: number,
  counts: (result: PromiseSettledResult<T>) => boolean = () => true,
): Promise<Array<PromiseSettledResult<T>>> {
  const results: Array<PromiseSettledResult<T>> = [];
  await new Promise<void>((resolve) => {
    if (n <= 0) resolve();
    for (const p of promises) {
      const note = (result: PromiseSettledResult<T>) => {
        if (!counts(result)) return;
        results.push(result);
        if (results.length === n) resolve();
      };
      p.then(
        (value) => note({ status: 'fulfilled', value }),
        (reason: unknown) => note({ status: 'rejected', reason }),
      );
    }
  });
  return results.slice(0, n);
}
