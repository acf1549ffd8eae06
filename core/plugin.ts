import type { Context } from 'koa';
import type { IncomingHttpHeaders } from 'node:http';
import type { Static, TSchema } from '@sinclair/typebox';
import type { HangarConfig } from '../config/schema.js';
import type { Logger } from './log.js';
import type { Store } from './db/store.js';
import type { Migration } from './db/migrations.js';
import type { Pki } from './pki/pki.js';
import type { Clock } from './clock.js';
import type { EventBus } from './events.js';
import type { Mailer } from './mail.js';
import type { TaskQueue } from './tasks/queue.js';
import type { RateLimiter } from './ratelimit.js';
import type { AuthRegistry, Principal } from './auth/index.js';
import type { Permission } from './auth/permissions.js';
import type { RouteScope } from './auth/scope.js';
import type { Metrics } from './metrics.js';
import type { RequestObservers } from './http/observers.js';
import type { ServiceRef, ServiceRegistry } from './provided.js';
import type { Clusters } from './clusters/service.js';
import type { Peers } from './workers.js';

export { defineExtensionPoint, defineServiceRef, type ExtensionPoint, type ServiceRef } from './provided.js';

export type HttpMethod = 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';

/**
 * Who may call a route: anyone, any authenticated caller, callers whose role claim equals `role`
 * (or, with `orSelf`, whose user id equals that path parameter), or agents presenting a valid
 * client certificate issued by hangar's CA.
 */
export type AuthRequirement = 'public' | 'authenticated' | 'agent' | { role: string; orSelf?: string };

/** The listeners hangar runs: the control API (TLS, /v1) and the login API (plain HTTP behind a proxy, no prefix). */
export type ListenerName = 'control' | 'login';

export interface RouteSchemas {
  body?: TSchema;
  query?: TSchema;
  params?: TSchema;
  /** Schema of `data` in a successful response (documentation; not enforced at run time). */
  response?: TSchema;
}

export interface AgentIdentity {
  nodeId: string;
  serial: string;
}

/** What a handler receives: validated input plus who is calling. */
export interface HangarRequest<B = unknown, Q = unknown, P = unknown> {
  body: B;
  query: Q;
  params: P;
  principal: Principal | null;
  agent: AgentIdentity | null;
  ip: string;
  requestId: string;
  headers: IncomingHttpHeaders;
  /** The body exactly as received (for signatures and digests). */
  rawBody: Buffer;
  /** Escape hatch for streaming responses; prefer returning a value or a Reply. */
  ctx: Context;
  /** Aborted when the request's connection closes or the server shuts down. */
  signal: AbortSignal;
}

/** The type a schema validates to, or `Otherwise` when the route declares none. */
type ValidatedBy<S, Otherwise> = S extends TSchema ? Static<S> : Otherwise;

/** What a handler of a route with these schemas receives: its body, query and path parameters as validated. */
export type RequestOf<S extends RouteSchemas> = HangarRequest<ValidatedBy<S['body'], unknown>, ValidatedBy<S['query'], Record<string, never>>, ValidatedBy<S['params'], Record<string, never>>>;

export interface RouteDef<B = unknown, Q = unknown, P = unknown> {
  method: HttpMethod;
  /** OpenAPI-style path, e.g. `/v1/nodes/{id}`. */
  path: string;
  auth: AuthRequirement;
  /**
   * The one permission the route needs (`<kind>:<verb>`, core/auth/permissions.ts). Declared only
   * where it differs from the default its path and method give (`GET` → `<kind>:read`, other
   * methods → `<kind>:write`, kind from the path; see defaultPermission). A caller whose role does
   * not grant it gets 403 naming it; a route guarded by a role also lets in that role (and, with
   * `orSelf`, the user it names), as before.
   */
  permission?: Permission;
  /**
   * Where the resource the route acts on belongs to a project (core/auth/scope.ts): the resources
   * the request names (`of`), or the kind a list answers (`list`). Then a caller is let in when its
   * installation role grants the permission, or its role in the resource's project does; a
   * resource of a project it is not a member of answers 404 as one that does not exist.
   */
  scope?: RouteScope;
  summary: string;
  description?: string;
  /** Which listener serves the route; default `control`. */
  listener?: ListenerName;
  schemas?: RouteSchemas;
  /** Keep properties whose value is null (default false: they are removed before validation). */
  preserveNullValues?: boolean;
  /** Accept `application/xml` / `text/xml` bodies, handed over as an XmlDocument (core/http/xml.ts). */
  xml?: boolean;
  /** Status of a successful reply when the handler returns a plain value; default 200. */
  status?: number;
  /** Other success statuses the handler answers (with a Reply), e.g. 200 when nothing was left to wait for. */
  otherStatuses?: number[];
  /**
   * Content type(s) of a raw answer (`Reply.raw`): the body is not the `{data}` envelope.
   * `schemas.response` then describes the whole body, when it is JSON.
   */
  produces?: string | string[];
  /**
   * Error statuses the handler answers besides those core documents for every route like it
   * (400 and 500 always; 401 without `public`, 403 with a role or a permission an auditor lacks,
   * 404 with path parameters or a body or a write, 409 for writes, 413, 415 with a body, 408 and
   * 503 for public routes).
   */
  errors?: number[];
  /**
   * A probe that monitors call every few seconds (a load balancer's health check, a metrics scrape):
   * its successful answers are logged at `debug`, not `info` (its failures stay at `info`).
   */
  probe?: boolean;
  /**
   * Origins whose web pages may call this route (core/http/cors.ts): its CORS preflight is answered
   * and its answers name an allowed origin. `*` allows any. Unset or empty: no cross-origin access.
   */
  cors?: readonly string[];
  /**
   * Record this route in the audit log even though it is a read: it hands out a credential (a
   * kubeconfig). Writes are always recorded.
   */
  audited?: boolean;
  handler(req: HangarRequest<B, Q, P>): unknown;
}

/**
 * A route whose handler receives its input typed by the route's own schemas (`Static<>` of
 * `schemas.body`, `.query` and `.params`): no hand-written type repeats a schema.
 */
export function defineRoute<const S extends RouteSchemas = Record<string, never>>(
  route: Omit<RouteDef, 'schemas' | 'handler'> & { schemas?: S; handler(req: RequestOf<S>): unknown },
): RouteDef {
  return route as RouteDef;
}

export interface BackgroundLoop {
  name: string;
  intervalMs: number;
  /**
   * Run in one control plane at a time when several share the store (they take turns through a
   * leadership lease named after the loop, core/db/leadership.ts). For loops that act on shared
   * records — observing, detecting, removing, purging — where a second run would duplicate events
   * or work; leave it off for loops that tend this process's own state.
   */
  once?: boolean;
  /** Runs as the loops start too, not only one interval later (what the process must know at once). */
  immediately?: boolean;
  run(signal: AbortSignal): Promise<void>;
}

/** What setup() gives back: routes as data, loops, a hook for start-up and one for shutdown. */
export interface PluginParts {
  routes?: RouteDef[];
  loops?: BackgroundLoop[];
  /**
   * Picks up the work a previous process left half done: records in a transitional state
   * (deploying, removing…) whose background job died with that process. Called once by
   * `hangar serve` just before it listens, never by the script runner (which shares the store with
   * a running server). Answers what it restarted, one line each, for the log.
   */
  resume?(): Promise<string[]>;
  close?(): Promise<void>;
}

export interface Plugin {
  name: string;
  description?: string;
  /** What this plugin needs from others: set up after their providers; a start-up without one fails naming it. */
  deps?: readonly ServiceRef<unknown>[];
  /** What it uses when present (set up after their providers when they are loaded). */
  optionalDeps?: readonly ServiceRef<unknown>[];
  /** What it provides (`services.provided.provide(ref, value)` in setup). */
  provides?: readonly ServiceRef<unknown>[];
  /** Schema of this plugin's configuration section (`config[name]`), defaults filled in. */
  configSchema?: TSchema;
  migrations?: Migration[];
  setup(services: Services): PluginParts | Promise<PluginParts>;
}

export function definePlugin(plugin: Plugin): Plugin {
  return plugin;
}

/** What a program is built of: its built-in plugins and drivers, by the names configuration uses. */
export interface Catalogue {
  plugins: Record<string, () => Promise<{ default: Plugin }>>;
  /** Built-in drivers, the orchestrator backends among them (`swarm`, `k8s`: loaded when `drivers:` names them, as any other). */
  drivers: Record<string, () => Promise<{ default: Driver }>>;
}

/** A driver: the only code that touches a backend SDK. `create` builds its instance. */
export interface Driver<T = unknown> {
  name: string;
  kind: string;
  create(services: Services): T | Promise<T>;
}

export function defineDriver<T>(driver: Driver<T>): Driver<T> {
  return driver;
}

/**
 * A driver as its users name it: by typed reference (declared in the driver's api.ts) instead of by
 * a string and a cast. The name is the driver's `name`, as `drivers:` loads it.
 */
export interface DriverRef<T> {
  readonly name: string;
  /** Phantom: carries the type, never set. */
  readonly type?: T;
}

export function defineDriverRef<T>(name: string): DriverRef<T> {
  return Object.freeze({ name });
}

export interface DriverRegistry {
  /** The driver's instance; throws when no `drivers:` entry loaded it. */
  get<T>(ref: DriverRef<T>): T;
  has(name: string): boolean;
  names(): string[];
}

/** Everything a plugin may use; plugins import no globals. */
export interface Services {
  config: HangarConfig;
  log: Logger;
  db: Store;
  ca: Pki;
  events: EventBus;
  drivers: DriverRegistry;
  clock: Clock;
  auth: AuthRegistry;
  /** Aborted when the control plane begins to shut down. */
  shutdown: AbortSignal;
  /** True under `hangar serve`; false when a tool (the runner) assembles the services without listening. */
  serving: boolean;
  /** Names of the loaded plugins. */
  plugins: string[];
  /** Values plugins share by typed reference, and contributions to extension points. */
  provided: ServiceRegistry;
  /** Outgoing mail over SMTP (configured under `mail:`). */
  mail: Mailer;
  /** The durable task queue agents long-poll. */
  tasks: TaskQueue;
  /** Counters for rate limits and lockouts, shared by every control plane on the database. */
  limits: RateLimiter;
  /** Prometheus metrics of this control plane (core/metrics.ts); plugins add scrape-time gauges. */
  metrics: Metrics;
  /** Observers of every answered request (core/http/observers.ts): metrics, the audit log. */
  requests: RequestObservers;
  /**
   * The other worker processes of this control plane (api.workers, core/workers.ts), for what a
   * plugin keeps in memory and the others must hear of; inactive in a control plane of one process.
   */
  peers: Peers;
  /** Clusters (swarms, Kubernetes), their members, orchestrator calls, background work and observation. */
  clusters: Clusters;
  /** The ports the listeners are bound to (filled once they listen; `api.port: 0` picks one). */
  ports: Map<ListenerName, number>;
  /** Every route of every loaded plugin (complete once start-up has finished). */
  routeTable(): readonly RegisteredRoute[];
}

/** A route as registered: its definition plus the plugin that declared it. */
export interface RegisteredRoute {
  plugin: string;
  route: RouteDef;
}
