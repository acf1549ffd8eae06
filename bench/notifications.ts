// Benchmark: notification latency and the API's latency beside it, with a fleet connected (issue 31,
// "Measured"). A real control plane (the production build, bin/hangar serve) with N simulated agents
// heartbeating (bench/agents-generator.ts), S subscriptions over C webhook channels to a receiver on
// loopback, and a steady stream of events (a node record made through the API: node.created).
//
//   npm run bench:notify -- [--n 5000] [--subscriptions 1000] [--channels 20] [--dialects sqlite,postgres]
//                           [--duration 60] [--events-per-second 5] [--reads-per-second 20] [--slow-seconds 5]
//
// Of the S subscriptions, one per channel takes node.created; the others take node.created only for
// resources that do not exist (each is still matched against every event). So each event is
// delivered C times. Two phases of --duration each:
//   ok       the receiver answers 204 at once: event → receiver latency (from the request that made
//            the event to the receiver having the delivery) p50/p99, and the API's p99 (GET /v1/nodes/{id})
//   failing  the receiver answers 503 to everything (deliveries retry with backoff): the API's p99 again
//   slow     the receiver holds every request --slow-seconds before it answers 204 (with --channels 100:
//            a hundred slow receivers, issue 31's proof): the API's p99 again
// Printed with the load average: on a busy machine the figures are the machine's as much as hangar's.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import { parseArgs } from 'node:util';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { httpRequest } from '../core/http/client.js';
import { epochMs } from './agents-generator.js';
import { ms, paced, percentile, startControlPlane, startFleet, type Generator } from './fleet.js';
import { processCpu, rssMb } from './processes.js';

const args = parseArgs({
  options: {
    n: { type: 'string', default: '5000' },
    subscriptions: { type: 'string', default: '1000' },
    channels: { type: 'string', default: '20' },
    dialects: { type: 'string', default: 'sqlite,postgres' },
    duration: { type: 'string', default: '60' },
    'events-per-second': { type: 'string', default: '5' },
    'reads-per-second': { type: 'string', default: '20' },
    interval: { type: 'string', default: '10' },
    'slow-seconds': { type: 'string', default: '5' },
    generators: { type: 'string', default: '2' },
    'no-build': { type: 'boolean', default: false },
    'pg-url': { type: 'string', default: process.env.HANGAR_TEST_PG_URL ?? 'postgres://hangar:hangar@127.0.0.1:5432/hangar_test' },
  },
});
const N = Number(args.values.n);
const SUBSCRIPTIONS = Number(args.values.subscriptions);
const CHANNELS = Math.max(1, Math.min(Number(args.values.channels), SUBSCRIPTIONS));
const DURATION_S = Number(args.values.duration);
const EVENTS_PER_S = Number(args.values['events-per-second']);
const READS_PER_S = Number(args.values['reads-per-second']);
const INTERVAL_S = Number(args.values.interval);
const SLOW_MS = Number(args.values['slow-seconds']) * 1000;
const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');

/** A webhook receiver on loopback: when each delivery of each node's node.created arrived, per channel path. */
class Receiver {
  mode: 'ok' | 'failing' | 'slow' = 'ok';
  /** node id → arrival times (epoch ms), one per channel. */
  readonly arrivals = new Map<string, number[]>();
  private readonly server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      if (this.mode === 'failing') return void res.writeHead(503).end();
      if (this.mode === 'slow') return void setTimeout(() => res.writeHead(204).end(), SLOW_MS);
      const at = epochMs();
      const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { type?: string; resource?: { id?: string } };
      const id = body.resource?.id;
      if (body.type === 'node.created' && id) this.arrivals.set(id, [...(this.arrivals.get(id) ?? []), at]);
      res.writeHead(204).end();
    });
  });
  async start(): Promise<string> {
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }
  stop(): Promise<void> {
    return new Promise((resolve) => this.server.close(() => resolve()));
  }
}

async function run(dialect: string) {
  const receiver = new Receiver();
  const base = await receiver.start();
  const cp = await startControlPlane(dialect, {
    pgUrl: args.values['pg-url']!,
    workers: '1',
    intervalS: INTERVAL_S,
    plugins: 'system,iam,nodes,agent-internal,notifications',
    env: { HANGAR_NOTIFICATIONS__ALLOW_HTTP: 'true', HANGAR_NOTIFICATIONS__ALLOW_PRIVATE_ADDRESSES: 'true', HANGAR_NOTIFICATIONS__RETRY_BASE_SECONDS: '1' },
  });
  const generators: Generator[] = [];
  try {
    const fleet = await startFleet(cp, { n: N, count: Number(args.values.generators), intervalS: INTERVAL_S, protocol: 'h2', generators, onTasks: () => undefined });
    const api = (method: string, p: string, body?: unknown) => httpRequest(`${cp.url}${p}`, { method, ca: cp.ca, headers: { authorization: `Bearer ${fleet.jwt}` }, body });
    const channelIds: string[] = [];
    for (let c = 0; c < CHANNELS; c++) {
      const res = await api('POST', '/v1/notifications/channels', { name: `bench-${c}`, kind: 'webhook', url: `${base}/c${c}` });
      if (res.status !== 201) throw new Error(`channel: ${res.status} ${res.text}`);
      channelIds.push(res.json.data.id as string);
    }
    for (let s = 0; s < SUBSCRIPTIONS; s++) {
      const channel = channelIds[s % CHANNELS]!;
      const body = s < CHANNELS ? { channel_id: channel, event_types: ['node.created'] } : { channel_id: channel, event_types: ['node.created'], resource_ids: [`node-none-${s}`] };
      const res = await api('POST', '/v1/notifications/subscriptions', body);
      if (res.status !== 201) throw new Error(`subscription: ${res.status} ${res.text}`);
    }
    // The subscriptions are read again at most every 2 s.
    await new Promise((r) => setTimeout(r, 2500));

    const phase = async (name: 'ok' | 'failing' | 'slow') => {
      receiver.mode = name;
      const made = new Map<string, number>();
      const reads: number[] = [];
      let errors = 0;
      const cpu0 = processCpu(cp.child.pid!);
      const t0 = Date.now();
      let counter = 0;
      await Promise.all([
        paced(EVENTS_PER_S, DURATION_S, async () => {
          const started = epochMs();
          const res = await api('POST', '/v1/nodes', { name: `${name}-${dialect}-${++counter}` });
          if (res.status === 201) made.set(res.json.data.id as string, started);
          else errors++;
        }),
        paced(READS_PER_S, DURATION_S, async () => {
          const started = epochMs();
          const res = await api('GET', `/v1/nodes/${fleet.nodeIds[Math.floor(Math.random() * fleet.nodeIds.length)]!}`);
          if (res.status === 200) reads.push(epochMs() - started);
          else errors++;
        }),
      ]);
      const cpu = (processCpu(cp.child.pid!) - cpu0) / ((Date.now() - t0) / 1000);
      // Deliveries still on their way get a moment to land.
      if (name === 'ok') await new Promise((r) => setTimeout(r, 3000));
      const latencies = [...made].flatMap(([id, at]) => (receiver.arrivals.get(id) ?? []).map((arrived) => arrived - at));
      return { name, events: made.size, deliveries: latencies.length, expected: made.size * CHANNELS, p50: percentile(latencies, 50), p99: percentile(latencies, 99), readP50: percentile(reads, 50), readP99: percentile(reads, 99), reads: reads.length, errors, cpu, rss: rssMb(cp.child.pid!) };
    };
    return [await phase('ok'), await phase('failing'), await phase('slow')];
  } finally {
    for (const g of generators) g.child.kill('SIGKILL');
    await cp.stop();
    await receiver.stop();
  }
}

if (!args.values['no-build']) {
  const built = spawnSync(process.execPath, [path.join(ROOT, 'scripts', 'build.mjs'), 'server'], { stdio: 'inherit' });
  if (built.status !== 0) throw new Error('npm run build:server failed');
}
console.log(
  `hangar notifications benchmark — ${new Date().toISOString()}, node ${process.version}, ${os.cpus().length} cores, load average ${os.loadavg().map((l) => l.toFixed(1)).join(' ')}; ` +
    `${N} agents (heartbeat every ${INTERVAL_S} s), ${SUBSCRIPTIONS} subscriptions over ${CHANNELS} webhook channels (each event delivered ${CHANNELS}×), ${EVENTS_PER_S} events/s and ${READS_PER_S} reads/s for ${DURATION_S} s per phase`,
);
console.log('dialect   receiver  events  deliveries  notify_p50_ms  notify_p99_ms  api_reads  api_p50_ms  api_p99_ms  errors  cp_cpu  cp_rss_mb');
for (const dialect of args.values.dialects!.split(',')) {
  for (const r of await run(dialect)) {
    console.log(
      [
        dialect.padEnd(8),
        r.name.padEnd(9),
        String(r.events).padStart(6),
        `${r.deliveries}/${r.expected}`.padStart(11),
        (r.name === 'ok' ? ms(r.p50) : '   n/a').padStart(14),
        (r.name === 'ok' ? ms(r.p99) : '   n/a').padStart(14),
        String(r.reads).padStart(10),
        ms(r.readP50).padStart(11),
        ms(r.readP99).padStart(11),
        String(r.errors).padStart(7),
        r.cpu.toFixed(2).padStart(7),
        r.rss.toFixed(0).padStart(10),
      ].join(' '),
    );
  }
}
process.exit(0);
