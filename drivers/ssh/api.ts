import { defineDriverRef } from '../../core/plugin.js';

/** The ssh driver's contract: what plugins import of it (importing this never loads ssh2). */

/** Which step of an SSH operation failed; error messages start with it. */
export type SshStep = 'connect' | 'host-key' | 'auth' | 'sudo' | 'command' | 'upload' | 'timeout' | 'disk-full';

export class SshError extends Error {
  constructor(
    readonly step: SshStep,
    message: string,
  ) {
    super(message);
    this.name = 'SshError';
  }
}

export interface SshTarget {
  host: string;
  port?: number;
  username?: string;
  /** Private key content (OpenSSH or PEM), never a path. */
  privateKey?: string;
  password?: string;
}

/** Where first-contact host keys are remembered (the store, in the control plane). */
export interface HostKeyStore {
  get(host: string, port: number): Promise<string | null>;
  set(host: string, port: number, fingerprint: string): Promise<void>;
}

export interface OpenOptions {
  hostKeys: HostKeyStore;
  /** Expected fingerprint (`SHA256:…`); wins over the store. */
  pinnedHostKey?: string;
  /** Accept and record a host key that differs from the one recorded before. */
  acceptChangedHostKey?: boolean;
  /**
   * Refuse a host whose key is neither pinned nor recorded, before any credential is offered (no
   * trust on first use): for machines hangar did not deploy, whose address it was only told.
   */
  requireKnownHostKey?: boolean;
  timeoutMs?: number;
}

export interface ExecOptions {
  sudo?: boolean;
  stdin?: string | Buffer;
  timeoutMs?: number;
  onOutput?(chunk: string, stream: 'stdout' | 'stderr'): void;
}

export interface ExecResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** `'it''s'`-safe single quoting for sh. */
export function shellQuote(value: string): string {
  return `'${value.replace(/'/g, `'\\''`)}'`;
}

/** One SSH connection: commands (optionally with sudo), uploads, streamed output. */
export interface SshSession {
  readonly target: Required<Pick<SshTarget, 'host' | 'port' | 'username'>> & { password?: string };
  /** The local address this connection leaves from: the address the machine can reach us on. */
  readonly localAddress: string;
  readonly hostKeyFingerprint: string;
  readonly isRoot: boolean;
  exec(command: string, options?: ExecOptions): Promise<ExecResult>;
  /** Like exec, but a non-zero exit is an SshError naming `what`; answers stdout. */
  must(what: string, command: string, options?: ExecOptions): Promise<string>;
  upload(content: string | Buffer, remotePath: string, options?: { mode?: number; owner?: string }): Promise<void>;
  close(): void;
}

export interface SshDriver {
  open(target: SshTarget, options: OpenOptions): Promise<SshSession>;
}

/** The ssh driver (`drivers: [ssh]`): `services.drivers.get(SshDriverRef)`. */
export const SshDriverRef = defineDriverRef<SshDriver>('ssh');
