/**
 * A real S3 server for tests: SeaweedFS's `weed server -s3` (master, volume server, filer and S3
 * gateway in one process), built from the Go module proxy by scripts/s3-build.sh (lab/s3). See
 * docs/lab.md ("The S3 server").
 *
 *   before(async function () {
 *     this.timeout(S3_START_TIMEOUT_MS);          // the first run on a machine may build it
 *     const available = s3Availability();
 *     requireService(this, available.ok, available.why);
 *     s3 = await S3Server.start();                // or { host: lab.gateway } for a lab's machines
 *   });
 *   after(() => s3?.stop());
 *   …  const bucket = await s3.bucket('photos'); await bucket.put('a.txt', 'hello');
 *      s3.client()  // an S3Client (test/support/s3-client.ts) with this run's credentials
 *
 * Every run gets a temporary data folder, free ports and its own credentials (an access key and a
 * 40-character secret); the S3 API answers only requests signed with them. SeaweedFS's other
 * listeners (master, volume server, filer, gRPC) are on 127.0.0.1; the S3 port on `host` (default
 * 127.0.0.1). Telemetry is off: nothing leaves the machine. The server cannot outlive the test run:
 * it is stopped when its stdin (a pipe from this process) closes, which happens even when this
 * process is killed; stop() (and, on exit, a synchronous hook) ends its process group; leftover
 * folders of dead runs are removed by the next start.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { waitFor } from './agents.js';
import { S3Client, type S3Credentials } from './s3-client.js';
import { freePort } from './ports.js';
import { SharedService } from './shared-service.js';

const REPO = fileURLToPath(new URL('../../', import.meta.url));
export const S3_BUILD_SCRIPT = join(REPO, 'scripts', 's3-build.sh');

/**
 * How long a before hook may take when it may have to build the server: a cold build is ~25
 * CPU-minutes plus ~2 GB of module downloads (docs/lab.md); in CI it runs in the background from
 * the start of .ci/run and the suites wait for it.
 */
export const S3_START_TIMEOUT_MS = 60 * 60_000;

const TEMP_PREFIX = 'hangar-s3-server-';

/** Where the built weed executable is, or would be (the MinIO stand-in's executable is beside it). */
export function s3BuildPath(): { path: string; built: boolean } {
  const result = spawnSync('bash', [S3_BUILD_SCRIPT, '--path'], { encoding: 'utf8' });
  return { path: result.stdout.trim(), built: result.status === 0 };
}

/** Whether the S3 server can run here: it is built, or a Go new enough to build it is there. */
export function s3Availability(): { ok: boolean; why: string } {
  const why = 'the S3 server (SeaweedFS, built from the Go module proxy by bash scripts/s3-build.sh: Go >= 1.26.6, or a finished build in its cache)';
  if (s3BuildPath().built) return { ok: true, why };
  const go = spawnSync('sh', ['-c', 'command -v go'], { encoding: 'utf8' });
  return { ok: go.status === 0, why };
}

let building: Promise<string> | undefined;

/**
 * The path of the `weed` executable, built first when the cache lacks it (once per process; on the
 * machine one build at a time: a second caller, such as .ci/run's background build, is waited for).
 * Build progress goes to stderr. A failed build throws with the end of the build log.
 */
export function ensureS3Build(): Promise<string> {
  building ??= new Promise<string>((resolve, reject) => {
    const child = spawn('bash', [S3_BUILD_SCRIPT], { stdio: ['ignore', 'pipe', 'pipe'] });
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
      else reject(new Error(`building the S3 server failed (scripts/s3-build.sh exited with ${code}):\n${stderr.trim()}`));
    });
  }).catch((error: unknown) => {
    building = undefined;
    throw error;
  });
  return building;
}

/** The folder holding weed and minio-standin (what the lab mounts at /opt/hangar-s3). */
export async function ensureS3BuildFolder(): Promise<string> {
  return dirname(await ensureS3Build());
}

function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

function removeStaleFolders(): void {
  for (const entry of readdirSync(tmpdir())) {
    const match = new RegExp(`^${TEMP_PREFIX}(\\d+)-`).exec(entry);
    if (match && !pidAlive(Number(match[1]))) rmSync(join(tmpdir(), entry), { recursive: true, force: true });
  }
}

/** A bucket of a running server, with the object operations tests use. */
export interface S3Bucket {
  name: string;
  put(key: string, body: string | Buffer): Promise<{ etag: string }>;
  get(key: string): Promise<Buffer>;
  list(prefix?: string): Promise<string[]>;
  delete(key: string): Promise<void>;
}

export interface S3StartOptions {
  /** The address the S3 API listens on (default 127.0.0.1); e.g. a lab's gateway for its machines. */
  host?: string;
  /** Milliseconds to wait for the S3 API to answer (then for a first object to be stored). Default 2 minutes. */
  readyTimeoutMs?: number;
}

const running = new Set<S3Server>();
let exitHookInstalled = false;

/** A running SeaweedFS with its S3 gateway (see the module comment). */
export class S3Server {
  private stopped = false;

  private constructor(
    /** The weed executable. */
    readonly executable: string,
    /** The temporary folder: data/ (SeaweedFS's volumes and filer metadata), s3.json, weed.log. */
    readonly dir: string,
    /** http://host:port of the S3 API. */
    readonly endpoint: string,
    readonly credentials: S3Credentials,
    private readonly child: ChildProcess,
    /** Seconds from spawning weed to a first object stored (a signed ListBuckets answered, then a probe bucket's put). */
    readonly startSeconds: number,
  ) {}

  static async start(options: S3StartOptions = {}): Promise<S3Server> {
    const executable = await ensureS3Build();
    removeStaleFolders();
    const host = options.host ?? '127.0.0.1';
    const dir = mkdtempSync(join(tmpdir(), `${TEMP_PREFIX}${process.pid}-`));
    const data = join(dir, 'data');
    mkdirSync(data);
    const credentials: S3Credentials = { accessKeyId: `hangar-test-${randomBytes(4).toString('hex')}`, secretAccessKey: randomBytes(30).toString('base64url') };
    const config = join(dir, 's3.json');
    const identity = { name: 'hangar-test', credentials: [{ accessKey: credentials.accessKeyId, secretKey: credentials.secretAccessKey }], actions: ['Admin', 'Read', 'List', 'Tagging', 'Write'] };
    writeFileSync(config, JSON.stringify({ identities: [identity] }), { mode: 0o600 });
    const ports: number[] = [];
    while (ports.length < 7) {
      const port = await freePort('127.0.0.1');
      if (!ports.includes(port)) ports.push(port);
    }
    const s3Port = await freePort(host);
    const [masterPort, masterGrpc, volumePort, volumeGrpc, filerPort, filerGrpc, s3Grpc] = ports as [number, number, number, number, number, number, number];
    const args = [
      `-logdir=${dir}`,
      'server',
      `-dir=${data}`,
      '-ip=127.0.0.1',
      '-ip.bind=127.0.0.1',
      `-master.port=${masterPort}`,
      `-master.port.grpc=${masterGrpc}`,
      '-master.telemetry=false',
      '-master.telemetry.url=',
      '-master.volumeSizeLimitMB=64',
      `-volume.port=${volumePort}`,
      `-volume.port.grpc=${volumeGrpc}`,
      '-volume.max=0',
      '-volume.preStopSeconds=0',
      '-filer',
      `-filer.port=${filerPort}`,
      `-filer.port.grpc=${filerGrpc}`,
      '-s3',
      `-s3.ip.bind=${host}`,
      `-s3.port=${s3Port}`,
      `-s3.port.grpc=${s3Grpc}`,
      '-s3.port.iceberg=0',
      '-s3.port.lance=0',
      `-s3.config=${config}`,
    ];
    // bash keeps weed's lifetime tied to its stdin: when the pipe from this process closes (stop(),
    // or this process dying however it dies) weed gets SIGTERM, then SIGKILL 3 s later (weed closes
    // its volume server and filer within a second of SIGTERM but does not end: SeaweedFS 4.53).
    // (A background job's stdin is /dev/null unless redirected: the pipe is kept as fd 3 for it.)
    const watchdog = 'exec 3<&0; weed=$1; shift; "$weed" "$@" </dev/null >>"$LOG" 2>&1 & pid=$!; { cat <&3 >/dev/null; kill -TERM "$pid" 2>/dev/null; sleep 3; kill -KILL "$pid" 2>/dev/null; } & wait "$pid"';
    const started = Date.now();
    const child = spawn('bash', ['-c', watchdog, 'bash', executable, ...args], {
      cwd: dir,
      stdio: ['pipe', 'ignore', 'ignore'],
      detached: true, // its own process group: stop() can end every process of it at once
      env: { ...process.env, LOG: join(dir, 'weed.log'), AWS_ACCESS_KEY_ID: '', AWS_SECRET_ACCESS_KEY: '' },
    });
    const endpoint = `http://${host.includes(':') ? `[${host}]` : host}:${s3Port}`;
    const server = new S3Server(executable, dir, endpoint, credentials, child, 0);
    installExitHook();
    running.add(server);
    const client = server.client();
    try {
      await waitFor(
        async () => {
          if (child.exitCode !== null) throw new Error(`weed exited with code ${child.exitCode} before it was ready`);
          try {
            return (await client.request('GET', '/')).status === 200;
          } catch {
            return false;
          }
        },
        { what: `the S3 API at ${endpoint}`, timeoutMs: options.readyTimeoutMs ?? 120_000, intervalMs: 250 },
      );
      // A fresh SeaweedFS holds back its first volume allocation for a few seconds, and until its
      // master has elected itself a bucket's create may answer 404 ("volume id … not found"): a
      // first write is tried until it goes through, so that tests get a server that stores objects at once.
      let refused: Error | null = null;
      await waitFor(
        async () => {
          if (child.exitCode !== null) throw new Error(`weed exited with code ${child.exitCode} before it stored an object`);
          const probe = `hangar-ready-${randomBytes(4).toString('hex')}`;
          try {
            await client.createBucket(probe);
            await client.putObject(probe, 'probe', 'ready');
            await client.deleteObject(probe, 'probe');
            await client.deleteBucket(probe);
            return true;
          } catch (error) {
            refused = error as Error;
            return false;
          }
        },
        { what: `a first object stored at ${endpoint}`, timeoutMs: options.readyTimeoutMs ?? 120_000, intervalMs: 500 },
      ).catch((error: Error) => {
        throw refused ? new Error(`${error.message}: ${refused.message}`, { cause: refused }) : error;
      });
    } catch (error) {
      const log = server.log().split('\n').slice(-30).join('\n');
      server.stopSync();
      throw new Error(`${(error as Error).message}\nthe end of weed's log:\n${log}`, { cause: error });
    }
    (server as { startSeconds: number }).startSeconds = (Date.now() - started) / 1000;
    return server;
  }

  /** An S3 client with this run's credentials (`connect` to reach it another way). */
  client(options: { connect?: string } = {}): S3Client {
    return new S3Client({ endpoint: this.endpoint, connect: options.connect, credentials: this.credentials });
  }

  /** Creates a bucket (a unique name unless given) and returns its object operations. */
  async bucket(name = `test-${randomBytes(4).toString('hex')}`): Promise<S3Bucket> {
    const client = this.client();
    await client.createBucket(name);
    return {
      name,
      put: (key, body) => client.putObject(name, key, body),
      get: (key) => client.getObject(name, key),
      list: (prefix) => client.listObjects(name, prefix),
      delete: (key) => client.deleteObject(name, key),
    };
  }

  /** weed's output so far (its glog files are in `dir` too). */
  log(): string {
    const path = join(this.dir, 'weed.log');
    return existsSync(path) ? readFileSync(path, 'utf8') : '';
  }

  get pid(): number {
    return this.child.pid ?? 0;
  }

  /** Stops weed (SIGTERM through its watchdog, SIGKILL 3 s later; SIGKILL to the group after 20 s) and removes the folder. */
  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    running.delete(this);
    if (this.child.exitCode === null && this.child.signalCode === null) {
      const exited = new Promise<void>((resolve) => this.child.once('exit', () => resolve()));
      this.child.stdin?.end();
      const timer = setTimeout(() => killGroup(this.child), 20_000);
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
    for (const server of running) server.stopSync();
  });
}

const sharedOnLoopback = new SharedService('the S3 server', () => S3Server.start(), (server) => server.stop());

/**
 * The S3 server on 127.0.0.1 that the suites of this process share (test/support/shared-service.ts):
 * started by the first, kept for the next; each suite uses buckets of its own. Give it back with
 * releaseSharedS3Server() in the after hook of the suite that got it.
 */
export function sharedS3Server(): Promise<S3Server> {
  return sharedOnLoopback.acquire();
}

export function releaseSharedS3Server(): void {
  sharedOnLoopback.release();
}
