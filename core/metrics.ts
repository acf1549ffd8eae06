import client, { type Counter, type Gauge, type Histogram } from 'prom-client';
import type { Store } from './db/store.js';
import { defineExtensionPoint } from './provided.js';
import type { FinishedRequest } from './http/observers.js';
import { alone, type Peers } from './workers.js';

/** Seconds: the buckets of every latency histogram (1 ms … 30 s). */
const LATENCY_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];
/** Seconds: task durations run from a moment to an hour (an OS update). */
const TASK_BUCKETS = [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600];

/** The route label of a request: its template, never the raw path (which would explode the series). */
export function routeLabel(request: Pick<FinishedRequest, 'route'>): string {
  return request.route?.path ?? '(unmatched)';
}

let processRegistry: client.Registry | undefined;

/** Node's process metrics (CPU, memory, event loop, GC), collected once per process and shared by every control plane in it. */
function processMetrics(): client.Registry {
  if (!processRegistry) {
    processRegistry = new client.Registry();
    client.collectDefaultMetrics({ register: processRegistry });
  }
  return processRegistry;
}

type Collect = (set: (labels: Record<string, string>, value: number) => void) => Promise<void> | void;

/**
 * The labels that name a resource by id: its kind (the scope resolver's, core/auth/scope.ts) and the
 * permission that reads it. A series carrying one belongs to that resource's project, and a
 * project's metrics (`GET /v1/projects/{id}/metrics`, docs/metrics.md) answer it to the members
 * whose role reads that kind. A plugin labelling a series with another resource adds it here.
 */
export const RESOURCE_LABELS: Readonly<Record<string, { kind: string; permission: string }>> = {
  volume: { kind: 'volume', permission: 'volumes:read' },
};

/**
 * A series that a project's metrics (`GET /v1/projects/{id}/metrics`) compute for the project
 * itself, where `/metrics` has it for the whole installation with no label naming a project
 * (`hangar_alerts_firing`: the project's alerts by rule and severity). Answered to the members whose
 * role in the project grants `permission`.
 */
export interface ProjectSeries {
  name: string;
  help: string;
  permission: string;
  collect(projectId: string, set: (labels: Record<string, string>, value: number) => void): Promise<void>;
}

export const ProjectSeriesPoint = defineExtensionPoint<ProjectSeries>('metrics.project-series', 'series a project’s metrics compute for the project (core/metrics.ts)');

/** Metrics as prom-client's getMetricsAsJSON answers them. */
export type MetricsJson = Awaited<ReturnType<client.Registry['getMetricsAsJSON']>>;
type LabelValues = Record<string, string | number | undefined>;

const escapeHelp = (text: string) => text.replace(/\\/g, '\\\\').replace(/\n/g, '\\n');
const escapeLabel = (text: string) => escapeHelp(text).replace(/"/g, '\\"');
const formatValue = (value: number) => (Number.isNaN(value) ? 'NaN' : value === Infinity ? '+Inf' : value === -Infinity ? '-Inf' : String(value));

/** A gauge's samples in the shape of getMetricsAsJSON (for {@link exposition}). */
export function gaugeJson(name: string, help: string, values: Array<{ labels: Record<string, string>; value: number }>): MetricsJson[number] {
  return { name, help, type: 'gauge', aggregator: 'sum', values } as unknown as MetricsJson[number];
}

/** The exposition text (Prometheus 0.0.4) of metrics as JSON. */
export function exposition(metrics: MetricsJson): string {
  const lines: string[] = [];
  for (const metric of metrics) {
    lines.push(`# HELP ${metric.name} ${escapeHelp(metric.help)}`, `# TYPE ${metric.name} ${metric.type}`);
    for (const sample of metric.values as Array<{ metricName?: string; labels: LabelValues; value: number }>) {
      const labels = Object.entries(sample.labels).filter(([, v]) => v !== undefined);
      const labelText = labels.length ? `{${labels.map(([k, v]) => `${k}="${escapeLabel(String(v))}"`).join(',')}}` : '';
      lines.push(`${sample.metricName ?? metric.name}${labelText} ${formatValue(sample.value)}`);
    }
  }
  return `${lines.join('\n')}\n`;
}

/**
 * The control plane's Prometheus metrics (services.metrics): one registry per control plane.
 * Core records HTTP requests, background loops, the task queue and the store's pool; plugins add
 * gauges computed at scrape time with {@link gauge}. `GET /metrics` (the metrics plugin) serves it.
 */
export class Metrics {
  readonly registry = new client.Registry();
  readonly httpRequests: Counter<'listener' | 'method' | 'route' | 'status'>;
  readonly httpDuration: Histogram<'listener' | 'method' | 'route'>;
  readonly loopRuns: Counter<'loop' | 'outcome'>;
  readonly loopDuration: Histogram<'loop'>;
  readonly leaseExpiries: Counter<'outcome'>;
  readonly taskDuration: Histogram<'kind' | 'outcome'>;
  readonly heartbeats: Counter<'outcome'>;
  readonly heartbeatDuration: Histogram;
  readonly pollLooks: Counter<'store'>;

  constructor(private readonly peers: Peers = alone) {
    const registers = [this.registry];
    this.httpRequests = new client.Counter({ name: 'hangar_http_requests_total', help: 'HTTP requests answered, by listener, method, route template and status', labelNames: ['listener', 'method', 'route', 'status'], registers });
    this.httpDuration = new client.Histogram({ name: 'hangar_http_request_duration_seconds', help: 'Time to answer an HTTP request (until the answer starts), by route template', labelNames: ['listener', 'method', 'route'], buckets: LATENCY_BUCKETS, registers });
    this.loopRuns = new client.Counter({ name: 'hangar_loop_runs_total', help: 'Background loop runs, by loop and outcome (ok, failed)', labelNames: ['loop', 'outcome'], registers });
    this.loopDuration = new client.Histogram({ name: 'hangar_loop_duration_seconds', help: 'Duration of background loop runs', labelNames: ['loop'], buckets: LATENCY_BUCKETS, registers });
    this.leaseExpiries = new client.Counter({ name: 'hangar_task_lease_expiries_total', help: 'Task leases that expired without a result: retried (back to pending) or failed (attempts used up)', labelNames: ['outcome'], registers });
    this.taskDuration = new client.Histogram({ name: 'hangar_task_duration_seconds', help: 'From queued to reported, by task kind and outcome (completed, failed)', labelNames: ['kind', 'outcome'], buckets: TASK_BUCKETS, registers });
    this.heartbeats = new client.Counter({ name: 'hangar_heartbeats_total', help: 'Agent heartbeats received, by outcome (ok, refused)', labelNames: ['outcome'], registers });
    this.pollLooks = new client.Counter({
      name: 'hangar_agent_poll_looks_total',
      help: 'Looks at a node’s task queue for a long-poll: queried (the store was asked) or known_idle (found empty before and no task queued since: no query)',
      labelNames: ['store'],
      registers,
    });
    this.heartbeatDuration = new client.Histogram({ name: 'hangar_heartbeat_duration_seconds', help: 'Time to process one agent heartbeat', buckets: LATENCY_BUCKETS, registers });
  }

  /** Records one answered request (a RequestObservers observer). */
  readonly observeRequest = (request: FinishedRequest): void => {
    const route = routeLabel(request);
    this.httpRequests.inc({ listener: request.listener, method: request.method, route, status: String(request.status) });
    this.httpDuration.observe({ listener: request.listener, method: request.method, route }, request.durationMs / 1000);
  };

  /**
   * A gauge whose values are computed when scraped: `collect` calls `set(labels, value)` for each
   * series. `of: 'store'` for a value read from the store, the same in every worker (api.workers);
   * otherwise it is this process's and the workers' values are summed.
   */
  gauge(name: string, help: string, labelNames: string[], collect: Collect, of: 'process' | 'store' = 'process'): void {
    new client.Gauge({
      name,
      help,
      labelNames,
      aggregator: of === 'store' ? 'first' : 'sum',
      registers: [this.registry],
      async collect(this: Gauge) {
        this.reset();
        await collect((labels, value) => this.set(labels, value));
      },
    });
  }

  /** A counter a plugin increments; with several workers (api.workers) a scrape answers their sum. */
  counter<L extends string = string>(name: string, help: string, labelNames: L[] = []): Counter<L> {
    return new client.Counter({ name, help, labelNames, registers: [this.registry] });
  }

  /** Gauges over core's own state: the task queue by kind and status, held long-polls, the store's connection pool. */
  watchCore(store: Store, openPolls: () => number): void {
    this.gauge('hangar_tasks', 'Unfinished tasks in the queue, by kind and status (pending, leased)', ['kind', 'status'], async (set) => {
      const rows: Array<{ kind: string; status: string; n: number | string }> = await store
        .knex('tasks')
        .whereIn('status', ['pending', 'leased'])
        .select('kind', 'status')
        .count({ n: '*' })
        .groupBy('kind', 'status');
      for (const row of rows) set({ kind: row.kind, status: row.status }, Number(row.n));
    }, 'store');
    this.gauge('hangar_agent_polls_open', 'Agent long-polls held open by this control plane (agents connected and waiting for work)', [], (set) => set({}, openPolls()));
    this.gauge('hangar_db_pool_connections', 'Connections of the store’s pool, by state (used, free, pending: callers waiting for one)', ['state'], (set) => {
      const pool = (store.knex.client as { pool?: { numUsed(): number; numFree(): number; numPendingAcquires(): number; max: number } }).pool;
      if (!pool) return;
      set({ state: 'used' }, pool.numUsed());
      set({ state: 'free' }, pool.numFree());
      set({ state: 'pending' }, pool.numPendingAcquires());
      set({ state: 'max' }, pool.max);
    });
  }

  /**
   * The exposition text: this control plane's metrics, then the process's. With several workers
   * (api.workers) every worker's, summed (a gauge read from the store is taken once).
   */
  async text(): Promise<string> {
    const all = await this.peers.collectMetrics(this.own);
    if (all) return client.AggregatorRegistry.aggregate(all as Parameters<typeof client.AggregatorRegistry.aggregate>[0]).metrics();
    return `${await this.registry.metrics()}\n${await processMetrics().metrics()}`;
  }

  /**
   * The samples `keep` keeps, with their metrics' help and type, as JSON (every worker's, summed as
   * in {@link text}); metrics left with no sample are left out.
   */
  async select(keep: (labels: LabelValues) => boolean | Promise<boolean>): Promise<MetricsJson> {
    const all = await this.peers.collectMetrics(this.own);
    const metrics = all ? await client.AggregatorRegistry.aggregate(all as Parameters<typeof client.AggregatorRegistry.aggregate>[0]).getMetricsAsJSON() : await this.own();
    const out: MetricsJson = [];
    for (const metric of metrics) {
      const values = [];
      for (const sample of metric.values as Array<{ labels: LabelValues }>) if (await keep(sample.labels)) values.push(sample);
      if (values.length) out.push({ ...metric, values } as MetricsJson[number]);
    }
    return out;
  }

  /** This process's metrics as JSON: what a worker answers the primary (one function, the first caller's, answers for it). */
  private readonly own = async (): Promise<MetricsJson> => [...(await this.registry.getMetricsAsJSON()), ...(await processMetrics().getMetricsAsJSON())];

  readonly contentType = this.registry.contentType;
}
