import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { TestDialect } from '../../support/dialects.js';

/** The real CLI entry point. */
export const BIN = path.resolve('bin/hangar.mjs');

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

export interface CliOptions {
  env?: Record<string, string | undefined>;
  input?: string;
  cwd?: string;
  uid?: number;
  gid?: number;
  timeoutMs?: number;
}

/**
 * Runs `node bin/hangar.mjs …` as a subprocess, asynchronously (so a control plane running in this
 * process keeps answering), and collects its output.
 */
export function hangarCli(args: string[], options: CliOptions = {}): Promise<CliResult> {
  return runProcess(process.execPath, [BIN, ...args], options);
}

export function runProcess(command: string, args: string[], options: CliOptions = {}): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const env: Record<string, string> = {};
    for (const [k, v] of Object.entries({ ...process.env, ...options.env })) if (v !== undefined) env[k] = v;
    const input = options.input;
    const child = spawn(command, args, { env, cwd: options.cwd, uid: options.uid, gid: options.gid, stdio: [input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout!.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr!.on('data', (c: Buffer) => (stderr += c.toString()));
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`${command} ${args.join(' ')} did not finish in time\nstdout: ${stdout}\nstderr: ${stderr}`));
    }, options.timeoutMs ?? 30_000);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
    if (child.stdin) {
      // A child that exits without reading its input must not fail the test with EPIPE.
      child.stdin.on('error', () => undefined);
      child.stdin.end(input);
    }
  });
}

/** Temporary directories removed after the suite. */
export class TempDirs {
  private readonly dirs: string[] = [];
  make(prefix = 'hangar-runner-'): string {
    const dir = mkdtempSync(path.join(os.tmpdir(), prefix));
    this.dirs.push(dir);
    return dir;
  }
  cleanup(): void {
    for (const dir of this.dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
  }
}

/** Environment that points a CLI subprocess at one dialect's fresh storage (test configuration). */
export function storageEnv(dialect: TestDialect, storage = dialect.freshStorage()): Record<string, string | undefined> {
  const config = dialect.config(storage);
  return {
    NODE_ENV: 'test',
    HANGAR_DATA_DIR: storage.dataDir,
    HANGAR_DATABASE__URL: config.database.url ?? undefined,
    HANGAR_DATABASE__SCHEMA: storage.schema ?? undefined,
    HANGAR_SECRETS__MASTER_KEY: config.secrets.master_key ?? undefined,
  };
}

export async function waitFor<T>(probe: () => T | undefined | false, what: string, timeoutMs = 15_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = probe();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

export const waitForFile = (file: string) => waitFor(() => existsSync(file), file);

/**
 * Splits an ExecStart= line the way systemd.service(5) describes ("Command lines"): `%%` is a
 * literal `%` (other specifiers are refused here), words are separated by whitespace, double and
 * single quotes group, backslash escapes are C-style, then `$$` is a literal `$` and `$NAME` /
 * `${NAME}` expand from the environment.
 */
export function systemdSplit(line: string, env: Record<string, string> = {}): string[] {
  if (/%[^%]/.test(line.replace(/%%/g, ''))) throw new Error(`unexpected specifier in ${line}`);
  const text = line.replace(/%%/g, '%');
  const words: string[] = [];
  let i = 0;
  const escapes: Record<string, string> = { n: '\n', t: '\t', r: '\r', '\\': '\\', '"': '"', "'": "'", s: ' ' };
  while (i < text.length) {
    while (i < text.length && /\s/.test(text[i]!)) i++;
    if (i >= text.length) break;
    let word = '';
    while (i < text.length && !/\s/.test(text[i]!)) {
      const c = text[i]!;
      if (c === '"' || c === "'") {
        i++;
        while (i < text.length && text[i] !== c) {
          if (text[i] === '\\') {
            word += escapes[text[i + 1]!] ?? text[i + 1];
            i += 2;
          } else word += text[i++];
        }
        i++;
      } else if (c === '\\') {
        word += escapes[text[i + 1]!] ?? text[i + 1];
        i += 2;
      } else word += text[i++];
    }
    words.push(word);
  }
  return words.map((w) =>
    w.replace(/\$\$|\$\{(\w+)\}|\$(\w+)/g, (m, a?: string, b?: string) => (m === '$$' ? '$' : (env[(a ?? b)!] ?? ''))),
  );
}

/** Reads an EnvironmentFile= the way systemd does for the forms hangar writes (KEY="…" with \\-escapes). */
export function systemdEnvFile(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const line of text.split('\n')) {
    if (!line.trim() || /^\s*[#;]/.test(line)) continue;
    const eq = line.indexOf('=');
    const key = line.slice(0, eq).trim();
    let value = line.slice(eq + 1).trim();
    if (value.startsWith('"') && value.endsWith('"')) value = value.slice(1, -1).replace(/\\(["\\`$])/g, '$1');
    out[key] = value;
  }
  return out;
}

/** The value of `Key=` in a unit file. */
export function unitValue(unit: string, key: string): string {
  const line = unit.split('\n').find((l) => l.startsWith(`${key}=`));
  if (!line) throw new Error(`no ${key}= in unit:\n${unit}`);
  return line.slice(key.length + 1);
}
