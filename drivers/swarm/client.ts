import Docker from 'dockerode';
import { sleep } from '../../core/clock.js';
import { attemptWith } from '../../core/errors.js';

/** What every part of the swarm driver works with: the engine's API and the docker CLI against the same socket. */
export interface SwarmContext {
  docker: Docker;
  socketPath: string;
  /** The docker CLI (for `docker stack deploy` / `docker stack rm`). */
  dockerBinary: string;
}

export function createContext(socketPath: string, dockerBinary: string): SwarmContext {
  // A safety net for an engine that stops answering (no call here waits on the engine that long).
  return { docker: new Docker({ socketPath, timeout: 5 * 60_000 }), socketPath, dockerBinary };
}

/** A driver failure: what failed, then the engine's own reason; `statusCode` is the engine's HTTP status when there was one. */
export class SwarmDriverError extends Error {
  constructor(
    message: string,
    readonly statusCode?: number,
  ) {
    super(message);
    this.name = 'SwarmDriverError';
  }
}

/** The HTTP status of a dockerode error (undefined for anything else). */
export function statusOf(err: unknown): number | undefined {
  const code = (err as { statusCode?: unknown } | null)?.statusCode;
  return typeof code === 'number' ? code : undefined;
}

export const isNotFound = (err: unknown): boolean => statusOf(err) === 404;
export const isConflict = (err: unknown): boolean => statusOf(err) === 409;

/**
 * The engine's reason for a failure: dockerode errors carry the engine's JSON answer in `json`;
 * anything else (a socket error) has its own message. Never the request (it may hold secret data).
 */
export function dockerReason(err: unknown): string {
  const e = err as { json?: unknown; reason?: unknown; message?: unknown; code?: unknown } | null;
  if (e && typeof e === 'object') {
    const json = e.json as { message?: unknown } | string | null | undefined;
    if (json && typeof json === 'object' && typeof json.message === 'string' && json.message.trim()) return json.message.trim();
    if (typeof json === 'string' && json.trim()) return json.trim();
    if (Buffer.isBuffer(json) && json.length) return json.toString('utf8').trim();
    if (typeof e.code === 'string' && typeof e.message === 'string') return e.message;
    if (typeof e.reason === 'string' && typeof e.message === 'string') return e.message.trim();
    if (typeof e.message === 'string') return e.message;
  }
  return String(err);
}

/** `<what>: <docker's reason>`, keeping the status code. */
export function failure(what: string, err: unknown): SwarmDriverError {
  if (err instanceof SwarmDriverError) return err;
  const e = err as { code?: unknown } | null;
  if (e && typeof e === 'object' && (e.code === 'ENOENT' || e.code === 'ECONNREFUSED' || e.code === 'EACCES') && statusOf(err) === undefined) {
    return new SwarmDriverError(`${what}: cannot reach the Docker Engine (${dockerReason(err)})`);
  }
  return new SwarmDriverError(`${what}: ${dockerReason(err)}`, statusOf(err));
}

/** Runs an engine call, turning its failure into `<what>: <reason>`. */
export const attempt = attemptWith(failure);


/** Polls `check` until it returns true or `timeoutMs` passes; returns whether it became true. */
export async function waitUntil(check: () => Promise<boolean>, timeoutMs: number, intervalMs = 500): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await check()) return true;
    if (Date.now() >= deadline) return false;
    await sleep(Math.min(intervalMs, Math.max(0, deadline - Date.now())));
  }
}

/** A non-empty name the engine will take as a name (not a flag, no path separators). */
export function checkName(kind: string, name: unknown): string {
  if (typeof name !== 'string' || !/^[A-Za-z0-9][A-Za-z0-9_.-]*$/.test(name) || name.length > 200) {
    throw new SwarmDriverError(`invalid ${kind} name ${JSON.stringify(name)}: letters, digits, '_', '.' and '-', starting with a letter or digit`);
  }
  return name;
}

/**
 * Options for a dockerode POST whose path ends in `?`: dockerode would otherwise put every option
 * into the query string as well as the body (and a secret's data with it).
 */
export function body<T extends object>(payload: T, query: Record<string, unknown> = {}): object {
  return { _query: query, _body: payload };
}

/** A name or id as a path segment (dockerode puts it into the URL as it is). */
export const segment = (value: string) => encodeURIComponent(String(value));

/**
 * Raw engine JSON: the shapes the driver reads and writes (service specs, tasks, nodes, swarm info),
 * loosely typed. It crosses no edge: what leaves the driver is typed by the call's result schema
 * (core/orchestrator.ts), which the control plane checks when the result is reported.
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- the Docker Engine API's JSON, read through dockerode, whose types (@types/dockerode) leave most of these shapes open; 56 reads in drivers/swarm walk it
export type Raw = Record<string, any>;
