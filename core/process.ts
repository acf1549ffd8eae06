/** Child processes without a shell, shared by the agent's executors and the drivers it runs. */
import { spawn } from 'node:child_process';

export interface RunResult {
  code: number | null;
  stdout: string;
  stderr: string;
  /** The command was killed at `timeoutMs`. */
  timedOut: boolean;
}

/** Starts a long-running program in the background, detached from the agent (it outlives an agent restart). */
export function startDetached(command: string, args: string[], env: NodeJS.ProcessEnv = {}): void {
  const child = spawn(command, args, { stdio: 'ignore', detached: true, env: { ...process.env, ...env } });
  child.on('error', () => undefined);
  child.unref();
}

/**
 * Runs a command without a shell; never throws for a non-zero exit, only for a missing command.
 * `onStdoutLine` hears each line of standard output as it comes (restic's status lines); a line it
 * answers `false` for is not kept in `stdout`. `onSpawn` is told the child's process id (a restore
 * reads what it has written so far from /proc).
 */
export function runCommand(
  command: string,
  args: string[],
  options: { timeoutMs?: number; env?: NodeJS.ProcessEnv; input?: string; onStdoutLine?: (line: string) => boolean | void; onSpawn?: (pid: number) => void } = {},
): Promise<RunResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { env: options.env ?? process.env, stdio: [options.input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'] });
    if (child.pid !== undefined) options.onSpawn?.(child.pid);
    // A command that exits without reading its input must not take the agent down with EPIPE.
    child.stdin?.on('error', () => undefined);
    let stdout = '';
    let stderr = '';
    let timedOut = false;
    const timer = options.timeoutMs
      ? setTimeout(() => {
          timedOut = true;
          child.kill('SIGKILL');
        }, options.timeoutMs)
      : undefined;
    let partial = '';
    const hear = options.onStdoutLine;
    child.stdout!.on('data', (c: Buffer) => {
      if (!hear) return void (stdout += c.toString());
      const lines = (partial + c.toString()).split('\n');
      partial = lines.pop()!;
      for (const line of lines) if (hear(line) !== false) stdout += `${line}\n`;
    });
    child.stderr!.on('data', (c: Buffer) => (stderr += c.toString()));
    child.on('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    child.on('close', (code) => {
      clearTimeout(timer);
      if (partial && (!hear || hear(partial) !== false)) stdout += partial;
      resolve({ code, stdout, stderr, timedOut });
    });
    child.stdin?.end(options.input);
  });
}
