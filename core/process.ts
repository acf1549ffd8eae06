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

/** Runs a command without a shell; never throws for a non-zero exit, only for a missing command. */
export function runCommand(command: string, args: string[], options: { timeoutMs?: number; env?: NodeJS.ProcessEnv; input?: string } = {}): Promise<RunResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { env: options.env ?? process.env, stdio: [options.input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'] });
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
    child.stdout!.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr!.on('data', (c: Buffer) => (stderr += c.toString()));
    child.on('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr, timedOut });
    });
    child.stdin?.end(options.input);
  });
}
