// Benchmark: hangar against an anchor control plane (DockNimbus `nimbus-api`, Go) on the same machine,
// with the same data seeded through each one's own API, under the same load generator (wrk, its own
// process). Prints req/s and p50/p99 latency per scenario for both, the ratio hangar ÷ anchor and the
// target it is judged by, plus cold start, RSS, and the CPU the servers and wrk used.
//
//   npm run bench:duel -- [--anchor /path/to/nimbus-api] [--nodes 100,1000] [--duration 10]
//                         [--connections 32] [--threads 1] [--repeat 3] [--scenarios healthz,list,login,write]
//                         [--workers N]      (hangar serve processes, api.workers; CPU and RSS are the sum of all)
//                         [--cpu-prof DIR]   (hangar's CPU profiles, one file per process, for node --cpu-prof readers)
//
// The anchor binary is the operator's (never downloaded, never committed): without --anchor only
// hangar's figures are printed. hangar runs from the production build (`npm run build:server`, which
// this benchmark runs first) with its default configuration, as `npm start` would.
//
// Scenarios (authenticated ones carry a JWT from each server's own login):
//   healthz     GET /healthz
//   list-N      GET /v1/nodes listing N nodes (hangar: ?limit=N; the anchor answers every node; past
//               100 the anchor's nodes are copies written into its SQLite file: see cloneAnchorNodes)
//   login       POST /v1/iam/login (password hashing: hangar scrypt, the anchor bcrypt)
//   write       the write set (issue 32), each a write with its audit entry (each also a scenario of
//               its own: --scenarios rename, tag, scale…):
//               rename  PATCH /v1/nodes/{id} renaming a node (round robin over the seeded nodes): the one
//                       write both APIs have (nimbus-api 0.2.0 has no tags or SSH profiles, and its key
//                       deletion answers 200 for keys that do not exist)
//               tag     PUT /v1/tags on the seeded nodes, a new value each time (hangar only: the anchor
//                       has no tags)
//               scale   POST /v1/compute/instances/{id}/scale of stopped instances (round robin over 20
//                       written into hangar's store: an instance needs a cluster and its agent to be
//                       created through the API; a stopped one only records its count). hangar only: the
//                       anchor's scale acts on an instance of a real swarm at once (no stopped instance
//                       that records a count), which this bench does not run
//               A secret create is not in the set: it creates the secret on the cluster through the
//               cluster's agent, which this bench does not simulate.
//
// Runs interleave hangar and anchor per repetition (h, a, h, a…) so that load from elsewhere on the
// machine falls on both; medians are reported, and the ratio is the ratio of the medians.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { createHash, createHmac, randomBytes } from 'node:crypto';
import { mkdtempSync, openSync, readFileSync, rmSync, writeFileSync, existsSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import https from 'node:https';
import Database from 'better-sqlite3';
import { httpRequest as request, type HttpRequestOptions, type HttpResponse } from '../core/http/client.js';
import { BareNodeServer } from './bare-start.js';
import { mallocArenaMb, processCpu, processTree, rssMb } from './processes.js';

/** The benchmark's own requests (seeding, checks): a connection each (no pooled sockets between phases). */
const oneShot = new https.Agent({ keepAlive: false });
const httpRequest = (url: string, options: HttpRequestOptions = {}) => request(url, { agent: oneShot, ...options });

const args = parseArgs({
  options: {
    anchor: { type: 'string' },
    nodes: { type: 'string', default: '100,1000' },
    duration: { type: 'string', default: '10' },
    connections: { type: 'string', default: '32' },
    threads: { type: 'string', default: '1' },
    repeat: { type: 'string', default: '3' },
    scenarios: { type: 'string', default: 'healthz,list,login,write' },
    workers: { type: 'string', default: '1', description: 'hangar serve processes (api.workers)' },
    'no-build': { type: 'boolean', default: false },
    keep: { type: 'boolean', default: false },
    'cpu-prof': { type: 'string', description: 'directory for hangar CPU profiles (node --cpu-prof), one per process' },
  },
});
const NODE_COUNTS = args.values.nodes!.split(',').map(Number).sort((a, b) => a - b);
const DURATION_S = Number(args.values.duration);
const CONNECTIONS = Number(args.values.connections);
const THREADS = Number(args.values.threads);
const REPEAT = Number(args.values.repeat);
const SCENARIOS = new Set(args.values.scenarios!.split(','));
const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');

/** Targets printed with the ratios (issue 13): hangar ÷ anchor req/s at least this. */
const TARGETS: Record<string, number> = { healthz: 0.6, list: 1.5, login: 1.0 };

// ---- processes ---------------------------------------------------------------------------------

function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const server = net.createServer().listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

/**
 * For a server of several processes: how many, and their PSS (shared pages divided among the
 * processes sharing them), since a sum of RSS counts the pages they share once per process.
 */
function processesNote(pid: number): string {
  const tree = processTree(pid);
  if (tree.length === 1) return '';
  let kb = 0;
  for (const p of tree) kb += Number(/^Pss:\s+(\d+)/m.exec(readFileSync(`/proc/${p}/smaps_rollup`, 'utf8'))![1]);
  return ` (${tree.length} processes, RSS summed; PSS ${(kb / 1024).toFixed(1)} MB)`;
}

/** How long both servers idle after the last run before their RSS is read a second time. */
const SETTLE_MS = 15_000;
/** A server counts as idle this long after its start: the RSS judged against the idle target is read then. */
const IDLE_MS = 20_000;

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.floor((s.length - 1) / 2)]! : NaN;
};

interface Running {
  child: ChildProcess;
  url: string;
}

async function waitHealthy(url: string, child: ChildProcess, what: string): Promise<void> {
  for (;;) {
    if (child.exitCode !== null) throw new Error(`${what} exited with ${child.exitCode} before answering /healthz`);
    const res = await httpRequest(`${url}/healthz`, { ca: false, timeoutMs: 2000 }).catch(() => null);
    if (res?.status === 200) return;
    await new Promise((r) => setTimeout(r, 5));
  }
}

async function stopProcess(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null) return;
  const exited = new Promise((r) => child.once('exit', r));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
  await exited;
  clearTimeout(timer);
}

// ---- the two servers ---------------------------------------------------------------------------

interface Seeded {
  jwt: string;
  username: string;
  password: string;
  nodeIds: string[];
  /** hangar's stopped instances (the scale scenario). */
  instanceIds?: string[];
}

interface Target {
  name: string;
  dir: string;
  running?: Running;
  seeded?: Seeded;
  /** Starts the server (store kept between starts); resolves once /healthz answers, with the wall time. */
  start(): Promise<number>;
  bootstrap(): Promise<Seeded>;
  addNodes(seeded: Seeded, upTo: number): Promise<void>;
  listPath(n: number): string;
  /** Bytes of one list answer, to show what each side sends. */
}

function jsonOrThrow(res: HttpResponse, what: string, ok = [200, 201]): any {
  if (!ok.includes(res.status)) throw new Error(`${what}: HTTP ${res.status} ${res.text.slice(0, 300)}`);
  return res.json;
}

/** Seeding: a few requests at a time, each retried once (a loaded machine drops the odd connection). */
async function inParallel<T>(items: T[], concurrency: number, fn: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < items.length) {
        const item = items[next++]!;
        await fn(item).catch(() => fn(item));
      }
    }),
  );
}

/** A `node` for the launcher that writes a CPU profile per process (Node refuses --cpu-prof in NODE_OPTIONS). */
function profilingNode(dir: string, profileDir: string): string {
  const script = path.join(dir, 'node-cpu-prof');
  writeFileSync(script, `#!/bin/sh\nexec '${process.execPath}' --cpu-prof --cpu-prof-dir='${profileDir}' "$@"\n`, { mode: 0o755 });
  return script;
}

function hangarTarget(): Target {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'duel-hangar-'));
  let port = 0;
  const target: Target = {
    name: 'hangar',
    dir,
    async start() {
      port ||= await freePort();
      const started = performance.now();
      const node = args.values['cpu-prof'] ? profilingNode(dir, path.resolve(args.values['cpu-prof'])) : process.execPath;
      // The hangar command as an operator runs it: the launcher (bin/hangar) sets glibc's malloc up.
      const child = spawn(path.join(ROOT, 'bin', 'hangar'), ['serve'], {
        cwd: dir,
        env: {
          ...process.env,
          NODE: node,
          NODE_ENV: 'production',
          HANGAR_DATA_DIR: path.join(dir, 'data'),
          HANGAR_API__HOST: '127.0.0.1',
          HANGAR_API__PORT: String(port),
          HANGAR_LOGIN__PORT: '0',
          HANGAR_IAM__ANNOUNCE_BOOTSTRAP_SECRET: 'false',
          HANGAR_API__WORKERS: args.values.workers!,
        },
        // The access log goes to a file, as it would to a journal.
        stdio: ['ignore', openSync(path.join(dir, 'hangar.log'), 'a'), 'inherit'],
      });
      const url = `https://127.0.0.1:${port}`;
      target.running = { child, url };
      await waitHealthy(url, child, 'hangar');
      return performance.now() - started;
    },
    async bootstrap() {
      const { url } = target.running!;
      const boot = jsonOrThrow(await httpRequest(`${url}/v1/bootstrap`, { method: 'POST', ca: false, body: {} }), 'hangar bootstrap');
      const password = boot.data.password as string;
      const login = jsonOrThrow(await httpRequest(`${url}/v1/iam/login`, { method: 'POST', ca: false, body: { username: 'admin', password } }), 'hangar login');
      return { jwt: login.data.token, username: 'admin', password, nodeIds: [] };
    },
    async addNodes(seeded, upTo) {
      const { url } = target.running!;
      const todo = Array.from({ length: upTo - seeded.nodeIds.length }, (_, i) => seeded.nodeIds.length + i);
      await inParallel(todo, 8, async (i) => {
        const res = await httpRequest(`${url}/v1/nodes`, {
          method: 'POST',
          ca: false,
          headers: { authorization: `Bearer ${seeded.jwt}` },
          body: { name: `sim-${i}`, ip_address: `10.1.${Math.floor(i / 250)}.${(i % 250) + 1}` },
        });
        seeded.nodeIds.push(jsonOrThrow(res, 'hangar node create').data.id);
      });
    },
    listPath: (n) => `/v1/nodes?limit=${n}`,
  };
  return target;
}

/**
 * nimbus-api 0.2.0 registers a node in time that grows with the fleet (1 ms for the first, 2 s at
 * 200, 7 s at 320: a thousand would take hours), so only this many come through its API; the rest
 * are copies of a registered row written into its SQLite file (same columns, fresh id, machine id,
 * name and addresses), which its list reads like any other.
 */
const ANCHOR_REGISTERED_NODES = 100;

function cloneAnchorNodes(dbFile: string, from: number, upTo: number): string[] {
  const db = new Database(dbFile);
  try {
    db.pragma('busy_timeout = 10000');
    const template = db.prepare('select * from nodes order by created_at limit 1').get() as Record<string, unknown>;
    const columns = Object.keys(template);
    const insert = db.prepare(`insert into nodes (${columns.join(', ')}) values (${columns.map((c) => `@${c}`).join(', ')})`);
    const ids: string[] = [];
    db.transaction(() => {
      for (let i = from; i < upTo; i++) {
        const id = `node-${randomBytes(4).toString('hex')}`;
        const at = `${Math.floor(i / 250)}.${(i % 250) + 1}`;
        insert.run({ ...template, id, machine_id: `machine-${i}`, name: null, hostname: `sim-${i}`, ip_address: `10.1.${at}`, wireguard_ip: `10.10.${Math.floor(i / 250) + 10}.${(i % 250) + 1}` });
        ids.push(id);
      }
    })();
    return ids;
  } finally {
    db.close();
  }
}

/**
 * Stopped instances written into hangar's SQLite store (an instance is created through the API only
 * on a cluster whose agent runs it), on a swarm record of their own; required columns the bench does
 * not name get neutral values. Answers their ids.
 */
function seedStoppedInstances(target: Target, n: number): string[] {
  const db = new Database(path.join(target.dir, 'data', 'hangar.db'));
  try {
    db.pragma('busy_timeout = 10000');
    const now = new Date().toISOString();
    const project = (db.prepare("select id from projects where name = 'default'").get() as { id?: string } | undefined)?.id;
    const insert = (table: string, row: Record<string, unknown>) => {
      const full: Record<string, unknown> = { ...row };
      for (const c of db.prepare(`pragma table_info("${table}")`).all() as Array<{ name: string; type: string; notnull: number; dflt_value: unknown }>) {
        if (c.name in full || !c.notnull || c.dflt_value !== null) continue;
        full[c.name] = /int|real|num|bool/i.test(c.type) ? 0 : /json|text/i.test(c.type) ? '[]' : 'x';
      }
      const columns = Object.keys(full);
      db.prepare(`insert into "${table}" (${columns.map((c) => `"${c}"`).join(', ')}) values (${columns.map(() => '?').join(', ')})`).run(...Object.values(full));
    };
    insert('clusters', { id: 'swm-duel', name: 'duel-swarm', backend: 'swarm', status: 'empty', ...(project ? { project_id: project } : {}), created_at: now, updated_at: now });
    const ids = Array.from({ length: n }, (_, i) => `inst-duel${i}`);
    for (const [i, id] of ids.entries()) {
      insert('compute_instances', { id, name: `duel-${i}`, cluster_id: 'swm-duel', status: 'stopped', desired: 'stopped', replicas: 1, op_rev: 0, created_at: now, updated_at: now });
    }
    return ids;
  } finally {
    db.close();
  }
}

/** The anchor, driven through its own interfaces (docs of DockNimbus 0.2.0 and its CLI's HMAC signing). */
function anchorTarget(binary: string): Target {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'duel-anchor-'));
  const agentSecret = randomBytes(16).toString('hex');
  let port = 0;
  const target: Target = {
    name: 'anchor',
    dir,
    async start() {
      if (!port) {
        port = await freePort();
        // Its own certificate, so that it writes nothing outside this directory (it would generate one
        // into /var/lib/nimbus as root otherwise).
        const made = spawnSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-days', '2',
          '-keyout', path.join(dir, 'server.key'), '-out', path.join(dir, 'server.crt'), '-subj', '/CN=localhost', '-addext', 'subjectAltName=IP:127.0.0.1'], { encoding: 'utf8' });
        if (made.status !== 0) throw new Error(`openssl: ${made.stderr}`);
        writeFileSync(
          path.join(dir, 'api.yaml'),
          [
            `listen: "127.0.0.1:${port}"`,
            `db_path: "${path.join(dir, 'nimbus.db')}"`,
            `admin_secret_key: "${agentSecret}"`,
            'wireguard_subnet: "10.10.0.0/16"',
            'local_domain: "nimbus"',
            `tls_cert: "${path.join(dir, 'server.crt')}"`,
            `tls_key: "${path.join(dir, 'server.key')}"`,
            '',
          ].join('\n'),
        );
      }
      const started = performance.now();
      const child = spawn(binary, ['--config', path.join(dir, 'api.yaml')], {
        cwd: dir,
        env: { ...process.env, HOME: dir },
        stdio: ['ignore', openSync(path.join(dir, 'anchor.log'), 'a'), openSync(path.join(dir, 'anchor.log'), 'a')],
      });
      const url = `https://127.0.0.1:${port}`;
      target.running = { child, url };
      await waitHealthy(url, child, 'the anchor');
      return performance.now() - started;
    },
    async bootstrap() {
      const { url } = target.running!;
      const boot = jsonOrThrow(await httpRequest(`${url}/v1/bootstrap`, { method: 'POST', ca: false, body: {} }), 'anchor bootstrap').data;
      // Its CLI signs METHOD\nPATH\nTIMESTAMP\nACCESS_KEY with HMAC-SHA256 keyed by hex SHA-256 of the secret.
      const key = createHash('sha256').update(boot.secret_key).digest('hex');
      const signed = (method: string, p: string, body: unknown) => {
        const timestamp = new Date().toISOString().replace(/\.\d+Z$/, 'Z');
        const signature = createHmac('sha256', key).update(`${method}\n${p}\n${timestamp}\n${boot.access_key}`).digest('hex');
        return httpRequest(`${url}${p}`, {
          method,
          ca: false,
          body,
          headers: { 'x-nimbus-access-key': boot.access_key, 'x-nimbus-timestamp': timestamp, 'x-nimbus-signature': signature },
        });
      };
      const password = `Duel-${randomBytes(9).toString('base64url')}-1!`;
      jsonOrThrow(await signed('POST', `/v1/iam/users/${boot.user_id}/password`, { password }), 'anchor set password');
      const login = jsonOrThrow(await httpRequest(`${url}/v1/iam/login`, { method: 'POST', ca: false, body: { username: boot.username, password } }), 'anchor login');
      return { jwt: login.data.token, username: boot.username, password, nodeIds: [] };
    },
    async addNodes(seeded, upTo) {
      const { url } = target.running!;
      const viaApi = Math.max(seeded.nodeIds.length, Math.min(upTo, ANCHOR_REGISTERED_NODES));
      const todo = Array.from({ length: viaApi - seeded.nodeIds.length }, (_, i) => seeded.nodeIds.length + i);
      // How its agents register (X-Agent-Token is the configured admin secret in 0.2.0). One at a
      // time: concurrent registrations wait on each other's SQLite write lock for seconds.
      await inParallel(todo, 1, async (i) => {
        const res = await httpRequest(`${url}/v1/internal/nodes/register`, {
          method: 'POST',
          ca: false,
          timeoutMs: 300_000,
          headers: { 'x-agent-token': agentSecret },
          body: {
            machine_id: `machine-${i}`,
            hostname: `sim-${i}`,
            ip_address: `10.1.${Math.floor(i / 250)}.${(i % 250) + 1}`,
            arch: 'amd64',
            total_cpu: 2,
            total_mem: 1024,
            agent_version: 'bench',
          },
        });
        seeded.nodeIds.push(jsonOrThrow(res, 'anchor node register').data.id);
      });
      if (upTo > seeded.nodeIds.length) seeded.nodeIds.push(...cloneAnchorNodes(path.join(dir, 'nimbus.db'), seeded.nodeIds.length, upTo));
    },
    listPath: () => '/v1/nodes',
  };
  return target;
}

// ---- wrk ---------------------------------------------------------------------------------------

interface Load {
  method: string;
  path: string;
  headers: Record<string, string>;
  body?: string;
  /** A request per id, round robin over these ids: `path` and `body` are Lua expressions of `id` and of `i` (a counter) and `tag` (per run). */
  rotate?: { ids: string[]; path: string; body: string };
}

interface WrkResult {
  rps: number;
  p50: number;
  p99: number;
  requests: number;
  errors: number;
  wrkCpu: number;
  /** Cores the server used during the run. */
  serverCpu: number;
  /** The server's CPU per request (µs): what decides under a loaded machine, where req/s wanders. */
  cpuPerRequest: number;
}

const luaString = (s: string) => JSON.stringify(s); // JSON string literals are valid Lua string literals for ASCII

function luaScript(load: Load): string {
  const headers = Object.entries({ ...load.headers, ...(load.body || load.rotate ? { 'Content-Type': 'application/json' } : {}) })
    .map(([k, v]) => `wrk.headers[${luaString(k)}] = ${luaString(v)}`)
    .join('\n');
  if (load.rotate) {
    return `${headers}
local ids = { ${load.rotate.ids.map(luaString).join(', ')} }
local i = 0
local tag = tostring(math.random(1, 1000000))
request = function()
  i = i + 1
  local id = ids[(i % #ids) + 1]
  return wrk.format(${luaString(load.method)}, ${load.rotate.path}, nil, ${load.rotate.body})
end
`;
  }
  return `wrk.method = ${luaString(load.method)}
${load.body ? `wrk.body = ${luaString(load.body)}` : ''}
${headers}
`;
}

/** wrk reports latencies like 1.23ms, 850.00us, 1.02s. */
function toMs(value: string): number {
  const m = /^([\d.]+)(us|ms|s|m)$/.exec(value.trim());
  if (!m) return NaN;
  const n = Number(m[1]);
  return m[2] === 'us' ? n / 1000 : m[2] === 'ms' ? n : m[2] === 's' ? n * 1000 : n * 60_000;
}

async function runWrk(target: Target, load: Load, durationS = DURATION_S): Promise<WrkResult> {
  const { url, child } = target.running!;
  const script = path.join(target.dir, 'load.lua');
  writeFileSync(script, luaScript(load));
  const cpu0 = processCpu(child.pid!);
  // `times` reports the CPU wrk used (children of the shell): the generator's own cost.
  const out = await new Promise<string>((resolve, reject) => {
    const sh = spawn('bash', ['-c', 'wrk "$@" && times', 'wrk', `-t${THREADS}`, `-c${CONNECTIONS}`, `-d${durationS}s`, '--timeout', '60s', '--latency', '-s', script, `${url}${load.path}`], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let text = '';
    sh.stdout.on('data', (c: Buffer) => (text += c));
    sh.stderr.on('data', (c: Buffer) => (text += c));
    sh.on('error', reject);
    sh.on('close', (code) => (code === 0 ? resolve(text) : reject(new Error(`wrk failed (${code}): ${text}`))));
  });
  const serverCpu = (processCpu(child.pid!) - cpu0) / durationS;
  const rps = Number(/Requests\/sec:\s+([\d.]+)/.exec(out)?.[1] ?? NaN);
  const requests = Number(/(\d+) requests in/.exec(out)?.[1] ?? 0);
  const non2xx = Number(/Non-2xx or 3xx responses:\s+(\d+)/.exec(out)?.[1] ?? 0);
  const socket = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(out);
  const socketErrors = socket ? socket.slice(1).reduce((a, b) => a + Number(b), 0) : 0;
  const times = out.trim().split('\n').slice(-1)[0]!.match(/(\d+)m([\d.]+)s/g) ?? [];
  const wrkCpu = times.reduce((sum, t) => {
    const [, m, s] = /(\d+)m([\d.]+)s/.exec(t)!;
    return sum + Number(m) * 60 + Number(s);
  }, 0) / durationS;
  return {
    rps,
    p50: toMs(/\s50%\s+(\S+)/.exec(out)?.[1] ?? ''),
    p99: toMs(/\s99%\s+(\S+)/.exec(out)?.[1] ?? ''),
    requests,
    errors: non2xx + socketErrors,
    wrkCpu,
    serverCpu,
    cpuPerRequest: requests ? (serverCpu * durationS * 1e6) / requests : NaN,
  };
}

// ---- the duel ----------------------------------------------------------------------------------

interface Row {
  scenario: string;
  kind: string;
  results: Map<string, WrkResult[]>;
  bytes: Map<string, number>;
}

function loads(target: Target, scenario: string, n?: number): Load {
  const s = target.seeded!;
  const auth = { Authorization: `Bearer ${s.jwt}` };
  switch (scenario) {
    case 'healthz':
      return { method: 'GET', path: '/healthz', headers: {} };
    case 'list':
      return { method: 'GET', path: target.listPath(n!), headers: auth };
    case 'login':
      return { method: 'POST', path: '/v1/iam/login', headers: {}, body: JSON.stringify({ username: s.username, password: s.password }) };
    case 'rename':
      return { method: 'PATCH', path: '/v1/nodes/', headers: auth, rotate: { ids: s.nodeIds.slice(0, 100), path: '"/v1/nodes/" .. id', body: `'{"name":"duel-' .. tag .. '-' .. i .. '"}'` } };
    case 'tag':
      return {
        method: 'PUT',
        path: '/v1/tags',
        headers: auth,
        rotate: { ids: s.nodeIds.slice(0, 100), path: '"/v1/tags"', body: `'{"resource_type":"node","resource_id":"' .. id .. '","key":"duel","value":"v-' .. tag .. '-' .. i .. '"}'` },
      };
    case 'scale':
      return { method: 'POST', path: '/v1/compute/instances/', headers: auth, rotate: { ids: s.instanceIds!, path: '"/v1/compute/instances/" .. id .. "/scale"', body: `'{"replicas":' .. (i % 5 + 1) .. '}'` } };
    default:
      throw new Error(`unknown scenario ${scenario}`);
  }
}

async function responseBytes(target: Target, load: Load): Promise<number> {
  if (load.rotate) return NaN;
  const headers = load.body ? { ...load.headers, 'Content-Type': 'application/json' } : load.headers;
  const res = await httpRequest(`${target.running!.url}${load.path}`, { method: load.method, ca: false, headers, body: load.body });
  if (res.status >= 300) throw new Error(`${target.name} ${load.method} ${load.path}: HTTP ${res.status} ${res.text.slice(0, 200)}`);
  return res.raw.length;
}

const fmt = (v: number, digits = 0) => (Number.isFinite(v) ? v.toFixed(digits) : 'n/a');

async function main() {
  if (!args.values['no-build']) {
    const built = spawnSync(process.execPath, [path.join(ROOT, 'scripts', 'build.mjs'), 'server'], { stdio: 'inherit' });
    if (built.status !== 0) throw new Error('npm run build:server failed');
  }
  const anchorPath = args.values.anchor ? path.resolve(args.values.anchor) : null;
  if (anchorPath && !existsSync(anchorPath)) throw new Error(`--anchor ${anchorPath} does not exist`);
  const targets = [hangarTarget(), ...(anchorPath ? [anchorTarget(anchorPath)] : [])];
  const wrkVersion = spawnSync('wrk', ['--version'], { encoding: 'utf8' }).stdout.split('\n')[0];
  console.log(`hangar duel — ${new Date().toISOString()}, node ${process.version}, ${os.cpus().length} × ${os.cpus()[0]?.model}, load average ${os.loadavg().map((l) => l.toFixed(1)).join(' ')}`);
  console.log(`wrk ${wrkVersion?.split(' ')[1] ?? '?'}: ${THREADS} thread(s), ${CONNECTIONS} connections, keep-alive, TLS, ${DURATION_S} s per run, ${REPEAT} run(s) each, interleaved`);
  if (anchorPath) console.log(`anchor: ${anchorPath} (${spawnSync(anchorPath, ['-version'], { encoding: 'utf8' }).stdout.trim() || 'version unknown'})`);

  const cold = new Map<string, number[]>();
  const idleRss = new Map<string, number>();
  // hangar's start is judged against a bare node HTTPS server's, started between its restarts.
  const bare = new BareNodeServer(await freePort());
  const bareStarts: number[] = [];
  try {
    for (const t of targets) {
      const first = await t.start();
      t.seeded = await t.bootstrap();
      await t.addNodes(t.seeded, NODE_COUNTS[0]!);
      // Cold start: a restart of the seeded server, to its first healthy answer.
      const times: number[] = [];
      for (let i = 0; i < 3; i++) {
        await stopProcess(t.running!.child);
        if (t.name === 'hangar') bareStarts.push(await bare.start());
        times.push(await t.start());
      }
      cold.set(t.name, times);
      if (t.name === 'hangar') console.log(`bare node HTTPS server: starts ${bareStarts.map((x) => fmt(x)).join(', ')} ms (between hangar's restarts)`);
      await new Promise((r) => setTimeout(r, 2000));
      const justStarted = rssMb(t.running!.child.pid!);
      // Idle: `hangar serve` collects its start-up's garbage once it has been quiet a few seconds (cli/young-generation.ts).
      await new Promise((r) => setTimeout(r, IDLE_MS - 2000));
      idleRss.set(t.name, rssMb(t.running!.child.pid!));
      console.log(
        `${t.name}: first start ${fmt(first)} ms; restarts ${times.map((x) => fmt(x)).join(', ')} ms; RSS 2 s after the start ${fmt(justStarted, 1)} MB, idle (${IDLE_MS / 1000} s) ${fmt(idleRss.get(t.name)!, 1)} MB${processesNote(t.running!.child.pid!)}`,
      );
    }

    const rows: Row[] = [];
    const measure = async (scenario: string, kind: string, n?: number, on = targets) => {
      const row: Row = { scenario, kind, results: new Map(), bytes: new Map() };
      for (const t of on) {
        row.results.set(t.name, []);
        row.bytes.set(t.name, await responseBytes(t, loads(t, kind, n)));
        await runWrk(t, loads(t, kind, n), 2); // warm-up (JIT, caches, connections)
      }
      for (let r = 0; r < REPEAT; r++) {
        for (const t of on) row.results.get(t.name)!.push(await runWrk(t, loads(t, kind, n)));
      }
      rows.push(row);
      printRow(row, targets);
    };

    printHeader(targets);
    if (SCENARIOS.has('healthz')) await measure('healthz', 'healthz');
    if (SCENARIOS.has('list')) {
      for (const n of NODE_COUNTS) {
        for (const t of targets) await t.addNodes(t.seeded!, n);
        await measure(`list ${n} nodes`, 'list', n);
      }
    }
    if (SCENARIOS.has('login')) await measure('login', 'login');
    const writes = (name: string) => SCENARIOS.has('write') || SCENARIOS.has(name);
    if (writes('rename')) await measure('write: rename node', 'rename');
    // Writes the anchor has no equivalent of (see the top of this file): hangar alone.
    const hangar = targets.filter((t) => t.name === 'hangar');
    if (writes('tag')) await measure('write: tag put', 'tag', undefined, hangar);
    if (writes('scale')) {
      hangar[0]!.seeded!.instanceIds = seedStoppedInstances(hangar[0]!, 20);
      await measure('write: instance scale', 'scale', undefined, hangar);
    }

    console.log('');
    // RSS right after the last run varies with when the collector last ran; read again after both
    // have been idle for a while (V8 and Go return memory on their own once idle).
    const afterDuel = new Map(targets.map((t) => [t.name, rssMb(t.running!.child.pid!)]));
    await new Promise((r) => setTimeout(r, SETTLE_MS));
    const settled = new Map(targets.map((t) => [t.name, rssMb(t.running!.child.pid!)]));
    for (const t of targets) {
      console.log(
        `${t.name}: cold start (restart, median of 3) ${fmt(median(cold.get(t.name)!))} ms; idle RSS ${fmt(idleRss.get(t.name)!, 1)} MB; ` +
          `RSS after the duel ${fmt(afterDuel.get(t.name)!, 1)} MB, ${SETTLE_MS / 1000} s later ${fmt(settled.get(t.name)!, 1)} MB ` +
          `(malloc's main arena ${fmt(mallocArenaMb(t.running!.child.pid!), 1)} MB)${processesNote(t.running!.child.pid!)}`,
      );
    }
    const coldMs = median(cold.get('hangar')!);
    console.log(
      `targets: cold start ≤ 8× a bare node server's start → ${fmt(coldMs)} ms ÷ ${fmt(median(bareStarts))} ms = ${fmt(coldMs / median(bareStarts), 1)}× (and < 500 ms: ${fmt(coldMs / 500, 2)}×); idle RSS < 80 MB → ${fmt(idleRss.get('hangar')!, 1)} MB; ` +
        `RSS ${SETTLE_MS / 1000} s after the duel < 110 MB → ${fmt(settled.get('hangar')!, 1)} MB (${fmt(afterDuel.get('hangar')!, 1)} MB at its end)`,
    );
  } finally {
    bare.remove();
    for (const t of targets) {
      if (t.running) await stopProcess(t.running.child);
      if (args.values.keep) console.log(`kept ${t.dir}`);
      else rmSync(t.dir, { recursive: true, force: true });
    }
  }
}

function printHeader(targets: Target[]) {
  const cols = ['scenario'.padEnd(22)];
  for (const t of targets) cols.push(`${t.name} req/s  p50 ms  p99 ms  cpu µs/req  bytes`.padStart(49));
  // ratio: req/s, hangar ÷ anchor (the target); cpu ratio: the anchor's CPU per request ÷ hangar's.
  if (targets.length > 1) cols.push('   ratio  target  cpu ratio');
  cols.push('  wrk cpu  errors');
  console.log(`\n${cols.join(' ')}`);
}

function printRow(row: Row, targets: Target[]) {
  const cols = [row.scenario.padEnd(22)];
  const med = new Map<string, number>();
  let wrkCpu = 0;
  let errors = 0;
  for (const t of targets.filter((x) => row.results.has(x.name))) {
    const rs = row.results.get(t.name)!;
    const rps = median(rs.map((r) => r.rps));
    med.set(t.name, rps);
    wrkCpu = Math.max(wrkCpu, median(rs.map((r) => r.wrkCpu)));
    errors += rs.reduce((a, r) => a + r.errors, 0);
    cols.push(
      `${fmt(rps).padStart(t.name.length + 6)} ${fmt(median(rs.map((r) => r.p50)), 2).padStart(7)} ${fmt(median(rs.map((r) => r.p99)), 2).padStart(7)} ${fmt(median(rs.map((r) => r.serverCpu)), 2).padStart(4)} ${fmt(median(rs.map((r) => r.cpuPerRequest))).padStart(6)} ${fmt(row.bytes.get(t.name)!).padStart(6)}`.padStart(49),
    );
  }
  if (targets.length > 1 && !row.results.has('anchor')) {
    cols.push(`${'anchor: no equivalent'.padStart(49)}`);
    cols.push('   –'.padEnd(15), '       –'.padStart(9));
  } else if (targets.length > 1) {
    const ratio = med.get('hangar')! / med.get('anchor')!;
    const target = TARGETS[row.kind];
    const cpu = (name: string) => median(row.results.get(name)!.map((r) => r.cpuPerRequest));
    cols.push(`${fmt(ratio, 2).padStart(7)}× ${target ? `≥ ${target}` : ''}`.padEnd(15));
    cols.push(`${fmt(cpu('anchor') / cpu('hangar'), 2).padStart(8)}×`);
  }
  cols.push(`${fmt(wrkCpu, 2).padStart(8)} ${String(errors).padStart(7)}`);
  console.log(cols.join(' '));
  if (REPEAT > 1 && row.results.has('anchor')) {
    const per = row.results.get('hangar')!.map((r, i) => fmt(r.rps / row.results.get('anchor')![i]!.rps, 2));
    console.log(`${''.padEnd(22)} per-run ratios ${per.join(', ')}`);
  }
}

await main();
process.exit(0);
