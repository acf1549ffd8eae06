import { createHash, X509Certificate } from 'node:crypto';
import os from 'node:os';
import { AgentConnection } from './connection.js';
import { httpRequest, type HttpResponse } from '../core/http/client.js';
import type { Logger } from '../core/log.js';
import { LANES, type Lane, type TaskKindRegistry } from '../core/tasks/kinds.js';
import { agentBackends, agentTaskKinds, builtinExecutors, type Executor } from './executors/index.js';
import { overlayReport, wireguardKeys } from './executors/overlay.js';
import { collectFacts, type MachineState } from './facts.js';
import { newKeyPair, saveIdentity, type AgentIdentity } from './identity.js';
import { sleep } from '../core/clock.js';
import { confirmUpdate, takeRollbackNote } from './update-guard.js';

export interface AgentOptions {
  dataDir: string;
  logFile: string;
  log: Logger;
  executors?: Map<string, Executor>;
  /** The task kinds the executors are for (payloads are checked against them before anything runs). */
  kinds?: TaskKindRegistry;
  /** Most seconds between retries while the control plane is away. */
  maxBackoffSeconds?: number;
}

/** An answer of the control API: `{data}` on success, `{message}` on an error (docs: API conventions). */
interface Answer<T> {
  data: T;
  message?: string;
}

/** What POST /v1/nodes/join answers (plugins/nodes/join.ts). */
interface JoinAnswer {
  node_id: string;
  certificate: string;
  ca_pem?: string | null;
  overlay_ip?: string | null;
  overlay_prefix?: number | null;
}

/** What POST /v1/internal/heartbeat answers (what the agent reads of it). */
interface HeartbeatAnswer {
  heartbeat_interval_seconds?: number;
  poll_wait_seconds?: number;
}

interface PolledTask {
  task_id: string;
  kind: string;
  payload: Record<string, unknown>;
  attempt: number;
}

/** Splits a join token into its secret and the CA fingerprint it pins (`<secret>.<sha256 hex>`). */
export function parseJoinToken(token: string): { secret: string; caSha256: string | null } {
  const [secret, pin] = token.trim().split('.');
  return { secret: secret ?? '', caSha256: pin && /^[0-9a-f]{64}$/.test(pin) ? pin : null };
}

/**
 * What to do when the control plane's server certificate does not name the address the machine
 * joins with (its CA is the right one: the token pinned it).
 */
export function certificateMismatch(apiUrl: string, subjectAltName: string | undefined): string {
  const host = new URL(apiUrl).hostname.replace(/^\[(.*)\]$/, '$1');
  const names = (subjectAltName ?? '').split(', ').filter(Boolean).map((n) => n.replace(/^(DNS|IP Address):/, ''));
  return (
    `the control plane's server certificate does not name ${host}${names.length ? ` (it names ${names.join(', ')})` : ''}: ` +
    `on the control plane, add ${host} to api.public_addresses (the certificate is reissued at start; an address the host itself gains is added within api.watch_addresses_seconds, without a restart), ` +
    `or join with --api https://<one of its names>:${new URL(apiUrl).port || 443}`
  );
}

/**
 * Joins a control plane with a token: fetches its CA and checks it against the fingerprint in the
 * token, creates this machine's key pair (the private key stays here), and stores the identity.
 */
export async function joinControlPlane(options: { apiUrl: string; token: string; dataDir: string; log: Logger; caPem?: string }): Promise<AgentIdentity> {
  const apiUrl = options.apiUrl.replace(/\/+$/, '');
  const { caSha256 } = parseJoinToken(options.token);
  let caPem = options.caPem;
  if (!caPem) {
    if (!caSha256) throw new Error('the token pins no CA (operator certificates?): pass --ca-file with the CA that signed the server certificate');
    const res = await httpRequest<unknown>(`${apiUrl}/v1/ca`, { ca: false });
    if (res.status !== 200) throw new Error(`GET ${apiUrl}/v1/ca answered ${res.status}`);
    const fingerprint = createHash('sha256').update(new X509Certificate(res.text).raw).digest('hex');
    if (fingerprint !== caSha256) throw new Error(`the control plane's CA (sha256 ${fingerprint}) is not the one the token pins (${caSha256}); refusing to join`);
    caPem = res.text;
  }
  const keys = newKeyPair();
  const wg = await wireguardKeys().catch(() => null);
  const facts = collectFacts({ pendingUpdates: null });
  const res = await httpRequest<Answer<JoinAnswer>>(`${apiUrl}/v1/nodes/join`, {
    method: 'POST',
    ca: caPem,
    body: {
      token: options.token,
      hostname: os.hostname(),
      public_key: keys.publicKeyPem,
      architecture: facts.architecture,
      ...(wg ? { wg_public_key: wg.publicKey } : {}),
    },
  }).catch((error: NodeJS.ErrnoException & { cert?: { subjectaltname?: string } }) => {
    if (error.code !== 'ERR_TLS_CERT_ALTNAME_INVALID') throw error;
    throw new Error(certificateMismatch(apiUrl, error.cert?.subjectaltname));
  });
  if (res.status !== 201) throw new Error(`joining failed: HTTP ${res.status}: ${res.json?.message ?? res.text}`);
  const data = res.json.data;
  const identity: AgentIdentity = {
    nodeId: data.node_id,
    apiUrl,
    certPem: data.certificate,
    keyPem: keys.privateKeyPem,
    caPem: data.ca_pem ?? caPem,
    overlayIp: data.overlay_ip ?? null,
    overlayPrefix: data.overlay_prefix ?? null,
    wgPrivateKey: wg?.privateKey ?? null,
  };
  saveIdentity(options.dataDir, identity);
  options.log.info({ node_id: identity.nodeId, overlay_ip: identity.overlayIp }, 'joined the control plane');
  return identity;
}

/** Most tasks an agent holds (running or waiting in their lanes) before it stops polling for more. */
const MAX_HELD_TASKS = 64;
/** The least time between two progress reports of one task. */
const PROGRESS_INTERVAL_MS = 1000;

/**
 * The machine agent: heartbeats on the interval the server sets (saying which task kinds and
 * backends it runs), long-polls tasks, runs them through executors and reports. Each task runs
 * in its kind's lane: one at a time per lane, in the order queued, the lanes side by side. When
 * the control plane is away it backs off and keeps trying; it never stops workloads because of that.
 */
export class Agent {
  private readonly controller = new AbortController();
  /** One HTTP/2 session to the control plane for everything (HTTP/1.1 when it has none). */
  private readonly connection: AgentConnection;
  private readonly executors: Map<string, Executor>;
  private readonly kinds: TaskKindRegistry;
  /** The last task queued in each lane: the next one in that lane starts when it ends. */
  private readonly laneTails = new Map<Lane, Promise<void>>();
  /** Resolved whenever a held task finishes (the poll loop waits on it when it holds too many). */
  private released: () => void = () => undefined;
  /**
   * Ends the task loop's wait after failed polls: called when a heartbeat is answered again (the
   * control plane is back, or a new one restored at its address), so that the agent takes its
   * tasks at once instead of sleeping out a backoff of up to maxBackoffSeconds.
   */
  private endPollBackoff: () => void = () => undefined;
  private readonly state: MachineState = { pendingUpdates: null };
  private heartbeatSeconds = 10;
  /** When the next heartbeat is due, after the last reply. */
  private nextHeartbeatMs = 10_000;
  private heartbeatsPaused = false;
  /** An update pending confirmation (agent/update-guard.ts) is confirmed by the first answered heartbeat. */
  private updateConfirmed = false;
  private heartbeatInFlight: Promise<void> | null = null;
  private pollWaitSeconds = 30;
  /** Tasks polled and not yet reported: every heartbeat renews their leases. */
  private readonly heldTasks = new Set<string>();
  private readonly maxBackoffMs: number;

  constructor(
    readonly identity: AgentIdentity,
    private readonly options: AgentOptions,
  ) {
    this.connection = new AgentConnection(identity.apiUrl, { ca: identity.caPem, cert: identity.certPem, key: identity.keyPem }, (why) =>
      this.log.info({ why }, 'the control plane answers agents over HTTP/1.1: using HTTP/1.1 connections'),
    );
    this.executors = options.executors ?? builtinExecutors();
    this.kinds = options.kinds ?? agentTaskKinds();
    this.maxBackoffMs = (options.maxBackoffSeconds ?? 30) * 1000;
  }

  private get log(): Logger {
    return this.options.log;
  }

  private request<T = unknown>(method: string, path: string, body?: unknown, timeoutMs = 30_000, headers?: Record<string, string>): Promise<HttpResponse<Answer<T> | undefined>> {
    return this.connection.request<Answer<T> | undefined>(path, { method, body, headers, timeoutMs, signal: this.controller.signal });
  }

  /** Runs until stop(): the heartbeat loop and the task loop side by side. */
  async run(): Promise<void> {
    this.log.info({ node_id: this.identity.nodeId, api: this.identity.apiUrl }, 'agent running');
    const rolledBack = takeRollbackNote(this.options.dataDir);
    if (rolledBack) this.log.warn(rolledBack, `the update to ${rolledBack.from_version} did not reach the control plane in time: this is the previous executable (${rolledBack.to_version}) again`);
    await Promise.all([this.heartbeatLoop(), this.taskLoop()]);
  }

  stop(): void {
    this.controller.abort();
    this.released();
    this.connection.close();
  }

  private backoff(failures: number): number {
    const base = Math.min(this.maxBackoffMs, 1000 * 2 ** Math.min(failures - 1, 10));
    return base / 2 + Math.random() * (base / 2);
  }

  async heartbeat(): Promise<void> {
    const held = [...this.heldTasks];
    const capabilities = { kinds: [...this.executors.keys()].filter((k) => this.kinds.get(k)).sort(), backends: agentBackends() };
    // The overlay as it is (interface, address, how many peers answer): the control plane
    // advertises this node by its overlay address only while a peer answers there.
    const overlay = await overlayReport(this.options.dataDir).catch((err: Error) => {
      this.log.debug({ error: err.message }, 'reading the overlay state failed');
      return null;
    });
    const res = await this.request<HeartbeatAnswer>('POST', '/v1/internal/heartbeat', {
      ...collectFacts(this.state),
      capabilities,
      ...(overlay ? { overlay } : {}),
      ...(held.length ? { held_tasks: held } : {}),
    });
    if (res.status !== 200) throw new Error(`heartbeat answered ${res.status}: ${res.json?.message ?? res.text}`);
    const answer = res.json?.data;
    const announced = Number(answer?.heartbeat_interval_seconds) || this.heartbeatSeconds;
    // A longer interval (the fleet grew): the next beat comes anywhere between the old and the new one,
    // so that a fleet that started together (a restart) spreads over the interval instead of arriving in waves.
    this.nextHeartbeatMs = announced > this.heartbeatSeconds ? (this.heartbeatSeconds + Math.random() * (announced - this.heartbeatSeconds)) * 1000 : announced * 1000;
    this.heartbeatSeconds = announced;
    this.pollWaitSeconds = Number(answer?.poll_wait_seconds) || this.pollWaitSeconds;
  }

  private async heartbeatLoop(): Promise<void> {
    let failures = 0;
    while (!this.controller.signal.aborted && !this.heartbeatsPaused) {
      try {
        this.heartbeatInFlight = this.heartbeat();
        await this.heartbeatInFlight;
        if (!this.updateConfirmed) {
          confirmUpdate(this.options.dataDir, this.log);
          this.updateConfirmed = true;
        }
        if (failures) {
          this.log.info('control plane reachable again');
          this.endPollBackoff();
        }
        failures = 0;
      } catch (err) {
        if (this.controller.signal.aborted) return;
        failures++;
        this.log.warn({ failures, error: (err as Error).message }, 'heartbeat failed; workloads keep running, retrying');
      } finally {
        this.heartbeatInFlight = null;
      }
      await sleep(failures ? Math.min(this.backoff(failures), this.heartbeatSeconds * 1000) : this.nextHeartbeatMs, this.controller.signal);
    }
  }

  private async taskLoop(): Promise<void> {
    let failures = 0;
    while (!this.controller.signal.aborted) {
      try {
        // Tasks stuck behind a long one in their lane are held (their leases renewed): hold no more than this.
        while (this.heldTasks.size >= MAX_HELD_TASKS && !this.controller.signal.aborted) await new Promise<void>((resolve) => (this.released = resolve));
        const res = await this.request<PolledTask[]>('GET', `/v1/internal/tasks/${this.identity.nodeId}?wait=${this.pollWaitSeconds}`, undefined, (this.pollWaitSeconds + 15) * 1000);
        if (res.status !== 200) throw new Error(`task poll answered ${res.status}: ${res.json?.message ?? res.text}`);
        failures = 0;
        for (const task of res.json?.data ?? []) this.dispatch(task);
      } catch (err) {
        if (this.controller.signal.aborted) return;
        failures++;
        this.log.warn({ failures, error: (err as Error).message }, 'task poll failed; retrying');
        const backoff = new AbortController();
        this.endPollBackoff = () => backoff.abort();
        const wait = this.backoff(failures);
        const began = Date.now();
        await sleep(wait, AbortSignal.any([this.controller.signal, backoff.signal]));
        this.endPollBackoff = () => undefined;
        if (backoff.signal.aborted && !this.controller.signal.aborted) this.log.info({ failures, skipped_ms: Math.max(0, Math.round(wait - (Date.now() - began))) }, 'task poll backoff ended: the control plane answers again');
      }
    }
  }

  /** Queues a polled task in its lane (a kind this agent does not know runs at once, to fail). */
  private dispatch(task: PolledTask): void {
    if (this.heldTasks.has(task.task_id)) return;
    this.heldTasks.add(task.task_id);
    const lane: Lane = this.kinds.get(task.kind)?.lane ?? 'reads';
    const previous = this.laneTails.get(lane) ?? Promise.resolve();
    const run = previous
      .then(() => (this.controller.signal.aborted ? undefined : this.execute(task)))
      .catch((err: Error) => this.log.error({ task_id: task.task_id, error: err.message }, 'running a task failed'))
      .finally(() => {
        // Cut short (the agent stopping): the lease runs out and the task goes back to pending.
        this.heldTasks.delete(task.task_id);
        this.released();
        if (this.laneTails.get(lane) === run) this.laneTails.delete(lane);
      });
    this.laneTails.set(lane, run);
  }

  /** The lanes with a task running or waiting (for tests and diagnostics). */
  busyLanes(): Lane[] {
    return LANES.filter((lane) => this.laneTails.has(lane));
  }

  private async execute(task: PolledTask): Promise<void> {
    const executor = this.executors.get(task.kind);
    const kind = this.kinds.get(task.kind);
    const afterwards: Array<() => void | Promise<void>> = [];
    let outcome: { status: 'completed' | 'failed'; output?: unknown; error?: string };
    const started = Date.now();
    const refused = kind ? this.kinds.checkPayload(kind, task.payload) : null;
    if (!executor) {
      outcome = { status: 'failed', error: `this agent has no executor for ${task.kind}` };
    } else if (refused) {
      outcome = { status: 'failed', error: `this agent refused the ${task.kind} task: ${refused}` };
    } else {
      try {
        const output = await executor({
          payload: task.payload,
          log: this.log.child({ task_id: task.task_id, kind: task.kind }),
          dataDir: this.options.dataDir,
          logFile: this.options.logFile,
          after: (action) => afterwards.push(action),
          download: async (path) => {
            // Large downloads (the agent executable) come brotli-compressed, decoded on arrival.
            const res = await this.request('GET', path, undefined, 600_000, { 'accept-encoding': 'br' });
            return { status: res.status, body: res.raw, headers: res.headers };
          },
          setPendingUpdates: (count) => (this.state.pendingUpdates = count),
          progress: this.progressReporter(task.task_id),
          quiesce: async () => {
            this.heartbeatsPaused = true;
            await this.heartbeatInFlight?.catch(() => undefined);
          },
        });
        outcome = { status: 'completed', output: output ?? null };
      } catch (err) {
        outcome = { status: 'failed', error: (err as Error).message };
      }
    }
    this.log.info({ task_id: task.task_id, kind: task.kind, status: outcome.status, ms: Date.now() - started }, 'task done');
    await this.reportWithRetry(task.task_id, outcome);
    for (const action of afterwards) await action();
  }

  /**
   * What a running task says of its progress, sent to the control plane at most once every
   * PROGRESS_INTERVAL_MS (the latest value then): one failed send is not retried, the next one
   * carries newer figures anyway.
   */
  private progressReporter(taskId: string): (value: Record<string, number | string | null>) => void {
    let latest: Record<string, number | string | null> | null = null;
    let timer: NodeJS.Timeout | null = null;
    let lastSent = 0;
    const send = () => {
      timer = null;
      const value = latest;
      latest = null;
      if (!value || this.controller.signal.aborted) return;
      lastSent = Date.now();
      this.request('POST', `/v1/internal/tasks/${taskId}/progress`, { progress: value }).catch((err: Error) => this.log.debug({ task_id: taskId, error: err.message }, 'reporting progress failed'));
    };
    return (value) => {
      latest = value;
      if (!timer) timer = setTimeout(send, Math.max(0, lastSent + PROGRESS_INTERVAL_MS - Date.now()));
    };
  }

  /** Results matter: retry a few times before leaving the task to its lease expiry. */
  private async reportWithRetry(taskId: string, outcome: object): Promise<void> {
    for (let attempt = 1; attempt <= 5 && !this.controller.signal.aborted; attempt++) {
      try {
        const res = await this.request('POST', `/v1/internal/tasks/${taskId}/result`, outcome);
        if (res.status === 200 || res.status === 409 || res.status === 404) return;
        throw new Error(`HTTP ${res.status}`);
      } catch (err) {
        this.log.warn({ task_id: taskId, attempt, error: (err as Error).message }, 'reporting a result failed');
        await sleep(this.backoff(attempt), this.controller.signal);
      }
    }
  }
}
