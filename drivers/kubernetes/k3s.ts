/**
 * k3s on this machine: installing the binary the operator provides (airgap style: the control
 * plane serves it to agents like the agent executable), running `k3s server` or `k3s agent` under
 * systemd when it is there and as a detached process otherwise, and reading what k3s writes (the
 * admin kubeconfig, the join token). In the machine lab the "binary" is hangar's k3s stand-in
 * (lab/kube, docs/kubernetes.md): the same command line and files.
 */
import { spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, openSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { sleep } from '../../core/clock.js';
import { KubeDriverError } from './errors.js';

/** Where k3s keeps things (its defaults). */
export const K3S_PATHS = {
  binary: '/usr/local/bin/k3s',
  kubeconfig: '/etc/rancher/k3s/k3s.yaml',
  configDir: '/etc/rancher/k3s',
  dataDir: '/var/lib/rancher/k3s',
  token: '/var/lib/rancher/k3s/server/node-token',
  /** Image tarballs k3s imports into containerd when it starts (airgap installs). */
  imagesDir: '/var/lib/rancher/k3s/agent/images',
  /** Written by a k3s agent once the node has its client certificate (TLS bootstrapping). */
  agentKubeconfig: '/var/lib/rancher/k3s/agent/kubelet.kubeconfig',
  log: '/var/log/k3s.log',
  pidFile: '/run/k3s.pid',
  units: { server: '/etc/systemd/system/k3s.service', agent: '/etc/systemd/system/k3s-agent.service' },
} as const;

export { K3S_API_PORT } from './names.js';
/** How long installing waits for k3s to be up (its files written, the node registered). */
export const K3S_READY_TIMEOUT_MS = 4 * 60_000;

export type K3sRole = 'server' | 'agent';

/** A file the agent installs: its SHA-256 (checked; the same file already in place is not fetched again) and how to get it. */
export interface K3sFileSource {
  sha256: string;
  fetch(): Promise<Buffer>;
}
/** The k3s binary: from the control plane (the operator placed it), or from `kubernetes.k3s_download_url`. */
export type K3sBinarySource = K3sFileSource;
/** k3s's airgap images tarball (k3s-airgap-images-<arch>.tar.zst|.tar.gz|.tar), placed where k3s imports it at start. */
export interface K3sImagesSource extends K3sFileSource {
  file_name: string;
}

/** The names k3s's releases give the images tarball (k3s imports .tar, .tar.gz and .tar.zst from agent/images). */
export const IMAGES_FILE = /^k3s-airgap-images-[a-z0-9]+\.tar(\.zst|\.gz)?$/;

const hasSystemd = () => existsSync('/run/systemd/system');

function sha256Of(path: string): string | null {
  try {
    return createHash('sha256').update(readFileSync(path)).digest('hex');
  } catch {
    return null;
  }
}

/** Puts the fetched file at `target` (whole or not at all) unless the same one is there; answers whether it changed. */
async function placeFile(what: string, source: K3sFileSource, target: string, mode: number): Promise<boolean> {
  if (sha256Of(target) === source.sha256) return false;
  const body = await source.fetch();
  const sha256 = createHash('sha256').update(body).digest('hex');
  if (sha256 !== source.sha256) throw new KubeDriverError(`installing k3s: ${what}'s checksum is ${sha256}, expected ${source.sha256}; nothing installed`, 502);
  mkdirSync(dirname(target), { recursive: true });
  writeFileSync(`${target}.new`, body, { mode });
  chmodSync(`${target}.new`, mode);
  renameSync(`${target}.new`, target);
  return true;
}

/** Puts the binary at `target` (default /usr/local/bin/k3s) unless the same one is there; answers whether it changed. */
export function placeBinary(source: K3sBinarySource, target: string = K3S_PATHS.binary): Promise<boolean> {
  return placeFile('the binary', source, target, 0o755);
}

/** Puts the images tarball in k3s's images folder (`dir`, default /var/lib/rancher/k3s/agent/images) unless the same one is there. */
export function placeImages(source: K3sImagesSource, dir: string = K3S_PATHS.imagesDir): Promise<boolean> {
  if (!IMAGES_FILE.test(source.file_name)) throw new KubeDriverError(`installing k3s: ${JSON.stringify(source.file_name)} is not an images tarball's name (k3s-airgap-images-<arch>.tar.zst, .tar.gz or .tar)`, 400);
  return placeFile(`the images tarball ${source.file_name}`, source, join(dir, source.file_name), 0o644);
}

function pidRunning(): number | null {
  try {
    const pid = Number(readFileSync(K3S_PATHS.pidFile, 'utf8').trim());
    if (!pid) return null;
    process.kill(pid, 0);
    return pid;
  } catch {
    return null;
  }
}

function unitName(role: K3sRole): string {
  return role === 'server' ? 'k3s' : 'k3s-agent';
}

/** Whether k3s runs here (as a systemd unit or as the process in the pid file). */
export function k3sRunning(): { running: boolean; role: K3sRole | null } {
  if (hasSystemd()) {
    for (const role of ['server', 'agent'] as const) {
      if (spawnSync('systemctl', ['is-active', '--quiet', unitName(role)]).status === 0) return { running: true, role };
    }
    return { running: false, role: null };
  }
  const pid = pidRunning();
  if (!pid) return { running: false, role: null };
  const cmdline = (() => {
    try {
      return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
    } catch {
      return [];
    }
  })();
  return { running: true, role: cmdline.includes('agent') ? 'agent' : 'server' };
}

const quote = (arg: string) => (/^[\w@%+=:,./-]+$/.test(arg) ? arg : `'${arg.replace(/'/g, `'\\''`)}'`);

/** Starts `k3s <role> <args>`: a systemd unit when systemd runs, otherwise a process of its own session logging to /var/log/k3s.log. */
function start(role: K3sRole, args: string[]): void {
  if (hasSystemd()) {
    const unit = K3S_PATHS.units[role];
    writeFileSync(
      unit,
      [
        '[Unit]',
        `Description=k3s ${role} (installed by hangar)`,
        'Wants=network-online.target',
        'After=network-online.target',
        '',
        '[Service]',
        'Type=exec',
        `ExecStart=${[K3S_PATHS.binary, role, ...args].map(quote).join(' ')}`,
        'KillMode=process',
        'Delegate=yes',
        'LimitNOFILE=1048576',
        'Restart=always',
        'RestartSec=5s',
        '',
        '[Install]',
        'WantedBy=multi-user.target',
        '',
      ].join('\n'),
      { mode: 0o644 },
    );
    const reload = spawnSync('systemctl', ['daemon-reload'], { encoding: 'utf8' });
    const enable = spawnSync('systemctl', ['enable', '--now', unitName(role)], { encoding: 'utf8' });
    if (reload.status !== 0 || enable.status !== 0) throw new KubeDriverError(`starting k3s ${role}: systemctl: ${(enable.stderr || reload.stderr).trim()}`);
    return;
  }
  mkdirSync(dirname(K3S_PATHS.log), { recursive: true });
  const out = openSync(K3S_PATHS.log, 'a');
  const child = spawn(K3S_PATHS.binary, [role, ...args], { detached: true, stdio: ['ignore', out, out] });
  child.unref();
  if (!child.pid) throw new KubeDriverError(`starting k3s ${role}: the process did not start`);
  writeFileSync(K3S_PATHS.pidFile, `${child.pid}\n`);
}

function logTail(): string {
  if (hasSystemd()) return spawnSync('journalctl', ['-u', 'k3s', '-u', 'k3s-agent', '-n', '20', '--no-pager'], { encoding: 'utf8' }).stdout ?? '';
  try {
    return readFileSync(K3S_PATHS.log, 'utf8').split('\n').slice(-20).join('\n');
  } catch {
    return '';
  }
}

async function waitForFiles(role: K3sRole, files: string[], timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!files.every((f) => existsSync(f) && statSync(f).size > 0)) {
    if (!k3sRunning().running) throw new KubeDriverError(`k3s ${role} stopped before it was up; the end of its log:\n${logTail()}`);
    if (Date.now() > deadline) throw new KubeDriverError(`k3s ${role} is not up after ${timeoutMs / 1000} s (no ${files.join(', ')}); the end of its log:\n${logTail()}`, 504);
    await sleep(500);
  }
}

export interface K3sServerInput {
  node_name: string;
  /** The address the node is known by in the cluster (its overlay address when it has one); null: k3s picks. */
  node_ip: string | null;
  /** Extra names and addresses the API server's certificate is valid for (the public address, the kubeconfig endpoint). */
  tls_sans: string[];
  binary: K3sBinarySource;
  /** The airgap images tarball, when the operator placed one: in k3s's images folder before k3s starts. */
  images?: K3sImagesSource | null;
}

/** The flags both roles share. */
function nodeFlags(input: { node_name: string; node_ip: string | null }): string[] {
  return ['--node-name', input.node_name, ...(input.node_ip ? ['--node-ip', input.node_ip] : [])];
}

/**
 * Installs and starts `k3s server` (idempotent: a k3s already running as the server is left as it
 * is) and waits until it has written the admin kubeconfig and the join token.
 */
export async function installServer(input: K3sServerInput, timeoutMs = K3S_READY_TIMEOUT_MS): Promise<{ runtime_node_id: string; version: string }> {
  const now = k3sRunning();
  if (now.running && now.role === 'agent') throw new KubeDriverError('installing the k3s server: this machine runs a k3s agent (a member of another cluster); uninstall it first', 409);
  await placeBinary(input.binary);
  if (input.images) await placeImages(input.images);
  if (!now.running) {
    start('server', [
      ...nodeFlags(input),
      ...input.tls_sans.flatMap((san) => ['--tls-san', san]),
      '--write-kubeconfig-mode',
      '0600',
      // The cluster's load balancer is hangar's own ingress controller (POST …/lb, drivers/kubernetes/loadbalancer.ts):
      // k3s's bundled Traefik would hold ports 80 and 443 on every node whether or not one was asked for.
      '--disable',
      'traefik',
    ]);
  }
  await waitForFiles('server', [K3S_PATHS.kubeconfig, K3S_PATHS.token], timeoutMs);
  return { runtime_node_id: input.node_name, version: k3sVersion() };
}

export interface K3sAgentInput {
  node_name: string;
  node_ip: string | null;
  /** https://<server>:6443 */
  server_url: string;
  token: string;
  binary: K3sBinarySource;
  images?: K3sImagesSource | null;
}

/** Installs and starts `k3s agent` joining the server with its token, and waits until the node has its credentials (TLS bootstrapping done). */
export async function installAgent(input: K3sAgentInput, timeoutMs = K3S_READY_TIMEOUT_MS): Promise<{ runtime_node_id: string; version: string }> {
  const now = k3sRunning();
  if (now.running && now.role === 'server') throw new KubeDriverError('joining as a k3s agent: this machine runs a k3s server; uninstall it first', 409);
  await placeBinary(input.binary);
  if (input.images) await placeImages(input.images);
  if (!now.running) start('agent', [...nodeFlags(input), '--server', input.server_url, '--token', input.token]);
  await waitForFiles('agent', [K3S_PATHS.agentKubeconfig], timeoutMs);
  return { runtime_node_id: input.node_name, version: k3sVersion() };
}

export function k3sVersion(): string {
  const out = spawnSync(K3S_PATHS.binary, ['--version'], { encoding: 'utf8' });
  return /k3s version (\S+)/.exec(out.stdout ?? '')?.[1] ?? 'unknown';
}

/** The join token `k3s server` wrote (K10<CA hash>::server:<secret>). */
export function serverToken(): { token: string } {
  if (!existsSync(K3S_PATHS.token)) throw new KubeDriverError('reading the k3s join token: this machine runs no k3s server (no node-token)', 404);
  return { token: readFileSync(K3S_PATHS.token, 'utf8').trim() };
}

/** The admin kubeconfig (k3s's own by default), its server set to `server_url` (k3s writes https://127.0.0.1:6443). */
export function adminKubeconfig(serverUrl: string, file: string = K3S_PATHS.kubeconfig): { kubeconfig: string } {
  if (!existsSync(file)) throw new KubeDriverError(`reading the kubeconfig: this machine runs no k3s server (no ${file})`, 404);
  const yaml = readFileSync(file, 'utf8');
  return { kubeconfig: yaml.replace(/server: https:\/\/127\.0\.0\.1:\d+/g, `server: ${serverUrl}`) };
}

/**
 * Stops k3s and removes it: the unit or process, the binary, its configuration and data (what
 * k3s-uninstall.sh does; with real k3s, its own uninstall script runs first when there is one).
 * {uninstalled: false} when nothing of k3s was here.
 */
export async function uninstall(): Promise<{ uninstalled: boolean }> {
  const present = existsSync(K3S_PATHS.binary) || existsSync(K3S_PATHS.dataDir) || k3sRunning().running;
  for (const script of ['/usr/local/bin/k3s-uninstall.sh', '/usr/local/bin/k3s-agent-uninstall.sh']) {
    if (existsSync(script)) spawnSync('sh', [script], { stdio: 'ignore' });
  }
  if (hasSystemd()) {
    for (const role of ['server', 'agent'] as const) {
      spawnSync('systemctl', ['disable', '--now', unitName(role)], { stdio: 'ignore' });
      rmSync(K3S_PATHS.units[role], { force: true });
    }
    spawnSync('systemctl', ['daemon-reload'], { stdio: 'ignore' });
  } else {
    const pid = pidRunning();
    if (pid) {
      try {
        process.kill(pid, 'SIGTERM');
      } catch {
        // gone already
      }
      const deadline = Date.now() + 30_000;
      while (pidRunning() && Date.now() < deadline) await sleep(250);
      if (pidRunning()) process.kill(pid, 'SIGKILL');
    }
    rmSync(K3S_PATHS.pidFile, { force: true });
  }
  for (const path of [K3S_PATHS.binary, K3S_PATHS.configDir, K3S_PATHS.dataDir]) rmSync(path, { recursive: true, force: true });
  return { uninstalled: present };
}
