import type { IncomingMessage } from 'node:http';
import type { Http2ServerRequest } from 'node:http2';
import type { Context } from 'koa';
import { HttpError, badRequest, type ErrorDetail } from '../errors.js';
import { isXmlContentType, XmlDocument } from './xml.js';

export function parseSize(size: string): number {
  const m = /^(\d+(?:\.\d+)?)\s*(b|kb|mb|gb)?$/i.exec(size.trim());
  if (!m) throw new Error(`bad size ${size}`);
  const unit = { b: 1, kb: 1024, mb: 1024 ** 2, gb: 1024 ** 3 }[(m[2] ?? 'b').toLowerCase() as 'b'];
  return Math.floor(Number(m[1]) * unit);
}

/** What a request may send: in full once its credentials check out, much less before. */
export interface BodyLimits {
  /** Largest body of a caller whose credentials checked out (api.body_limit). */
  bytes: number;
  /** Largest body of a caller without credentials (api.unauthenticated_body_limit). */
  unauthenticatedBytes: number;
  /** How long a caller without credentials may take to send its body (api.unauthenticated_body_timeout_ms). */
  unauthenticatedTimeoutMs: number;
}

/** Caps how many bodies of callers without credentials are being received at once (per listener). */
export class BodyGate {
  private inFlight = 0;

  constructor(readonly max: number) {}

  enter(): (() => void) | null {
    if (this.inFlight >= this.max) return null;
    this.inFlight++;
    let left = false;
    return () => {
      if (left) return;
      left = true;
      this.inFlight--;
    };
  }
}

const NO_BODY = Buffer.alloc(0);

/** Answers that end the connection: whatever the client still sends is not read. */
function closing(status: number, message: string, headers: Record<string, string> = {}): HttpError {
  return new HttpError(status, message, undefined, { Connection: 'close', ...headers });
}

/**
 * Whether the request announces a body at all: over HTTP/1.1 a length above 0, or chunks; over
 * HTTP/2 a stream its headers did not end (a length is optional there).
 */
function announcesBody(ctx: Context): boolean {
  const { stream } = ctx.req as IncomingMessage & Partial<Pick<Http2ServerRequest, 'stream'>>;
  if (stream) return !stream.endAfterHeaders && Number(ctx.get('content-length') || 1) > 0;
  return Boolean(ctx.get('transfer-encoding')) || Number(ctx.get('content-length') || 0) > 0;
}

/**
 * The request body as bytes, read once and not interpreted (parsing comes after authentication).
 * A caller whose credentials checked out may send `limits.bytes`; one without credentials only
 * `limits.unauthenticatedBytes`, within `limits.unauthenticatedTimeoutMs`, and only while fewer than
 * the gate's maximum of such bodies are in flight.
 */
export class RequestBody {
  private reading?: Promise<Buffer>;

  constructor(
    private readonly ctx: Context,
    private readonly limits: BodyLimits,
    private readonly gate: BodyGate,
  ) {}

  read(authenticated: boolean): Promise<Buffer> {
    this.reading ??= authenticated ? this.receive(this.limits.bytes) : this.receiveUnauthenticated();
    return this.reading;
  }

  private async receiveUnauthenticated(): Promise<Buffer> {
    if (!announcesBody(this.ctx)) return this.receive(this.limits.unauthenticatedBytes);
    const leave = this.gate.enter();
    if (!leave) {
      throw closing(503, 'Too many requests without credentials are sending bodies at the moment; retry shortly', { 'Retry-After': '1' });
    }
    try {
      return await this.receive(this.limits.unauthenticatedBytes, this.limits.unauthenticatedTimeoutMs, ' for requests without credentials');
    } finally {
      leave();
    }
  }

  private receive(limit: number, timeoutMs = 0, who = ''): Promise<Buffer> {
    // No body announced: nothing to wait for (a GET, most of the traffic).
    if (!announcesBody(this.ctx)) return Promise.resolve(NO_BODY);
    const req = this.ctx.req;
    const tooLarge = () => closing(413, `Request body is larger than the ${limit}-byte limit${who}`);
    if (Number(this.ctx.get('content-length') || 0) > limit) return Promise.reject(tooLarge());
    return new Promise<Buffer>((resolve, reject) => {
      const chunks: Buffer[] = [];
      let size = 0;
      const finish = (err: Error | null, body?: Buffer) => {
        req.off('data', onData);
        req.off('end', onEnd);
        req.off('error', onError);
        req.off('aborted', onAborted);
        clearTimeout(timer);
        if (err) {
          // Stop reading; the answer closes the connection (nothing more is buffered).
          req.pause();
          reject(err);
        } else resolve(body!);
      };
      const onData = (chunk: Buffer) => {
        size += chunk.length;
        if (size > limit) finish(tooLarge());
        else chunks.push(chunk);
      };
      const onEnd = () => finish(null, Buffer.concat(chunks));
      const onError = (err: Error) => finish(err);
      const onAborted = () => finish(closing(400, 'The client closed the connection before the body was complete'));
      const timer = timeoutMs
        ? setTimeout(() => finish(closing(408, `The request body did not arrive within ${timeoutMs} ms${who}`)), timeoutMs)
        : undefined;
      req.on('data', onData);
      req.once('end', onEnd);
      req.once('error', onError);
      req.once('aborted', onAborted);
      if (req.readableEnded) onEnd();
    });
  }
}

/** How deeply a JSON body may nest (objects and arrays); deeper bodies get a 400. */
export const MAX_BODY_DEPTH = 64;

/** Whether a parsed JSON value nests deeper than `max` levels (walked without recursion). */
export function nestsDeeperThan(value: unknown, max: number): boolean {
  const stack: Array<[unknown, number]> = [[value, 1]];
  while (stack.length) {
    const [v, depth] = stack.pop()!;
    if (!v || typeof v !== 'object') continue;
    if (depth > max) return true;
    for (const child of Array.isArray(v) ? v : Object.values(v)) {
      if (child && typeof child === 'object') stack.push([child, depth + 1]);
    }
  }
  return false;
}

/**
 * A key JSON.parse keeps as an own property but which an assignment (`out[key] = …`, as in
 * dropNulls, Object.assign, a handler's copy) takes for the object's prototype: the key then
 * vanishes and the value's properties turn up as inherited ones, so validation named properties the
 * client never sent. No schema of hangar has such a property: it is refused up front, by its name.
 */
const PROTOTYPE_KEY = '__proto__';

/**
 * What hangar refuses in any part of a request before validation: the path (`body.a.b[2]`) and
 * problem of the first string or key holding U+0000 (PostgreSQL cannot store that character in
 * text, and no name or value hangar takes needs it), or of a `__proto__` key; null when clean.
 */
export function refusedPartAt(value: unknown, root: string): ErrorDetail | null {
  const stack: Array<[unknown, string]> = [[value, root]];
  while (stack.length) {
    const [v, where] = stack.pop()!;
    if (typeof v === 'string') {
      if (v.includes('\u0000')) return { path: where, message: 'must not contain the NUL character (U+0000)', keyword: 'nul' };
    } else if (Array.isArray(v)) {
      v.forEach((item, i) => stack.push([item, `${where}[${i}]`]));
    } else if (v && typeof v === 'object') {
      for (const [k, item] of Object.entries(v)) {
        if (k.includes('\u0000')) return { path: where, message: 'must not contain the NUL character (U+0000)', keyword: 'nul' };
        if (k === PROTOTYPE_KEY) return { path: `${where}.${k}`, message: 'is not an allowed property', keyword: 'prototype' };
        stack.push([item, `${where}.${k}`]);
      }
    }
  }
  return null;
}

/** Throws the 400 when a part of the request holds U+0000 or a `__proto__` key ({@link refusedPartAt}). */
export function assertAcceptableInput(value: unknown, root: string): void {
  const refused = refusedPartAt(value, root);
  if (refused) throw badRequest(`Validation failed: ${refused.path} ${refused.message}`, [refused]);
}

/** Turns the raw body into what the handler gets: a plain value, an XmlDocument, or undefined when empty. */
export function parseBody(ctx: Context, raw: Buffer, acceptsXml: boolean): unknown {
  if (raw.length === 0) return undefined;
  const type = ctx.get('content-type');
  const text = raw.toString('utf8');
  if (!type || /^application\/([\w.+-]+\+)?json\b/i.test(type)) {
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch (err) {
      throw badRequest(`Malformed JSON body: ${(err as Error).message}`);
    }
    if (nestsDeeperThan(value, MAX_BODY_DEPTH)) {
      throw badRequest(`The JSON body nests deeper than ${MAX_BODY_DEPTH} levels of objects and arrays; flatten it`, [
        { path: 'body', message: `nests deeper than ${MAX_BODY_DEPTH} levels` },
      ]);
    }
    return value;
  }
  if (isXmlContentType(type)) {
    if (!acceptsXml) throw new HttpError(415, 'This endpoint does not accept XML; send application/json');
    return XmlDocument.parse(text);
  }
  if (/^application\/x-www-form-urlencoded\b/i.test(type)) {
    return Object.fromEntries(new URLSearchParams(text));
  }
  throw new HttpError(415, `Unsupported content type ${type.split(';')[0]}; send application/json`);
}
