/**
 * The real upstream Kubernetes control plane for tests — etcd, kube-apiserver,
 * kube-controller-manager and kube-scheduler, built from the Go module proxy (lab/kube,
 * scripts/kube-build.sh) — with kwok simulating the nodes and the pods on them: nodes report
 * Ready, pods bound to them go Running, no container runs. See docs/kubernetes.md ("Test
 * infrastructure").
 *
 *   before(async function () {
 *     this.timeout(KUBE_START_TIMEOUT_MS);          // the first run on a machine builds it
 *     const available = await kubeAvailability();
 *     requireService(this, available.ok, available.why);
 *     kube = await KubeControlPlane.start({ nodes: 3 });
 *   });
 *   after(() => kube?.stop());
 *   …  kube.api(CoreV1Api).listNode()
 *
 * Everything listens on loopback on free ports; certificates (a CA, the API server's serving
 * certificate, the service-account signing key, client certificates) and the admin kubeconfig are
 * made in a temporary folder, removed by stop(). The processes cannot outlive the test run: the
 * control plane stops when its stdin (a pipe from this process) closes, which happens even when
 * this process is killed, and its children die with it (see `kube control-plane` in lab/kube).
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { appendFileSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { waitFor } from './agents.js';
import { CoreV1Api, KubeConfig, type ApiConstructor, type ApiType, type V1Node } from '@kubernetes/client-node';

const REPO = fileURLToPath(new URL('../../', import.meta.url));
export const KUBE_BUILD_SCRIPT = join(REPO, 'scripts', 'kube-build.sh');

/**
 * How long a before hook may take when it may have to build the control plane: a cold build on
 * a 2-core machine takes an estimated 11–13 minutes idle, 40 on a loaded one (docs/kubernetes.md);
 * in CI it runs in the background from the start of .ci/run and the suites wait for it.
 */
export const KUBE_START_TIMEOUT_MS = 50 * 60_000;

/** Nodes kwok plays the kubelet of carry this annotation (and `type: kwok` as a label). */
export const KWOK_NODE_ANNOTATION = 'kwok.x-k8s.io/node';

const TEMP_PREFIX = 'hangar-kube-';

/** In the control plane's folder: the file kwok serves as every container's log (lab/kube PodLogsFile). */
const POD_LOGS_FILE = 'pod-logs.log';

/** Where the built executable is, or would be. */
function builtPath(): { path: string; built: boolean } {
  const result = spawnSync('bash', [KUBE_BUILD_SCRIPT, '--path'], { encoding: 'utf8' });
  return { path: result.stdout.trim(), built: result.status === 0 };
}

/** Whether the control plane can run here: it is built, or Go is there to build it. */
export async function kubeAvailability(): Promise<{ ok: boolean; why: string }> {
  const why = 'the Kubernetes control plane (Go >= 1.24 and the Go module proxy to build lab/kube with scripts/kube-build.sh, or a finished build in its cache)';
  if (builtPath().built) return { ok: true, why };
  const go = spawnSync('sh', ['-c', 'command -v go'], { encoding: 'utf8' });
  return { ok: go.status === 0, why };
}

let building: Promise<string> | undefined;

/**
 * The path of the `kube` executable, built first when the cache lacks it (once per process; on
 * the machine, one build at a time: a second caller waits for the first). Build progress goes to
 * stderr. A failed build throws with the end of the build log.
 */
export function ensureKubeBuild(): Promise<string> {
  building ??= new Promise<string>((resolve, reject) => {
    const child = spawn('bash', [KUBE_BUILD_SCRIPT], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => {
      stderr += chunk.toString();
      process.stderr.write(chunk);
    });
    child.on('error', reject);
    child.on('close', (code) => {
      const path = stdout.trim().split('\n').pop() ?? '';
      if (code === 0 && path && existsSync(path)) resolve(path);
      else reject(new Error(`building the Kubernetes control plane failed (scripts/kube-build.sh exited with ${code}):\n${stderr.trim()}`));
    });
  }).catch((error: unknown) => {
    building = undefined; // the next suite tries again (the Go caches keep what was compiled)
    throw error;
  });
  return building;
}

export interface KubeStartOptions {
  /** How many kwok nodes to create (named kwok-node-1, …), waiting until they are Ready. Default 0. */
  nodes?: number;
  /** Milliseconds to wait for the control plane to be ready. Default 3 minutes. */
  readyTimeoutMs?: number;
}

interface ReadyLine {
  ready: true;
  server: string;
  kubeconfig: string;
  pids: Record<string, number>;
  seconds: number;
}

/** Control planes of this process that have not been stopped: killed synchronously on exit. */
const running = new Set<KubeControlPlane>();
let exitHookInstalled = false;

function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Removes the temporary folders of earlier runs whose process is gone (start() does, first). */
export function removeStaleFolders(): void {
  for (const entry of readdirSync(tmpdir())) {
    const match = new RegExp(`^${TEMP_PREFIX}(\\d+)-`).exec(entry);
    if (match && !pidAlive(Number(match[1]))) rmSync(join(tmpdir(), entry), { recursive: true, force: true });
  }
}

export function nodeReady(node: V1Node): boolean {
  return node.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false;
}

/** A running control plane (see the module comment). */
export class KubeControlPlane {
  /** The API server's URL (https://127.0.0.1:<port>). */
  readonly server: string;
  /** The admin kubeconfig (client certificate of system:admin, group system:masters). */
  readonly kubeconfigPath: string;
  readonly kubeConfig: KubeConfig;
  /** The component processes by name (etcd, kube-apiserver, …, kwok). */
  readonly pids: Readonly<Record<string, number>>;
  /** Seconds from starting the processes to the API server's /readyz. */
  readonly startSeconds: number;
  private stopped = false;

  private constructor(
    /** The `kube` executable (kubectl: `${kube.executable} kubectl …`). */
    readonly executable: string,
    /** Certificates, kubeconfigs, the etcd data and the components' logs (logs/<name>.log). */
    readonly dir: string,
    private readonly child: ChildProcess,
    ready: ReadyLine,
    private readonly output: () => string,
  ) {
    this.server = ready.server;
    this.kubeconfigPath = ready.kubeconfig;
    this.pids = ready.pids;
    this.startSeconds = ready.seconds;
    this.kubeConfig = new KubeConfig();
    this.kubeConfig.loadFromFile(this.kubeconfigPath);
  }

  /** Builds when needed, starts the control plane and kwok, creates options.nodes kwok nodes. */
  static async start(options: KubeStartOptions = {}): Promise<KubeControlPlane> {
    const executable = await ensureKubeBuild();
    removeStaleFolders();
    const dir = mkdtempSync(join(tmpdir(), `${TEMP_PREFIX}${process.pid}-`));
    const child = spawn(executable, ['control-plane', '--data-dir', dir, '--exit-on-stdin-close'], {
      stdio: ['pipe', 'pipe', 'pipe'],
      detached: true, // its own process group: stop() can end every process of it at once
    });
    let output = '';
    child.stderr?.on('data', (chunk: Buffer) => (output += chunk.toString()));
    let ready: ReadyLine;
    try {
      ready = await new Promise<ReadyLine>((resolve, reject) => {
        let stdout = '';
        const timer = setTimeout(() => reject(new Error(`the control plane was not ready after ${options.readyTimeoutMs ?? 180_000} ms`)), options.readyTimeoutMs ?? 180_000);
        child.stdout?.on('data', (chunk: Buffer) => {
          stdout += chunk.toString();
          const line = stdout.split('\n').find((l) => l.startsWith('{'));
          if (line) {
            clearTimeout(timer);
            resolve(JSON.parse(line) as ReadyLine);
          }
        });
        child.on('error', (error) => {
          clearTimeout(timer);
          reject(error);
        });
        child.on('exit', (code, signal) => {
          clearTimeout(timer);
          reject(new Error(`the control plane exited (${signal ?? `code ${code}`}) before it was ready`));
        });
      });
    } catch (error) {
      killGroup(child);
      rmSync(dir, { recursive: true, force: true });
      throw new Error(`${(error as Error).message}\n${output.trim()}`, { cause: error });
    }
    const kube = new KubeControlPlane(executable, dir, child, ready, () => output);
    installExitHook();
    running.add(kube);
    await kube.defaultServiceAccount();
    if (options.nodes) await kube.addNodes(Array.from({ length: options.nodes }, (_, i) => `kwok-node-${i + 1}`));
    return kube;
  }

  /**
   * Waits for the service-account controller to make `default/default`: until then the API server
   * refuses every pod of the namespace ("error looking up service account").
   */
  private async defaultServiceAccount(): Promise<void> {
    const core = this.api(CoreV1Api);
    await waitFor(
      async () => {
        try {
          return await core.readNamespacedServiceAccount({ name: 'default', namespace: 'default' });
        } catch {
          return undefined;
        }
      },
      { what: 'the default service account', timeoutMs: 60_000, intervalMs: 200 },
    );
  }

  /**
   * Appends lines to what kwok serves as the log of every container of every pod (no container
   * runs: lab/kube writes kwok a ClusterLogs rule pointing at this file). Each line is written in
   * the CRI log format the kubelet reads: `<RFC 3339 time> <stream> F <text>`.
   */
  appendPodLog(lines: Array<{ text: string; stream?: 'stdout' | 'stderr'; time?: Date }>): void {
    const cri = lines.map((l) => `${(l.time ?? new Date()).toISOString()} ${l.stream ?? 'stdout'} F ${l.text}\n`).join('');
    appendFileSync(join(this.dir, POD_LOGS_FILE), cri);
  }

  /** An API client of the given group/version (e.g. CoreV1Api) with the admin credentials. */
  api<T extends ApiType>(apiClass: ApiConstructor<T>): T {
    return this.kubeConfig.makeApiClient(apiClass);
  }

  /** Creates Node objects that kwok manages and waits until every one reports Ready. */
  async addNodes(names: string[], timeoutMs = 60_000): Promise<V1Node[]> {
    const core = this.api(CoreV1Api);
    for (const name of names) {
      await core.createNode({
        body: {
          metadata: {
            name,
            annotations: { [KWOK_NODE_ANNOTATION]: 'fake' },
            labels: { 'kubernetes.io/hostname': name, 'kubernetes.io/os': 'linux', 'kubernetes.io/arch': 'amd64', type: 'kwok' },
          },
        },
      });
    }
    return waitFor(
      async () => {
        const nodes = await Promise.all(names.map((name) => core.readNode({ name })));
        return nodes.every(nodeReady) ? nodes : undefined;
      },
      { what: `nodes ${names.join(', ')} Ready`, timeoutMs, intervalMs: 250 },
    );
  }

  /** The `kube control-plane` process that supervises the components. */
  get supervisorPid(): number {
    return this.child.pid ?? 0;
  }

  /** A component's log so far (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok). */
  log(component: string): string {
    const path = join(this.dir, 'logs', `${component}.log`);
    return existsSync(path) ? readFileSync(path, 'utf8') : '';
  }

  /** What the control-plane process itself reported (component start times, failures). */
  get controlPlaneOutput(): string {
    return this.output();
  }

  /** Runs the upstream kubectl against this control plane: { code, stdout, stderr }. */
  kubectl(args: string[]): { code: number; stdout: string; stderr: string } {
    const result = spawnSync(this.executable, ['kubectl', '--kubeconfig', this.kubeconfigPath, ...args], { encoding: 'utf8', timeout: 60_000 });
    return { code: result.status ?? 1, stdout: result.stdout, stderr: result.stderr };
  }

  /**
   * Stops every process (gracefully: the control plane stops its components and waits for them;
   * SIGKILL to its process group after 30 s) and removes the folder.
   */
  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    running.delete(this);
    if (this.child.exitCode === null && this.child.signalCode === null) {
      const exited = new Promise<void>((resolve) => this.child.once('exit', () => resolve()));
      this.child.stdin?.end(); // the control plane's signal to stop (see --exit-on-stdin-close)
      const timer = setTimeout(() => killGroup(this.child), 30_000);
      await exited;
      clearTimeout(timer);
    }
    rmSync(this.dir, { recursive: true, force: true });
  }

  /** stop() for process exit, where nothing asynchronous runs. */
  stopSync(): void {
    if (this.stopped) return;
    this.stopped = true;
    running.delete(this);
    killGroup(this.child);
    rmSync(this.dir, { recursive: true, force: true });
  }
}

function killGroup(child: ChildProcess): void {
  if (!child.pid) return;
  try {
    process.kill(-child.pid, 'SIGKILL');
  } catch {
    // the group is gone already
  }
}

function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.on('exit', () => {
    for (const kube of running) kube.stopSync();
  });
}
