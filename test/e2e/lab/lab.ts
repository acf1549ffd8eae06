/**
 * The machine lab: real machines for end-to-end tests. Each machine is a container of the lab
 * image (lab/image.sh: Debian bookworm with sshd, dockerd, sudo, iproute2, iptables, wireguard)
 * on a private docker network with a fixed address, started with the options docs/lab.md explains.
 *
 *   const lab = new Lab();                       // name 'e2e', subnet 172.31.77.0/24
 *   const [m1, m2] = await lab.start({ machines: 2 });
 *   await m1.sh('docker info');                  // docker exec
 *   await sshExec(m2.ssh.deployer, 'sudo -n true');
 *   await m2.disconnect();  …  await m2.reconnect();
 *   await lab.teardown();                        // also runs on exit, SIGINT and SIGTERM
 *
 * Everything the lab creates carries the label `hangar-lab=<run id>` (plus hangar-lab.name,
 * hangar-lab.pid); a new lab first removes what crashed runs left behind.
 */
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { docker, dockerAvailable, dockerOk, dockerSync, type RunResult } from '../../../lab/docker.js';
import { ensureLabImage, imageObtainable, type EnsureImageResult } from '../../../lab/image.js';
import { generateSshKeyPair, type SshKeyPair } from '../../../lab/keys.js';
import { sealAvailable, sealNetwork, unsealBridge } from '../../../lab/seal.js';

export { dockerAvailable };

export const LABEL = 'hangar-lab';
export const DEFAULT_SUBNET = '172.31.77.0/24';

/**
 * The `docker run` options of every machine (see docs/lab.md): every capability but SYS_RESOURCE
 * (which the sandbox refuses, so --privileged fails), no seccomp/apparmor confinement, the host's
 * cgroups writable for the machine's own dockerd, tmpfs for /run and /var/lib/docker (overlay2
 * cannot stack on the container's overlayfs), /dev/net/tun for wireguard-go, /dev/kmsg for a
 * kubelet (its OOM watcher reads the kernel log), and docker's init
 * (tini) as PID 1 to reap zombies and pass signals on to lab-init.
 */
export const MACHINE_RUN_OPTIONS: readonly string[] = [
  '--cap-add', 'ALL',
  '--cap-drop', 'SYS_RESOURCE',
  '--security-opt', 'seccomp=unconfined',
  '--security-opt', 'apparmor=unconfined',
  '--cgroupns=host',
  '-v', '/sys/fs/cgroup:/sys/fs/cgroup:rw',
  '--tmpfs', '/run',
  '--tmpfs', '/var/lib/docker:exec',
  '--device', '/dev/net/tun',
  '--device', '/dev/kmsg',
  '--init',
];

export type LabUserName = 'root' | 'deployer' | 'pwuser';

/** What an SSH client needs to log in to one machine as one user. */
export interface SshCredentials {
  host: string;
  port: number;
  username: LabUserName;
  /** OpenSSH private key (root and deployer). */
  privateKey?: string;
  /** The same key in a file (mode 0600), for the ssh command line. */
  privateKeyPath?: string;
  /** pwuser's password. */
  password?: string;
}

export interface LabOptions {
  /** Names the containers (hangar-lab-<name>-<machine>) and the network (hangar-lab-<name>). Default 'e2e'. */
  name?: string;
  /** IPv4 subnet of the lab network, prefix /24 or shorter. Machines get .11, .12, …; the host is .1. */
  subnet?: string;
  /** Kept after this process ends (the `npm run lab` CLI); otherwise removed on exit. */
  persistent?: boolean;
  /** Where keys and state.json go (default: a temporary folder, removed at teardown). */
  stateDir?: string;
  /** Progress lines (default: console.log prefixed with [lab]). */
  log?: (line: string) => void;
  /** Milliseconds to wait for a machine's sshd and dockerd (default 90 s). */
  readyTimeoutMs?: number;
}

export interface StartOptions {
  /** How many machines (named m1, m2, …, continuing after existing ones) or their names. */
  machines: number | string[];
  /** Extra arguments for each machine's dockerd. */
  dockerdArgs?: string;
  /** Host folders or files bind-mounted into each machine, as docker's `-v host:machine[:ro]`. */
  mounts?: string[];
}

export interface ExecOptions {
  /** Run as this user (docker exec --user). Default root. */
  user?: string;
  input?: string;
  timeoutMs?: number;
}

export type MachineStatus = 'created' | 'running' | 'paused' | 'restarting' | 'removing' | 'exited' | 'dead' | 'missing';

export interface LabState {
  name: string;
  runId: string;
  subnet: string;
  network: string;
  image: string;
  machines: { name: string; ip: string; container: string }[];
  users: {
    root: { privateKeyPath: string };
    deployer: { privateKeyPath: string };
    pwuser: { password: string };
  };
}

interface LeftoverResource {
  kind: 'container' | 'network';
  id: string;
  name: string;
  labels: Record<string, string>;
}

/** Labs of this process that have not been torn down: removed synchronously on exit or signal. */
const active = new Set<Lab>();
let exitHooksInstalled = false;

function installExitHooks(): void {
  if (exitHooksInstalled) return;
  exitHooksInstalled = true;
  process.on('exit', () => {
    for (const lab of active) lab.teardownSync();
  });
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    const onSignal = (): void => {
      for (const lab of active) lab.teardownSync();
      // Nobody else handles it: behave like the default action (end the process).
      if (process.listenerCount(signal) <= 1) process.exit(signal === 'SIGINT' ? 130 : signal === 'SIGTERM' ? 143 : 129);
    };
    process.on(signal, onSignal);
  }
}

function pidAlive(pid: number): boolean {
  if (!Number.isInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

function parseIPv4(ip: string): number {
  const parts = ip.split('.').map(Number);
  if (parts.length !== 4 || parts.some((p) => !Number.isInteger(p) || p < 0 || p > 255)) throw new Error(`not an IPv4 address: ${ip}`);
  return (((parts[0] << 24) >>> 0) + (parts[1] << 16) + (parts[2] << 8) + parts[3]) >>> 0;
}

function formatIPv4(value: number): string {
  return [value >>> 24, (value >>> 16) & 255, (value >>> 8) & 255, value & 255].join('.');
}

function parseCidr(cidr: string): { base: number; prefix: number } {
  const [ip, prefixText] = cidr.split('/');
  const prefix = Number(prefixText);
  if (!Number.isInteger(prefix) || prefix < 0 || prefix > 32) throw new Error(`not an IPv4 CIDR: ${cidr}`);
  const mask = prefix === 0 ? 0 : (0xffffffff << (32 - prefix)) >>> 0;
  return { base: (parseIPv4(ip) & mask) >>> 0, prefix };
}

/** Whether two IPv4 CIDRs share an address. */
export function cidrsOverlap(a: string, b: string): boolean {
  const x = parseCidr(a);
  const y = parseCidr(b);
  const prefix = Math.min(x.prefix, y.prefix);
  const mask = prefix === 0 ? 0 : (0xffffffff << (32 - prefix)) >>> 0;
  return ((x.base & mask) >>> 0) === ((y.base & mask) >>> 0);
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

export class Lab {
  readonly name: string;
  readonly subnet: string;
  readonly network: string;
  readonly runId: string;
  readonly persistent: boolean;
  readonly stateDir: string;
  /** root and deployer: a key pair made for this lab; pwuser: a password made for this lab. */
  readonly users: {
    root: SshKeyPair & { privateKeyPath: string };
    deployer: SshKeyPair & { privateKeyPath: string };
    pwuser: { password: string };
  };
  /** Machines in start order. */
  readonly machines: Machine[] = [];
  image: string | undefined;
  /** The last ensureImage() result (build or cache, and how long it took). */
  imageResult: EnsureImageResult | undefined;
  private readonly log: (line: string) => void;
  readonly readyTimeoutMs: number;
  private readonly ownsStateDir: boolean;
  private networkCreated = false;
  /** The host's bridge of the lab network (sealed: lab/seal.ts), once it is created. */
  bridge: string | undefined;
  private tornDown = false;
  private readonly base: number;

  constructor(options: LabOptions = {}) {
    this.name = options.name ?? 'e2e';
    if (!/^[a-z0-9][a-z0-9-]*$/.test(this.name)) throw new Error(`lab name must be lowercase letters, digits and dashes: ${this.name}`);
    this.subnet = options.subnet ?? DEFAULT_SUBNET;
    const { base, prefix } = parseCidr(this.subnet);
    if (prefix > 24) throw new Error(`lab subnet must be /24 or larger: ${this.subnet}`);
    this.base = base;
    this.network = `${LABEL}-${this.name}`;
    this.runId = `${this.name}-${Date.now().toString(36)}-${randomBytes(3).toString('hex')}`;
    this.persistent = options.persistent ?? false;
    this.log = options.log ?? ((line: string) => console.log(`[lab] ${line}`));
    this.readyTimeoutMs = options.readyTimeoutMs ?? 90_000;
    this.ownsStateDir = !options.stateDir;
    this.stateDir = options.stateDir ?? mkdtempSync(join(tmpdir(), `hangar-lab-${this.name}-`));
    mkdirSync(join(this.stateDir, 'keys'), { recursive: true, mode: 0o700 });
    const root = generateSshKeyPair(`root@hangar-lab-${this.name}`);
    const deployer = generateSshKeyPair(`deployer@hangar-lab-${this.name}`);
    const rootPath = join(this.stateDir, 'keys', 'root');
    const deployerPath = join(this.stateDir, 'keys', 'deployer');
    writeFileSync(rootPath, root.privateKey, { mode: 0o600 });
    writeFileSync(deployerPath, deployer.privateKey, { mode: 0o600 });
    this.users = {
      root: { ...root, privateKeyPath: rootPath },
      deployer: { ...deployer, privateKeyPath: deployerPath },
      pwuser: { password: `lab-${randomBytes(9).toString('base64url')}` },
    };
  }

  /**
   * Whether this machine can run the lab: dockerd answers, the lab network can be sealed
   * (lab/seal.ts: root and iptables), and the image is there or can be built.
   */
  static async availability(): Promise<{ docker: boolean; image: boolean; why?: string }> {
    if (!(await dockerAvailable())) return { docker: false, image: false, why: 'Docker (dockerd)' };
    const seal = sealAvailable();
    if (!seal.ok) return { docker: true, image: false, why: seal.why };
    const image = await imageObtainable();
    return { docker: true, image: image.ok, why: image.why };
  }

  /** The lab image for the current recipe (built when missing); its tag. */
  async ensureImage(): Promise<string> {
    this.imageResult = await ensureLabImage({ log: this.log });
    this.image = this.imageResult.tag;
    return this.image;
  }

  /** The address the n-th machine (0-based) gets. */
  addressOf(slot: number): string {
    return formatIPv4(this.base + 11 + slot);
  }

  /** The host's address on the lab network (the gateway). */
  get gateway(): string {
    return formatIPv4(this.base + 1);
  }

  machine(name: string): Machine {
    const found = this.machines.find((m) => m.name === name);
    if (!found) throw new Error(`no machine ${name} in lab ${this.name} (machines: ${this.machines.map((m) => m.name).join(', ') || 'none'})`);
    return found;
  }

  labels(extra: Record<string, string> = {}): string[] {
    const labels: Record<string, string> = {
      [LABEL]: this.runId,
      [`${LABEL}.name`]: this.name,
      [`${LABEL}.pid`]: String(process.pid),
      ...(this.persistent ? { [`${LABEL}.persistent`]: '1' } : {}),
      ...extra,
    };
    return Object.entries(labels).flatMap(([k, v]) => ['--label', `${k}=${v}`]);
  }

  /**
   * Starts machines (the first call also removes leftovers, builds the image if needed and
   * creates the network) and waits until each one's sshd and dockerd are up.
   */
  async start(options: StartOptions): Promise<Machine[]> {
    if (this.tornDown) throw new Error(`lab ${this.name} was torn down; make a new Lab`);
    const t0 = Date.now();
    if (!this.persistent) installExitHooks();
    active.add(this);
    if (!this.networkCreated) {
      await this.removeLeftovers();
      await this.ensureImage();
      await this.createNetwork();
    }
    const names =
      typeof options.machines === 'number'
        ? Array.from({ length: options.machines }, (_, i) => `m${this.machines.length + i + 1}`)
        : options.machines;
    for (const name of names) {
      if (!/^[a-z0-9][a-z0-9-]*$/.test(name)) throw new Error(`machine name must be lowercase letters, digits and dashes: ${name}`);
      if (this.machines.some((m) => m.name === name)) throw new Error(`lab ${this.name} already has a machine ${name}`);
    }
    const created = names.map((name, i) => new Machine(this, name, this.addressOf(this.machines.length + i)));
    this.machines.push(...created);
    this.log(`starting ${created.map((m) => `${m.name} (${m.ip})`).join(', ')} on ${this.network} ${this.subnet}`);
    await Promise.all(created.map((m) => m.create(options.dockerdArgs, options.mounts)));
    await Promise.all(created.map((m) => m.waitReady()));
    this.writeState();
    this.log(`${created.length} machine(s) ready in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    return created;
  }

  private async createNetwork(): Promise<void> {
    const ids = (await dockerOk(['network', 'ls', '-q'])).split('\n').filter(Boolean);
    if (ids.length > 0) {
      const networks = JSON.parse(await dockerOk(['network', 'inspect', ...ids])) as {
        Name: string;
        IPAM?: { Config?: { Subnet?: string }[] | null };
      }[];
      for (const network of networks) {
        for (const config of network.IPAM?.Config ?? []) {
          if (config.Subnet && !config.Subnet.includes(':') && cidrsOverlap(config.Subnet, this.subnet)) {
            throw new Error(
              `lab subnet ${this.subnet} overlaps docker network ${network.Name} (${config.Subnet}); ` +
                'give this lab another subnet (the subnet option; HANGAR_LAB_SUBNET for npm run lab)',
            );
          }
        }
      }
    }
    await dockerOk(['network', 'create', '--driver', 'bridge', '--subnet', this.subnet, '--gateway', this.gateway, ...this.labels(), this.network]);
    // Sealed before any machine is on it: nothing it sends is forwarded off this host (lab/seal.ts).
    try {
      this.bridge = sealNetwork(this.network);
    } catch (error) {
      await docker(['network', 'rm', this.network]);
      throw error;
    }
    this.networkCreated = true;
  }

  /**
   * Removes what earlier runs left: everything of this lab's name (unless a live process still
   * owns it: then this throws), and every non-persistent lab resource whose process is gone.
   */
  async removeLeftovers(): Promise<number> {
    const leftovers = await listLabResources();
    const doomed: LeftoverResource[] = [];
    for (const resource of leftovers) {
      const pid = Number(resource.labels[`${LABEL}.pid`]);
      const persistent = resource.labels[`${LABEL}.persistent`] === '1';
      const sameName = resource.labels[`${LABEL}.name`] === this.name;
      if (resource.labels[LABEL] === this.runId) continue;
      if (sameName) {
        if (!persistent && pid !== process.pid && pidAlive(pid)) {
          throw new Error(
            `lab ${this.name} is in use by process ${pid} (${resource.kind} ${resource.name}); ` +
              'wait for it, stop it, or use another lab name',
          );
        }
        doomed.push(resource);
      } else if (!persistent && !pidAlive(pid)) {
        doomed.push(resource);
      }
    }
    if (doomed.length === 0) return 0;
    this.log(`removing leftovers of earlier runs: ${doomed.map((r) => `${r.kind} ${r.name}`).join(', ')}`);
    await removeResources(doomed);
    return doomed.length;
  }

  private writeState(): void {
    const state: LabState = {
      name: this.name,
      runId: this.runId,
      subnet: this.subnet,
      network: this.network,
      image: this.image ?? '',
      machines: this.machines.map((m) => ({ name: m.name, ip: m.ip, container: m.container })),
      users: {
        root: { privateKeyPath: this.users.root.privateKeyPath },
        deployer: { privateKeyPath: this.users.deployer.privateKeyPath },
        pwuser: { password: this.users.pwuser.password },
      },
    };
    writeFileSync(join(this.stateDir, 'state.json'), `${JSON.stringify(state, null, 2)}\n`, { mode: 0o600 });
  }

  /** Removes the containers and the network this lab created, and its state folder when it made it. Idempotent. */
  async teardown(): Promise<void> {
    if (this.tornDown) return;
    this.tornDown = true;
    active.delete(this);
    const t0 = Date.now();
    const containers = await docker(['ps', '-aq', '--filter', `label=${LABEL}=${this.runId}`]);
    const ids = containers.stdout.split('\n').filter(Boolean);
    if (ids.length > 0) await docker(['rm', '--force', '--volumes', ...ids]);
    const networks = await docker(['network', 'ls', '-q', '--no-trunc', '--filter', `label=${LABEL}=${this.runId}`]);
    const netIds = networks.stdout.split('\n').filter(Boolean);
    if (netIds.length > 0) await docker(['network', 'rm', ...netIds]);
    unsealNetworks(netIds);
    this.removeLocalState();
    if (ids.length + netIds.length > 0) {
      this.log(`torn down: ${ids.length} container(s), ${netIds.length} network(s) in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    }
  }

  /** teardown() for process exit and signals, where nothing asynchronous can run. */
  teardownSync(): void {
    if (this.tornDown) return;
    this.tornDown = true;
    active.delete(this);
    const ids = dockerSync(['ps', '-aq', '--filter', `label=${LABEL}=${this.runId}`]).stdout.split('\n').filter(Boolean);
    if (ids.length > 0) dockerSync(['rm', '--force', '--volumes', ...ids]);
    const netIds = dockerSync(['network', 'ls', '-q', '--no-trunc', '--filter', `label=${LABEL}=${this.runId}`]).stdout.split('\n').filter(Boolean);
    if (netIds.length > 0) dockerSync(['network', 'rm', ...netIds]);
    unsealNetworks(netIds);
    this.removeLocalState();
    if (ids.length + netIds.length > 0) console.error(`[lab] ${this.name}: removed ${ids.length} container(s) and ${netIds.length} network(s) on exit`);
  }

  private removeLocalState(): void {
    for (const machine of this.machines) removeMachineCgroups(machine.container);
    if (this.ownsStateDir) rmSync(this.stateDir, { recursive: true, force: true });
  }
}

export class Machine {
  readonly container: string;
  private connected = true;

  constructor(
    readonly lab: Lab,
    readonly name: string,
    readonly ip: string,
  ) {
    this.container = `${LABEL}-${lab.name}-${name}`;
  }

  /** Credentials for the three users: root and deployer with a key, pwuser with a password. */
  get ssh(): Record<LabUserName, SshCredentials> {
    const { root, deployer, pwuser } = this.lab.users;
    return {
      root: { host: this.ip, port: 22, username: 'root', privateKey: root.privateKey, privateKeyPath: root.privateKeyPath },
      deployer: { host: this.ip, port: 22, username: 'deployer', privateKey: deployer.privateKey, privateKeyPath: deployer.privateKeyPath },
      pwuser: { host: this.ip, port: 22, username: 'pwuser', password: pwuser.password },
    };
  }

  /** @internal `docker run` of this machine. */
  async create(dockerdArgs?: string, mounts: string[] = []): Promise<void> {
    if (!this.lab.image) throw new Error('the lab image is not ready');
    const { users } = this.lab;
    await dockerOk([
      'run', '--detach',
      '--name', this.container,
      '--hostname', this.name,
      '--network', this.lab.network,
      '--ip', this.ip,
      '--network-alias', this.name,
      ...this.lab.labels({ [`${LABEL}.machine`]: this.name }),
      ...MACHINE_RUN_OPTIONS,
      '--env', `LAB_ROOT_KEY=${users.root.publicKey}`,
      '--env', `LAB_DEPLOYER_KEY=${users.deployer.publicKey}`,
      '--env', `LAB_PWUSER_PASSWORD=${users.pwuser.password}`,
      '--env', `LAB_CGROUP_PARENT=/hangar-lab/${this.container}`,
      ...(dockerdArgs ? ['--env', `LAB_DOCKERD_ARGS=${dockerdArgs}`] : []),
      ...mounts.flatMap((mount) => ['-v', mount]),
      this.lab.image,
    ]);
  }

  /** Waits until lab-init reports sshd and dockerd up (/run/lab-ready). */
  async waitReady(timeoutMs = this.lab.readyTimeoutMs): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const probe = await docker(['exec', this.container, 'sh', '-c', 'if [ -e /run/lab-ready ]; then echo ready; elif [ -e /run/lab-failed ]; then echo failed; fi']);
      const answer = probe.stdout.trim();
      if (answer === 'ready') return;
      const status = await this.status();
      if (answer === 'failed' || status === 'exited' || status === 'dead' || status === 'missing' || Date.now() > deadline) {
        const logs = await docker(['logs', '--tail', '40', this.container]);
        const why = answer === 'failed' ? 'its dockerd did not start' : status !== 'running' ? `it is ${status}` : `not ready after ${timeoutMs} ms`;
        throw new Error(`machine ${this.name} (${this.container}) is not ready: ${why}\n${logs.stdout}${logs.stderr}`);
      }
      await sleep(200);
    }
  }

  /** `docker exec` (as root unless options.user): the command is a shell line (bash -c) or argv. */
  exec(command: string | string[], options: ExecOptions = {}): Promise<RunResult> {
    const argv = typeof command === 'string' ? ['bash', '-c', command] : command;
    return docker(['exec', '-i', ...(options.user ? ['--user', options.user] : []), this.container, ...argv], {
      input: options.input,
      timeoutMs: options.timeoutMs ?? 120_000,
    });
  }

  /** exec() that throws (with the output) unless the command succeeds; resolves to stdout, trimmed. */
  async sh(command: string | string[], options: ExecOptions = {}): Promise<string> {
    const result = await this.exec(command, options);
    if (result.code !== 0) {
      const shown = typeof command === 'string' ? command : command.join(' ');
      throw new Error(`${this.name}: \`${shown}\` failed (exit code ${result.code})\n${result.stdout}${result.stderr}`);
    }
    return result.stdout.trim();
  }

  async status(): Promise<MachineStatus> {
    const result = await docker(['inspect', '--format', '{{.State.Status}}', this.container]);
    return result.code === 0 ? (result.stdout.trim() as MachineStatus) : 'missing';
  }

  /** The address docker reports on the lab network ('' when cut off or stopped). */
  async currentAddress(): Promise<string> {
    const result = await dockerOk(['inspect', '--format', `{{with index .NetworkSettings.Networks "${this.lab.network}"}}{{.IPAddress}}{{end}}`, this.container]);
    return result.trim();
  }

  /** Graceful stop (SIGTERM: lab-init stops dockerd and sshd; SIGKILL after timeoutSeconds). */
  async stop(timeoutSeconds = 10): Promise<void> {
    await dockerOk(['stop', '--time', String(timeoutSeconds), this.container]);
  }

  /** Starts a stopped or killed machine and waits for sshd and dockerd (its /var/lib/docker starts empty: tmpfs). */
  async start(): Promise<void> {
    await dockerOk(['start', this.container]);
    await this.waitReady();
  }

  /** stop() then start(). */
  async restart(): Promise<void> {
    await this.stop();
    await this.start();
  }

  /** Power cut: SIGKILL to everything in the machine. */
  async kill(): Promise<void> {
    await dockerOk(['kill', this.container]);
  }

  /** Freezes every process (cgroup freezer): the address still answers ping, nothing else answers. */
  async pause(): Promise<void> {
    await dockerOk(['pause', this.container]);
  }

  async unpause(): Promise<void> {
    await dockerOk(['unpause', this.container]);
  }

  /** Cuts the machine off the lab network (it keeps only loopback and its own docker bridges). */
  async disconnect(): Promise<void> {
    await dockerOk(['network', 'disconnect', '--force', this.lab.network, this.container]);
    this.connected = false;
  }

  /** Puts the machine back on the lab network with the same address and name. */
  async reconnect(): Promise<void> {
    await dockerOk(['network', 'connect', '--ip', this.ip, '--alias', this.name, this.lab.network, this.container]);
    this.connected = true;
  }

  get isConnected(): boolean {
    return this.connected;
  }

  /** The machine's console (lab-init's output). */
  async logs(): Promise<string> {
    const result = await docker(['logs', this.container]);
    return result.stdout + result.stderr;
  }
}

async function listLabResources(): Promise<LeftoverResource[]> {
  const resources: LeftoverResource[] = [];
  const containerIds = (await dockerOk(['ps', '-aq', '--filter', `label=${LABEL}`])).split('\n').filter(Boolean);
  if (containerIds.length > 0) {
    const inspected = JSON.parse(await dockerOk(['inspect', ...containerIds])) as { Id: string; Name: string; Config: { Labels: Record<string, string> | null } }[];
    for (const c of inspected) resources.push({ kind: 'container', id: c.Id, name: c.Name.replace(/^\//, ''), labels: c.Config.Labels ?? {} });
  }
  const networkIds = (await dockerOk(['network', 'ls', '-q', '--filter', `label=${LABEL}`])).split('\n').filter(Boolean);
  if (networkIds.length > 0) {
    const inspected = JSON.parse(await dockerOk(['network', 'inspect', ...networkIds])) as { Id: string; Name: string; Labels: Record<string, string> | null }[];
    for (const n of inspected) resources.push({ kind: 'network', id: n.Id, name: n.Name, labels: n.Labels ?? {} });
  }
  return resources;
}

async function removeResources(resources: LeftoverResource[]): Promise<void> {
  const containers = resources.filter((r) => r.kind === 'container');
  if (containers.length > 0) await docker(['rm', '--force', '--volumes', ...containers.map((c) => c.id)]);
  for (const c of containers) removeMachineCgroups(c.name);
  const networks = resources.filter((r) => r.kind === 'network');
  if (networks.length > 0) await docker(['network', 'rm', ...networks.map((n) => n.id)]);
  unsealNetworks(networks.map((n) => n.id));
}

/** Removes the seals of lab networks (by full id: a lab network's bridge is br-<first 12 of its id>). */
function unsealNetworks(ids: string[]): void {
  for (const id of ids) unsealBridge(`br-${id.slice(0, 12)}`);
}

/** Everything the lab ever made on this docker (any run, any name). */
export async function listLab(): Promise<LeftoverResource[]> {
  return listLabResources();
}

/** Removes everything labelled hangar-lab (with a name: only that lab's), whoever made it. */
export async function removeAllLab(name?: string): Promise<number> {
  const resources = (await listLabResources()).filter((r) => !name || r.labels[`${LABEL}.name`] === name);
  await removeResources(resources);
  return resources.length;
}

/**
 * The machine's own dockerd makes cgroups under /hangar-lab/<container> of each host hierarchy
 * (--cgroupns=host); once the machine is gone they are empty and are removed (deepest first).
 */
function removeMachineCgroups(container: string): void {
  if (!existsSync('/sys/fs/cgroup')) return;
  const script = `for d in /sys/fs/cgroup/*/hangar-lab/${container} /sys/fs/cgroup/hangar-lab/${container}; do [ -d "$d" ] && find "$d" -depth -type d -exec rmdir {} + 2>/dev/null; done; true`;
  spawnSync('sh', ['-c', script], { stdio: 'ignore', timeout: 10_000 });
}
