import http2 from 'node:http2';
import { isIP } from 'node:net';
import Koa, { type Context } from 'koa';
import type { IncomingHttpHeaders } from 'node:http';
import type { ValidateFunction } from 'ajv';
import type { TSchema } from '@sinclair/typebox';
import { forbidden, HttpError, reasonPhrase } from '../errors.js';
import { authorize, type AuthOutcome, type PermissionCheck } from '../auth/index.js';
import { parsePermission, permissionOf, userGrantsOf, type UserGrants } from '../auth/permissions.js';
import { ScopeGate, type RouteScope, type ScopeAccess } from '../auth/scope.js';
import { randomToken } from '../ids.js';
import type { AgentIdentity, HangarRequest, ListenerName, RouteDef, Services } from '../plugin.js';
import type { Principal } from '../auth/index.js';
import { isStoreFull } from '../db/health.js';
import { inWriteScope, isConnectionLost, isPoolExhausted, WriteScope } from '../db/write-scope.js';
import { uniqueViolationConflict } from '../db/repository.js';
import { assertValid, createAjv, dropNulls } from '../validation.js';
import { assertAcceptableInput, BodyGate, parseBody, parseSize, RequestBody, unsupportedContentType, type BodyGates, type BodyHolder, type BodyLimits } from './body.js';
import type { FinishedRequest } from './observers.js';
import { Reply } from './reply.js';
import { responseCheck } from './response-check.js';
import { RouteTree } from './router.js';
import { CorsPolicy } from './cors.js';
import { XmlDocument } from './xml.js';

const bodyAjv = createAjv();
/** Query strings, path segments and XML are text: coerce to the declared types (a lone value to an array too). */
const inputAjv = createAjv({ coerceTypes: 'array', useDefaults: true });

interface Validators {
  body?: ValidateFunction;
  xmlBody?: ValidateFunction;
  query?: ValidateFunction;
  params?: ValidateFunction;
}

/** A route's validators, compiled the first time the route is called (start-up compiles none). */
function validators(route: RouteDef): () => Validators {
  let compiled: Validators | undefined;
  return () => {
    if (compiled) return compiled;
    const s = route.schemas ?? {};
    const c = (ajv: typeof bodyAjv, schema?: TSchema) => (schema ? ajv.compile(schema) : undefined);
    return (compiled = {
      body: c(bodyAjv, s.body),
      xmlBody: route.xml ? c(inputAjv, s.body) : undefined,
      query: c(inputAjv, s.query),
      params: c(inputAjv, s.params),
    });
  };
}

/** `::ffff:10.0.0.1` → `10.0.0.1`: one spelling per IPv4 address. */
function plainAddress(address: string): string {
  return address.startsWith('::ffff:') && isIP(address.slice(7)) === 4 ? address.slice(7) : address;
}

/**
 * The client's address: the socket peer, or, when the peer is a trusted proxy, the nearest address
 * in X-Forwarded-For that is not one (what each trusted proxy appended is believed; the rest not).
 */
export function clientAddress(ctx: Context, trusted: ReadonlySet<string>): string {
  let address = plainAddress(ctx.req.socket.remoteAddress ?? '');
  if (!trusted.has(address)) return address;
  const hops = ctx.get('x-forwarded-for').split(',').map((h) => plainAddress(h.trim()));
  while (hops.length && trusted.has(address)) {
    const hop = hops.pop()!;
    if (!isIP(hop)) break;
    address = hop;
  }
  return address;
}

const REQUEST_ID = /^[\w.:-]{1,128}$/;

function requestId(ctx: Context): string {
  const offered = ctx.get('x-request-id');
  return offered && REQUEST_ID.test(offered) ? offered : `req-${randomToken(20)}`;
}

const JSON_TYPE = 'application/json; charset=utf-8';

/**
 * A JSON answer, serialised here (Koa's own path for objects looks the type up on every response),
 * and sent as the string, large or small. Node encodes a string into a block it frees once the write
 * is done; a Buffer's block lives until V8 collects the Buffer, which under load is tens of large
 * answers later, and glibc's main arena grows to hold them and keeps the space after the load
 * (docs/performance.md, "Large answers sent as strings"). A small string also goes with the head in
 * one write (one TLS record).
 * The value stays in `ctx.state.payload` for the request observers.
 */
function sendJson(ctx: Context, status: number, payload: unknown): void {
  ctx.status = status;
  ctx.res.setHeader('Content-Type', JSON_TYPE);
  ctx.state.payload = payload;
  ctx.body = JSON.stringify(payload);
}


/**
 * The 507 for a write the store refused for want of space (a full disk), or null: the client learns
 * why and that nothing was written; the store's health logs the condition once per interval
 * (core/db/health.ts), not once per request.
 */
function storeFull(err: unknown): HttpError | null {
  if (!isStoreFull(err)) return null;
  return new HttpError(507, 'The store cannot take this change: the disk that holds it is full, and nothing was written. An operator must free space; then send it again');
}

function errorBody(ctx: Context, err: unknown, services: Services): void {
  let status = 500;
  let message = 'Internal error; the request id identifies it in the server log';
  let details: unknown[] | undefined;
  err = uniqueViolationConflict(err) ?? storeFull(err) ?? err;
  if (err instanceof HttpError) {
    ({ status, message, details } = err);
    for (const [k, v] of Object.entries(err.headers ?? {})) {
      // HTTP/2 forbids the header (an agent's session): the one request ends instead of the
      // connection, its stream reset once answered, so the body it still sends is not waited for.
      if (k.toLowerCase() === 'connection' && ctx.req instanceof http2.Http2ServerRequest) {
        const { stream } = ctx.req;
        stream.once('finish', () => stream.close());
      } else ctx.set(k, v);
    }
  } else {
    const e = err as { status?: number; expose?: boolean; message?: string; stack?: string; name?: string };
    if (e && e.expose && typeof e.status === 'number' && e.status >= 400 && e.status < 500) {
      status = e.status;
      message = e.message ?? reasonPhrase(status);
    } else if ((ctx.state.writes as WritesState | undefined)?.scope.committed) {
      // The change is in the store: never a 500 that invites sending it again.
      status = 503;
      message = 'The change was saved, but the answer could not be completed (the store failed after the commit); read the resource to see it rather than sending the request again';
      services.log.error(
        { request_id: ctx.state.requestId, err: { type: e?.name, message: e?.message, stack: e?.stack } },
        'request failed after its change was committed',
      );
    } else if ((ctx.state.writes as WritesState | undefined)?.scope.uncertain) {
      // The connection was lost during the commit of a change: nobody can tell whether it was saved.
      status = 503;
      message = 'The connection to the store was lost while the change was being committed: it may have been saved. Read the resource before sending the request again';
      services.log.warn({ request_id: ctx.state.requestId, err: { type: e?.name, message: e?.message } }, 'request failed: the store connection was lost during a commit');
    } else if (isConnectionLost(err)) {
      // Nothing of this request was committed: it may be sent again.
      status = 503;
      message = 'The connection to the store was lost and nothing was saved; send the request again';
      ctx.set('Retry-After', '1');
      services.log.warn({ request_id: ctx.state.requestId, err: { type: e?.name, message: e?.message } }, 'request failed: the store connection was lost');
    } else if (isPoolExhausted(err)) {
      // Load, not a fault: the request waited for a store connection as long as knex allows.
      status = 503;
      message = 'The store is busy (every connection of its pool stayed in use while this request waited) and nothing was saved; send the request again shortly';
      ctx.set('Retry-After', '2');
      services.log.warn({ request_id: ctx.state.requestId, path: ctx.path }, 'request refused: no store connection became free in time (database.pool_max)');
    } else {
      services.log.error(
        { request_id: ctx.state.requestId, err: { type: e?.name, message: e?.message, stack: e?.stack } },
        'request failed',
      );
    }
  }
  sendJson(ctx, status, { error: reasonPhrase(status), message, ...(details ? { details } : {}), request_id: ctx.state.requestId });
}

function send(ctx: Context, result: unknown, route: RouteDef): void {
  if (result instanceof Reply) {
    for (const k in result.headers) ctx.set(k, result.headers[k]!);
    if (result.status === 204) {
      ctx.status = 204;
      return;
    }
    if (result.type) {
      ctx.status = result.status;
      ctx.type = result.type;
      ctx.body = result.body;
      return;
    }
    sendJson(ctx, result.status, result.body);
    return;
  }
  sendJson(ctx, route.status ?? 200, { data: result ?? null });
}

/** Whether the client has gone (an HTTP/2 response tells through its stream). */
function responseClosed(res: Context['res']): boolean {
  return res instanceof http2.Http2ServerResponse ? res.stream.closed || res.stream.destroyed : res.closed;
}

/**
 * Each request's abort signal, aborted when its client goes or the control plane shuts down. One
 * listener on the shutdown signal serves them all: an AbortSignal's addEventListener walks the
 * listeners it has (to refuse a duplicate), so a listener per request cost O(n) each with thousands
 * of agents' long-polls held (13 % of the control plane's CPU at 5 000 agents).
 */
class RequestSignals {
  private readonly open = new Set<AbortController>();

  constructor(private readonly shutdown: AbortSignal) {
    shutdown.addEventListener(
      'abort',
      () => {
        for (const controller of this.open) controller.abort();
        this.open.clear();
      },
      { once: true },
    );
  }

  of(ctx: Context): AbortSignal {
    const controller = new AbortController();
    if (responseClosed(ctx.res) || this.shutdown.aborted) {
      controller.abort();
      return controller.signal;
    }
    this.open.add(controller);
    ctx.res.once('close', () => {
      this.open.delete(controller);
      controller.abort();
    });
    return controller.signal;
  }
}

/** What a handler gets. Its `signal` is made the first time a handler asks for it (most never do). */
class Request implements HangarRequest {
  #signal?: AbortSignal;

  constructor(
    readonly body: unknown,
    readonly query: Record<string, unknown>,
    readonly params: Record<string, unknown>,
    readonly principal: Principal | null,
    readonly agent: AgentIdentity | null,
    readonly rawBody: Buffer,
    readonly ctx: Context,
    private readonly signals: RequestSignals,
  ) {}

  get ip(): string {
    return this.ctx.state.clientIp;
  }

  get requestId(): string {
    return this.ctx.state.requestId;
  }

  get headers(): IncomingHttpHeaders {
    return this.ctx.headers;
  }

  get signal(): AbortSignal {
    return (this.#signal ??= this.signals.of(this.ctx));
  }
}

/**
 * Whose body slot a request takes (core/http/body.ts BodyGate): a user's (whatever credential it
 * used: a signed request's body, read before the signature is checked, takes the slot of the user
 * its access key names), a machine's; a caller without credentials takes one of its address.
 */
function holderOf(ctx: Context, principal: Principal | null, agent: AgentIdentity | null): BodyHolder {
  if (principal) return { anonymous: false, holder: `principal:${principal.id}` };
  if (agent) return { anonymous: false, holder: `agent:${agent.nodeId}` };
  return { anonymous: true, address: ctx.state.clientIp };
}

function routeMiddleware(route: RouteDef, listener: ListenerName, services: Services, limits: BodyLimits, gates: BodyGates, signals: RequestSignals, userGrants: UserGrants) {
  const compiled = validators(route);
  // In tests, answers are checked against the declared response schema (core/http/response-check.ts); never in production.
  const checkResponse = services.config.env === 'test' ? responseCheck(route) : null;
  const answer = (ctx: Context, result: unknown) => {
    checkResponse?.(result);
    send(ctx, result, route);
  };
  const permission = permissionOf(route);
  const check: PermissionCheck = { permission, userGrants };
  // A route on a project's resources (route.scope): memberships open it too, once projects are loaded.
  const routeScope = route.scope;
  const gate = routeScope ? new ScopeGate(services.provided, () => userGrants) : null;
  const scopedCheck: PermissionCheck | null = routeScope ? { ...check, viaProjects: (p) => gate!.admits(p, permission, routeScope) } : null;
  // A credential limited to one project reaches what a route scopes to projects (the projects' own
  // routes too) and its own account; a route on resources not scoped to projects (creating backup
  // targets, the gateway's table…) would act installation-wide.
  const kind = parsePermission(permission)?.kind;
  const openToProjectKeys = Boolean(route.scope) || kind === 'account' || kind === 'public' || kind === 'agent';
  const ownProjectQuery = Boolean(((route.schemas?.query as { properties?: Record<string, unknown> } | undefined)?.properties ?? {}).project);
  const bodyIsObject = (route.schemas?.body as { type?: string } | undefined)?.type === 'object';
  return async (ctx: Context) => {
    ctx.state.route = route;
    const received = new RequestBody(ctx, limits, gates);
    // 1–2: authentication (headers first; a signature reads the body), then permission.
    const readBody = (owner: string | null) =>
      received.read(owner === null ? { anonymous: true, address: ctx.state.clientIp, unproven: true } : { anonymous: false, holder: `principal:${owner}` });
    const scoped = routeScope && gate!.active ? routeScope : null;
    const { principal, agent } = await authorize(route.auth, { ctx, body: readBody, listener }, services.auth, services.ca, scoped ? scopedCheck! : check);
    ctx.state.principal = principal?.id ?? agent?.nodeId;
    if (principal?.project_id && !openToProjectKeys) {
      throw forbidden(`This credential is limited to a project, and ${route.method} ${route.path} (${permission}) acts on resources not scoped to projects yet: use a credential of the installation`);
    }
    // 2b: the project of what the path names (404 when it is not the caller's), a list's ?project=.
    const access: ScopeAccess | null = scoped && principal ? await gate!.access(principal, permission) : null;
    const seen = new Map<string, string>();
    if (access) {
      await gate!.check(access, scoped!, permission, { params: (ctx as unknown as { params: unknown }).params, body: undefined }, 'params', seen);
      if (scoped!.list) access.narrowed = await gate!.narrowing(ctx, access, ownProjectQuery);
    }
    // A scoped list whose answer is not an array (GET /v1/gateway) filters itself with what was decided here.
    ctx.state.scope = access;
    // 3: the content type, before a byte of the body is read: JSON (XML where declared), nothing a web page can send cross-site.
    const unsupported = unsupportedContentType(ctx, Boolean(route.xml));
    if (unsupported) throw unsupported;
    const rawBody = await received.read(holderOf(ctx, principal, agent));
    // 4: parsing and validation.
    const v = compiled();
    let body = parseBody(ctx, rawBody, Boolean(route.xml));
    assertAcceptableInput(body instanceof XmlDocument ? body.content : body, 'body');
    if (body instanceof XmlDocument) {
      if (v.xmlBody) assertValid(v.xmlBody, body.content, 'body');
    } else {
      if (!route.preserveNullValues) body = dropNulls(body, route.schemas?.body as Record<string, unknown> | undefined);
      if (v.body) {
        if (body === undefined && bodyIsObject) body = {};
        assertValid(v.body, body, 'body');
      }
    }
    const query: Record<string, unknown> = ctx.querystring ? { ...ctx.query } : {};
    if (ctx.querystring) assertAcceptableInput(query, 'query');
    if (v.query) assertValid(v.query, query, 'query');
    const params: Record<string, unknown> = { ...(ctx as unknown as { params: Record<string, string> }).params };
    assertAcceptableInput(params, 'path');
    if (v.params) assertValid(v.params, params, 'path');
    // 4b: the projects of what the body (and the query) names.
    if (access) await gate!.check(access, scoped!, permission, { params, body, query }, 'body', seen);
    // 5: the handler. A write's handler runs in a write scope: the records that go with its first
    // committed write (the audit entry) are written in that write's transaction (core/db/write-scope.ts).
    const req = new Request(body, query, params, principal, agent, rawBody, ctx, signals);
    if (!WRITES.has(ctx.method)) {
      const result = await route.handler(req);
      return answer(ctx, access && scoped!.list ? await visibleOnly(gate!, scoped!.list, access, result) : result);
    }
    const started = finishedRequest(ctx, listener, 0, route.status ?? 200);
    const companions = services.requests.companionsFor(started);
    const scope = new WriteScope(
      companions.length
        ? async (trx) => {
            for (const { companion } of companions) await companion.write(started, trx);
          }
        : null,
      companions.length && companions.every(({ companion }) => companion.writePrepared)
        ? async (tx) => {
            for (const { companion } of companions) await companion.writePrepared!(started, tx);
          }
        : null,
    );
    ctx.state.writes = { scope, companions: companions.map((c) => c.name) };
    answer(ctx, await inWriteScope(scope, () => route.handler(req)));
  };
}

const WRITES = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);

/** A scoped list's answer with only the items the caller may see (core/auth/scope.ts). */
async function visibleOnly(gate: ScopeGate, kind: NonNullable<RouteScope['list']>, access: ScopeAccess, result: unknown): Promise<unknown> {
  const body = result instanceof Reply ? (result.body as { data?: unknown } | null) : null;
  if (result instanceof Reply && !result.type && Array.isArray(body?.data)) {
    return new Reply(result.status, { ...body, data: await gate.filter(kind, access, body.data) }, result.headers);
  }
  if (Array.isArray(result)) return gate.filter(kind, access, result);
  return result;
}

/** What the pipeline knows of a write's scope (ctx.state.writes). */
interface WritesState {
  scope: WriteScope;
  companions: string[];
}

function methodNotAllowed(ctx: Context, allowed: string[]): HttpError {
  return new HttpError(405, `${ctx.method} is not allowed on ${ctx.path}; allowed: ${allowed.join(', ')}`, undefined, { Allow: allowed.join(', ') });
}

/** What the request observers (core/http/observers.ts) learn of an answered request (`status` before the answer is known). */
function finishedRequest(ctx: Context, listener: ListenerName, durationMs: number, status = ctx.status): FinishedRequest {
  const caller = ctx.state.caller as AuthOutcome | undefined;
  const body = ctx.state.payload as { data?: unknown } | null | undefined;
  const writes = ctx.state.writes as WritesState | undefined;
  return {
    listener,
    method: ctx.method,
    route: (ctx.state.route as RouteDef | undefined) ?? null,
    params: { ...(ctx as unknown as { params?: Record<string, string> }).params },
    status,
    durationMs,
    principal: caller?.principal ?? null,
    agentNodeId: caller?.agent?.nodeId ?? null,
    ip: ctx.state.clientIp ?? ctx.ip,
    requestId: ctx.state.requestId,
    token: ctx.state,
    userAgent: ctx.get('user-agent'),
    data: body && typeof body === 'object' && !Buffer.isBuffer(body) && 'data' in body ? body.data : undefined,
    committed: writes?.scope.committed ?? false,
    uncertain: writes?.scope.uncertain ?? false,
    recordedWith: writes?.scope.carried ? writes.companions : [],
  };
}

/** One Koa application per listener: request ids, error bodies, access log, observers, the routes, 404/405. */
export function buildKoaApp(listener: ListenerName, routes: RouteDef[], services: Services): Koa {
  const app = new Koa({ proxy: false });
  app.silent = true;
  const tree = new RouteTree<(ctx: Context) => Promise<void>>();
  const { api } = services.config;
  const limits: BodyLimits = {
    bytes: parseSize(api.body_limit),
    timeoutMs: api.body_timeout_ms,
    unauthenticatedBytes: Math.min(parseSize(api.unauthenticated_body_limit), parseSize(api.body_limit)),
    unauthenticatedTimeoutMs: api.unauthenticated_body_timeout_ms,
  };
  const gates: BodyGates = {
    anonymous: new BodyGate(Math.min(api.unauthenticated_bodies_per_address, api.unauthenticated_bodies_in_flight), api.unauthenticated_bodies_in_flight),
    authenticated: new BodyGate(Math.min(api.bodies_per_principal, api.bodies_in_flight), api.bodies_in_flight),
  };
  const signals = new RequestSignals(services.shutdown);
  // What users hold: the permissions of every listener's routes open to any authenticated caller.
  const userGrants = userGrantsOf(services.routeTable().map((r) => r.route));
  for (const route of routes) tree.add(route.method, route.path, routeMiddleware(route, listener, services, limits, gates, signals, userGrants));
  const accessLog = services.log.child({ listener });

  const trustedProxies = new Set(api.trusted_proxies.map(plainAddress));
  // Set on the response directly: Koa's ctx.set normalises each value again on every request.
  const securityHeaders = Object.entries({
    'X-Content-Type-Options': 'nosniff',
    // Answers carry tokens, secrets and private state: no cache keeps a copy.
    'Cache-Control': 'no-store',
    ...(listener === 'control' ? { 'Strict-Transport-Security': 'max-age=31536000' } : {}),
  });
  app.use(async (ctx, next) => {
    const started = process.hrtime.bigint();
    ctx.state.requestId = requestId(ctx);
    ctx.state.clientIp = clientAddress(ctx, trustedProxies);
    // Before the handler, so that a route may answer otherwise (a cacheable download).
    for (const [name, value] of securityHeaders) ctx.res.setHeader(name, value);
    ctx.res.setHeader('X-Request-Id', ctx.state.requestId);
    try {
      await next();
    } catch (err) {
      errorBody(ctx, err, services);
    } finally {
      const durationMs = Number(process.hrtime.bigint() - started) / 1e6;
      await services.requests.finished(finishedRequest(ctx, listener, durationMs), (observer, err) => {
        // A full disk is logged by the store's health once per interval, not once per request.
        if (!isStoreFull(err)) accessLog.error({ request_id: ctx.state.requestId, observer, err: { message: err.message } }, 'request observer failed');
      });
      // A probe's successes are logged at debug (a load balancer checks every few seconds).
      const level = (ctx.state.route as RouteDef | undefined)?.probe && ctx.status < 400 ? 'debug' : 'info';
      if (accessLog.isLevelEnabled(level)) {
        accessLog[level](
          {
            request_id: ctx.state.requestId,
            method: ctx.method,
            path: ctx.path,
            status: ctx.status,
            duration_ms: durationMs,
            ip: ctx.state.clientIp,
            principal: ctx.state.principal,
          },
          'request',
        );
      }
    }
  });
  const cors = new CorsPolicy(routes);
  app.use(async (ctx) => {
    const match = tree.match(ctx.method, ctx.path);
    if (match.kind === 'found') {
      (ctx as unknown as { params: Record<string, string> }).params = match.params;
      cors.decorate(ctx);
      return match.value(ctx);
    }
    if (cors.preflight(ctx)) return;
    if (match.kind === 'method-not-allowed') throw methodNotAllowed(ctx, match.allowed);
    throw new HttpError(404, `No route for ${ctx.method} ${ctx.path}`);
  });
  return app;
}
