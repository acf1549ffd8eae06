import type { ChildProcess } from 'node:child_process';

/**
 * The first line a child process writes (stdout or stderr) that matches `pattern`; rejects with
 * everything it wrote when it exits first or when `timeoutMs` passes.
 */
export function waitForLine(child: ChildProcess, pattern: RegExp, timeoutMs = 20_000): Promise<string> {
  return new Promise((resolve, reject) => {
    let seen = '';
    const timer = setTimeout(() => reject(new Error(`no line matching ${pattern} within ${timeoutMs} ms in: ${seen}`)), timeoutMs);
    const onData = (chunk: Buffer) => {
      seen += chunk.toString();
      const line = seen.split('\n').find((l) => pattern.test(l));
      if (line) {
        clearTimeout(timer);
        resolve(line);
      }
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', onData);
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`exited with ${code} before ${pattern}: ${seen}`));
    });
  });
}

/** The `hangar started` log line of `hangar serve`, parsed (its urls, plugins, running_from…). */
export async function startedLine(child: ChildProcess, timeoutMs = 30_000): Promise<Record<string, any>> {
  return JSON.parse(await waitForLine(child, /"hangar started"/, timeoutMs)) as Record<string, any>;
}
