// Benchmark: what the write scope's AsyncLocalStorage costs (core/db/write-scope.ts). Three `hangar
// serve` processes from the sources, on SQLite, default plugins, on this machine:
//   als         as it is: the storage enabled while a write scope is open, disabled when none is
//   always-on   the storage left enabled once a write enabled it (as it was before)
//   no-als      the write scope passed without AsyncLocalStorage: a variable set around the handler,
//               so the process never enables async hooks (exact while writes run one at a time, which
//               is how they are sent here)
// (bench/write-scope-sync.mjs rewrites core/db/write-scope.ts as it loads for the last two.)
// Scenarios, each against every process in turn, interleaved per repetition (the order rotates):
//   get     GET /v1/nodes?limit=20 with a JWT, `--connections` at once (no write scope)
//   write   PATCH /v1/nodes/{id} renaming a node with a JWT, one at a time (a write scope each, with
//           its audit entry carried in the write's transaction and settled after the answer)
//   mixed   both at once: the GETs and one writer
// Prints, per scenario and process, the medians of req/s and of the server's CPU milliseconds per
// request (from /proc, which load elsewhere on the machine disturbs less than req/s), and the ratios
// to no-als.
//
//   npx tsx bench/write-scope-als.ts [--duration 5] [--repeat 5] [--connections 8]
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { processCpu } from './processes.js';

const args = parseArgs({
  options: {
    duration: { type: 'string', default: '5' },
    repeat: { type: 'string', default: '5' },
    connections: { type: 'string', default: '8' },
    warmup: { type: 'string', default: '2' },
  },
});
const DURATION_MS = Number(args.values.duration) * 1000;
const WARMUP_MS = Number(args.values.warmup) * 1000;
const REPEAT = Number(args.values.repeat);
const CONNECTIONS = Number(args.values.connections);
const PASSWORD = 'Bench-Password-97-Scope!';

interface Server {
  name: string;
  child: ChildProcess;
  url: string;
  ca: string;
  agent: https.Agent;
  token: string;
  nodeIds: string[];
  dataDir: string;
}

async function serve(name: string, variant: 'sync' | 'always-on' | null): Promise<Server> {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), `hangar-bench-${name}-`));
  const nodeArgs = variant ? ['--import', './bench/write-scope-sync.mjs'] : [];
  const child = spawn(process.execPath, [...nodeArgs, 'bin/hangar.mjs', 'serve', '--data-dir', dataDir], {
    env: { ...process.env, ...(variant ? { HANGAR_BENCH_WRITE_SCOPE: variant } : {}), HANGAR_FROM_SOURCES: '1', HANGAR_LOG__LEVEL: 'info', HANGAR_API__HOST: '127.0.0.1', HANGAR_API__PORT: '0', HANGAR_LOGIN__PORT: '0' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout!.on('data', (c: Buffer) => (output += c.toString()));
  child.stderr!.on('data', (c: Buffer) => (output += c.toString()));
  const deadline = Date.now() + 120_000;
  let url = '';
  while (!url) {
    if (child.exitCode !== null || Date.now() > deadline) throw new Error(`${name} did not start:\n${output}`);
    const line = output.split('\n').find((l) => l.includes('"hangar started"'));
    if (line) url = (JSON.parse(line) as { urls: string[] }).urls[0]!;
    else await new Promise((resolve) => setTimeout(resolve, 100));
  }
  if (variant && !output.includes(`loaded as ${variant}`)) throw new Error(`${name}: the write scope was not replaced:\n${output}`);
  // From now on its log (an access-log line per request, as in production) is read and dropped.
  for (const stream of [child.stdout!, child.stderr!]) {
    stream.removeAllListeners('data');
    stream.resume();
  }
  const ca = readFileSync(path.join(dataDir, 'pki', 'ca.crt'), 'utf8');
  const agent = new https.Agent({ keepAlive: true, maxSockets: CONNECTIONS, ca });
  const server: Server = { name, child, url, ca, agent, token: '', nodeIds: [], dataDir };
  const boot = await send(server, 'POST', '/v1/bootstrap', { password: PASSWORD, email: 'bench@example.test' });
  if (boot.status !== 201) throw new Error(`${name}: bootstrap answered ${boot.status} ${JSON.stringify(boot.json)}`);
  const login = await send(server, 'POST', '/v1/iam/login', { username: boot.json.data.username, password: PASSWORD });
  server.token = login.json.data.token;
  for (let i = 0; i < 20; i++) server.nodeIds.push((await send(server, 'POST', '/v1/nodes', { name: `bench-${i}` })).json.data.id);
  return server;
}

function send(server: Server, method: string, target: string, body?: unknown): Promise<{ status: number; json: any }> {
  const bytes = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
  return new Promise((resolve, reject) => {
    const req = https.request(
      `${server.url}${target}`,
      {
        method,
        agent: server.agent,
        headers: { ...(server.token ? { authorization: `Bearer ${server.token}` } : {}), ...(bytes ? { 'content-type': 'application/json', 'content-length': String(bytes.length) } : {}) },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString();
          resolve({ status: res.statusCode!, json: text ? JSON.parse(text) : null });
        });
      },
    );
    req.on('error', reject);
    req.end(bytes);
  });
}

/** One scenario for `ms`: `concurrency` loops sending requests; answers req/s and the server's CPU ms per request. */
type Scenario = 'get' | 'write' | 'mixed';

async function load(server: Server, scenario: Scenario, ms: number): Promise<{ rps: number; cpuMsPerRequest: number }> {
  const loops: Array<'get' | 'write'> = [...Array(scenario === 'write' ? 0 : CONNECTIONS).fill('get'), ...(scenario === 'get' ? [] : ['write' as const])];
  let done = 0;
  let counter = 0;
  const cpu0 = processCpu(server.child.pid!);
  const started = performance.now();
  const until = started + ms;
  await Promise.all(
    loops.map(async (kind) => {
      while (performance.now() < until) {
        const n = counter++;
        const res =
          kind === 'get'
            ? await send(server, 'GET', '/v1/nodes?limit=20')
            : await send(server, 'PATCH', `/v1/nodes/${server.nodeIds[n % server.nodeIds.length]}`, { name: `bench-${n}` });
        if (res.status !== 200) throw new Error(`${server.name} ${kind}: ${res.status} ${JSON.stringify(res.json)}`);
        done++;
      }
    }),
  );
  const seconds = (performance.now() - started) / 1000;
  return { rps: done / seconds, cpuMsPerRequest: ((processCpu(server.child.pid!) - cpu0) * 1000) / done };
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

const servers = [await serve('als', null), await serve('always-on', 'always-on'), await serve('no-als', 'sync')];
try {
  const results: Record<string, Record<string, { rps: number[]; cpu: number[] }>> = {};
  for (const scenario of ['get', 'write', 'mixed'] as const) {
    for (const s of servers) await load(s, scenario, WARMUP_MS);
    results[scenario] = Object.fromEntries(servers.map((s) => [s.name, { rps: [], cpu: [] }]));
    for (let r = 0; r < REPEAT; r++) {
      const order = [...servers.slice(r % servers.length), ...servers.slice(0, r % servers.length)];
      for (const s of order) {
        const { rps, cpuMsPerRequest } = await load(s, scenario, DURATION_MS);
        results[scenario]![s.name]!.rps.push(rps);
        results[scenario]![s.name]!.cpu.push(cpuMsPerRequest);
      }
    }
  }
  console.log(`write scope: AsyncLocalStorage or not (${os.cpus().length} cores, Node ${process.version}, ${REPEAT} × ${DURATION_MS / 1000} s each, interleaved; medians; load average ${os.loadavg().map((l) => l.toFixed(1)).join(' ')})`);
  const what = { get: `GET, ${CONNECTIONS} at once`, write: 'PATCH, one at a time', mixed: `${CONNECTIONS} GET loops and one PATCH loop at once` };
  for (const [scenario, byServer] of Object.entries(results)) {
    const base = byServer['no-als']!;
    console.log(`  ${scenario} (${what[scenario as Scenario]})`);
    for (const [name, x] of Object.entries(byServer)) {
      // The ratio of each repetition (its runs were next to each other in time), then their median: slow changes of the machine's load cancel out.
      const paired = (a: number[], b: number[]) => median(a.map((v, i) => v / b[i]!)).toFixed(2);
      const ratios = name === 'no-als' ? '' : `  ÷ no-als (median of the paired ratios): req/s ${paired(x.rps, base.rps)}, CPU/req ${paired(x.cpu, base.cpu)}`;
      console.log(`    ${name.padEnd(9)} ${median(x.rps).toFixed(0).padStart(6)} req/s  ${median(x.cpu).toFixed(3)} CPU ms/req${ratios}`);
      console.log(`              CPU ms/req runs: ${x.cpu.map((v) => v.toFixed(2)).join(', ')}`);
    }
  }
} finally {
  for (const s of servers) {
    s.agent.destroy();
    s.child.kill('SIGTERM');
  }
  await new Promise((resolve) => setTimeout(resolve, 1000));
  for (const s of servers) rmSync(s.dataDir, { recursive: true, force: true });
}
