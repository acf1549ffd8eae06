import { IncomingMessage } from 'node:http';
import http2 from 'node:http2';
import { Type } from '@sinclair/typebox';
import { HttpError } from '../../core/errors.js';
import { Reply } from '../../core/http/reply.js';
import { definePlugin, type HangarRequest, defineRoute } from '../../core/plugin.js';
import { EventsJournalRef } from './api.js';
import type { Principal } from '../../core/auth/index.js';
import { userGrantsOf } from '../../core/auth/permissions.js';
import { ScopeGate } from '../../core/auth/scope.js';
import { Attributor, Viewer, type Audience } from './audience.js';
import { Journal, LIVE_EVENT_TYPES, type LiveEvent, type LiveEventType } from './journal.js';
import { EventStreams, type StreamConnection, type StreamLimits } from './streams.js';
import { NodeEventRecorded } from '../nodes/api.js';
import { AlertFiring, AlertResolved } from '../alerts/api.js';
import { TaskCompleted, TaskFailed, TaskLeased, TaskQueued } from '../../core/tasks/queue.js';

export const EventsConfigSchema = Type.Object(
  {
    buffer: Type.Integer({ minimum: 10, maximum: 100_000, default: 2000, description: 'recent events kept for clients that reconnect with Last-Event-ID' }),
    keepalive_seconds: Type.Integer({ minimum: 1, maximum: 300, default: 15, description: 'a comment line this often keeps idle streams (and proxies) open' }),
    streams_per_principal: Type.Integer({ minimum: 1, maximum: 10_000, default: 16, description: 'event streams one user may hold open on this process (each worker counts its own); one more is a 429' }),
    streams_per_address: Type.Integer({ minimum: 1, maximum: 100_000, default: 64, description: 'event streams one client address (an IPv6 address: its /64) may hold open on this process (each worker counts its own); one more is a 429' }),
    stream_buffer_bytes: Type.Integer({
      minimum: 16_384,
      maximum: 256 * 1024 * 1024,
      default: 262_144,
      description: 'bytes of events a stream’s client may leave untaken before the stream is dropped (it resumes with Last-Event-ID)',
    }),
    revalidate_seconds: Type.Integer({
      minimum: 1,
      maximum: 86_400,
      default: 60,
      description: 'every open stream’s credentials are checked again this often, besides at once when a notice says they changed',
    }),
  },
  { additionalProperties: false, default: {} },
);

interface EventsConfig extends StreamLimits {
  buffer: number;
  keepalive_seconds: number;
  revalidate_seconds: number;
}

/** Store tables whose changes are announced, by the resource type clients know them as (who may see them: audience.ts). */
const RESOURCE_TYPES: Record<string, string> = {
  alerts: 'alert',
  nodes: 'node',
  cluster_members: 'swarm_member',
  compute_instances: 'instance',
  services: 'service',
  s3_instances: 's3',
  volumes: 'volume',
  load_balancers: 'loadbalancer',
  ssh_profiles: 'ssh_profile',
  projects: 'project',
};
/** secrets and configs share one table; their ids say which. */
function resourceType(table: string, id: string): string {
  if (table === 'secrets') return id.startsWith('cfg-') ? 'config' : 'secret';
  // Clusters keep the name their API gives them: a swarm group is a `swarm`.
  if (table === 'clusters') return id.startsWith('swarm-') ? 'swarm' : 'cluster';
  return RESOURCE_TYPES[table] ?? table;
}

const TypesQuery = Type.Optional(
  Type.String({ pattern: `^(${LIVE_EVENT_TYPES.map((t) => t.replace('.', '\\.')).join('|')})(,(${LIVE_EVENT_TYPES.map((t) => t.replace('.', '\\.')).join('|')}))*$`, description: `comma-separated event types to receive (default all): ${LIVE_EVENT_TYPES.join(', ')}` }),
);

const LiveEventView = Type.Object({ id: Type.String(), type: Type.String(), at: Type.String(), data: Type.Record(Type.String(), Type.Unknown()) });

function visibleTo(viewer: Viewer, types: ReadonlySet<string> | null) {
  return (event: LiveEvent) => viewer.sees(event.audience) && (!types || types.has(event.type));
}

/** The connection of a request's answer: its socket (HTTP/1.1), or its stream of an HTTP/2 session. */
function connectionOf(req: HangarRequest): StreamConnection {
  const { req: incoming, res } = req.ctx;
  if (incoming instanceof IncomingMessage) {
    const { socket } = incoming;
    return { buffered: () => socket.writableLength, cut: () => socket.destroy() };
  }
  const { stream } = res as unknown as http2.Http2ServerResponse;
  return { buffered: () => stream.writableLength, cut: () => stream.close(http2.constants.NGHTTP2_CANCEL) };
}

/** Node events go to whoever may list nodes (installation things, never a project's key). */
const NODES: Audience = { permission: 'nodes:read' };
/** An alert goes to whoever may read it: one on a project's resource to the project's readers of alerts, one of no project to whoever may list the installation's. */
const alertAudience = (alert: { project_id?: string | null }): Audience => ({ permission: 'alerts:read', project: alert.project_id ?? null });

const typesOf = (req: HangarRequest<unknown, { types?: string }>) => (req.query.types ? new Set<string>(String(req.query.types).split(',')) : null);
const view = (e: LiveEvent) => ({ id: e.id, type: e.type, at: e.at, data: e.data });

/**
 * Live events for dashboards and `hangar events --follow`: resource changes (from the store's
 * change feed), node status changes and node events, and task state changes, as Server-Sent
 * Events on `GET /v1/events/stream` (resumable with Last-Event-ID while the journal holds the
 * missed events) and as a list on `GET /v1/events`. Events carry ids and states, never a record's
 * contents: a client that cares reads the record through its own route.
 */
/** The workers' channel for live events (core/workers.ts). */
const PEER_CHANNEL = 'live-event';

export default definePlugin({
  name: 'events',
  description: 'live events: Server-Sent Events stream of resource, node and task changes',
  provides: [EventsJournalRef],
  configSchema: EventsConfigSchema,
  setup(services) {
    const settings = services.config.events as EventsConfig;
    const { peers } = services;
    const journal = new Journal(settings.buffer, () => services.clock.now(), peers.run);
    services.provided.provide(EventsJournalRef, journal);
    // With workers (api.workers) every worker journals every worker's events, numbered by the
    // primary, so any stream sees them all and a Last-Event-ID from one worker resumes on another.
    const emit = (type: LiveEventType, data: Record<string, unknown>, audience: Audience) => {
      if (peers.active) peers.sequence(PEER_CHANNEL, { type, data, audience, at: services.clock.now().toISOString() });
      else journal.append(type, data, audience);
    };
    // Who may see a change: its resource's project, found once per record (audience.ts).
    const attributor = new Attributor(services.provided, () => services.db.knex);
    let userGrants: ReturnType<typeof userGrantsOf> | undefined;
    const grants = () => (userGrants ??= userGrantsOf(services.routeTable().map((r) => r.route)));
    const gate = new ScopeGate(services.provided, grants);
    const viewerOf = (principal: Principal) => Viewer.of(principal, gate, grants());

    const unsubscribers = [
      peers.subscribe(PEER_CHANNEL, (payload, seq) => {
        const { type, data, audience, at } = payload as { type: LiveEventType; data: Record<string, unknown>; audience: Audience; at: string };
        journal.append(type, data, audience, { seq: seq!, at });
      }),
      services.db.changes.subscribe((change) => {
        const { table, id, op } = change;
        const type = resourceType(table, id);
        attributor.attribute(change, (audience) =>
          emit('resource.changed', { type, id, op, ...(audience.project !== undefined ? { project_id: audience.project } : {}) }, audience),
        );
      }),
      services.events.subscribe(NodeEventRecorded, (e) => {
        emit('node.event', { id: e.id, node_id: e.node_id, identifier: e.identifier, kind: e.kind, message: e.message, created_at: e.created_at }, NODES);
        if (e.kind === 'node_status_changed' && e.node_id) emit('node.status', { node_id: e.node_id, from: e.data?.from ?? null, to: e.data?.to ?? null }, NODES);
      }),
      // The alerts plugin's announcements (plugins/alerts), as they are published.
      ...([[AlertFiring, 'alert.firing'], [AlertResolved, 'alert.resolved']] as const).map(([topic, type]) => services.events.subscribe(topic, (alert) => emit(type, { ...alert }, alertAudience(alert)))),
      ...[TaskQueued, TaskLeased, TaskCompleted, TaskFailed].map((topic) =>
        services.events.subscribe(topic, (t) => {
          emit('task.state', { task_id: t.id, node_id: t.node_id, kind: t.kind, status: t.status, subject: t.subject }, { adminOnly: true });
        }),
      ),
    ];

    const streams = new EventStreams(journal, settings, services.auth, services.db.notices, services.metrics, services.log, viewerOf);

    return {
      async close() {
        for (const unsubscribe of unsubscribers) unsubscribe();
        streams.close();
      },
      loops: [
        // The backstop of the notices: a change they did not carry (a notice lost with a listening
        // connection is followed by a forget-everything, but a row changed by hand is not) ends a stream within a turn.
        { name: 'events:revalidate-streams', intervalMs: settings.revalidate_seconds * 1000, run: () => streams.revalidateAll() },
      ],
      routes: [
        defineRoute({
          method: 'GET',
          path: '/v1/events/stream',
          auth: 'authenticated',
          summary: 'Live events as Server-Sent Events (text/event-stream), resumable with Last-Event-ID',
          produces: 'text/event-stream',
          errors: [406, 429],
          description:
            'Each event is `id: <id>`, `event: <type>`, `data: <JSON>`, of what the caller may read (a project’s resources where its role reads their kind). Types: resource.changed {type, id, op, project_id}, node.status {node_id, from, to}, ' +
            'node.event {id, node_id, kind, message, created_at}, task.state {task_id, node_id, kind, status, subject} (admins only). ' +
            'A reconnecting client sends Last-Event-ID (EventSource does) and gets what it missed; when that is no longer kept it gets a `reset` event ' +
            'and should reload what it shows. The server ends a stream with a last `end` event {reason, message}: `revoked` when its credentials are ' +
            'no longer accepted (user deleted, API key deleted, logout, password changed), `role_changed` (reconnect: what a stream carries depends on the role), ' +
            '`expired` when the token expires, `shutdown`. ' +
            'A client that does not read is dropped once events.stream_buffer_bytes are waiting for it. Past events.streams_per_principal or ' +
            'events.streams_per_address open streams the answer is 429. Send `Accept: text/event-stream`.',
          schemas: {
            query: Type.Object({ types: TypesQuery, last_event_id: Type.Optional(Type.String({ maxLength: 100, description: 'as the Last-Event-ID header, for clients that cannot set it' })) }, { additionalProperties: false }),
          },
          async handler(req) {
            if (!req.ctx.accepts('text/event-stream')) {
              throw new HttpError(406, 'This route answers a Server-Sent Events stream: send Accept: text/event-stream (EventSource does); GET /v1/events lists recent events as JSON');
            }
            const lastId = (req.headers['last-event-id'] as string | undefined) ?? req.query.last_event_id;
            const resume = journal.resumeAfter(lastId === undefined ? undefined : String(lastId));
            // Over a limit: the 429, before anything is written.
            const stream = streams.open(await viewerOf(req.principal!), req.ip, connectionOf(req), typesOf(req), 'seq' in resume ? resume.seq : journal.last);
            stream.write(`retry: 2000\n: hangar events, run ${journal.boot}\n\n`);
            if ('reset' in resume) stream.write(`event: reset\ndata: ${JSON.stringify({ message: resume.reset })}\n\n`);
            const keepalive = setInterval(() => stream.write(': keep-alive\n\n'), settings.keepalive_seconds * 1000);
            // A token's stream lives no longer than the token: the client reconnects with a fresh one.
            const exp = typeof req.principal?.exp === 'number' ? req.principal.exp * 1000 - Date.now() : null;
            const expiry =
              exp !== null
                ? setTimeout(() => streams.end(stream, 'expired', 'the credentials expired: reconnect with fresh ones'), Math.max(0, Math.min(exp, 2 ** 31 - 1)))
                : null;
            const stop = () => {
              if (services.shutdown.aborted) streams.end(stream, 'shutdown', 'the control plane is stopping: reconnect with Last-Event-ID');
              stream.close();
            };
            stream.onClose(() => {
              clearInterval(keepalive);
              if (expiry) clearTimeout(expiry);
              req.signal.removeEventListener('abort', stop);
            });
            if (req.signal.aborted) stop();
            else req.signal.addEventListener('abort', stop, { once: true });
            // The replay (after Last-Event-ID) goes out as the client takes it, as live events do.
            stream.pump();
            return Reply.raw(stream.body, 'text/event-stream; charset=utf-8', { 'Cache-Control': 'no-store', 'X-Accel-Buffering': 'no' });
          },
        }),
        defineRoute({
          method: 'GET',
          path: '/v1/events',
          auth: 'authenticated',
          summary: 'The recent live events this control plane keeps, oldest first (after=<id> for those after one)',
          errors: [410],
          schemas: {
            query: Type.Object({ types: TypesQuery, after: Type.Optional(Type.String({ maxLength: 100, description: 'an event id: only later events' })) }, { additionalProperties: false }),
            response: Type.Array(LiveEventView),
          },
          async handler(req) {
            const replay = journal.after(req.query.after);
            if ('reset' in replay) throw new HttpError(410, replay.reset);
            return replay.events.filter(visibleTo(await viewerOf(req.principal!), typesOf(req))).map(view);
          },
        }),
      ],
    };
  },
});
