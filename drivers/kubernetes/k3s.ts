/**
 * k3s on this machine: installing the binary the operator provides (airgap style: the control
 * plane serves it to agents like the agent executable), running `k3s server` or `k3s agent` under
 * systemd when it is there and as a detached process otherwise, and reading what k3s writes (the
 * admin kubeconfig, the join token). In the machine lab the "binary" is hangar's k3s stand-in
 * (lab/kube, docs/kubernetes.md): the same command line and files.
 *
 * The join token an agent node starts with is a secret of the whole cluster: it is never on a
 * command line (world-readable in /proc/<pid>/cmdline) nor in the unit file (0644). As k3s's own
 * installer does, it goes in a 0600 environment file as K3S_TOKEN — the unit's EnvironmentFile=
 * (/etc/systemd/system/k3s-agent.service.env), or /etc/rancher/k3s/k3s-agent.env for the detached
 * process, which gets it in its environment (/proc/<pid>/environ: readable by root only).
 */
import { spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, openSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { sleep } from '../../core/clock.js';
import { KubeDriverError } from './errors.js';

/**
 * Where k3s keeps things: its defaults, under `root`. The agent uses `/` unless HANGAR_K3S_ROOT
 * names another folder (tests put a machine's k3s files, systemd's marker and all, in a temporary
 * one; docs/kubernetes.md).
 */
export function k3sPaths(root: string = process.env.HANGAR_K3S_ROOT || '/') {
  const at = (path: string) => join(root, path);
  return {
    binary: at('/usr/local/bin/k3s'),
    /** k3s's own uninstall scripts, which its installer writes. */
    uninstallScripts: [at('/usr/local/bin/k3s-uninstall.sh'), at('/usr/local/bin/k3s-agent-uninstall.sh')],
    kubeconfig: at('/etc/rancher/k3s/k3s.yaml'),
    configDir: at('/etc/rancher/k3s'),
    dataDir: at('/var/lib/rancher/k3s'),
    token: at('/var/lib/rancher/k3s/server/node-token'),
    /** Image tarballs k3s imports into containerd when it starts (airgap installs). */
    imagesDir: at('/var/lib/rancher/k3s/agent/images'),
    /** Written by a k3s agent once the node has its client certificate (TLS bootstrapping). */
    agentKubeconfig: at('/var/lib/rancher/k3s/agent/kubelet.kubeconfig'),
    /** What k3s's containerd and kubelet keep at run time (sockets, pods' mounts) and the CNI's state: k3s-killall.sh unmounts and removes them. */
    runDir: at('/run/k3s'),
    kubeletDir: at('/var/lib/kubelet'),
    cniDir: at('/var/lib/cni'),
    /** The pods' network namespaces (cni-<uuid>) are mounted here. */
    cniNetns: at('/run/netns/cni-'),
    log: at('/var/log/k3s.log'),
    pidFile: at('/run/k3s.pid'),
    /** Present when systemd is the running init system (sd_booted()). */
    systemdMarker: at('/run/systemd/system'),
    units: { server: at('/etc/systemd/system/k3s.service'), agent: at('/etc/systemd/system/k3s-agent.service') },
    /** The units' environment files (0600: the agent's holds K3S_TOKEN), where k3s's installer puts them. */
    unitEnv: { server: at('/etc/systemd/system/k3s.service.env'), agent: at('/etc/systemd/system/k3s-agent.service.env') },
    /** The same for k3s run as a detached process (no systemd), where k3s's installer puts them for OpenRC. */
    processEnv: { server: at('/etc/rancher/k3s/k3s.env'), agent: at('/etc/rancher/k3s/k3s-agent.env') },
  } as const;
}

/** Where k3s keeps things on a machine (its defaults, under /). */
export const K3S_PATHS = k3sPaths('/');

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

const hasSystemd = () => existsSync(k3sPaths().systemdMarker);

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
export function placeBinary(source: K3sBinarySource, target: string = k3sPaths().binary): Promise<boolean> {
  return placeFile('the binary', source, target, 0o755);
}

/** Puts the images tarball in k3s's images folder (`dir`, default /var/lib/rancher/k3s/agent/images) unless the same one is there. */
export function placeImages(source: K3sImagesSource, dir: string = k3sPaths().imagesDir): Promise<boolean> {
  if (!IMAGES_FILE.test(source.file_name)) throw new KubeDriverError(`installing k3s: ${JSON.stringify(source.file_name)} is not an images tarball's name (k3s-airgap-images-<arch>.tar.zst, .tar.gz or .tar)`, 400);
  return placeFile(`the images tarball ${source.file_name}`, source, join(dir, source.file_name), 0o644);
}

function pidRunning(): number | null {
  try {
    const pid = Number(readFileSync(k3sPaths().pidFile, 'utf8').trim());
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

/** Writes a file only root can read, never readable by others on the way (a new file at 0600, then renamed over the old one). */
function writePrivate(file: string, text: string): void {
  mkdirSync(dirname(file), { recursive: true });
  const next = `${file}.new`;
  rmSync(next, { force: true });
  writeFileSync(next, text, { mode: 0o600 });
  chmodSync(next, 0o600);
  renameSync(next, file);
}

/** KEY="value" lines that systemd's EnvironmentFile= and sh's `.` both read back as given. */
function environmentFile(env: Record<string, string>): string {
  const lines = Object.entries(env).map(([key, value]) => {
    if (/[\r\n\0]/.test(value)) throw new KubeDriverError(`starting k3s: ${key} holds a line break`, 400);
    return `${key}="${value.replace(/[\\"$`]/g, (c) => `\\${c}`)}"`;
  });
  return `# written by hangar: the environment k3s starts with (mode 0600: it holds the cluster's join token)\n${lines.join('\n')}\n`;
}

/**
 * Starts `k3s <role> <args>` with `env` (secrets: never on its command line, in a 0600 file): a
 * systemd unit when systemd runs, otherwise a process of its own session logging to /var/log/k3s.log.
 */
function start(role: K3sRole, args: string[], env: Record<string, string> = {}): void {
  const paths = k3sPaths();
  if (hasSystemd()) {
    const unit = paths.units[role];
    writePrivate(paths.unitEnv[role], environmentFile(env));
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
        `EnvironmentFile=${paths.unitEnv[role]}`,
        `ExecStart=${[paths.binary, role, ...args].map(quote).join(' ')}`,
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
  // The same file as under systemd, for whoever starts it again by hand (set -a; . <file>); the
  // process gets the values in its environment, readable by root only.
  writePrivate(paths.processEnv[role], environmentFile(env));
  mkdirSync(dirname(paths.log), { recursive: true });
  const out = openSync(paths.log, 'a');
  const child = spawn(paths.binary, [role, ...args], { detached: true, stdio: ['ignore', out, out], env: { ...process.env, ...env } });
  child.unref();
  if (!child.pid) throw new KubeDriverError(`starting k3s ${role}: the process did not start`);
  mkdirSync(dirname(paths.pidFile), { recursive: true });
  writeFileSync(paths.pidFile, `${child.pid}\n`);
}

function logTail(): string {
  if (hasSystemd()) return spawnSync('journalctl', ['-u', 'k3s', '-u', 'k3s-agent', '-n', '20', '--no-pager'], { encoding: 'utf8' }).stdout ?? '';
  try {
    return readFileSync(k3sPaths().log, 'utf8').split('\n').slice(-20).join('\n');
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
  await waitForFiles('server', [k3sPaths().kubeconfig, k3sPaths().token], timeoutMs);
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
  // The token in K3S_TOKEN (a 0600 file), never on the command line: anyone on the machine can read that.
  if (!now.running) start('agent', [...nodeFlags(input), '--server', input.server_url], { K3S_TOKEN: input.token });
  await waitForFiles('agent', [k3sPaths().agentKubeconfig], timeoutMs);
  return { runtime_node_id: input.node_name, version: k3sVersion() };
}

export function k3sVersion(): string {
  const out = spawnSync(k3sPaths().binary, ['--version'], { encoding: 'utf8' });
  return /k3s version (\S+)/.exec(out.stdout ?? '')?.[1] ?? 'unknown';
}

/** The join token `k3s server` wrote (K10<CA hash>::server:<secret>). */
export function serverToken(): { token: string } {
  const file = k3sPaths().token;
  if (!existsSync(file)) throw new KubeDriverError('reading the k3s join token: this machine runs no k3s server (no node-token)', 404);
  return { token: readFileSync(file, 'utf8').trim() };
}

/** The admin kubeconfig (k3s's own by default), its server set to `server_url` (k3s writes https://127.0.0.1:6443). */
export function adminKubeconfig(serverUrl: string, file: string = k3sPaths().kubeconfig): { kubeconfig: string } {
  if (!existsSync(file)) throw new KubeDriverError(`reading the kubeconfig: this machine runs no k3s server (no ${file})`, 404);
  const yaml = readFileSync(file, 'utf8');
  return { kubeconfig: yaml.replace(/server: https:\/\/127\.0\.0\.1:\d+/g, `server: ${serverUrl}`) };
}

/** A process of this machine: its id, its parent's, its command line. */
interface Proc {
  pid: number;
  ppid: number;
  args: string;
}

function processes(): Proc[] {
  const found: Proc[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      found.push({ pid: Number(entry), ppid, args: readFileSync(`/proc/${entry}/cmdline`, 'utf8').split('\0').join(' ').trim() });
    } catch {
      // gone meanwhile
    }
  }
  return found;
}

/** A process and all its descendants, children first (k3s-killall.sh's killtree). */
function tree(all: Proc[], root: number): number[] {
  const children = all.filter((p) => p.ppid === root).flatMap((p) => tree(all, p.pid));
  return [...children, root];
}

/** Runs a program of the machine's PATH when it is there (a host without iproute2 or iptables has nothing of theirs to clean). */
function runIfPresent(program: string, args: string[], input?: string): { ran: boolean; status: number | null; stdout: string } {
  const res = spawnSync(program, args, { encoding: 'utf8', input, stdio: [input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'] });
  if ((res.error as NodeJS.ErrnoException | undefined)?.code === 'ENOENT') return { ran: false, status: null, stdout: '' };
  return { ran: true, status: res.status, stdout: res.stdout ?? '' };
}

/** The network interfaces k3s's CNI made (flannel's VXLAN and WireGuard devices, the pods' bridge), as k3s-killall.sh deletes them. */
export const K3S_INTERFACES = ['cni0', 'flannel.1', 'flannel-v6.1', 'kube-ipvs0', 'flannel-wg', 'flannel-wg-v6'] as const;
/**
 * iptables rules k3s added (kube-proxy's, the CNI's, flannel's): k3s-killall.sh keeps every other line of
 * iptables-save (`grep -v KUBE- | grep -v CNI- | grep -iv flannel`): KUBE- and CNI- as written, flannel in
 * any case — podman's cni-podman0 and the like are not k3s's.
 */
export const K3S_RULE = /KUBE-|CNI-|[Ff][Ll][Aa][Nn][Nn][Ee][Ll]/;

/**
 * What k3s-killall.sh does once k3s is stopped: the containers it ran keep running otherwise.
 * Kills every containerd shim of this k3s (k3s/data/<hash>/bin/containerd-shim…) with the pods'
 * processes under it; unmounts what is mounted under /run/k3s, k3s's data dir, the kubelet's pods
 * and plugins and the CNI's network namespaces (deepest first) and removes those folders; deletes
 * the CNI's network namespaces, the veths on cni0 and the interfaces of {@link K3S_INTERFACES};
 * drops the iptables rules of {@link K3S_RULE} (IPv4 and IPv6). `mountsFile`: the mount table read
 * (tests give their own). Answers what it did.
 */
export function killall(mountsFile = '/proc/self/mounts'): { killed: number[]; unmounted: string[]; still_mounted: string[]; interfaces: string[]; rules_removed: number } {
  const paths = k3sPaths();
  const shim = new RegExp(`${escapeRegExp(join(paths.dataDir, 'data'))}/[^/ ]+/bin/containerd-shim`);
  const all = processes();
  const killed = [...new Set(all.filter((p) => shim.test(p.args)).flatMap((p) => tree(all, p.pid)))];
  for (const pid of killed) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // gone already
    }
  }
  const prefixes = [paths.runDir, paths.dataDir, join(paths.kubeletDir, 'pods'), join(paths.kubeletDir, 'plugins'), paths.cniNetns];
  const unmounted = mountsUnder(mountsFile, prefixes).sort((a, b) => b.length - a.length || b.localeCompare(a));
  for (const mount of unmounted) runIfPresent('umount', ['-f', mount]);
  // What is still mounted (busy, no umount) is not removed, nor any folder above it: a pod's volume
  // (a hostPath, an NFS share) would lose its data (k3s's script removes with rm --one-file-system).
  const stillMounted = mountsUnder(mountsFile, prefixes);
  removeUnlessMounted([paths.runDir, join(paths.kubeletDir, 'pods'), join(paths.kubeletDir, 'plugins')], stillMounted);

  const interfaces: string[] = [];
  for (const ns of runIfPresent('ip', ['netns', 'show']).stdout.split('\n').map((l) => l.split(' ')[0] ?? '')) {
    if (ns.startsWith('cni-')) runIfPresent('ip', ['netns', 'delete', ns]);
  }
  // The pods' veths on the bridge, then the CNI's own interfaces.
  const links = runIfPresent('ip', ['-o', 'link', 'show']).stdout.split('\n');
  const veths = links.filter((l) => / master cni0 /.test(l)).map((l) => (l.split(': ')[1] ?? '').split('@')[0]!).filter(Boolean);
  const present = new Set(links.map((l) => (l.split(': ')[1] ?? '').split('@')[0]!));
  for (const name of [...veths, ...K3S_INTERFACES.filter((i) => present.has(i))]) {
    if (runIfPresent('ip', ['link', 'delete', name]).status === 0) interfaces.push(name);
  }
  removeUnlessMounted([paths.cniDir], stillMounted);

  let removed = 0;
  for (const family of ['iptables', 'ip6tables']) {
    const saved = runIfPresent(`${family}-save`, []);
    if (!saved.ran || saved.status !== 0) continue;
    const lines = saved.stdout.split('\n');
    const kept = lines.filter((l) => !K3S_RULE.test(l));
    if (kept.length === lines.length) continue;
    removed += lines.length - kept.length;
    runIfPresent(`${family}-restore`, [], kept.join('\n'));
  }
  return { killed, unmounted, still_mounted: stillMounted, interfaces, rules_removed: removed };
}

/** The mount points of the mount table `file` at or under one of `prefixes` (a prefix ending in "-" matches names that start with it). */
function mountsUnder(file: string, prefixes: string[]): string[] {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch {
    return [];
  }
  // The mount table escapes spaces and the like as octal (\040).
  const points = text.split('\n').map((line) => (line.split(' ')[1] ?? '').replace(/\\([0-7]{3})/g, (_m, o: string) => String.fromCharCode(Number.parseInt(o, 8))));
  return points.filter((m) => m && prefixes.some((p) => m === p || m.startsWith(p.endsWith('-') ? p : `${p}/`)));
}

/** Removes each folder unless something is still mounted in it. */
function removeUnlessMounted(dirs: string[], mounted: string[]): void {
  for (const dir of dirs) if (!mounted.some((m) => m === dir || m.startsWith(`${dir}/`))) rmSync(dir, { recursive: true, force: true });
}

const escapeRegExp = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/**
 * Stops k3s and removes it, as k3s-uninstall.sh does: the unit or process, then what k3s-killall.sh
 * stops and cleans ({@link killall}: the containers it ran, their mounts, the CNI's interfaces and
 * iptables rules), the binary, its configuration and data, the kubelet's and the CNI's folders —
 * never a folder something is still mounted in (`still_mounted`) — (with real k3s, its own
 * uninstall script runs first when there is one). {uninstalled: false} when nothing of k3s is here
 * (no binary, data or configuration, unit, uninstall script, nor a running k3s): then nothing is
 * touched — the kubelet's and the CNI's folders, interfaces and iptables rules of this machine are
 * another Kubernetes's (kubeadm, rke2) or another runtime's (podman), a failed join's cleanup must
 * leave them.
 */
export async function uninstall(mountsFile?: string): Promise<{ uninstalled: boolean; killall?: ReturnType<typeof killall> }> {
  const paths = k3sPaths();
  const present =
    [paths.binary, paths.dataDir, paths.configDir, paths.runDir, ...paths.uninstallScripts, ...Object.values(paths.units), ...Object.values(paths.unitEnv)].some((p) => existsSync(p)) ||
    pidRunning() !== null ||
    k3sRunning().running;
  if (!present) return { uninstalled: false };
  for (const script of paths.uninstallScripts) {
    if (existsSync(script)) spawnSync('sh', [script], { stdio: 'ignore' });
  }
  if (hasSystemd()) {
    for (const role of ['server', 'agent'] as const) {
      spawnSync('systemctl', ['disable', '--now', unitName(role)], { stdio: 'ignore' });
      rmSync(paths.units[role], { force: true });
      rmSync(paths.unitEnv[role], { force: true });
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
    rmSync(paths.pidFile, { force: true });
  }
  // k3s stopped, its containers do not: what k3s-killall.sh does.
  const cleaned = killall(mountsFile);
  // configDir holds the detached process's environment files too.
  removeUnlessMounted([paths.binary, paths.configDir, paths.dataDir, paths.kubeletDir], cleaned.still_mounted);
  return { uninstalled: present, killall: cleaned };
}
