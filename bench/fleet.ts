// The pieces the fleet benchmarks share (bench/agents.ts, bench/notifications.ts): a control plane
// started as an operator runs it (bin/hangar serve, the production build), the simulated agents'
// generator processes (bench/agents-generator.ts), and a fleet joined and heard from.
import { fork, spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import knexFactory from 'knex';
import { httpRequest } from '../core/http/client.js';
import { randomToken } from '../core/ids.js';
import type { FromGenerator, GeneratorStart, ToGenerator } from './agents-generator.js';

/** How long the fleet may take to be heard from after it starts, before the measurement starts anyway. */
export const ONLINE_LIMIT_S = 300;
const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');
const LAUNCHER = path.join(ROOT, 'bin', 'hangar');

export interface ControlPlaneOptions {
  pgUrl: string;
  workers: string;
  intervalS: number;
  /** HANGAR_PLUGINS (default: what the agents need). */
  plugins?: string;
  /** More of the control plane's environment (configuration). */
  env?: NodeJS.ProcessEnv;
}

/** Runs `work` every 1/perSecond seconds for `seconds`, not waiting for one to finish before the next. */
export async function paced(perSecond: number, seconds: number, work: (i: number) => Promise<void>): Promise<void> {
  if (perSecond <= 0) return;
  const gap = 1000 / perSecond;
  const end = Date.now() + seconds * 1000;
  const running: Array<Promise<void>> = [];
  let i = 0;
  for (let next = Date.now(); next < end; next += gap) {
    await new Promise((r) => setTimeout(r, Math.max(0, next - Date.now())));
    running.push(work(i++).catch(() => undefined));
  }
  await Promise.all(running);
}

export function percentile(values: number[], p: number): number {
  if (!values.length) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

/** Sums per-reason counts from several sources. */
export function mergeCounts(all: Array<Record<string, number>>): Record<string, number> {
  const sum: Record<string, number> = {};
  for (const counts of all) for (const [why, count] of Object.entries(counts)) sum[why] = (sum[why] ?? 0) + count;
  return sum;
}

export const ms = (v: number) => (Number.isNaN(v) ? '   n/a' : `${v.toFixed(1).padStart(6)}`);

export interface ControlPlane {
  child: ChildProcess;
  url: string;
  ca: string;
  /** Where its store is, for a bench that seeds records no API makes without a real cluster. */
  store: { dialect: string; sqliteFile: string; pgUrl: string; schema: string };
  stop(): Promise<void>;
}

function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const server = net.createServer().listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

export async function startControlPlane(dialect: string, options: ControlPlaneOptions): Promise<ControlPlane> {
  const PG_URL = options.pgUrl;
  const port = await freePort();
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'hangar-bench-'));
  const schema = `bench_${randomToken(8)}`;
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    NODE_ENV: 'production',
    HANGAR_DATA_DIR: dataDir,
    HANGAR_API__HOST: '127.0.0.1',
    HANGAR_API__PORT: String(port),
    // The access log at info would measure the log (BENCH_ACCESS_LOG=1 keeps it, for diagnosis).
    HANGAR_LOG__LEVEL: process.env.BENCH_ACCESS_LOG ? 'info' : 'warn',
    HANGAR_PLUGINS: options.plugins ?? 'system,iam,nodes,agent-internal',
    HANGAR_API__WORKERS: options.workers,
    HANGAR_NODES__HEARTBEAT_INTERVAL_SECONDS: String(options.intervalS),
    HANGAR_NODES__OFFLINE_AFTER_SECONDS: String(options.intervalS * 4),
    HANGAR_IAM__ANNOUNCE_BOOTSTRAP_SECRET: 'false',
    ...options.env,
    // BENCH_PG_POOL_MAX: database.pool_max on PostgreSQL (10, the default, unless set).
    ...(dialect === 'postgres' ? { HANGAR_DATABASE__URL: PG_URL, HANGAR_DATABASE__SCHEMA: schema, HANGAR_DATABASE__POOL_MAX: process.env.BENCH_PG_POOL_MAX ?? '10', HANGAR_SECRETS__MASTER_KEY: Buffer.alloc(32, 'bench').toString('base64') } : {}),
  };
  const logFile = process.env.BENCH_ACCESS_LOG ? (await import('node:fs')).openSync(`/tmp/bench-access-${dialect}.log`, 'w') : 'inherit';
  // BENCH_CPU_PROF=DIR: the control plane writes a CPU profile there when it stops (node --cpu-prof).
  if (process.env.BENCH_CPU_PROF) env.NODE_OPTIONS = `${env.NODE_OPTIONS ?? ''} --cpu-prof --cpu-prof-dir=${process.env.BENCH_CPU_PROF}`;
  // The hangar command as an operator runs it: the launcher (bin/hangar) sets Node up for `serve`.
  const child = spawn(LAUNCHER, ['serve'], { env: { ...env, NODE: process.env.BENCH_NODE ?? process.execPath }, stdio: ['ignore', logFile, 'inherit'] });
  const url = `https://127.0.0.1:${port}`;
  for (let i = 0; ; i++) {
    const up = await httpRequest(`${url}/healthz`, { ca: false }).catch(() => null);
    if (up?.status === 200) break;
    if (i > 600 || child.exitCode !== null) throw new Error('the control plane did not come up');
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    child,
    url,
    ca: readFileSync(path.join(dataDir, 'pki', 'ca.crt'), 'utf8'),
    store: { dialect, sqliteFile: path.join(dataDir, 'hangar.db'), pgUrl: PG_URL, schema },
    async stop() {
      const exited = new Promise((r) => child.once('exit', r));
      child.kill('SIGTERM');
      await exited;
      rmSync(dataDir, { recursive: true, force: true });
      if (dialect === 'postgres') {
        const knex = knexFactory({ client: 'pg', connection: PG_URL, pool: { min: 0, max: 1 } });
        await knex.raw(`drop schema if exists "${schema}" cascade`);
        await knex.destroy();
      }
    },
  };
}

export interface Generator {
  child: ChildProcess;
  next<T extends FromGenerator['type']>(type: T): Promise<Extract<FromGenerator, { type: T }>>;
  send(message: ToGenerator): void;
}

export function startGenerator(onTasks: (arrivals: Array<[string, number]>) => void): Generator {
  const child = fork(path.join(ROOT, 'bench', 'agents-generator.ts'), [], { execArgv: ['--import', 'tsx'], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  const waiting = new Map<string, { resolve: (m: FromGenerator) => void; reject: (err: Error) => void }>();
  child.on('message', (message: FromGenerator) => {
    if (message.type === 'tasks') onTasks(message.arrivals);
    else waiting.get(message.type)?.resolve(message);
  });
  child.once('exit', (code) => {
    for (const { reject } of waiting.values()) reject(new Error(`a generator exited with ${code}`));
  });
  return {
    child,
    next: (type) =>
      new Promise((resolve, reject) => {
        waiting.set(type, { resolve: resolve as (m: FromGenerator) => void, reject });
      }),
    send: (message) => child.send(message),
  };
}

export interface Fleet {
  jwt: string;
  generators: Generator[];
  nodeIds: string[];
  enrolS: number;
  onlineS: number;
}

/**
 * Claims the control plane, joins `n` simulated agents in `count` generator processes and waits
 * until every one has had a heartbeat answered (at most ONLINE_LIMIT_S), then one announced
 * interval more: the steady state. Generators are pushed to `generators` as they start, so the
 * caller can stop them whatever happens.
 */
export async function startFleet(cp: ControlPlane, options: { n: number; count: number; intervalS: number; protocol: 'h2' | 'http/1.1'; generators: Generator[]; onTasks(arrivals: Array<[string, number]>): void }): Promise<Fleet> {
  const { n, intervalS, generators, onTasks } = options;
  const boot = await httpRequest(`${cp.url}/v1/bootstrap`, { method: 'POST', ca: cp.ca, body: {} });
  const login = await httpRequest(`${cp.url}/v1/iam/login`, { method: 'POST', ca: cp.ca, body: { username: 'admin', password: boot.json.data.password } });
  const jwt = login.json.data.token as string;
  const share = Math.ceil(n / options.count);
  const enrolStart = Date.now();
  for (let g = 0; g < options.count && g * share < n; g++) {
    const gen = startGenerator(onTasks);
    generators.push(gen);
    const start: GeneratorStart = { type: 'start', url: cp.url, ca: cp.ca, jwt, count: Math.min(share, n - g * share), offset: g * share, intervalSeconds: intervalS, protocol: options.protocol };
    gen.send(start);
  }
  const enrolled = await Promise.all(generators.map((g) => g.next('enrolled')));
  const enrolS = (Date.now() - enrolStart) / 1000;
  const nodeIds = enrolled.flatMap((e) => e.nodeIds);

  // The fleet starts at once (as after a control-plane restart): the time until every agent has had
  // a heartbeat answered is reported; then one announced interval more, and the steady state is measured.
  const onlineStart = Date.now();
  let announced = intervalS;
  for (;;) {
    const statuses = await Promise.all(
      generators.map((g) => {
        const status = g.next('status');
        g.send({ type: 'status' });
        return status;
      }),
    );
    announced = Math.max(...statuses.map((s) => s.intervalSeconds));
    if (statuses.reduce((sum, s) => sum + s.heard, 0) >= n || Date.now() - onlineStart > ONLINE_LIMIT_S * 1000) break;
    await new Promise((r) => setTimeout(r, 1000));
  }
  const onlineS = (Date.now() - onlineStart) / 1000;
  await new Promise((r) => setTimeout(r, announced * 1000));
  return { jwt, generators, nodeIds, enrolS, onlineS };
}

/**
 * The first admin of a control plane just started: claims it (POST /v1/bootstrap), logs in, and
 * answers a caller of its API with that token (the answer's `data`; a status of 300 or more throws,
 * with the body).
 */
export async function adminApi(plane: Pick<ControlPlane, 'url' | 'ca'>): Promise<(method: string, path: string, body?: unknown) => Promise<any>> {
  const boot = await httpRequest(`${plane.url}/v1/bootstrap`, { method: 'POST', ca: plane.ca, body: {} });
  const login = await httpRequest(`${plane.url}/v1/iam/login`, { method: 'POST', ca: plane.ca, body: { username: 'admin', password: boot.json.data.password } });
  const headers = { authorization: `Bearer ${login.json.data.token as string}` };
  return async (method, p, body) => {
    const res = await httpRequest(`${plane.url}${p}`, { method, ca: plane.ca, headers, body });
    if (res.status >= 300) throw new Error(`${method} ${p}: ${res.status} ${res.text}`);
    return res.json?.data;
  };
}
