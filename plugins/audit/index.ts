import { Type } from '@sinclair/typebox';
import type { FinishedRequest } from '../../core/http/observers.js';
import { Reply } from '../../core/http/reply.js';
import { definePlugin, defineRoute } from '../../core/plugin.js';
import { retentionLoops } from '../../core/retention.js';
import { KINDS, parsePermission, permissionOf, type PermissionRoute } from '../../core/auth/permissions.js';
import { AuditRecorded, type AuditRecordedEvent } from './api.js';
import { auditNotification, keepWithNotification, NotificationsRef } from '../notifications/api.js';
import type { Knex } from 'knex';
import { AnonymousFlood } from './flood.js';
import { AuditLog, auditMigrations, type NewAuditEntry } from './store.js';

export const AuditConfigSchema = Type.Object(
  {
    retention_days: Type.Integer({ minimum: 0, default: 90, description: 'entries older than this are deleted; 0 keeps them for ever' }),
    prune_interval_seconds: Type.Integer({ minimum: 1, default: 3600, description: 'how often old entries are looked for' }),
    anonymous_entries_per_minute: Type.Integer({
      minimum: 1,
      default: 10,
      description:
        'anonymous writes (no credentials) with an entry of their own, per source address (an IPv6 /64) and minute; of refused ones only the first has one; the others are counted into one entry per route and status',
    }),
    anonymous_addresses_per_minute: Type.Integer({
      minimum: 1,
      default: 10000,
      description: 'source addresses of anonymous writes followed one by one in a minute; the others are counted together under the address *',
    }),
  },
  { additionalProperties: false, default: {} },
);

interface AuditConfig {
  retention_days: number;
  prune_interval_seconds: number;
  anonymous_entries_per_minute: number;
  anonymous_addresses_per_minute: number;
}

/** How often counted anonymous entries of minutes that are over are written. */
const FLUSH_INTERVAL_MS = 5000;

/**
 * How long an entry written with its write may wait for its answer before it is taken for one whose
 * process stopped (a crash) and closed as written. Far longer than a request lasts: another control
 * plane's requests in flight are not closed under them.
 */
const UNSETTLED_AFTER_MS = 15 * 60_000;
/** How often entries left pending are looked for (at start too). */
const UNSETTLED_INTERVAL_MS = 5 * 60_000;

const WRITES = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);

/**
 * Whether the audit log keeps a request: a user's (or anonymous caller's) write that reached a
 * route, or a read of a route declared `audited` (it hands out a credential). Agents' traffic is
 * metered, not audited.
 */
export function isAudited(request: FinishedRequest): boolean {
  return Boolean(request.route) && (WRITES.has(request.method) || request.route!.audited === true) && request.route!.auth !== 'agent';
}

/**
 * The resource a write was about: the id of what a 201 created, else the last path parameter
 * (`/v1/nodes/{id}/cordon` → the node), else an `id` the answer names.
 */
export function resourceOf(request: FinishedRequest): string | null {
  const data = request.data as { id?: unknown } | undefined;
  const answered = data && typeof data === 'object' && (typeof data.id === 'string' || typeof data.id === 'number') ? String(data.id) : null;
  if (request.status === 201 && answered) return answered;
  const params = Object.values(request.params);
  return params.length ? params[params.length - 1]! : answered;
}

const clip = (value: string | null | undefined, max: number) => (value ? value.slice(0, max) : null);

export function entryOf(request: FinishedRequest, at: Date): NewAuditEntry {
  return {
    created_at: at.toISOString(),
    listener: request.listener,
    method: request.method,
    route: request.route!.path,
    resource_id: clip(resourceOf(request), 200),
    principal_id: clip(request.principal?.id, 100),
    principal_name: clip(request.principal?.name, 200),
    auth_method: clip(request.principal?.method, 32),
    source_ip: clip(request.ip, 64) ?? '',
    status: request.status,
    request_id: request.requestId,
    user_agent: clip(request.userAgent, 200),
    count: 1,
  };
}

const AuditEntryView = Type.Object({
  id: Type.Integer(),
  created_at: Type.String({ format: 'date-time' }),
  listener: Type.String(),
  method: Type.String(),
  route: Type.String({ description: 'route template, e.g. /v1/nodes/{id}/cordon' }),
  resource_id: Type.Union([Type.String(), Type.Null()]),
  principal_id: Type.Union([Type.String(), Type.Null()]),
  principal_name: Type.Union([Type.String(), Type.Null()]),
  auth_method: Type.Union([Type.String(), Type.Null()], { description: 'jwt, hmac, session…; null for anonymous callers' }),
  source_ip: Type.String(),
  status: Type.Integer(),
  request_id: Type.String(),
  user_agent: Type.Union([Type.String(), Type.Null()]),
  count: Type.Integer({
    minimum: 1,
    description: 'requests the entry stands for: 1, or more for anonymous writes of one address, route and status counted together in a minute (then the first one’s time, request id and client)',
  }),
});

const AuditQuery = Type.Object(
  {
    principal: Type.Optional(Type.String({ minLength: 1, maxLength: 200, description: 'user id or name' })),
    resource: Type.Optional(Type.String({ minLength: 1, maxLength: 200, description: 'resource id' })),
    route: Type.Optional(Type.String({ minLength: 1, maxLength: 300, description: 'route template, e.g. /v1/nodes/{id}/cordon' })),
    method: Type.Optional(Type.Union(['POST', 'PUT', 'PATCH', 'DELETE'].map((m) => Type.Literal(m)))),
    status: Type.Optional(Type.Integer({ minimum: 100, maximum: 599 })),
    outcome: Type.Optional(Type.Union([Type.Literal('success'), Type.Literal('failure')], { description: 'success: status below 400' })),
    since: Type.Optional(Type.String({ format: 'date-time', description: 'entries at or after this time (RFC 3339)' })),
    until: Type.Optional(Type.String({ format: 'date-time', description: 'entries before this time (RFC 3339)' })),
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000, default: 100 })),
    cursor: Type.Optional(Type.String({ maxLength: 200 })),
  },
  { additionalProperties: false },
);

/**
 * The audit log: every write on both APIs (control and login) — method, route template, resource
 * id, principal, source address, outcome status, request id, time — appended to `audit_log` before
 * its caller gets the answer, and written to the log as `audit`. Read with `GET /v1/audit` (admins).
 */
export default definePlugin({
  name: 'audit',
  description: 'append-only audit log of every write on both APIs',
  configSchema: AuditConfigSchema,
  migrations: auditMigrations,
  setup(services) {
    const settings = services.config.audit as AuditConfig;
    const log = new AuditLog(services.db);
    const auditLog = services.log.child({ audit: true });
    const flood = new AnonymousFlood({ entriesPerMinute: settings.anonymous_entries_per_minute, addressesPerMinute: settings.anonymous_addresses_per_minute });
    // What is kept of a request between its calls is keyed by the request's own token (made by the
    // server), never by its request id, which the client chooses: two requests sharing an id never
    // touch each other's entries.
    /** Anonymous requests that took a place for an entry of their own before their handler ran. */
    const reserved = new WeakSet<object>();
    /** Entries written with their write: the row and what it was written with, until the answer settles it. */
    const started = new WeakMap<object, { id: number; entry: NewAuditEntry }>();
    // The entry goes in with the request's first committed write, in its transaction (core/db/write-scope.ts):
    // a write that committed has its entry, one that did not has none from it.
    const begin = async (request: FinishedRequest, trx: Parameters<AuditLog['begin']>[1]) => {
      const entry = entryOf(request, services.clock.now());
      started.set(request.token, { id: await log.begin(entry, trx), entry });
    };
    services.requests.accompany('audit', {
      wants(request) {
        if (!isAudited(request)) return false;
        if (request.principal) return true;
        if (!flood.reserve(request.ip, services.clock.now())) return false;
        reserved.add(request.token);
        return true;
      },
      write: (request, trx) => begin(request, trx),
      // The entry is one prepared statement either way (plugins/audit/store.ts).
      writePrepared: (request, tx) => begin(request, tx),
    });
    // Once the answer is known: the entry of a request that wrote nothing, or, for one written with
    // its write, what the answer decided (always: the entry is settled, and closed to changes, even
    // when the answer is what it was written with).
    /** What the bus is told of an entry (and its notification says): the kind of its route's permission. */
    const recordedOf = (route: PermissionRoute, entry: NewAuditEntry): AuditRecordedEvent => {
      const permission = permissionOf(route);
      const kind = parsePermission(permission)?.kind;
      return {
        kind: kind && KINDS[kind] && KINDS[kind].scope !== 'none' ? kind : 'other',
        permission,
        method: entry.method,
        route: entry.route,
        resource_id: entry.resource_id,
        principal_id: entry.principal_id,
        principal_name: entry.principal_name,
        status: entry.status,
        request_id: entry.request_id,
        created_at: entry.created_at,
      };
    };
    /**
     * Writes what settles an entry (`change`: its append, its settlement, its closing after a crash) and
     * the entry's notification (plugins/notifications, when loaded and subscribed to) in one
     * transaction. The entry wins over its notification: when the notification cannot be written
     * (its matching or its outbox insert fails), the entry is written alone and the loss logged
     * (the route, status and request id; the error's message). Answers what `change` did.
     */
    const withNotification = <R>(recorded: AuditRecordedEvent, change: (trx?: Knex.Transaction) => Promise<R>, wanted: (done: R) => boolean = () => true): Promise<R> =>
      keepWithNotification(
        services.db.knex,
        services.provided.find(NotificationsRef),
        auditNotification(recorded),
        change,
        (err) =>
          services.log.error(
            { audit: { method: recorded.method, route: recorded.route, status: recorded.status, request_id: recorded.request_id }, err: { message: err.message } },
            `audit: the notification of an entry was not written (audit.${recorded.kind}); the entry is`,
          ),
        wanted,
      );
    /** Tells the bus of a request's entry. */
    const announce = (recorded: AuditRecordedEvent) => services.events.publish(AuditRecorded, recorded);
    services.requests.add('audit', async (request) => {
      if (!isAudited(request)) return;
      const now = services.clock.now();
      const ownPlace = reserved.delete(request.token);
      const begun = started.get(request.token);
      started.delete(request.token);
      const entry = entryOf(request, now);
      if (!request.principal && entry.status >= 400 && ownPlace) flood.refusedWithEntry(entry.source_ip, now);
      const carried = request.recordedWith.includes('audit');
      // A write whose COMMIT's connection was lost: its entry is in the table exactly when it committed.
      if (begun && (carried || request.uncertain)) {
        // A change that committed keeps its success status (what the entry was written with) when only the answer failed after it.
        const answer = (request.committed || request.uncertain) && entry.status >= 500 ? { ...entry, status: begun.entry.status } : entry;
        const settled = { status: answer.status, resource_id: answer.resource_id, principal_id: answer.principal_id, principal_name: answer.principal_name, auth_method: answer.auth_method };
        const recorded = recordedOf(request.route!, { ...entry, ...settled });
        if (await withNotification(recorded, async (trx) => (await log.settle(begun.id, settled, trx)) || carried, (done) => done)) {
          auditLog.info({ entry: { ...entry, ...settled } }, 'audit');
          announce(recorded);
          return;
        }
      }
      if (!request.principal && !ownPlace && !flood.admit(entry, now)) return;
      auditLog.info({ entry }, 'audit');
      const recorded = recordedOf(request.route!, entry);
      await withNotification(recorded, (trx) => log.append(entry, trx));
      announce(recorded);
    });
    /** Writes the counted anonymous entries of minutes that are over. */
    const flush = async (all = false) => {
      const due = flood.due(services.clock.now(), all);
      if (!due.length) return;
      for (const entry of due) auditLog.info({ entry }, 'audit');
      await log.append(due);
    };
    /**
     * Closes entries left pending by a process that stopped before their answer (a crash): as
     * written (their write committed with them), each with its notification when notifications are
     * loaded (the route's kind read from the route table; an entry of a route no longer served is `other`).
     */
    const closeUnsettled = async () => {
      const before = new Date(services.clock.now().getTime() - UNSETTLED_AFTER_MS);
      let closed = 0;
      if (!services.provided.find(NotificationsRef)) {
        closed = await log.closeUnsettled(before);
      } else {
        const routes = new Map(services.routeTable().map(({ route }) => [`${route.method} ${route.path}`, route]));
        for (;;) {
          const entries = await log.unsettledBefore(before, 100);
          for (const entry of entries) {
            const route = routes.get(`${entry.method} ${entry.route}`) ?? { method: entry.method, path: entry.route, auth: 'public' as const };
            if (await withNotification(recordedOf(route, entry), (trx) => (trx ? log.close(entry.id, trx) : services.db.knex.transaction((t) => log.close(entry.id, t))), (done) => done)) closed += 1;
          }
          if (entries.length < 100) break;
        }
      }
      if (closed) services.log.warn({ closed }, 'audit: entries whose answer never came (their process stopped) closed as written');
      return closed;
    };
    return {
      async resume() {
        const closed = await closeUnsettled();
        return closed ? [`audit: ${closed} entries whose answer never came closed as written`] : [];
      },
      async close() {
        await flush(true).catch((err: Error) => services.log.error({ err: { message: err.message } }, 'audit: counted anonymous entries not written at shutdown'));
      },
      loops: [
        { name: 'audit:anonymous-counts', intervalMs: FLUSH_INTERVAL_MS, run: () => flush() },
        { name: 'audit:unsettled', once: true, intervalMs: UNSETTLED_INTERVAL_MS, run: () => closeUnsettled().then(() => undefined) },
        ...retentionLoops({
          name: 'audit:retention',
          days: settings.retention_days,
          intervalMs: settings.prune_interval_seconds * 1000,
          clock: services.clock,
          log: services.log,
          what: 'audit: entries',
          prune: (before) => log.prune(before),
        }),
      ],
      routes: [
        defineRoute({
          method: 'GET',
          path: '/v1/audit',
          auth: { role: 'admin' },
          summary: 'The audit log, newest first: every write on both APIs',
          description: 'Filters combine (and). `next_cursor` continues with older entries.',
          schemas: { query: AuditQuery, response: Type.Array(AuditEntryView) },
          handler: async (req) => Reply.page(await log.page(req.query)),
        }),
      ],
    };
  },
});
