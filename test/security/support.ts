import { readFileSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import path from 'node:path';
import { serveControlPlane, type ControlPlane } from '../support/control-plane.js';
import type { TestDialect } from '../support/dialects.js';

/** An answer read off the wire (status, headers, the JSON body when there is one). */
export interface WireAnswer {
  status: number;
  headers: http.IncomingHttpHeaders;
  json: any;
  text: string;
}

export interface HalfSent {
  /** The server's answer; a connection the server ends without one rejects. */
  answer: Promise<WireAnswer>;
  /** The request is on its way: its headers and `sent` bytes of its body were handed to the socket. */
  started: Promise<void>;
  destroy(): void;
}

/**
 * A request that announces a body of `announced` bytes (Content-Length) and sends only `sent` of
 * them, then holds the connection open: a slow or hostile client. `sent` may equal `announced` to
 * send the whole body at once.
 */
export function halfSent(
  base: string,
  target: string,
  options: { ca?: string; method?: string; headers?: Record<string, string>; announced: number; sent: number; localAddress?: string },
): HalfSent {
  return send(base, target, options);
}

/** A whole request from a chosen source address (`localAddress`, e.g. 127.0.0.2), with a JSON body. */
export function fromAddress(
  base: string,
  target: string,
  options: { ca?: string; method?: string; headers?: Record<string, string>; body: unknown; localAddress: string },
): Promise<WireAnswer> {
  const bytes = Buffer.from(JSON.stringify(options.body));
  return send(base, target, { ...options, announced: bytes.length, sent: bytes.length, whole: bytes }).answer;
}

function send(
  base: string,
  target: string,
  options: { ca?: string; method?: string; headers?: Record<string, string>; announced: number; sent: number; localAddress?: string; whole?: Buffer },
): HalfSent {
  const url = new URL(base + target);
  const transport = url.protocol === 'https:' ? https : http;
  const req = transport.request(url, {
    method: options.method ?? 'POST',
    ca: options.ca,
    localAddress: options.localAddress,
    agent: false,
    headers: { 'content-type': 'application/json', 'content-length': String(options.announced), ...options.headers },
  });
  const answer = new Promise<WireAnswer>((resolve, reject) => {
    req.on('response', (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (text += c));
      res.on('end', () => {
        let json: any;
        try {
          json = JSON.parse(text);
        } catch {
          json = undefined;
        }
        resolve({ status: res.statusCode!, headers: res.headers, json, text });
      });
      res.on('error', reject);
    });
    req.on('error', reject);
  });
  answer.catch(() => undefined);
  if (options.whole) {
    req.end(options.whole);
    return { answer, started: Promise.resolve(), destroy: () => req.destroy() };
  }
  const started = new Promise<void>((resolve) => {
    // A JSON string opened and never closed: the body cannot be complete before `announced` bytes.
    const head = Buffer.from('{"value":"');
    const rest = Math.max(0, options.sent - head.length);
    req.write(head);
    if (rest) req.write(Buffer.alloc(rest, 'x'), () => resolve());
    else resolve();
  });
  req.on('error', () => undefined);
  return { answer, started, destroy: () => req.destroy() };
}

/** Resident memory of a process (VmRSS), in MB. */
export function rssMb(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  return Number(/VmRSS:\s+(\d+) kB/.exec(status)![1]) / 1024;
}

/** `hangar serve` in a process of its own on the dialect (for what is measured in that process: its memory). */
export async function serveOwnProcess(dialect: TestDialect, name: string, env: Record<string, string>): Promise<ControlPlane> {
  let dataDir = '';
  const { schema } = dialect.freshStorage();
  const cp = await serveControlPlane({
    name,
    schema,
    caPem: () => readFileSync(path.join(dataDir, 'pki', 'ca.crt'), 'utf8'),
    env,
  });
  dataDir = cp.dataDir;
  return cp;
}

/** Waits until `n` of `promises` have settled (in any way); answers the settled values so far. */
export async function settledCount<T>(promises: Array<Promise<T>>, n: number): Promise<Array<PromiseSettledResult<T>>> {
  const results: Array<PromiseSettledResult<T> | undefined> = promises.map(() => undefined);
  let settled = 0;
  await new Promise<void>((resolve) => {
    if (n <= 0) resolve();
    promises.forEach((p, i) => {
      p.then(
        (value) => (results[i] = { status: 'fulfilled', value }),
        (reason) => (results[i] = { status: 'rejected', reason }),
      ).finally(() => {
        if (++settled === n) resolve();
      });
    });
  });
  return results.filter((r): r is PromiseSettledResult<T> => r !== undefined);
}
