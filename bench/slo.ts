// Benchmark: the API's latency under fleet load (issue 32, "Latency under fleet load"). A real control
// plane (the production build, bin/hangar serve, every plugin a default configuration loads) with N
// simulated agents heartbeating and long-polling (bench/agents-generator.ts), and for --duration
// seconds, side by side:
//
//   churn      --changes-per-second writes through the API, in turn: a node renamed (PATCH
//              /v1/nodes/{id}), a tag put on a node (PUT /v1/tags), an instance scaled (POST
//              /v1/compute/instances/{id}/scale, instances seeded stopped in the store: a running one
//              needs a real cluster and its agent, which this bench does not simulate; a stopped one
//              records its count). Secret updates are not in the churn for the same reason: a secret
//              lives on its cluster and is written there by the cluster's agent.
//   reads      single objects (GET /v1/nodes/{id}) at --reads-per-second
//   lists      pages of 100 nodes (GET /v1/nodes?limit=100, following next_cursor) at --lists-per-second
//   dispatch   a task queued for a random agent (POST /v1/nodes/{id}/logs) → the agent has it, at
//              --dispatches-per-second
//   heartbeats every agent's, as the generators time them
//
//   npm run bench:slo -- [--n 5000] [--dialects sqlite,postgres] [--duration 300] [--interval 10]
//                        [--changes-per-second 20] [--reads-per-second 20] [--lists-per-second 2]
//                        [--dispatches-per-second 2] [--generators 2] [--no-build]
//
// Prints p50/p99/max of each against its goal (mutating p99 ≤ 100 ms, reads ≤ 50, lists ≤ 250,
// heartbeats ≤ 50, dispatch ≤ 100), with the control plane's CPU and RSS and the load average
// before and after: on a busy machine the figures are the machine's as much as hangar's.
import { spawnSync } from 'node:child_process';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import knexFactory, { type Knex } from 'knex';
import { loadConfig } from '../core/config.js';
import { httpRequest } from '../core/http/client.js';
import { epochMs } from './agents-generator.js';
import { mergeCounts, ms, ONLINE_LIMIT_S, paced, percentile, startControlPlane, startFleet, type ControlPlane, type Generator } from './fleet.js';
import { processCpu, rssMb } from './processes.js';

const args = parseArgs({
  options: {
    n: { type: 'string', default: '5000' },
    dialects: { type: 'string', default: 'sqlite,postgres' },
    duration: { type: 'string', default: '300' },
    interval: { type: 'string', default: '10' },
    'changes-per-second': { type: 'string', default: '20' },
    'reads-per-second': { type: 'string', default: '20' },
    'lists-per-second': { type: 'string', default: '2' },
    'dispatches-per-second': { type: 'string', default: '2' },
    instances: { type: 'string', default: '50' },
    generators: { type: 'string', default: '2' },
    'no-build': { type: 'boolean', default: false },
    'pg-url': { type: 'string', default: process.env.HANGAR_TEST_PG_URL ?? 'postgres://hangar:hangar@127.0.0.1:5432/hangar_test' },
  },
});
const N = Number(args.values.n);
const DURATION_S = Number(args.values.duration);
const INTERVAL_S = Number(args.values.interval);
const INSTANCES = Number(args.values.instances);
const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');

/** The control plane's metrics scrape token (metrics.scrape_token), for its loops' figures. */
const SCRAPE_TOKEN = 'slo-bench-scrape-token-of-32-characters';

/** The goals of issue 32: p99 of each, in milliseconds. */
const GOALS = { mutating: 100, read: 50, list: 250, heartbeat: 50, dispatch: 100 } as const;
type Category = keyof typeof GOALS;

function storeOf(cp: ControlPlane): Knex {
  return cp.store.dialect === 'postgres'
    ? knexFactory({ client: 'pg', connection: cp.store.pgUrl, searchPath: [cp.store.schema], pool: { min: 0, max: 1 } })
    : knexFactory({ client: 'better-sqlite3', connection: { filename: cp.store.sqliteFile }, useNullAsDefault: true });
}

/** Stopped instances on a cluster with no member, written into the store (see the top of this file). */
async function seedStoppedInstances(cp: ControlPlane, n: number): Promise<string[]> {
  const knex = storeOf(cp);
  try {
    const now = new Date().toISOString();
    const project = ((await knex('projects').where({ name: 'default' }).first('id')) as { id?: string } | undefined)?.id;
    const insert = async (table: string, row: Record<string, unknown>) => {
      const full: Record<string, unknown> = { ...row };
      const columns = (await knex(table).columnInfo()) as unknown as Record<string, { type: string; nullable: boolean; defaultValue: unknown }>;
      for (const [name, info] of Object.entries(columns)) {
        if (name in full || info.nullable || info.defaultValue !== null) continue;
        full[name] = /int|real|num|bool/i.test(info.type) ? 0 : /json|text/i.test(info.type) ? '[]' : 'x';
      }
      await knex(table).insert(full);
    };
    await insert('clusters', { id: 'swm-slo', name: 'slo-swarm', backend: 'swarm', status: 'empty', ...(project ? { project_id: project } : {}), created_at: now, updated_at: now });
    const ids = Array.from({ length: n }, (_, i) => `inst-slo${i}`);
    for (const [i, id] of ids.entries()) {
      await insert('compute_instances', { id, name: `slo-${i}`, cluster_id: 'swm-slo', status: 'stopped', desired: 'stopped', replicas: 1, op_rev: 0, created_at: now, updated_at: now });
    }
    return ids;
  } finally {
    await knex.destroy();
  }
}

/** The control plane's background loops over the run, from its own /metrics: runs, mean and total seconds, the costliest first. */
function loopFigures(res: { status: number; text?: string } | null): string[] {
  if (res?.status !== 200 || !res.text) return [];
  const sums = new Map<string, number>();
  const counts = new Map<string, number>();
  for (const line of res.text.split('\n')) {
    const m = /^hangar_loop_duration_seconds_(sum|count)\{[^}]*loop="([^"]+)"[^}]*\} ([0-9.e+-]+)$/.exec(line);
    if (!m) continue;
    const into = m[1] === 'sum' ? sums : counts;
    into.set(m[2]!, (into.get(m[2]!) ?? 0) + Number(m[3]));
  }
  return [...sums]
    .sort((a, b) => b[1] - a[1])
    .slice(0, 6)
    .map(([loop, sum]) => `${loop} ${counts.get(loop) ?? 0}× ${((sum / Math.max(1, counts.get(loop) ?? 0)) * 1000).toFixed(1)} ms (${sum.toFixed(1)} s)`);
}

async function run(dialect: string) {
  const cp = await startControlPlane(dialect, {
    pgUrl: args.values['pg-url']!,
    workers: '1',
    intervalS: INTERVAL_S,
    plugins: loadConfig({ env: {} }).plugins.join(','),
    env: { HANGAR_METRICS__SCRAPE_TOKEN: SCRAPE_TOKEN },
  });
  const generators: Generator[] = [];
  try {
    const sent = new Map<string, number>(); // dispatched task id → when the request started
    const arrived = new Map<string, number>(); // task id → when its agent had it
    const fleet = await startFleet(cp, { n: N, count: Number(args.values.generators), intervalS: INTERVAL_S, protocol: 'h2', generators, onTasks: (arrivals) => arrivals.forEach(([id, at]) => arrived.set(id, at)) });
    const instanceIds = await seedStoppedInstances(cp, INSTANCES);
    const api = (method: string, p: string, body?: unknown) => httpRequest(`${cp.url}${p}`, { method, ca: cp.ca, headers: { authorization: `Bearer ${fleet.jwt}` }, body });
    const times: Record<Exclude<Category, 'heartbeat' | 'dispatch'>, number[]> = { mutating: [], read: [], list: [] };
    const byCall: Record<string, number[]> = {};
    const failures: Record<string, number> = {};
    const timed = async (category: keyof typeof times, what: string, call: () => Promise<{ status: number; json?: any }>, ok = 200) => {
      const started = epochMs();
      const res = await call().catch((err: Error) => ({ status: 0, json: { message: err.message } }));
      if (res.status === ok) {
        times[category].push(epochMs() - started);
        (byCall[what] ??= []).push(epochMs() - started);
      }
      else failures[`${what} ${res.status} ${String(res.json?.message ?? '').slice(0, 60)}`] = (failures[`${what} ${res.status} ${String(res.json?.message ?? '').slice(0, 60)}`] ?? 0) + 1;
      return res;
    };
    const pick = <T>(list: T[]) => list[Math.floor(Math.random() * list.length)]!;
    for (const g of generators) g.send({ type: 'measure' });
    const load0 = os.loadavg()[0]!;
    const cpu0 = processCpu(cp.child.pid!);
    const t0 = Date.now();
    const churn = [
      (i: number) => timed('mutating', 'rename', () => api('PATCH', `/v1/nodes/${pick(fleet.nodeIds)}`, { name: `slo-${i}-${Math.random().toString(36).slice(2, 8)}` })),
      (i: number) => timed('mutating', 'tag', () => api('PUT', '/v1/tags', { resource_type: 'node', resource_id: pick(fleet.nodeIds), key: 'slo', value: `v${i}` })),
      (i: number) => timed('mutating', 'scale', () => api('POST', `/v1/compute/instances/${pick(instanceIds)}/scale`, { replicas: (i % 5) + 1 }), 202),
    ];
    await Promise.all([
      paced(Number(args.values['changes-per-second']), DURATION_S, (i) => churn[i % churn.length]!(i).then(() => undefined)),
      paced(Number(args.values['reads-per-second']), DURATION_S, () => timed('read', 'read', () => api('GET', `/v1/nodes/${pick(fleet.nodeIds)}`)).then(() => undefined)),
      paced(Number(args.values['lists-per-second']), DURATION_S, async () => {
        // A page somewhere in the fleet: the first, or the one after a cursor a previous page gave.
        const first = await timed('list', 'list', () => api('GET', '/v1/nodes?limit=100'));
        const cursor = first.json?.next_cursor as string | undefined;
        if (cursor) await timed('list', 'list', () => api('GET', `/v1/nodes?limit=100&cursor=${encodeURIComponent(cursor)}`));
      }),
      paced(Number(args.values['dispatches-per-second']), DURATION_S, async () => {
        const started = epochMs();
        const res = await api('POST', `/v1/nodes/${pick(fleet.nodeIds)}/logs?lines=1`).catch(() => null);
        const id = res?.json?.data?.task_id as string | undefined;
        if (id) sent.set(id, started);
        else failures[`dispatch ${res?.status ?? 'error'}`] = (failures[`dispatch ${res?.status ?? 'error'}`] ?? 0) + 1;
      }),
    ]);
    const seconds = (Date.now() - t0) / 1000;
    const cpu = (processCpu(cp.child.pid!) - cpu0) / seconds;
    const rss = rssMb(cp.child.pid!);
    const loops = loopFigures(await httpRequest(`${cp.url}/metrics`, { ca: cp.ca, headers: { authorization: `Bearer ${SCRAPE_TOKEN}` } }).catch(() => null));
    await new Promise((r) => setTimeout(r, 2000));
    const statsPromise = Promise.all(generators.map((g) => g.next('stats')));
    for (const g of generators) g.send({ type: 'stop' });
    const stats = await statsPromise;
    const samples: Record<Category, number[]> = {
      ...times,
      heartbeat: stats.flatMap((s) => s.heartbeatMs),
      dispatch: [...sent].filter(([id]) => arrived.has(id)).map(([id, at]) => arrived.get(id)! - at),
    };
    const lost = sent.size - samples.dispatch.length;
    return { dialect, samples, byCall, loops, cpu, rss, onlineS: fleet.onlineS, load: [load0, os.loadavg()[0]!], failures: mergeCounts([failures, ...stats.map((s) => s.reasons)]), lost };
  } finally {
    for (const g of generators) g.child.kill('SIGKILL');
    await cp.stop();
  }
}

if (!args.values['no-build']) {
  const built = spawnSync(process.execPath, [path.join(ROOT, 'scripts', 'build.mjs'), 'server'], { stdio: 'inherit' });
  if (built.status !== 0) throw new Error('npm run build:server failed');
}
console.log(
  `hangar SLO benchmark — ${new Date().toISOString()}, node ${process.version}, ${os.cpus().length} cores; ${N} agents (heartbeat every ${INTERVAL_S} s), ` +
    `${args.values['changes-per-second']} changes/s (rename, tag, scale), ${args.values['reads-per-second']} reads/s, ${args.values['lists-per-second']} lists/s, ${args.values['dispatches-per-second']} dispatches/s for ${DURATION_S} s`,
);
console.log('dialect   call        count   p50_ms   p99_ms   max_ms  goal_p99_ms  p99/goal  within');
for (const dialect of args.values.dialects!.split(',')) {
  const r = await run(dialect);
  for (const category of Object.keys(GOALS) as Category[]) {
    const values = r.samples[category];
    const p99 = percentile(values, 99);
    console.log(
      [
        dialect.padEnd(8),
        category.padEnd(10),
        String(values.length).padStart(7),
        ms(percentile(values, 50)).padStart(8),
        ms(p99).padStart(8),
        ms(values.length ? Math.max(...values) : NaN).padStart(8),
        String(GOALS[category]).padStart(12),
        (p99 / GOALS[category]).toFixed(2).padStart(9),
        (values.length && p99 <= GOALS[category] ? 'yes' : 'NO').padStart(7),
      ].join(' '),
    );
  }
  const online = r.onlineS >= ONLINE_LIMIT_S ? `>${ONLINE_LIMIT_S}` : r.onlineS.toFixed(1);
  console.log(`${dialect.padEnd(8)}  control plane ${r.cpu.toFixed(2)} CPU, ${r.rss.toFixed(0)} MB RSS; fleet online in ${online} s; load average ${r.load.map((l) => l.toFixed(1)).join(' → ')}`);
  console.log(`${dialect.padEnd(8)}  by call (p50/p99/max ms): ${Object.entries(r.byCall).map(([what, v]) => `${what} ${ms(percentile(v, 50))}/${ms(percentile(v, 99))}/${ms(Math.max(...v))}`).join(', ')}`);
  if (r.loops.length) console.log(`${dialect.padEnd(8)}  background loops since the start (runs, mean, total): ${r.loops.join('; ')}`);
  const reasons = Object.entries(r.failures).filter(([, count]) => count > 0);
  if (reasons.length || r.lost) console.log(`  failures: ${[...reasons.map(([why, count]) => `${why} ×${count}`), ...(r.lost ? [`dispatched, never arrived ×${r.lost}`] : [])].join(', ')}`);
}
process.exit(0);
