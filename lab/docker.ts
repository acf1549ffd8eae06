/**
 * The machine lab talks to dockerd through the docker CLI (no SDK): every call is one
 * `docker …` process, so what the lab does can be replayed by hand from its log.
 */
import { spawn, spawnSync } from 'node:child_process';

export interface RunResult {
  code: number;
  stdout: string;
  stderr: string;
}

export interface RunOptions {
  /** Written to the process's stdin. */
  input?: string;
  /** Kills the process after this long (the result then has code 124). Default: none. */
  timeoutMs?: number;
  env?: NodeJS.ProcessEnv;
  /** Called with each complete stdout line as it arrives (e.g. build progress). */
  onLine?: (line: string) => void;
}

/** Runs a program and collects its output; never throws for a non-zero exit. */
export function run(file: string, args: string[], options: RunOptions = {}): Promise<RunResult> {
  return new Promise((resolve) => {
    const child = spawn(file, args, { env: options.env ?? process.env, stdio: ['pipe', 'pipe', 'pipe'] });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    let pending = '';
    let timedOut = false;
    const timer = options.timeoutMs
      ? setTimeout(() => {
          timedOut = true;
          child.kill('SIGKILL');
        }, options.timeoutMs)
      : undefined;
    child.stdout.on('data', (chunk: Buffer) => {
      out.push(chunk);
      if (options.onLine) {
        pending += chunk.toString('utf8');
        const lines = pending.split('\n');
        pending = lines.pop() ?? '';
        for (const line of lines) options.onLine(line);
      }
    });
    child.stderr.on('data', (chunk: Buffer) => err.push(chunk));
    child.on('error', (error) => {
      if (timer) clearTimeout(timer);
      resolve({ code: 127, stdout: '', stderr: `${file}: ${error.message}` });
    });
    child.on('close', (code, signal) => {
      if (timer) clearTimeout(timer);
      if (options.onLine && pending) options.onLine(pending);
      const stderr = Buffer.concat(err).toString('utf8');
      resolve({
        code: timedOut ? 124 : (code ?? (signal ? 128 : 1)),
        stdout: Buffer.concat(out).toString('utf8'),
        stderr: timedOut ? `${stderr}${stderr ? '\n' : ''}timed out after ${options.timeoutMs} ms` : stderr,
      });
    });
    child.stdin.on('error', () => undefined);
    child.stdin.end(options.input ?? '');
  });
}

export class DockerError extends Error {
  constructor(
    readonly args: string[],
    readonly result: RunResult,
  ) {
    super(`docker ${args.join(' ')} failed (exit code ${result.code}): ${(result.stderr || result.stdout).trim()}`);
    this.name = 'DockerError';
  }
}

/** `docker …`, whatever its exit code. */
export function docker(args: string[], options: RunOptions = {}): Promise<RunResult> {
  return run('docker', args, options);
}

/** `docker …`; throws a DockerError (with docker's message) when it fails; resolves to stdout, trimmed. */
export async function dockerOk(args: string[], options: RunOptions = {}): Promise<string> {
  const result = await docker(args, options);
  if (result.code !== 0) throw new DockerError(args, result);
  return result.stdout.trim();
}

/** `docker …` synchronously, for cleanup on process exit (where nothing asynchronous runs). */
export function dockerSync(args: string[]): RunResult {
  const result = spawnSync('docker', args, { encoding: 'utf8', timeout: 60_000 });
  return { code: result.status ?? 1, stdout: result.stdout ?? '', stderr: result.stderr ?? String(result.error ?? '') };
}

let availability: Promise<boolean> | undefined;

/** Whether dockerd answers (`docker info`), asked once per process. */
export function dockerAvailable(): Promise<boolean> {
  availability ??= docker(['info', '--format', '{{.ServerVersion}}'], { timeoutMs: 15_000 }).then((r) => r.code === 0);
  return availability;
}
