/**
 * A steady request loop through a load balancer, for the zero-downtime tests: one GET every
 * `everyMs` on a new connection (no keep-alive: each request is routed afresh), the Host header
 * naming the route. Every answer is counted by its body (a version), every failure (an error, a
 * timeout, a status other than 200) kept with its time, so a test can say exactly what was lost.
 */
import http from 'node:http';
import { httpRequest } from '../../core/http/client.js';
import { waitFor } from './agents.js';
import { stays } from './stays.js';

/**
 * The workload the loops talk to: busybox httpd answering its $VERSION on 8080; /ready exists (the
 * health check's path) unless READY=no. It stops at once on SIGTERM (stays()).
 */
export const VERSIONED_HTTPD = stays('mkdir -p /www; echo "$VERSION" > /www/index.html; [ "$READY" = no ] || echo ok > /www/ready', 'httpd -f -p 8080 -h /www');
/** Its health check: /ready answers (a version started with READY=no never becomes healthy). */
export const VERSIONED_HEALTH = { http: { path: '/ready', port: 8080 }, interval_s: 1, timeout_s: 1, retries: 1 };

export interface LoopFailure {
  at_ms: number;
  what: string;
}

export interface LoopReport {
  requests: number;
  /** Answers by body (trimmed), e.g. `{ v1: 120, v2: 80 }`. */
  answers: Record<string, number>;
  failures: LoopFailure[];
  /** Bodies in the order they changed: `['v1', 'v2']` for a clean cut-over. */
  sequence: string[];
}

export class RequestLoop {
  private readonly agent = new http.Agent({ keepAlive: false });
  private readonly report: LoopReport = { requests: 0, answers: {}, failures: [], sequence: [] };
  private running = true;
  private readonly started = Date.now();
  private readonly done: Promise<void>;

  constructor(
    private readonly url: string,
    private readonly host: string,
    private readonly everyMs = 50,
  ) {
    this.done = this.run();
  }

  private async one(): Promise<void> {
    const at = Date.now() - this.started;
    this.report.requests += 1;
    try {
      const res = await httpRequest(this.url, { headers: { host: this.host }, agent: this.agent, timeoutMs: 5000 });
      const body = res.text.trim();
      if (res.status !== 200) {
        this.report.failures.push({ at_ms: at, what: `${res.status} ${body.slice(0, 80)}` });
        return;
      }
      this.report.answers[body] = (this.report.answers[body] ?? 0) + 1;
      if (this.report.sequence[this.report.sequence.length - 1] !== body) this.report.sequence.push(body);
    } catch (err) {
      this.report.failures.push({ at_ms: at, what: (err as Error).message });
    }
  }

  private async run(): Promise<void> {
    const inFlight = new Set<Promise<void>>();
    while (this.running) {
      const request = this.one().finally(() => inFlight.delete(request));
      inFlight.add(request);
      await new Promise((resolve) => setTimeout(resolve, this.everyMs));
    }
    await Promise.all(inFlight);
  }

  /** What the loop saw so far (a copy). */
  snapshot(): LoopReport {
    return structuredClone(this.report);
  }

  /** Stops sending, waits for the requests in flight, and answers what the loop saw. */
  async stop(): Promise<LoopReport> {
    this.running = false;
    await this.done;
    this.agent.destroy();
    return this.snapshot();
  }
}

/** One line for a test's output: how many requests, how many failed, the answers and the last one. */
export const describeLoop = (r: LoopReport) =>
  `${r.requests} requests, ${r.failures.length} failed, answers ${JSON.stringify(r.answers)}, ending on ${r.sequence.at(-1)}` +
  (r.failures.length ? ` (failures: ${r.failures.slice(0, 3).map((f) => `${f.at_ms} ms ${f.what.slice(0, 60)}`).join('; ')} … ${r.failures.at(-1)!.at_ms} ms)` : '');

/**
 * Waits until `url` answers `version` for `host`, and nothing else, for half a second of a loop (a
 * route just applied, every replica serving); throws with the last loop's report when it does not.
 */
export async function answersOnly(url: string, host: string, version: string, timeoutMs = 60_000): Promise<LoopReport> {
  let last: LoopReport | undefined;
  try {
    return await waitFor(
      async () => {
        const probe = new RequestLoop(url, host);
        await new Promise((resolve) => setTimeout(resolve, 500));
        last = await probe.stop();
        return last.failures.length === 0 && Object.keys(last.answers).join() === version ? last : null;
      },
      { timeoutMs, intervalMs: 500, what: `${host} to answer ${version} through ${url}` },
    );
  } catch (err) {
    throw new Error(`${(err as Error).message}; last: ${last ? `${describeLoop(last)} ${JSON.stringify(last.failures.slice(0, 2))}` : 'none'}`, { cause: err });
  }
}
