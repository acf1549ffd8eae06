// One load-generator process of bench/agents.ts: joins its share of simulated agents (real join
// tokens, real P-256 keys, real mutual TLS) and runs each as the agent does (agent/agent.ts):
// heartbeats on the interval the server announces, one long-poll at a time, results reported.
// Driven by the coordinator over IPC; reports latencies, task arrivals and its event-loop lag.
import { generateKeyPairSync } from 'node:crypto';
import { readFileSync } from 'node:fs';
import https from 'node:https';
import os from 'node:os';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { AgentConnection, type AgentRequest } from '../agent/connection.js';
import { httpRequest, type HttpResponse } from '../core/http/client.js';

export interface GeneratorStart {
  type: 'start';
  url: string;
  ca: string;
  jwt: string;
  count: number;
  offset: number;
  intervalSeconds: number;
  /** h2: one HTTP/2 session per agent, as hangar's agent; http/1.1: a keep-alive pool, as agents before it. */
  protocol: 'h2' | 'http/1.1';
}

export type ToGenerator = GeneratorStart | { type: 'status' } | { type: 'measure' } | { type: 'stop' };

export type FromGenerator =
  | { type: 'enrolled'; nodeIds: string[]; seconds: number }
  | { type: 'tasks'; arrivals: Array<[taskId: string, epochMs: number]> }
  /** How many of its agents have had a heartbeat answered, and the interval the server last announced. */
  | { type: 'status'; heard: number; intervalSeconds: number }
  | { type: 'stats'; heartbeatMs: number[]; errors: number; reasons: Record<string, number>; lagP99Ms: number; intervals: number[] };

/** Milliseconds since the epoch with sub-millisecond precision, comparable across processes. */
export const epochMs = () => performance.timeOrigin + performance.now();

const FACTS = {
  architecture: 'amd64',
  // As an agent of this build: task kinds refuse agents older than they need.
  agent_version: (JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string }).version,
  kernel: os.release(),
  os: { id: 'debian', version: '12' },
  resources: { cpus: 2, load_1m: 0.1, memory_total_bytes: 1e9, memory_free_bytes: 5e8 },
  docker: { present: false },
  k3s: { present: false },
  pending_updates: 0,
  reboot_required: false,
  // What the simulated agent can run (the real one lists its executors): the log fetches the bench dispatches.
  capabilities: { kinds: ['agent.logs'], backends: [] },
};

interface SimAgent {
  nodeId: string;
  request(path: string, options?: AgentRequest): Promise<HttpResponse>;
  close(): void;
}

const send = (message: FromGenerator) => process.send!(message);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function enrol(start: GeneratorStart): Promise<SimAgent[]> {
  const agents: SimAgent[] = [];
  let next = 0;
  const worker = async () => {
    while (next < start.count) {
      const i = start.offset + next++;
      const pair = generateKeyPairSync('ec', { namedCurve: 'P-256' });
      // A join that fails (a timeout on a loaded machine) is tried again with a new token, twice.
      for (let attempt = 1; ; attempt++) {
        try {
          agents.push(await joinOne(start, i, pair));
          break;
        } catch (err) {
          if (attempt === 3) throw err;
        }
      }
    }
  };
  await Promise.all(Array.from({ length: 16 }, worker));
  return agents;
}

async function joinOne(start: GeneratorStart, i: number, pair: ReturnType<typeof generateKeyPairSync>): Promise<SimAgent> {
  const token = await httpRequest(`${start.url}/v1/nodes/token`, { method: 'POST', ca: start.ca, headers: { authorization: `Bearer ${start.jwt}` }, body: {} });
  if (token.status !== 201) throw new Error(`token ${i}: ${token.status} ${token.text}`);
  const join = await httpRequest(`${start.url}/v1/nodes/join`, {
    method: 'POST',
    ca: start.ca,
    body: { token: token.json.data.token, hostname: `sim-${i}`, public_key: pair.publicKey.export({ type: 'spki', format: 'pem' }).toString(), architecture: 'amd64' },
  });
  if (join.status !== 201) throw new Error(`join ${i}: ${join.status} ${join.text}`);
  const cert = join.json.data.certificate as string;
  const key = pair.privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
  const nodeId = join.json.data.node_id as string;
  if (start.protocol === 'h2') {
    // As the agent: one HTTP/2 session.
    const connection = new AgentConnection(start.url, { ca: start.ca, cert, key });
    return { nodeId, request: (path, options) => connection.request(path, options), close: () => connection.close() };
  }
  // As agents before HTTP/2: one keep-alive pool per machine.
  const agent = new https.Agent({ keepAlive: true, maxSockets: 4, ca: start.ca, cert, key });
  return { nodeId, request: (path, options) => httpRequest(`${start.url}${path}`, { ...options, ca: start.ca, cert, key, agent }), close: () => agent.destroy() };
}

/** A failed request's reason, short: its error code, else its message's start. */
const reasonOf = (err: unknown) => (err as NodeJS.ErrnoException).code ?? String((err as Error).message ?? err).slice(0, 60);

async function run(start: GeneratorStart) {
  const began = Date.now();
  const agents = await enrol(start);
  send({ type: 'enrolled', nodeIds: agents.map((a) => a.nodeId), seconds: (Date.now() - began) / 1000 });

  let heartbeatMs: number[] = [];
  let intervals: number[] = [];
  let errors = 0;
  /** Why requests failed: "heartbeat 429", "long-poll ECONNRESET", … → count. */
  let reasons: Record<string, number> = {};
  const failed = (what: string, why: string) => {
    errors++;
    reasons[`${what} ${why}`] = (reasons[`${what} ${why}`] ?? 0) + 1;
  };
  let heartbeatsInFlight = 0;
  const heard = new Set<string>();
  let announced = start.intervalSeconds;
  let stopping = false;
  let arrivals: Array<[string, number]> = [];
  const lag = monitorEventLoopDelay({ resolution: 5 });
  const flush = setInterval(() => {
    if (arrivals.length) send({ type: 'tasks', arrivals });
    arrivals = [];
  }, 20);

  process.on('message', (message: ToGenerator) => {
    if (message.type === 'status') {
      send({ type: 'status', heard: heard.size, intervalSeconds: announced });
    } else if (message.type === 'measure') {
      heartbeatMs = [];
      intervals = [];
      errors = 0;
      reasons = {};
      lag.reset();
      lag.enable();
    } else if (message.type === 'stop') {
      stopping = true;
      lag.disable();
      clearInterval(flush);
      if (heartbeatsInFlight) reasons['heartbeat unanswered at the end'] = heartbeatsInFlight;
      for (const a of agents) a.close();
      // The stats of a long run are megabytes: exit once the IPC channel has taken all of them.
      process.send!({ type: 'stats', heartbeatMs, errors, reasons, lagP99Ms: lag.percentile(99) / 1e6, intervals } satisfies FromGenerator, () => process.exit(0));
    }
  });

  for (const a of agents) {
    /** The long-poll's wait, as the last heartbeat reply said (the agent's default until then). */
    let pollWaitSeconds = 30;
    // Heartbeats, spread over the interval; the reply sets the next one.
    void (async () => {
      let interval = start.intervalSeconds;
      let wait = interval;
      await sleep(Math.random() * interval * 1000);
      while (!stopping) {
        const t0 = performance.now();
        heartbeatsInFlight++;
        try {
          const res = await a.request('/v1/internal/heartbeat', { method: 'POST', body: { ...FACTS, hostname: a.nodeId } });
          if (res.status !== 200) failed('heartbeat', String(res.status));
          else {
            heartbeatMs.push(performance.now() - t0);
            const next = Number(res.json.data.heartbeat_interval_seconds) || interval;
            pollWaitSeconds = Number(res.json.data.poll_wait_seconds) || pollWaitSeconds;
            // As the agent does: a longer interval starts anywhere between the old and the new one.
            wait = next > interval ? interval + Math.random() * (next - interval) : next;
            interval = next;
            intervals.push(interval);
            heard.add(a.nodeId);
            announced = interval;
          }
        } catch (err) {
          if (!stopping) failed('heartbeat', reasonOf(err));
        } finally {
          heartbeatsInFlight--;
        }
        await sleep(wait * 1000);
        wait = interval;
      }
    })();
    // One long-poll at a time; each task reported at once.
    void (async () => {
      while (!stopping) {
        try {
          const res = await a.request(`/v1/internal/tasks/${a.nodeId}?wait=${pollWaitSeconds}`, { timeoutMs: (pollWaitSeconds + 15) * 1000 });
          const now = epochMs();
          if (res.status !== 200) {
            failed('long-poll', String(res.status));
            await sleep(1000);
            continue;
          }
          for (const task of res.json?.data ?? []) {
            arrivals.push([task.task_id, now]);
            await a.request(`/v1/internal/tasks/${task.task_id}/result`, { method: 'POST', body: { status: 'completed', output: { lines: [] } } });
          }
        } catch (err) {
          if (!stopping) {
            failed('long-poll', reasonOf(err));
            await sleep(1000);
          }
        }
      }
    })();
  }
}

// The benchmark that started this process is gone: so is the reason to run.
process.on('disconnect', () => process.exit(0));

process.once('message', (message: ToGenerator) => {
  if (message.type !== 'start') return;
  run(message).catch((err: Error) => {
    console.error(`generator: ${err.message}`);
    process.exit(1);
  });
});
