/**
 * Runs a command on a lab machine over SSH: with the `ssh2` package (what drivers/ssh uses) by
 * default, or with the system's OpenSSH client (`ssh`, plus `sshpass` for passwords) when
 * HANGAR_LAB_SSH_CLIENT=openssh — the commands `npm run lab ssh` prints for humans.
 *
 * Both report the same way: a failed login or an unreachable host is code 255 with the reason
 * in stderr, as the ssh command does.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client, type ClientChannel } from 'ssh2';
import { run, type RunResult } from '../../../lab/docker.js';
import type { SshCredentials } from './lab.js';

export type SshClientName = 'ssh2' | 'openssh';

export interface SshExecOptions {
  /** Gives up (code 255) after this long, connection included. Default 30 s. */
  timeoutMs?: number;
}

/** Which client sshExec uses: HANGAR_LAB_SSH_CLIENT=openssh picks the system's, anything else ssh2. */
export function sshClientName(): SshClientName {
  return process.env.HANGAR_LAB_SSH_CLIENT === 'openssh' ? 'openssh' : 'ssh2';
}

/** Runs `command` as credentials.username on credentials.host; resolves with its exit code and output. */
export async function sshExec(credentials: SshCredentials, command: string, options: SshExecOptions = {}): Promise<RunResult> {
  return sshClientName() === 'ssh2' ? ssh2Exec(credentials, command, options) : opensshExec(credentials, command, options);
}

function ssh2Exec(credentials: SshCredentials, command: string, options: SshExecOptions): Promise<RunResult> {
  const timeoutMs = options.timeoutMs ?? 30_000;
  return new Promise<RunResult>((resolve) => {
    const conn = new Client();
    let settled = false;
    const stdout: Buffer[] = [];
    const stderr: Buffer[] = [];
    const finish = (result: RunResult): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      conn.end();
      resolve(result);
    };
    const timer = setTimeout(() => finish({ code: 255, stdout: '', stderr: `ssh: timed out after ${timeoutMs} ms` }), timeoutMs);
    conn.on('ready', () => {
      conn.exec(command, (error: Error | undefined, stream: ClientChannel) => {
        if (error) return finish({ code: 255, stdout: '', stderr: `ssh: ${error.message}` });
        stream.on('data', (chunk: Buffer) => stdout.push(chunk));
        stream.stderr.on('data', (chunk: Buffer) => stderr.push(chunk));
        stream.on('close', (code: number | null) => {
          finish({ code: code ?? 255, stdout: Buffer.concat(stdout).toString('utf8'), stderr: Buffer.concat(stderr).toString('utf8') });
        });
      });
    });
    conn.on('error', (error: Error & { level?: string }) => {
      const reason = error.level === 'client-authentication' ? `Permission denied (${error.message})` : error.message;
      finish({ code: 255, stdout: '', stderr: `ssh: ${credentials.username}@${credentials.host}: ${reason}` });
    });
    conn.connect({
      host: credentials.host,
      port: credentials.port,
      username: credentials.username,
      ...(credentials.privateKey ? { privateKey: credentials.privateKey } : {}),
      ...(credentials.password ? { password: credentials.password } : {}),
      tryKeyboard: false,
      readyTimeout: timeoutMs,
      // Lab machines make their host keys at first start; there is nothing to pin.
      hostVerifier: () => true,
    });
  });
}

async function opensshExec(credentials: SshCredentials, command: string, options: SshExecOptions): Promise<RunResult> {
  const timeoutMs = options.timeoutMs ?? 30_000;
  const common = [
    '-F', '/dev/null',
    '-o', 'StrictHostKeyChecking=no',
    '-o', 'UserKnownHostsFile=/dev/null',
    '-o', 'LogLevel=ERROR',
    '-o', `ConnectTimeout=${Math.max(1, Math.ceil(timeoutMs / 1000))}`,
    '-o', 'IdentitiesOnly=yes',
    '-o', 'IdentityAgent=none',
    '-o', 'KbdInteractiveAuthentication=no',
    '-p', String(credentials.port),
  ];
  const target = `${credentials.username}@${credentials.host}`;
  let tempDir: string | undefined;
  try {
    if (credentials.privateKey || credentials.privateKeyPath) {
      let keyPath = credentials.privateKeyPath;
      if (!keyPath) {
        tempDir = mkdtempSync(join(tmpdir(), 'hangar-lab-ssh-'));
        keyPath = join(tempDir, 'key');
        writeFileSync(keyPath, credentials.privateKey ?? '', { mode: 0o600 });
      }
      const args = [...common, '-o', 'BatchMode=yes', '-o', 'PreferredAuthentications=publickey', '-o', 'PasswordAuthentication=no', '-i', keyPath, target, command];
      return await run('ssh', args, { timeoutMs: timeoutMs + 5_000 }).then(timeoutAs255);
    }
    if (credentials.password) {
      const args = ['-e', 'ssh', ...common, '-o', 'PreferredAuthentications=password', '-o', 'PubkeyAuthentication=no', '-o', 'NumberOfPasswordPrompts=1', target, command];
      const result = await run('sshpass', args, { timeoutMs: timeoutMs + 5_000, env: { ...process.env, SSHPASS: credentials.password } });
      if (result.code === 127 && /ENOENT/.test(result.stderr)) throw new Error('sshpass is needed for password logins with the system ssh (apt-get install -y sshpass), or install ssh2');
      // sshpass exits 5 for a refused password (its own code; otherwise it passes ssh's on, so a
      // remote command's own exit code 5 would read as a refusal too: avoid 5 in lab commands).
      if (result.code === 5) return { ...result, code: 255, stderr: `${result.stderr}ssh: ${target}: Permission denied (password refused)\n` };
      return timeoutAs255(result);
    }
    throw new Error(`no key and no password for ${target}`);
  } finally {
    if (tempDir) rmSync(tempDir, { recursive: true, force: true });
  }
}

function timeoutAs255(result: RunResult): RunResult {
  return result.code === 124 ? { ...result, code: 255 } : result;
}
