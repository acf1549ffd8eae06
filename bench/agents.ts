// Benchmark: N simulated agents (real mTLS, real heartbeats and long-polls) against a real control
// plane in its own process. Prints heartbeat latency, dispatch latency (enqueue → agent has it),
// and the control plane's CPU and RSS, per N and dialect, with the ratios to the targets.
//
//   npx tsx bench/agents.ts [--n 100,1000,5000] [--dialects sqlite,postgres] [--duration 60] [--interval 10]
//
// Target (docs/performance.md): 5 000 agents at a 10 s heartbeat on this 2-core machine with
// heartbeat p99 < 50 ms and dispatch p99 < 100 ms. The load generator shares the machine's two
// cores with the control plane, so figures are pessimistic.
import { spawn, type ChildProcess } from 'node:child_process';
import { generateKeyPairSync } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import https from 'node:https';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import knexFactory from 'knex';
import { httpRequest } from '../core/http/client.js';
import { randomToken } from '../core/ids.js';

const args = parseArgs({
  options: {
    n: { type: 'string', default: '100,1000,5000' },
    dialects: { type: 'string', default: 'sqlite,postgres' },
    duration: { type: 'string', default: '60' },
    interval: { type: 'string', default: '10' },
    dispatches: { type: 'string', default: '200' },
    'pg-url': { type: 'string', default: process.env.HANGAR_TEST_PG_URL ?? 'postgres://hangar:hangar@127.0.0.1:5432/hangar_test' },
  },
});
const COUNTS = args.values.n!.split(',').map(Number);
const DIALECTS = args.values.dialects!.split(',');
const DURATION_S = Number(args.values.duration);
const INTERVAL_S = Number(args.values.interval);
const DISPATCHES = Number(args.values.dispatches);
const PG_URL = args.values['pg-url']!;
const BIN = path.resolve('bin/hangar.mjs');

function percentile(values: number[], p: number): number {
  if (!values.length) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

const ms = (v: number) => (Number.isNaN(v) ? '   n/a' : `${v.toFixed(1).padStart(6)}`);

function cpuSeconds(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100; // utime + stime, in clock ticks of 1/100 s
}

function rssMb(pid: number): number {
  return Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]) / 1024;
}

interface ControlPlane {
  child: ChildProcess;
  url: string;
  ca: string;
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

async function startControlPlane(dialect: string): Promise<ControlPlane> {
  const port = await freePort();
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'hangar-bench-'));
  const schema = `bench_${randomToken(8)}`;
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    NODE_ENV: 'production',
    HANGAR_DATA_DIR: dataDir,
    HANGAR_API__HOST: '127.0.0.1',
    HANGAR_API__PORT: String(port),
    // The access log at info would measure pino, not hangar (BENCH_ACCESS_LOG=1 keeps it, for diagnosis).
    HANGAR_LOG__LEVEL: process.env.BENCH_ACCESS_LOG ? 'info' : 'warn',
    HANGAR_PLUGINS: 'system,iam,nodes,agent-internal',
    HANGAR_NODES__HEARTBEAT_INTERVAL_SECONDS: String(INTERVAL_S),
    HANGAR_NODES__OFFLINE_AFTER_SECONDS: String(INTERVAL_S * 4),
    HANGAR_IAM__ANNOUNCE_BOOTSTRAP_SECRET: 'false',
    ...(dialect === 'postgres' ? { HANGAR_DATABASE__URL: PG_URL, HANGAR_DATABASE__SCHEMA: schema, HANGAR_DATABASE__POOL_MAX: '10' } : {}),
  };
  const logFile = process.env.BENCH_ACCESS_LOG ? (await import('node:fs')).openSync(`/tmp/bench-access-${dialect}.log`, 'w') : 'inherit';
  const child = spawn(process.execPath, [BIN, 'serve'], { env, stdio: ['ignore', logFile, 'inherit'] });
  const url = `https://127.0.0.1:${port}`;
  for (let i = 0; ; i++) {
    const up = await httpRequest(`${url}/healthz`, { ca: false }).catch(() => null);
    if (up?.status === 200) break;
    if (i > 300 || child.exitCode !== null) throw new Error('the control plane did not come up');
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    child,
    url,
    ca: readFileSync(path.join(dataDir, 'pki', 'ca.crt'), 'utf8'),
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

interface SimAgent {
  nodeId: string;
  agent: https.Agent;
  cert: string;
  key: string;
}

async function enrol(cp: ControlPlane, n: number, jwt: string): Promise<SimAgent[]> {
  const agents: SimAgent[] = [];
  const concurrency = 16;
  let next = 0;
  const worker = async () => {
    while (next < n) {
      const i = next++;
      const pair = generateKeyPairSync('ec', { namedCurve: 'P-256' });
      const token = await httpRequest(`${cp.url}/v1/nodes/token`, { method: 'POST', ca: cp.ca, headers: { authorization: `Bearer ${jwt}` }, body: {} });
      if (token.status !== 201) throw new Error(`token ${i}: ${token.status} ${token.text}`);
      const join = await httpRequest(`${cp.url}/v1/nodes/join`, {
        method: 'POST',
        ca: cp.ca,
        body: { token: token.json.data.token, hostname: `sim-${i}`, public_key: pair.publicKey.export({ type: 'spki', format: 'pem' }).toString(), architecture: 'amd64' },
      });
      if (join.status !== 201) throw new Error(`join ${i}: ${join.status} ${join.text}`);
      const cert = join.json.data.certificate as string;
      const key = pair.privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
      agents.push({ nodeId: join.json.data.node_id, cert, key, agent: new https.Agent({ keepAlive: true, maxSockets: 2, ca: cp.ca, cert, key }) });
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  return agents;
}

const FACTS = {
  architecture: 'amd64',
  agent_version: 'bench',
  kernel: os.release(),
  os: { id: 'debian', version: '12' },
  resources: { cpus: 2, load_1m: 0.1, memory_total_bytes: 1e9, memory_free_bytes: 5e8 },
  docker: { present: false },
  k3s: { present: false },
  pending_updates: 0,
  reboot_required: false,
};

async function run(dialect: string, n: number) {
  const cp = await startControlPlane(dialect);
  try {
    const boot = await httpRequest(`${cp.url}/v1/bootstrap`, { method: 'POST', ca: cp.ca, body: {} });
    const login = await httpRequest(`${cp.url}/v1/iam/login`, { method: 'POST', ca: cp.ca, body: { username: 'admin', password: boot.json.data.password } });
    const jwt = login.json.data.token as string;
    const enrolStart = Date.now();
    const agents = await enrol(cp, n, jwt);
    const enrolS = (Date.now() - enrolStart) / 1000;

    const heartbeatMs: number[] = [];
    const dispatchMs: number[] = [];
    const pending = new Map<string, number>(); // task id → enqueue start
    const arrivedEarly = new Map<string, number>(); // task id → arrival, when the POST answer came later
    let errors = 0;
    let stopping = false;
    const loops: Promise<void>[] = [];

    for (const a of agents) {
      const opts = { ca: cp.ca, cert: a.cert, key: a.key, agent: a.agent };
      // Heartbeats, spread over the interval.
      loops.push(
        (async () => {
          await new Promise((r) => setTimeout(r, Math.random() * INTERVAL_S * 1000));
          while (!stopping) {
            const t0 = performance.now();
            try {
              const res = await httpRequest(`${cp.url}/v1/internal/heartbeat`, { ...opts, method: 'POST', body: { ...FACTS, hostname: a.nodeId } });
              if (res.status !== 200) errors++;
              else heartbeatMs.push(performance.now() - t0);
            } catch {
              errors++;
            }
            await new Promise((r) => setTimeout(r, INTERVAL_S * 1000));
          }
        })(),
      );
      // Long-polls.
      loops.push(
        (async () => {
          while (!stopping) {
            try {
              const res = await httpRequest(`${cp.url}/v1/internal/tasks/${a.nodeId}?wait=30`, { ...opts, timeoutMs: 45_000 });
              const now = performance.now();
              for (const task of res.json?.data ?? []) {
                const started = pending.get(task.task_id);
                if (started !== undefined) {
                  dispatchMs.push(now - started);
                  pending.delete(task.task_id);
                } else arrivedEarly.set(task.task_id, now);
                await httpRequest(`${cp.url}/v1/internal/tasks/${task.task_id}/result`, { ...opts, method: 'POST', body: { status: 'completed', output: { lines: [] } } });
              }
            } catch {
              if (!stopping) errors++;
            }
          }
        })(),
      );
    }

    // Let the fleet settle for one interval, then measure.
    await new Promise((r) => setTimeout(r, INTERVAL_S * 1000));
    heartbeatMs.length = 0;
    // The generator shares the cores: its own event-loop lag is part of every latency it measures.
    const lag = monitorEventLoopDelay({ resolution: 5 });
    lag.enable();
    const cpu0 = cpuSeconds(cp.child.pid!);
    const t0 = Date.now();
    const gap = (DURATION_S * 1000) / DISPATCHES;
    for (let i = 0; i < DISPATCHES && Date.now() - t0 < DURATION_S * 1000; i++) {
      const target = agents[Math.floor(Math.random() * agents.length)]!;
      const started = performance.now();
      const res = await httpRequest(`${cp.url}/v1/nodes/${target.nodeId}/logs?lines=1`, { method: 'POST', ca: cp.ca, headers: { authorization: `Bearer ${jwt}` } });
      const id = res.json?.data?.task_id as string | undefined;
      if (id) {
        const early = arrivedEarly.get(id);
        if (early !== undefined) {
          dispatchMs.push(early - started);
          arrivedEarly.delete(id);
        } else pending.set(id, started);
      } else errors++;
      await new Promise((r) => setTimeout(r, Math.max(0, gap - (performance.now() - started))));
    }
    const remaining = DURATION_S * 1000 - (Date.now() - t0);
    if (remaining > 0) await new Promise((r) => setTimeout(r, remaining));
    const cpu = (cpuSeconds(cp.child.pid!) - cpu0) / ((Date.now() - t0) / 1000);
    const rss = rssMb(cp.child.pid!);
    lag.disable();
    const genLagP99 = lag.percentile(99) / 1e6;
    stopping = true;
    for (const a of agents) a.agent.destroy();
    await Promise.race([Promise.allSettled(loops), new Promise((r) => setTimeout(r, 2000))]);
    return { dialect, n, enrolS, heartbeats: heartbeatMs.length, hbP50: percentile(heartbeatMs, 50), hbP99: percentile(heartbeatMs, 99), dispatches: dispatchMs.length, dP50: percentile(dispatchMs, 50), dP99: percentile(dispatchMs, 99), cpu, rss, errors, lost: pending.size, genLagP99 };
  } finally {
    await cp.stop();
  }
}

console.log(`hangar agents benchmark — node ${process.version}, ${os.cpus().length} cores, heartbeat every ${INTERVAL_S} s, ${DURATION_S} s measured per run`);
console.log('dialect   agents  enrol_s  heartbeats  hb_p50_ms  hb_p99_ms  dispatches  disp_p50_ms  disp_p99_ms  cp_cpu_cores  cp_rss_mb  errors  gen_lag_p99_ms  hb_p99/50ms  disp_p99/100ms');
for (const dialect of DIALECTS) {
  for (const n of COUNTS) {
    const r = await run(dialect, n);
    console.log(
      [
        r.dialect.padEnd(8),
        String(r.n).padStart(7),
        r.enrolS.toFixed(1).padStart(8),
        String(r.heartbeats).padStart(11),
        ms(r.hbP50).padStart(10),
        ms(r.hbP99).padStart(10),
        String(r.dispatches).padStart(11),
        ms(r.dP50).padStart(12),
        ms(r.dP99).padStart(12),
        r.cpu.toFixed(2).padStart(13),
        r.rss.toFixed(0).padStart(10),
        String(r.errors + r.lost).padStart(7),
        ms(r.genLagP99).padStart(15),
        (r.hbP99 / 50).toFixed(2).padStart(12),
        (r.dP99 / 100).toFixed(2).padStart(15),
      ].join(' '),
    );
  }
}
process.exit(0);
