import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Value } from '@sinclair/typebox/value';
import type { HttpRequestOptions, HttpResponse } from '../../core/http/client.js';
import { isDriverCall } from '../../core/tasks/kinds.js';
import { versionInfo } from '../../core/version.js';
import { agentBackends, agentTaskKinds } from '../../agent/executors/index.js';
import type { TestHangar } from './hangar.js';

/** The plugins a node test's control plane loads. */
export const NODE_PLUGINS = ['system', 'iam', 'nodes', 'agent-internal'];

/** Short intervals so heartbeats, offline detection and lease expiry happen within seconds. */
export const FAST_NODES = {
  nodes: { heartbeat_interval_seconds: 1, offline_after_seconds: 3 },
  tasks: { poll_wait_seconds: 5, lease_seconds: 2, expiry_check_ms: 200 },
};

const HANGAR_BIN = path.resolve('bin/hangar.mjs');

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/**
 * Polls `probe` until it returns something truthy and returns that; throws after `timeoutMs`,
 * naming what was awaited and the last value seen.
 */
export async function waitFor<T>(probe: () => T | Promise<T>, options: { timeoutMs?: number; intervalMs?: number; what?: string } = {}): Promise<NonNullable<T>> {
  const { timeoutMs = 10_000, intervalMs = 100, what = 'a condition' } = options;
  const deadline = Date.now() + timeoutMs;
  const pause = backoff(intervalMs);
  let last: unknown;
  for (;;) {
    last = await probe();
    if (last) return last as NonNullable<T>;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what} (last value: ${JSON.stringify(last)})`);
    await sleep(pause());
  }
}

/**
 * The pauses between a wait's probes: 100 ms at first (most conditions hold within a moment), each
 * one twice the one before, up to `intervalMs`. A wait that is soon over does not sit out a whole
 * interval; a long one probes as seldom as asked (a handful of probes more, at its start).
 */
export function backoff(intervalMs: number): () => number {
  let next = Math.min(100, intervalMs);
  return () => {
    const pause = next;
    next = Math.min(next * 2, intervalMs);
    return pause;
  };
}

/**
 * Thrown by a probe of {@link until} for an outcome that waiting will not change (an install that
 * failed, a resource in `failed`): until() rethrows it at once instead of waiting out its deadline.
 */
export class FailNow extends Error {
  override name = 'FailNow';
}

/**
 * Waits for `probe` to answer something truthy, polling every `intervalMs` (after a quicker start:
 * {@link backoff}), for probes of a
 * system still coming up (a lab machine, a cluster). A probe that throws a {@link FailNow} or a
 * failed assertion (chai's AssertionError) fails the wait at once with that very error; any other
 * error counts as "not yet" (a connection refused while a service starts), and if the deadline
 * passes the timeout names `what`, the last answer and the last such error with its stack — never a
 * bare "timed out" hiding why.
 */
export async function until<T>(what: string, probe: () => Promise<T | null | undefined | false>, timeoutMs = 240_000, intervalMs = 1000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  let lastError: Error | null = null;
  let attempts = 0;
  const pause = backoff(intervalMs);
  for (;;) {
    attempts++;
    try {
      const value = await probe();
      if (value) return value;
      last = value;
    } catch (err) {
      if (err instanceof FailNow || (err as Error | null)?.name === 'AssertionError') throw err;
      lastError = err instanceof Error ? err : new Error(String(err));
    }
    if (Date.now() > deadline) {
      const answer = `last answer: ${JSON.stringify(last)?.slice(0, 2000)}`;
      if (!lastError) throw new Error(`timed out after ${timeoutMs / 1000} s (${attempts} attempts) waiting for ${what} (${answer})`);
      const timedOut = new Error(`timed out after ${timeoutMs / 1000} s (${attempts} attempts) waiting for ${what}; the last error: ${lastError.message} (${answer})`, { cause: lastError });
      timedOut.stack = `${timedOut.stack}\nthe last error's stack:\n${lastError.stack ?? lastError.message}`;
      throw timedOut;
    }
    await sleep(pause());
  }
}

export interface AgentExit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

/** A `hangar agent` running as a separate process. */
export interface AgentProcess {
  readonly child: ChildProcess;
  readonly dataDir: string;
  /** Everything the process wrote to stdout and stderr so far. */
  output(): string;
  /** Resolves once the process has exited. */
  readonly exited: Promise<AgentExit>;
  /** The exit, once there is one. */
  exit(): AgentExit | null;
  /** The node id the agent stored when it joined (null before). */
  nodeId(): string | null;
}

const running = new Set<AgentProcess>();
const dirs: string[] = [];

/**
 * A directory the executors' PATH points to: empty, so an agent under test can never find apt-get,
 * systemctl, reboot, wg or ip and change this machine (the OS executors fail with "not found").
 */
let emptyBinDir: string | null = null;
function safePath(): string {
  if (!emptyBinDir) {
    emptyBinDir = mkdtempSync(path.join(os.tmpdir(), 'hangar-agent-nobin-'));
    dirs.push(emptyBinDir);
  }
  return emptyBinDir;
}

/** A fresh, empty data dir for one agent (removed by {@link cleanupAgents}). */
export function agentDataDir(): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'hangar-agent-'));
  dirs.push(dir);
  return dir;
}

/** What the agent keeps in its data dir (agent.json, client.crt, client.key, ca.crt). */
export function readAgentFiles(dataDir: string): { nodeId: string; certPem: string; keyPem: string; caPem: string } {
  const config = JSON.parse(readFileSync(path.join(dataDir, 'agent.json'), 'utf8')) as { node_id: string };
  return {
    nodeId: config.node_id,
    certPem: readFileSync(path.join(dataDir, 'client.crt'), 'utf8'),
    keyPem: readFileSync(path.join(dataDir, 'client.key'), 'utf8'),
    caPem: readFileSync(path.join(dataDir, 'ca.crt'), 'utf8'),
  };
}

/**
 * Spawns `hangar agent` (bin/hangar.mjs under this Node) as its own process. With `join` it joins
 * first (`--join --token=T --api URL`); without, it resumes from the identity in `dataDir`.
 * The child's PATH is an empty directory (see {@link safePath}).
 */
export function spawnAgent(
  options: {
    dataDir?: string;
    /** How the token is given: `--token=T` (default), `--token T`, or on stdin (`--token-stdin`), out of sight of `ps`. */
    join?: { token: string; api: string; tokenArg?: 'equals' | 'separate' | 'stdin' };
    extraArgs?: string[];
    /** PATH for the agent instead of the empty one (e.g. to reach the docker CLI). */
    path?: string;
    /** More environment for the agent process (e.g. HANGAR_KUBECONFIG). */
    env?: Record<string, string>;
    /** The hangar tree whose agent runs (default this checkout): another release's sources, for version-skew tests. */
    root?: string;
  } = {},
): AgentProcess {
  const dataDir = options.dataDir ?? agentDataDir();
  mkdirSync(dataDir, { recursive: true });
  // `--token=T` by default: a token may begin with "-", which the documented `--token T` form cannot carry.
  const join = options.join;
  const tokenArgs = !join ? [] : join.tokenArg === 'stdin' ? ['--token-stdin'] : join.tokenArg === 'separate' ? ['--token', join.token] : [`--token=${join.token}`];
  const args = [options.root ? path.join(options.root, 'bin/hangar.mjs') : HANGAR_BIN, 'agent', '--data-dir', dataDir, ...(join ? ['--join', ...tokenArgs, '--api', join.api] : []), ...(options.extraArgs ?? [])];
  const child = spawn(process.execPath, args, {
    cwd: options.root ?? process.cwd(),
    env: { ...process.env, ...options.env, PATH: options.path ?? safePath(), NODE_ENV: 'test', NODE_OPTIONS: '' },
    stdio: [join?.tokenArg === 'stdin' ? 'pipe' : 'ignore', 'pipe', 'pipe'],
  });
  if (join?.tokenArg === 'stdin') child.stdin!.end(`${join.token}\n`);
  let output = '';
  child.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  let exit: AgentExit | null = null;
  const exited = new Promise<AgentExit>((resolve) => {
    child.on('exit', (code, signal) => {
      exit = { code, signal };
      resolve(exit);
    });
    child.on('error', (err) => {
      output += `\n[spawn error] ${err.message}\n`;
      exit = { code: null, signal: null };
      resolve(exit);
    });
  });
  const agent: AgentProcess = {
    child,
    dataDir,
    output: () => output,
    exited,
    exit: () => exit,
    nodeId: () => (existsSync(path.join(dataDir, 'agent.json')) ? readAgentFiles(dataDir).nodeId : null),
  };
  running.add(agent);
  void exited.then(() => running.delete(agent));
  return agent;
}

/** Waits until the agent has joined (stored its identity) and returns its node id. */
export async function joinedNodeId(agent: AgentProcess, timeoutMs = 15_000): Promise<string> {
  return waitFor(
    () => {
      if (agent.exit()) throw new Error(`the agent exited (${JSON.stringify(agent.exit())}) before joining:\n${agent.output()}`);
      return agent.nodeId();
    },
    { timeoutMs, what: `the agent in ${agent.dataDir} to join` },
  );
}

/** Waits for the agent process to exit by itself; fails (and kills it) if it does not in time. */
export async function waitForExit(agent: AgentProcess, timeoutMs = 15_000): Promise<AgentExit> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      agent.child.kill('SIGKILL');
      reject(new Error(`the agent did not exit within ${timeoutMs} ms; output:\n${agent.output()}`));
    }, timeoutMs);
  });
  try {
    return await Promise.race([agent.exited, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** Stops an agent process: `signal` (SIGTERM by default), then SIGKILL if it lingers. */
export async function stopAgent(agent: AgentProcess, signal: NodeJS.Signals = 'SIGTERM', graceMs = 5000): Promise<AgentExit> {
  if (agent.exit()) return agent.exit()!;
  agent.child.kill(signal);
  const timer = setTimeout(() => agent.child.kill('SIGKILL'), graceMs);
  try {
    return await agent.exited;
  } finally {
    clearTimeout(timer);
  }
}

/** Kills every agent process still running and removes the agents' data dirs. For after hooks. */
export async function cleanupAgents(): Promise<void> {
  await Promise.all([...running].map((agent) => stopAgent(agent, 'SIGKILL')));
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
  emptyBinDir = null;
}

/**
 * A TEST DOUBLE standing in for an agent: the test itself speaks the agent side of the API
 * (heartbeat, long-poll, results) over mutual TLS with a client certificate the control plane's
 * CA issued for `nodeId`. Nothing runs on this machine.
 */
export class FakeAgent {
  private constructor(
    private readonly t: Pick<TestHangar, 'request'>,
    readonly nodeId: string,
    readonly certPem: string,
    readonly keyPem: string,
  ) {}

  static async forNode(t: TestHangar, nodeId: string): Promise<FakeAgent> {
    const issued = await t.hangar.services.ca.issueClientCertificate(nodeId);
    return new FakeAgent(t, nodeId, issued.cert_pem, issued.key_pem!);
  }

  /** For a node whose certificate an admin had issued over the API (`POST /v1/nodes/{id}/cert`): a control plane in another process. */
  static withCertificate(t: Pick<TestHangar, 'request'>, nodeId: string, certPem: string, keyPem: string): FakeAgent {
    return new FakeAgent(t, nodeId, certPem, keyPem);
  }

  request<T = any>(method: string, pathAndQuery: string, options: HttpRequestOptions = {}): Promise<HttpResponse<T>> {
    return this.t.request<T>(method, pathAndQuery, { cert: this.certPem, key: this.keyPem, ...options });
  }

  /** A heartbeat of an agent of this version that runs every task kind (override with `facts`). */
  heartbeat(facts: Record<string, unknown> = {}): Promise<HttpResponse> {
    const capabilities = { kinds: agentTaskKinds().names(), backends: agentBackends() };
    return this.request('POST', '/v1/internal/heartbeat', { body: { hostname: `fake-${this.nodeId}`, architecture: 'amd64', agent_version: versionInfo.version, capabilities, ...facts } });
  }

  /** One long-poll; `wait` in seconds (omitted: the server's default). */
  poll(wait?: number, nodeId = this.nodeId): Promise<HttpResponse> {
    return this.request('GET', `/v1/internal/tasks/${nodeId}${wait === undefined ? '' : `?wait=${wait}`}`, { timeoutMs: 60_000 });
  }

  report(taskId: string, body: { status: 'completed' | 'failed'; output?: unknown; error?: string }): Promise<HttpResponse> {
    return this.request('POST', `/v1/internal/tasks/${taskId}/result`, { body });
  }
}

/** Answers and refusals of a fake orchestrator manager, by driver method (orchestrator calls) or task kind. */
export interface FakeManagerScript {
  /** An answer for the call's named input (its payload without `backend`); a promise is awaited. */
  answers?: Record<string, (input: any) => unknown>;
  /** A reason makes the call fail with it (the engine's error); undefined lets it through. */
  refusals?: Record<string, (input: any) => string | undefined | Promise<string | undefined>>;
}

/**
 * Runs a test double's task loop: every task it polls is recorded in `calls` (by driver method, or
 * by kind for host tasks, with the payload's named input) and answered from the script, or else
 * with the smallest result its kind's schema accepts. `stop()` ends the loop after its current poll.
 */
export function answerTasks(agent: FakeAgent, script: FakeManagerScript): { calls: Array<{ method: string; input: any }>; stop(): Promise<void> } {
  const calls: Array<{ method: string; input: any }> = [];
  const kinds = agentTaskKinds();
  let stopping = false;
  const loop = (async () => {
    while (!stopping) {
      const res = await agent.poll(1);
      for (const task of (res.json?.data ?? []) as Array<{ task_id: string; kind: string; payload: any }>) {
        const kind = kinds.get(task.kind);
        const { backend: _backend, ...input } = task.payload ?? {};
        const call = { method: kind && isDriverCall(kind) ? kind.method : task.kind, input };
        calls.push(call);
        const refused = await script.refusals?.[call.method]?.(call.input);
        // An answer may be a promise: the call is answered once it settles (a cluster still at it).
        const answer = (await script.answers?.[call.method]?.(call.input)) ?? (kind ? Value.Create(kind.result) : {});
        await agent.report(task.task_id, refused ? { status: 'failed', error: refused } : { status: 'completed', output: answer });
      }
    }
  })();
  return {
    calls,
    stop: async () => {
      stopping = true;
      await loop;
    },
  };
}
