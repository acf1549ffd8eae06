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

/** Waits until `n` of `promises` have settled (in any way); answers the settled values so far. */
export async function settledCount<T>(promises: Array<Promise<T>>, n: number): Promise<Array<PromiseSettledResult<T>>> {
  const results: Array<PromiseSettledResult<T> | undefined> = promises.map(() => undefined);
  let settled = 0;
  await new Promise<void>((resolve) => {
    if (n <= 0) resolve();
    promises.forEach((p, i) => {
      p.then(
        (value) => (results[i] = { status: 'fulfilled', value }),
        (reason) => (results[i] = { status: 'rejected', reason }),
      ).finally(() => {
        if (++settled === n) resolve();
      });
    });
  });
  return results.filter((r): r is PromiseSettledResult<T> => r !== undefined);
}
