import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Client, ConnectConfig, ClientChannel } from 'ssh2';
import { defineDriver } from '../../core/plugin.js';
import { shellQuote, SshError, type ExecOptions, type ExecResult, type OpenOptions, type SshDriver, type SshSession, type SshTarget } from './api.js';

function fingerprint(key: Buffer): string {
  return `SHA256:${createHash('sha256').update(key).digest('base64').replace(/=+$/, '')}`;
}

/** Credentials to try when none were given: the ssh-agent, then ~/.ssh/id_*. */
function defaultCredentials(): Pick<ConnectConfig, 'agent' | 'privateKey'> {
  if (process.env.SSH_AUTH_SOCK) return { agent: process.env.SSH_AUTH_SOCK };
  for (const name of ['id_ed25519', 'id_ecdsa', 'id_rsa']) {
    const file = path.join(os.homedir(), '.ssh', name);
    if (existsSync(file)) return { privateKey: readFileSync(file) };
  }
  return {};
}

function classify(err: Error & { level?: string; code?: string }, target: string): SshError {
  if (err instanceof SshError) return err;
  if (err.level === 'client-authentication') return new SshError('auth', `authentication refused by ${target}: check the user, key or password`);
  if (err.level === 'client-timeout' || /timed out/i.test(err.message)) return new SshError('timeout', `${target} did not answer in time`);
  if (['ECONNREFUSED', 'EHOSTUNREACH', 'ENETUNREACH', 'ETIMEDOUT', 'ENOTFOUND', 'EAI_AGAIN'].includes(err.code ?? '')) {
    return new SshError('connect', `cannot reach ${target}: ${err.code}`);
  }
  return new SshError('connect', `SSH to ${target} failed: ${err.message}`);
}

/** One SSH connection over ssh2 (the contract, api.ts `SshSession`, says what it offers). */
class Ssh2Session implements SshSession {
  private constructor(
    private readonly client: Client,
    readonly target: Required<Pick<SshTarget, 'host' | 'port' | 'username'>> & { password?: string },
    /** The local address this connection leaves from: the address the machine can reach us on. */
    readonly localAddress: string,
    readonly hostKeyFingerprint: string,
  ) {}

  static async open(target: SshTarget, options: OpenOptions): Promise<SshSession> {
    const host = target.host;
    const port = target.port ?? 22;
    const username = target.username ?? 'root';
    const where = `${username}@${host}:${port}`;
    const stored = await options.hostKeys.get(host, port);
    const recorded = options.pinnedHostKey ?? stored;
    let presented = '';
    // ssh2 (its crypto and protocol modules) loads with the first connection, not with the control plane.
    const { Client: SshClient } = await import('ssh2');
    const client = new SshClient();
    const credentials: Partial<ConnectConfig> = target.privateKey || target.password ? { privateKey: target.privateKey, password: target.password } : defaultCredentials();
    // The key first: a password goes only to a host that refused the key (ssh2's own order offers
    // the password first).
    const methods = [...(credentials.privateKey ? ['publickey'] : []), ...(credentials.agent ? ['agent'] : []), ...(target.password ? ['password', 'keyboard-interactive'] : [])];
    await new Promise<void>((resolve, reject) => {
      client.once('ready', () => resolve());
      // Every error, not only the first: ssh2 may emit a second (the socket lost after a failed
      // handshake), which with no listener left would be thrown out of the process.
      client.on('error', (err) => reject(classify(err, where)));
      client.connect({
        host,
        port,
        username,
        ...credentials,
        readyTimeout: options.timeoutMs ?? 20_000,
        keepaliveInterval: 15_000,
        tryKeyboard: Boolean(target.password),
        ...(methods.length ? { authHandler: methods as ConnectConfig['authHandler'] } : {}),
        hostVerifier: (key: Buffer) => {
          presented = fingerprint(key);
          if (!recorded && options.requireKnownHostKey) {
            reject(
              new SshError(
                'host-key',
                `no host key is recorded for ${host}:${port} (it presented ${presented}); no credentials were offered — if that is the machine's key (ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub on it), pass it as ssh_host_key`,
              ),
            );
            return false;
          }
          if (!recorded || recorded === presented || options.acceptChangedHostKey) return true;
          reject(
            new SshError('host-key', `the host key of ${host}:${port} changed (recorded ${recorded}, presented ${presented}); refusing — re-deploy with an explicit host-key override if the machine was reinstalled`),
          );
          return false;
        },
      });
      if (target.password) {
        client.on('keyboard-interactive', (_name, _instructions, _lang, prompts, finish) => finish(prompts.map(() => target.password!)));
      }
    }).catch((err) => {
      client.end();
      throw err;
    });
    // Pinned from now on: the first key seen, a key given explicitly, or an accepted change.
    if (stored !== presented) await options.hostKeys.set(host, port, presented);
    const local = (client as unknown as { _sock?: { localAddress?: string } })._sock?.localAddress ?? '';
    return new Ssh2Session(client, { host, port, username, password: target.password }, local.replace(/^::ffff:/, ''), presented);
  }

  get isRoot(): boolean {
    return this.target.username === 'root';
  }

  /**
   * Runs `command` through `sh -c`. With `sudo` (ignored for root) it runs as root: without a prompt
   * when sudo is passwordless, else with the login password written to sudo's stdin — never in argv.
   */
  async exec(command: string, options: ExecOptions = {}): Promise<ExecResult> {
    const elevate = options.sudo && !this.isRoot;
    let line = `sh -c ${shellQuote(command)}`;
    let stdin: Buffer | undefined = options.stdin === undefined ? undefined : Buffer.from(options.stdin);
    if (elevate) {
      if (this.target.password && stdin === undefined) {
        line = `sudo -S -p '' -- ${line}`;
        stdin = Buffer.from(`${this.target.password}\n`);
      } else {
        line = `sudo -n -- ${line}`;
      }
    }
    const result = await this.run(line, stdin, options);
    if (elevate && result.code !== 0 && /a password is required|incorrect password|no tty present|not in the sudoers/i.test(result.stderr)) {
      throw new SshError('sudo', `sudo on ${this.target.host} for ${this.target.username} needs a password or is not allowed; give the user passwordless sudo (or deploy as root)`);
    }
    if (result.code !== 0 && /No space left on device/i.test(result.stderr)) {
      throw new SshError('disk-full', `the disk of ${this.target.host} is full: ${result.stderr.trim().split('\n').pop()}`);
    }
    return result;
  }

  /** Like exec, but a non-zero exit is an SshError naming `what`. */
  async must(what: string, command: string, options: ExecOptions = {}): Promise<string> {
    const res = await this.exec(command, options);
    if (res.code !== 0) throw new SshError('command', `${what} failed on ${this.target.host} (exit ${res.code}): ${(res.stderr || res.stdout).trim().split('\n').slice(-3).join(' | ')}`);
    return res.stdout;
  }

  private run(line: string, stdin: Buffer | undefined, options: ExecOptions): Promise<ExecResult> {
    return new Promise((resolve, reject) => {
      this.client.exec(line, (err, channel: ClientChannel) => {
        if (err) return reject(new SshError('command', `cannot start a command on ${this.target.host}: ${err.message}`));
        let stdout = '';
        let stderr = '';
        const timer = options.timeoutMs
          ? setTimeout(() => {
              channel.close();
              reject(new SshError('timeout', `a command on ${this.target.host} did not finish within ${options.timeoutMs} ms`));
            }, options.timeoutMs)
          : undefined;
        channel.on('data', (c: Buffer) => {
          stdout += c.toString();
          options.onOutput?.(c.toString(), 'stdout');
        });
        channel.stderr.on('data', (c: Buffer) => {
          stderr += c.toString();
          options.onOutput?.(c.toString(), 'stderr');
        });
        channel.on('close', (code: number | null) => {
          clearTimeout(timer);
          resolve({ code, stdout, stderr });
        });
        channel.end(stdin);
      });
    });
  }

  /** Writes `content` to `remotePath` with a mode (and owner), as root when the user is not. */
  async upload(content: string | Buffer, remotePath: string, options: { mode?: number; owner?: string } = {}): Promise<void> {
    const mode = (options.mode ?? 0o644).toString(8);
    const staging = `/tmp/.hangar-upload-${process.pid}-${Date.now()}`;
    // Staged as the login user (no sudo needed to write /tmp), then moved into place as root.
    const staged = await this.exec(`umask 077 && cat > ${shellQuote(staging)}`, { stdin: content });
    if (staged.code !== 0) {
      if (/No space left on device/i.test(staged.stderr)) throw new SshError('disk-full', `the disk of ${this.target.host} is full while uploading ${remotePath}`);
      throw new SshError('upload', `uploading ${remotePath} to ${this.target.host} failed: ${staged.stderr.trim()}`);
    }
    const owner = options.owner ? ` -o ${shellQuote(options.owner.split(':')[0]!)}${options.owner.includes(':') ? ` -g ${shellQuote(options.owner.split(':')[1]!)}` : ''}` : '';
    const placed = await this.exec(`mkdir -p ${shellQuote(path.posix.dirname(remotePath))} && install -m ${mode}${owner} ${shellQuote(staging)} ${shellQuote(remotePath)}; status=$?; rm -f ${shellQuote(staging)}; exit $status`, { sudo: true });
    if (placed.code !== 0) throw new SshError(/No space left/i.test(placed.stderr) ? 'disk-full' : 'upload', `installing ${remotePath} on ${this.target.host} failed: ${placed.stderr.trim()}`);
  }

  close(): void {
    this.client.end();
  }
}

/** The SSH driver: the only code that imports ssh2. */
export default defineDriver<SshDriver>({
  name: 'ssh',
  kind: 'ssh',
  create: () => ({ open: (target, options) => Ssh2Session.open(target, options) }),
});
