// Benchmark: N simulated agents (real joins, real mutual TLS, real heartbeats and long-polls)
// against a real control plane in its own process. Prints joining time, heartbeat latency,
// dispatch latency (enqueue → agent has it) and the control plane's CPU and RSS, per N and dialect,
// with the ratios to the targets.
//
//   npm run bench:agents -- [--n 100,1000,5000] [--dialects sqlite,postgres] [--duration 60]
//                           [--interval 10] [--dispatches 200] [--generators 2] [--protocol h2|http/1.1]
//                           [--workers N]  (hangar serve processes, api.workers; cp_cpu and cp_rss_mb sum them)
//   npm run bench:agents -- --footprint   the agent executable (dist/agent, npm run build): its size,
//                                         compressed and not, and its RSS once joined and idle
//                           [--soak 3600 [--task-every 3]]  …then for that many seconds a task every few
//                                         seconds: RSS every 10 s, its growth over the soak (target < 5 %)
//                                         and the agent's CPU per task
//                           [--agent-node-options '--jitless']  V8/Node flags for the agent (NODE_OPTIONS)
//
// Target (docs/performance.md): 5 000 agents with heartbeat p99 < 50 ms and dispatch p99 < 100 ms;
// joining 5 000 machines in < 30 s. The simulated agents run in --generators processes of their own
// (bench/agents-generator.ts), whose CPU is reported next to the control plane's: on one machine
// they share its cores, so the latencies include their queueing.
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { httpRequest } from '../core/http/client.js';
import { epochMs } from './agents-generator.js';
import { mergeCounts, ms, ONLINE_LIMIT_S, percentile, startControlPlane, startFleet, type Generator } from './fleet.js';
import { processCpu, rssMb } from './processes.js';

const args = parseArgs({
  options: {
    n: { type: 'string', default: '100,1000,5000' },
    dialects: { type: 'string', default: 'sqlite,postgres' },
    duration: { type: 'string', default: '60' },
    interval: { type: 'string', default: '10' },
    dispatches: { type: 'string', default: '200' },
    generators: { type: 'string', default: '2' },
    workers: { type: 'string', default: '1' },
    protocol: { type: 'string', default: 'h2' },
    footprint: { type: 'boolean', default: false },
    soak: { type: 'string', default: '0' },
    'task-every': { type: 'string', default: '3' },
    'agent-node-options': { type: 'string', default: '' },
    'no-build': { type: 'boolean', default: false },
    'pg-url': { type: 'string', default: process.env.HANGAR_TEST_PG_URL ?? 'postgres://hangar:hangar@127.0.0.1:5432/hangar_test' },
  },
});
const COUNTS = args.values.n!.split(',').map(Number);
const DIALECTS = args.values.dialects!.split(',');
const DURATION_S = Number(args.values.duration);
const INTERVAL_S = Number(args.values.interval);
const DISPATCHES = Number(args.values.dispatches);
const GENERATORS = Math.max(1, Number(args.values.generators));
if (!['h2', 'http/1.1'].includes(args.values.protocol!)) throw new Error('--protocol is h2 (the agent: one HTTP/2 session) or http/1.1 (a keep-alive pool, as agents before HTTP/2)');
const PROTOCOL = args.values.protocol as 'h2' | 'http/1.1';
const PG_URL = args.values['pg-url']!;
const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');

async function run(dialect: string, n: number) {
  const cp = await startControlPlane(dialect, { pgUrl: PG_URL, workers: args.values.workers!, intervalS: INTERVAL_S });
  const generators: Generator[] = [];
  try {
    const sent = new Map<string, number>(); // task id → when the enqueue request started
    const arrived = new Map<string, number>(); // task id → when its agent had it
    const onTasks = (arrivals: Array<[string, number]>) => {
      for (const [id, at] of arrivals) arrived.set(id, at);
    };
    const { jwt, nodeIds, enrolS, onlineS } = await startFleet(cp, { n, count: GENERATORS, intervalS: INTERVAL_S, protocol: PROTOCOL, generators, onTasks });
    for (const g of generators) g.send({ type: 'measure' });
    const cpu0 = processCpu(cp.child.pid!);
    const genCpu0 = generators.map((g) => processCpu(g.child.pid!));
    const t0 = Date.now();
    let errors = 0;
    const dispatchFailures: Record<string, number> = {};
    const gap = (DURATION_S * 1000) / DISPATCHES;
    for (let i = 0; i < DISPATCHES && Date.now() - t0 < DURATION_S * 1000; i++) {
      const target = nodeIds[Math.floor(Math.random() * nodeIds.length)]!;
      const started = epochMs();
      const res = await httpRequest(`${cp.url}/v1/nodes/${target}/logs?lines=1`, { method: 'POST', ca: cp.ca, headers: { authorization: `Bearer ${jwt}` } }).catch((err: Error) => err);
      const id = res instanceof Error ? undefined : (res.json?.data?.task_id as string | undefined);
      if (id) sent.set(id, started);
      else {
        errors++;
        const why = res instanceof Error ? ((res as NodeJS.ErrnoException).code ?? res.message.slice(0, 60)) : `${res.status} ${String(res.json?.message ?? '').slice(0, 80)}`;
        dispatchFailures[`dispatch ${why}`] = (dispatchFailures[`dispatch ${why}`] ?? 0) + 1;
      }
      await new Promise((r) => setTimeout(r, Math.max(0, gap - (epochMs() - started))));
    }
    const remaining = DURATION_S * 1000 - (Date.now() - t0);
    if (remaining > 0) await new Promise((r) => setTimeout(r, remaining));
    const seconds = (Date.now() - t0) / 1000;
    const cpu = (processCpu(cp.child.pid!) - cpu0) / seconds;
    const genCpu = generators.reduce((sum, g, i) => sum + (processCpu(g.child.pid!) - genCpu0[i]!) / seconds, 0);
    const rss = rssMb(cp.child.pid!);
    // Dispatches still on their way get a moment to land.
    await new Promise((r) => setTimeout(r, 2000));
    const statsPromise = Promise.all(generators.map((g) => g.next('stats')));
    for (const g of generators) g.send({ type: 'stop' });
    const stats = await statsPromise;
    const heartbeatMs = stats.flatMap((s) => s.heartbeatMs);
    const dispatchMs = [...sent].filter(([id]) => arrived.has(id)).map(([id, at]) => arrived.get(id)! - at);
    const intervals = stats.flatMap((s) => s.intervals);
    return {
      dialect,
      n,
      enrolS,
      onlineS,
      heartbeats: heartbeatMs.length,
      hbP50: percentile(heartbeatMs, 50),
      hbP99: percentile(heartbeatMs, 99),
      dispatches: dispatchMs.length,
      dP50: percentile(dispatchMs, 50),
      dP99: percentile(dispatchMs, 99),
      cpu,
      genCpu,
      rss,
      errors: errors + stats.reduce((a, s) => a + s.errors, 0),
      reasons: mergeCounts([dispatchFailures, ...stats.map((s) => s.reasons)]),
      lost: sent.size - dispatchMs.length,
      genLagP99: Math.max(...stats.map((s) => s.lagP99Ms)),
      interval: percentile(intervals, 50),
    };
  } finally {
    for (const g of generators) g.child.kill('SIGKILL');
    await cp.stop();
  }
}

/** The real agent executable joined to a real control plane (SQLite), idle, then (--soak) busy: what a machine pays for it. */
async function footprint(): Promise<void> {
  const manifest = JSON.parse(readFileSync(path.join(ROOT, 'dist', 'agent', 'manifest.json'), 'utf8'));
  const exe = manifest.executables.amd64;
  const soakS = Number(args.values.soak);
  const taskEveryS = Number(args.values['task-every']);
  const nodeOptions = args.values['agent-node-options']!;
  const cp = await startControlPlane('sqlite', { pgUrl: PG_URL, workers: '1', intervalS: INTERVAL_S });
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'hangar-footprint-'));
  try {
    const boot = await httpRequest(`${cp.url}/v1/bootstrap`, { method: 'POST', ca: cp.ca, body: {} });
    const login = await httpRequest(`${cp.url}/v1/iam/login`, { method: 'POST', ca: cp.ca, body: { username: 'admin', password: boot.json.data.password } });
    const auth = { authorization: `Bearer ${login.json.data.token}` };
    const token = await httpRequest(`${cp.url}/v1/nodes/token`, { method: 'POST', ca: cp.ca, headers: auth, body: {} });
    const started = performance.now();
    const env = { ...process.env, ...(nodeOptions ? { NODE_OPTIONS: nodeOptions } : {}) };
    const agent = spawn(path.join(ROOT, 'dist', 'agent', exe.file), ['--join', '--token', token.json.data.token, '--api', cp.url, '--data-dir', dataDir], { stdio: 'ignore', env });
    const status = () => readFileSync(`/proc/${agent.pid}/status`, 'utf8');
    const rss = () => Number(/VmRSS:\s+(\d+)/.exec(status())![1]) / 1024;
    const samples: number[] = [];
    for (let s = 0; s < 30; s++) {
      await new Promise((r) => setTimeout(r, 1000));
      samples.push(rss());
    }
    const nodes = await httpRequest(`${cp.url}/v1/nodes`, { ca: cp.ca, headers: auth });
    const node = nodes.json.data.find((n: { status: string }) => n.status === 'ready') as { id: string } | undefined;
    const mb = (n: number) => `${(n / 1e6).toFixed(1)} MB`;
    console.log(`agent executable (node ${manifest.node_version}, built ${manifest.built_at}): ${mb(exe.size)}, served ${exe.compressed ? `${mb(exe.compressed.size)} (${exe.compressed.encoding})` : 'uncompressed'}; target < 40 MB compressed`);
    console.log(
      `agent RSS${nodeOptions ? ` (NODE_OPTIONS ${nodeOptions})` : ''}, joined (${node ? 'ready' : 'NOT ready'}) and idle ${((performance.now() - started) / 1000).toFixed(0)} s: ${samples.at(-1)!.toFixed(1)} MB (median ${percentile(samples.slice(10), 50).toFixed(1)} MB over the last 20 s, peak ${(Number(/VmHWM:\s+(\d+)/.exec(status())![1]) / 1024).toFixed(1)} MB); target < 40 MB`,
    );
    if (soakS > 0 && node) await soak(agent.pid!, node.id, { soakS, taskEveryS, rss, api: (method, p) => httpRequest(`${cp.url}${p}`, { method, ca: cp.ca, headers: auth }) });
    agent.kill('SIGTERM');
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
    await cp.stop();
  }
}

/**
 * A task every few seconds (a node's logs, the task bench:slo dispatches) for soakS seconds; RSS every 10 s.
 * The growth is the median of the last ten minutes' samples (or the last tenth) against the first's, so a
 * collection's saw-tooth does not decide it.
 */
async function soak(pid: number, nodeId: string, o: { soakS: number; taskEveryS: number; rss(): number; api(method: string, path: string): Promise<{ status: number; json?: any }> }): Promise<void> {
  const window = Math.max(3, Math.min(60, Math.round(o.soakS / 100)));
  const samples: Array<[number, number]> = [];
  const queued: string[] = [];
  const refused: Record<string, number> = {};
  const cpu0 = processCpu(pid);
  const t0 = Date.now();
  let nextSample = 0;
  let nextTask = 0;
  console.log(`soak: ${o.soakS} s, a task every ${o.taskEveryS} s; RSS every 10 s (MB):`);
  while (Date.now() - t0 < o.soakS * 1000) {
    const at = (Date.now() - t0) / 1000;
    if (at >= nextTask) {
      nextTask += o.taskEveryS;
      const res = await o.api('POST', `/v1/nodes/${nodeId}/logs?lines=1`).catch(() => null);
      if (res?.json?.data?.task_id) queued.push(res.json.data.task_id as string);
      else {
        const why = `${res?.status ?? 'error'} ${String(res?.json?.message ?? '').slice(0, 80)}`;
        refused[why] = (refused[why] ?? 0) + 1;
      }
    }
    if (at >= nextSample) {
      nextSample += 10;
      samples.push([at, o.rss()]);
      if (samples.length % 30 === 0) console.log(`  ${at.toFixed(0)} s: ${samples.at(-1)![1].toFixed(1)} MB`);
    }
    await new Promise((r) => setTimeout(r, 250));
  }
  const cpuS = processCpu(pid) - cpu0;
  // The last tasks, given the agent a few seconds to finish them: what became of them.
  await new Promise((r) => setTimeout(r, 5000));
  const last = queued.slice(-5);
  const ends: Record<string, number> = {};
  for (const id of last) {
    const t = await o.api('GET', `/v1/nodes/${nodeId}/logs/${id}`).catch(() => null);
    const status = String(t?.json?.data?.status ?? t?.status);
    ends[status] = (ends[status] ?? 0) + 1;
  }
  const refusedCount = Object.values(refused).reduce((a, b) => a + b, 0);
  const rssOf = (part: Array<[number, number]>) => percentile(part.map(([, v]) => v), 50);
  const first = rssOf(samples.slice(0, window));
  const lastRss = rssOf(samples.slice(-window));
  const growth = ((lastRss - first) / first) * 100;
  console.log(
    `soak: ${queued.length} tasks queued (${refusedCount} refused${refusedCount ? `: ${Object.entries(refused).map(([why, n]) => `${why} ×${n}`).join(', ')}` : ''}; the last ${last.length}: ${Object.entries(ends).map(([st, n]) => `${st} ×${n}`).join(', ')}), agent CPU ${((cpuS * 1e3) / Math.max(1, queued.length)).toFixed(1)} ms a task (${((cpuS / o.soakS) * 100).toFixed(2)} % of a core); ` +
      `RSS median of the first ${window} samples ${first.toFixed(1)} MB, of the last ${window} ${lastRss.toFixed(1)} MB, max ${Math.max(...samples.map(([, v]) => v)).toFixed(1)} MB: growth ${growth.toFixed(1)} % (target < 5 %) ${growth < 5 ? 'yes' : 'NO'}`,
  );
}

if (!args.values['no-build']) {
  const built = spawnSync(process.execPath, [path.join(ROOT, 'scripts', 'build.mjs'), 'server'], { stdio: 'inherit' });
  if (built.status !== 0) throw new Error('npm run build:server failed');
}
if (args.values.footprint) {
  await footprint();
  process.exit(0);
}
console.log(
  `hangar agents benchmark — ${new Date().toISOString()}, node ${process.version}, ${os.cpus().length} cores, load average ${os.loadavg().map((l) => l.toFixed(1)).join(' ')}; ` +
    `heartbeat every ${INTERVAL_S} s (or as the server says), ${DURATION_S} s measured per run, ${GENERATORS} generator process(es), agents on ${PROTOCOL === 'h2' ? 'one HTTP/2 session each' : 'HTTP/1.1 keep-alive pools'}`,
);
console.log('dialect   agents  join_s  online_s  heartbeats  hb_p50_ms  hb_p99_ms  dispatches  disp_p50_ms  disp_p99_ms  cp_cpu  gen_cpu  cp_rss_mb  errors  gen_lag_p99_ms  hb_interval_s  hb_p99/50ms  disp_p99/100ms  join/30s');
for (const dialect of DIALECTS) {
  for (const n of COUNTS) {
    const r = await run(dialect, n);
    console.log(
      [
        r.dialect.padEnd(8),
        String(r.n).padStart(7),
        r.enrolS.toFixed(1).padStart(7),
        (r.onlineS >= ONLINE_LIMIT_S ? `>${ONLINE_LIMIT_S}` : r.onlineS.toFixed(1)).padStart(9),
        String(r.heartbeats).padStart(11),
        ms(r.hbP50).padStart(10),
        ms(r.hbP99).padStart(10),
        String(r.dispatches).padStart(11),
        ms(r.dP50).padStart(12),
        ms(r.dP99).padStart(12),
        r.cpu.toFixed(2).padStart(7),
        r.genCpu.toFixed(2).padStart(8),
        r.rss.toFixed(0).padStart(10),
        String(r.errors + r.lost).padStart(7),
        ms(r.genLagP99).padStart(15),
        String(r.interval).padStart(14),
        (r.hbP99 / 50).toFixed(2).padStart(12),
        (r.dP99 / 100).toFixed(2).padStart(15),
        ((r.enrolS / 30) * (5000 / r.n)).toFixed(2).padStart(9),
      ].join(' '),
    );
    const reasons = Object.entries(r.reasons).filter(([, count]) => count > 0);
    if (reasons.length || r.lost) console.log(`  errors: ${[...reasons.map(([why, count]) => `${why} ×${count}`), ...(r.lost ? [`dispatched, never arrived ×${r.lost}`] : [])].join(', ')}`);
  }
}
process.exit(0);
