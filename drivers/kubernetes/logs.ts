import type { V1Deployment } from '@kubernetes/client-node';
import type { LogOptions } from './contract.js';
import { failure, isNotFound, KubeDriverError, type KubeContext } from './client.js';
import { podsOf } from './state.js';

export const DEFAULT_LOG_LINES = 100;
const MAX_LOG_LINES = 10_000;
const RFC3339 = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$/;

interface LogLine {
  /** The kubelet's timestamp: RFC 3339 in UTC with nanoseconds, so string order is time order. */
  timestamp: string;
  text: string;
}

function lineCount(options: LogOptions): number {
  const lines = options.lines ?? DEFAULT_LOG_LINES;
  if (!Number.isInteger(lines) || lines < 0) throw new KubeDriverError(`invalid log line count ${JSON.stringify(lines)}: a whole number of lines, 0 or more`, 400);
  return Math.min(lines, MAX_LOG_LINES);
}

function sinceTime(since: string | undefined): string | undefined {
  if (since === undefined || since === '') return undefined;
  if (!RFC3339.test(since) || Number.isNaN(Date.parse(since))) throw new KubeDriverError(`invalid log start ${JSON.stringify(since)}: an RFC 3339 date-time, e.g. 2024-05-01T12:00:00Z`, 400);
  return new Date(Date.parse(since)).toISOString();
}

/** The last `count` lines of every container of every pod of a Deployment, each `<timestamp> <text>`. */
async function deploymentLines(ctx: KubeContext, deployment: V1Deployment, count: number, since: string | undefined): Promise<LogLine[]> {
  const lines: LogLine[] = [];
  for (const pod of await podsOf(ctx, deployment)) {
    if (!pod.spec?.nodeName) continue; // never placed: no log
    for (const container of pod.spec.containers) {
      let text: string;
      try {
        text = await ctx.core.readNamespacedPodLog({
          name: pod.metadata!.name!,
          namespace: pod.metadata!.namespace!,
          container: container.name,
          timestamps: true,
          tailLines: count,
          // The client has no sinceTime: whole seconds back from now, then the lines before `since` are dropped below.
          ...(since ? { sinceSeconds: Math.max(1, Math.ceil((Date.now() - Date.parse(since)) / 1000) + 1) } : {}),
        });
      } catch (err) {
        // A pod that went away, or whose container has not started yet (400 "waiting to start"): no lines.
        const code = (err as { code?: number }).code;
        if (isNotFound(err) || code === 400) continue;
        throw failure(`reading the logs of pod ${pod.metadata?.name}`, err);
      }
      for (const raw of text.split('\n')) {
        if (!raw) continue;
        const space = raw.indexOf(' ');
        const head = space > 0 ? raw.slice(0, space) : '';
        if (!RFC3339.test(head)) lines.push({ timestamp: '', text: raw });
        else if (!since || head >= since.replace(/Z$/, '')) lines.push({ timestamp: head, text: raw.slice(space + 1) });
      }
    }
  }
  return lines;
}

/** The last `count` lines of several sources, in time order, each `<prefix><timestamp> <text>`. */
function merge(sources: Array<{ prefix: string; lines: LogLine[] }>, count: number): string[] {
  const all = sources.flatMap(({ prefix, lines }) => lines.map((line) => ({ prefix, line })));
  all.sort((a, b) => (a.line.timestamp < b.line.timestamp ? -1 : a.line.timestamp > b.line.timestamp ? 1 : 0));
  return (count === 0 ? [] : all.slice(-count)).map(({ prefix, line }) => `${prefix}${line.timestamp ? `${line.timestamp} ` : ''}${line.text}`);
}

/**
 * The logs of workloads, merged in time order: one workload's as `<timestamp> <text>`; several
 * (a bundle's parts) each prefixed `<part> | `. `lines` is the total (the kubelet tails per
 * container; the merge cuts again), `since` an RFC 3339 time.
 */
export async function logsOf(ctx: KubeContext, deployments: Array<{ prefix: string; deployment: V1Deployment }>, options: LogOptions): Promise<{ lines: string[] }> {
  const count = lineCount(options);
  const since = sinceTime(options.since);
  if (count === 0 || (since && Date.parse(since) > Date.now())) return { lines: [] };
  const sources = [];
  for (const { prefix, deployment } of deployments) sources.push({ prefix, lines: await deploymentLines(ctx, deployment, count, since) });
  return { lines: merge(sources, count) };
}
