import type { IncomingMessage } from 'node:http';
import type { Http2ServerRequest } from 'node:http2';
import type { Context } from 'koa';
import { HttpError, badRequest, type ErrorDetail } from '../errors.js';
import { addressHolder } from '../addresses.js';
import { jsonSyntaxError } from '../json-syntax.js';
import { namePart } from '../validation.js';
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
  /** How long a caller whose credentials checked out may take to send its body (api.body_timeout_ms). */
  timeoutMs: number;
  /** Largest body of a caller without credentials (api.unauthenticated_body_limit). */
  unauthenticatedBytes: number;
  /** How long a caller without credentials may take to send its body (api.unauthenticated_body_timeout_ms). */
  unauthenticatedTimeoutMs: number;
}

/** Why a gate refused a body: its holder has all its own slots, or every slot is taken. */
export type Refusal = 'holder' | 'everyone';

/**
 * Caps how many bodies are being received at once: a few per holder (a client address, a user, a
 * machine) first, then in all. A body holds its slot from its first byte awaited to its last
 * received (or its refusal); a request without a body takes none. One gate per kind of caller and
 * listener (core/http/koa-app.ts).
 */
export class BodyGate {
  private total = 0;
  private readonly held = new Map<string, number>();

  constructor(
    /** Slots one holder may have (api.unauthenticated_bodies_per_address, api.bodies_per_principal). */
    readonly perHolder: number,
    /** Slots in all (api.unauthenticated_bodies_in_flight, api.bodies_in_flight). */
    readonly max: number,
  ) {}

  /** A slot for `holder`: the function that gives it back, or why there is none. */
  enter(holder: string): (() => void) | Refusal {
    if (this.total >= this.max) return 'everyone';
    const mine = this.held.get(holder) ?? 0;
    if (mine >= this.perHolder) return 'holder';
    this.total++;
    this.held.set(holder, mine + 1);
    let left = false;
    return () => {
      if (left) return;
      left = true;
      this.total--;
      const n = this.held.get(holder)! - 1;
      if (n) this.held.set(holder, n);
      else this.held.delete(holder);
    };
  }

  /** Slots taken now (for tests and metrics). */
  get inFlight(): number {
    return this.total;
  }
}

/** The two gates of a listener: bodies of callers without credentials, and of those with them. */
export interface BodyGates {
  /** Per client address (api.unauthenticated_bodies_per_address), then in all (api.unauthenticated_bodies_in_flight). */
  anonymous: BodyGate;
  /** Per principal (every credential of one user together) or machine (api.bodies_per_principal), then in all (api.bodies_in_flight). */
  authenticated: BodyGate;
}

const NO_BODY = Buffer.alloc(0);

/** Answers that end the connection: whatever the client still sends is not read. */
export function closing(status: number, message: string, headers: Record<string, string> = {}): HttpError {
  return new HttpError(status, message, undefined, { Connection: 'close', ...headers });
}

/**
 * Whether the request announces a body at all: over HTTP/1.1 a length above 0, or chunks; over
 * HTTP/2 a stream its headers did not end (a length is optional there).
 */
export function announcesBody(ctx: Context): boolean {
  const { stream } = ctx.req as IncomingMessage & Partial<Pick<Http2ServerRequest, 'stream'>>;
  if (stream) return !stream.endAfterHeaders && Number(ctx.get('content-length') || 1) > 0;
  return Boolean(ctx.get('transfer-encoding')) || Number(ctx.get('content-length') || 0) > 0;
}

/**
 * Who a body of a caller is counted against: `anonymous` (its address) or a principal or machine.
 * `unproven`: a caller whose credentials name nobody (an unknown access key) is read as one whose
 * credentials name someone (the full limits, the same answers), in a slot of its address among
 * callers without credentials.
 */
export type BodyHolder = { anonymous: true; address: string; unproven?: boolean } | { anonymous: false; holder: string };

/**
 * The request body as bytes, read once and not interpreted (parsing comes after authentication).
 * A caller whose credentials checked out may send `limits.bytes` within `limits.timeoutMs`; one
 * without credentials only `limits.unauthenticatedBytes`, within `limits.unauthenticatedTimeoutMs`.
 * Either takes a slot of its gate while its body arrives: a few per holder, then a total.
 */
export class RequestBody {
  private reading?: Promise<Buffer>;

  constructor(
    private readonly ctx: Context,
    private readonly limits: BodyLimits,
    private readonly gates: BodyGates,
  ) {}

  read(who: BodyHolder): Promise<Buffer> {
    this.reading ??= !who.anonymous ? this.receiveAuthenticated(who.holder) : who.unproven ? this.receiveUnproven(who.address) : this.receiveAnonymous(who.address);
    return this.reading;
  }

  /** A body of credentials that name nobody: read and answered as one of credentials that do, in a slot of its address. */
  private receiveUnproven(address: string): Promise<Buffer> {
    const gate = this.gates.anonymous;
    return this.gated(gate, addressHolder(address), this.limits.bytes, this.limits.timeoutMs, '', {
      holder: [429, `Too many of your requests are sending bodies at the moment (${gate.perHolder} at once); finish one, then retry`],
      everyone: [503, 'Too many requests are sending bodies at the moment; retry shortly'],
    });
  }

  private receiveAnonymous(address: string): Promise<Buffer> {
    const { unauthenticatedBytes, unauthenticatedTimeoutMs } = this.limits;
    return this.gated(this.gates.anonymous, addressHolder(address), unauthenticatedBytes, unauthenticatedTimeoutMs, ' for requests without credentials', {
      holder: [429, 'Too many requests without credentials from your address are sending bodies at the moment; finish one, then retry'],
      everyone: [503, 'Too many requests without credentials are sending bodies at the moment; retry shortly'],
    });
  }

  private receiveAuthenticated(holder: string): Promise<Buffer> {
    return this.gated(this.gates.authenticated, holder, this.limits.bytes, this.limits.timeoutMs, '', {
      holder: [429, `Too many of your requests are sending bodies at the moment (${this.gates.authenticated.perHolder} at once); finish one, then retry`],
      everyone: [503, 'Too many requests are sending bodies at the moment; retry shortly'],
    });
  }

  private async gated(gate: BodyGate, holder: string, limit: number, timeoutMs: number, who: string, refusals: Record<Refusal, [number, string]>): Promise<Buffer> {
    if (!announcesBody(this.ctx)) return NO_BODY;
    const leave = gate.enter(holder);
    if (typeof leave !== 'function') {
      const [status, message] = refusals[leave];
      throw closing(status, message, { 'Retry-After': '1' });
    }
    try {
      return await this.receive(limit, timeoutMs, who);
    } finally {
      leave();
    }
  }

  private receive(limit: number, timeoutMs: number, who: string): Promise<Buffer> {
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
          chunks.length = 0;
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
 * Keys the client chose appear in the path only when they look like a name ({@link namePart}).
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
        stack.push([item, `${where}.${namePart(k)}`]);
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

const JSON_TYPE = /^application\/([\w.+-]+\+)?json\s*(;|$)/i;
const MEDIA_TYPE = /^[\w.+-]{1,64}\/[\w.+-]{1,64}$/;

/**
 * The 415 for a request whose content type a route does not take, or null. Writes take only JSON
 * (`application/json`, `application/*+json`) — and XML on a route declared `xml: true` —, and a
 * body must say it is JSON: a form (`application/x-www-form-urlencoded`, `multipart/form-data`) or
 * `text/plain` body is what any web page can make a browser send to another site without asking
 * first (no CORS preflight), so no route that changes state takes one. Reads with a body follow the
 * same rule. Checked before the body is read (the answer closes a connection whose body is unread).
 */
export function unsupportedContentType(ctx: Context, acceptsXml: boolean): HttpError | null {
  const type = ctx.get('content-type').trim();
  const writes = ctx.method !== 'GET' && ctx.method !== 'HEAD';
  const body = announcesBody(ctx);
  if (!type) return body ? closing(415, 'A request body needs Content-Type: application/json') : null;
  if (!writes && !body) return null;
  if (JSON_TYPE.test(type)) return null;
  if (isXmlContentType(type)) {
    if (acceptsXml) return null;
    return body ? closing(415, 'This endpoint does not accept XML; send application/json') : new HttpError(415, 'This endpoint does not accept XML; send application/json');
  }
  // The type is the client's text: named only when it looks like a media type.
  const named = type.split(';')[0]!.trim();
  const message = `Unsupported content type${MEDIA_TYPE.test(named) ? ` ${named.toLowerCase()}` : ''}; send application/json`;
  return body ? closing(415, message) : new HttpError(415, message);
}

/**
 * Why JSON.parse refused a body, without a word of the body: V8 quotes the text it could not read
 * ("Unexpected token 'p', "password=h"... is not valid JSON"), which would hand a password back.
 * The line and column when the parser names a position.
 */
export function jsonRefusal(text: string, err: unknown): string {
  const { line, column, positioned, ended, reason } = jsonSyntaxError(text, err);
  if (ended) return 'the JSON ends too early';
  if (!positioned) return 'it is not JSON (an unexpected character)';
  // The parser's reason names characters of the grammar (',' or '}'), never of the body.
  const why = reason.replace(/'[^']*'|"[^"]*"/g, (q) => (/^['"][,:{}[\]]['"]$/.test(q) ? q : '…'));
  return `${why} at line ${line}, column ${column}`;
}

/** Turns the raw body into what the handler gets: a plain value, an XmlDocument, or undefined when empty. */
export function parseBody(ctx: Context, raw: Buffer, acceptsXml: boolean): unknown {
  if (raw.length === 0) return undefined;
  const type = ctx.get('content-type');
  const text = raw.toString('utf8');
  if (JSON_TYPE.test(type)) {
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch (err) {
      throw badRequest(`Malformed JSON body: ${jsonRefusal(text, err)}`);
    }
    if (nestsDeeperThan(value, MAX_BODY_DEPTH)) {
      throw badRequest(`The JSON body nests deeper than ${MAX_BODY_DEPTH} levels of objects and arrays; flatten it`, [
        { path: 'body', message: `nests deeper than ${MAX_BODY_DEPTH} levels` },
      ]);
    }
    return value;
  }
  if (acceptsXml && isXmlContentType(type)) return XmlDocument.parse(text);
  // unsupportedContentType refused every other type before the body was read.
  throw unsupportedContentType(ctx, acceptsXml) ?? new HttpError(415, 'Unsupported content type; send application/json');
}
