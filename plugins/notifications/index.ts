import { retentionLoops } from '../../core/retention.js';
import { randomBytes } from 'node:crypto';
import { Type, type Static } from '@sinclair/typebox';
import type { Knex } from 'knex';
import { badRequest, conflict, notFound } from '../../core/errors.js';
import { Reply } from '../../core/http/reply.js';
import { IdParams, PageQuery } from '../../core/http/resources.js';
import { newId } from '../../core/ids.js';
import { definePlugin, type Services, defineRoute } from '../../core/plugin.js';
import { ProjectGrantsRef } from '../../core/auth/scope.js';
import { projectsOfResources, TagsRef, type ResourceType } from '../tags/api.js';
import { checkReceiverUrl, type AddressPolicy } from './address.js';
import { NotificationsRef } from './api.js';
import { Dispatcher } from './dispatcher.js';
import { EVENT_TYPES, keepEvents, eventOf, SEVERITIES, severityRank, type NewEvent, type NotificationEvent } from './events.js';
import { notificationMigrations } from './migrations.js';
import { CHANNEL_KINDS, HEADERS, mailTo, postTo, type AttemptResult, type OpenChannel } from './send.js';
import { ChannelStore, Outbox, SubscriptionStore, type ChannelRecord, type DeliveryRecord, type RetryPolicy, type SubscriptionRecord } from './store.js';

export const NotificationsConfigSchema = Type.Object(
  {
    allow_http: Type.Boolean({ default: false, description: 'accept http:// receiver URLs (default: https only)' }),
    allow_private_addresses: Type.Boolean({
      default: false,
      description: 'accept receivers whose host is (or resolves to) a loopback, private or link-local address; off by default against server-side request forgery',
    }),
    retry_hours: Type.Number({ exclusiveMinimum: 0, maximum: 720, default: 24, description: 'how long a delivery is retried (exponential backoff) before it is given up as failed' }),
    retry_base_seconds: Type.Number({ minimum: 0.05, maximum: 3600, default: 10, description: 'the wait after the first failed attempt; it doubles after each one' }),
    retry_max_seconds: Type.Number({ minimum: 0.05, maximum: 86_400, default: 3600, description: 'the longest wait between two attempts' }),
    timeout_seconds: Type.Number({ minimum: 0.1, maximum: 120, default: 10, description: 'how long one attempt may take (connect, send, the answer)' }),
    concurrency: Type.Integer({ minimum: 1, maximum: 256, default: 32, description: 'deliveries sent at once by the control plane that sends (each waits on its receiver, not on the control plane: more slots send more per second to slow receivers)' }),
    channel_concurrency: Type.Integer({ minimum: 1, maximum: 256, default: 2, description: 'of those, how many to one channel: a slow or dead receiver holds no more slots than this' }),
    poll_interval_ms: Type.Integer({ minimum: 50, maximum: 60_000, default: 1000, description: 'how often the outbox is looked at for due deliveries (besides at once when this process writes one)' }),
    retention_days: Type.Integer({ minimum: 0, maximum: 3650, default: 30, description: 'delivered and failed deliveries (and their attempts) older than this are deleted; 0 keeps them for ever' }),
    mail_from: Type.String({ minLength: 3, default: 'hangar <noreply@localhost>', description: 'the From of email notifications (sent through mail:)' }),
  },
  { additionalProperties: false, default: {} },
);
type NotificationsConfig = Static<typeof NotificationsConfigSchema>;

const ChannelName = Type.String({ pattern: '^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}$', description: 'letters, digits, "_", "." and "-"; at most 63 characters; unique' });
const Url = Type.String({ minLength: 1, maxLength: 2048, description: 'the receiver: https:// (http:// only with notifications.allow_http); a public address unless notifications.allow_private_addresses' });
const Headers = Type.Record(Type.String({ pattern: '^[A-Za-z0-9!#$%&\'*+.^_`|~-]{1,100}$' }), Type.String({ maxLength: 4096, pattern: '^[\\t\\x20-\\x7e\\x80-\\xff]*$', description: 'visible ASCII, spaces, tabs and Latin-1 (what HTTP carries); no control characters or line breaks' }), {
  maxProperties: 20,
  description: 'extra request headers (e.g. Authorization); stored encrypted, only their names are answered',
});
const Recipients = Type.Array(Type.String({ format: 'email', maxLength: 254 }), { minItems: 1, maxItems: 50, description: 'email addresses' });

const CreateChannel = Type.Object(
  {
    name: ChannelName,
    kind: Type.Union(CHANNEL_KINDS.map((k) => Type.Literal(k)), { description: 'webhook (signed JSON), email (through mail:), slack, discord, teams (their message JSON to an incoming webhook)' }),
    url: Type.Optional(Url),
    headers: Type.Optional(Headers),
    recipients: Type.Optional(Recipients),
  },
  { additionalProperties: false },
);

const PatchChannel = Type.Object(
  {
    name: Type.Optional(ChannelName),
    url: Type.Optional(Url),
    headers: Type.Optional(Headers),
    recipients: Type.Optional(Recipients),
    rotate_secret: Type.Optional(Type.Boolean({ description: 'a webhook: a new signing secret, answered this once (the old one stops at once)' })),
  },
  { additionalProperties: false },
);

const ChannelView = Type.Object({
  id: Type.String(),
  name: Type.String(),
  kind: Type.String(),
  url: Type.Union([Type.String(), Type.Null()], { description: 'the receiver’s origin only, with `/…` when it has a path or query (a path can be a credential: Slack, Mattermost); null for email' }),
  header_names: Type.Array(Type.String()),
  recipients: Type.Array(Type.String()),
  signed: Type.Boolean({ description: `deliveries carry ${HEADERS.signature}` }),
  secret: Type.Optional(Type.String({ description: 'the signing secret: only in the answer that made it' })),
  created_at: Type.String(),
  updated_at: Type.String(),
});

const EventTypeList = Type.Array(Type.String({ minLength: 1, maxLength: 64 }), { minItems: 1, maxItems: 100, description: `event types: ${Object.keys(EVENT_TYPES).join(', ')}` });

const CreateSubscription = Type.Object(
  {
    channel_id: Type.String({ minLength: 1, maxLength: 100, description: 'the channel (id or name)' }),
    event_types: EventTypeList,
    resource_ids: Type.Optional(Type.Array(Type.String({ minLength: 1, maxLength: 100 }), { maxItems: 100, description: 'only events about these resources (default: any)' })),
    tags: Type.Optional(Type.Record(Type.String({ minLength: 1, maxLength: 63 }), Type.String({ maxLength: 255 }), { maxProperties: 20, description: 'only events whose resource carries every one of these tags (the tags plugin)' })),
    min_severity: Type.Optional(Type.Union(SEVERITIES.map((s) => Type.Literal(s)), { description: 'the least severe event delivered (default info: all)' })),
    project: Type.Optional(
      Type.String({ minLength: 1, maxLength: 100, description: 'only events about resources of this project (id or name): its clusters, workloads, volumes, secrets… (never nodes or certificates, which are the installation’s)' }),
    ),
  },
  { additionalProperties: false },
);

const SubscriptionView = Type.Object({
  id: Type.String(),
  channel_id: Type.String(),
  event_types: Type.Array(Type.String()),
  resource_ids: Type.Array(Type.String()),
  tags: Type.Record(Type.String(), Type.String()),
  min_severity: Type.String(),
  project_id: Type.Union([Type.String(), Type.Null()], { description: 'only events about resources of this project; null: any' }),
  created_at: Type.String(),
});

const AttemptView = Type.Object({
  at: Type.String(),
  status_code: Type.Union([Type.Integer(), Type.Null()], { description: 'the receiver’s HTTP status; null when it did not answer (or for email)' }),
  latency_ms: Type.Integer(),
  error: Type.Union([Type.String(), Type.Null()]),
});

const DeliveryView = Type.Object({
  id: Type.String({ description: `also the idempotency key (${HEADERS.idempotencyKey}), the same on every attempt and redelivery` }),
  channel_id: Type.String(),
  subscription_id: Type.Union([Type.String(), Type.Null()]),
  event_id: Type.String(),
  event_type: Type.String(),
  status: Type.String({ description: 'pending | sending | delivered | failed' }),
  next_attempt_at: Type.Union([Type.String(), Type.Null()]),
  give_up_at: Type.String(),
  last_error: Type.Union([Type.String(), Type.Null()]),
  delivered_at: Type.Union([Type.String(), Type.Null()]),
  created_at: Type.String(),
  event: Type.Object({}, { additionalProperties: true }),
  attempts: Type.Array(AttemptView),
});

const DeliveriesQuery = Type.Object(
  {
    ...PageQuery.properties,
    channel_id: Type.Optional(Type.String({ minLength: 1, maxLength: 100 })),
    status: Type.Optional(Type.Union(['pending', 'sending', 'delivered', 'failed'].map((s) => Type.Literal(s)))),
    event_type: Type.Optional(Type.String({ minLength: 1, maxLength: 64 })),
  },
  { additionalProperties: false },
);

const TestResult = Type.Object({
  ok: Type.Boolean(),
  status_code: Type.Union([Type.Integer(), Type.Null()]),
  latency_ms: Type.Integer(),
  error: Type.Union([Type.String(), Type.Null()]),
});

const field = (path: string, message: string) => badRequest(`Validation failed: ${path} ${message}`, [{ path, message }]);
const RESERVED_HEADERS = new Set(['host', 'content-type', 'content-length', 'transfer-encoding', 'connection', 'user-agent', ...Object.values(HEADERS).map((h) => h.toLowerCase())]);

/** A signing secret: `whsec_` and 32 random bytes, base64url; the HMAC key is the whole string. */
const newSecret = () => `whsec_${randomBytes(32).toString('base64url')}`;

export default definePlugin({
  name: 'notifications',
  description: 'notification channels (signed webhooks, email, Slack, Discord, Teams), subscriptions to events, and a durable outbox of deliveries',
  provides: [NotificationsRef],
  optionalDeps: [TagsRef],
  configSchema: NotificationsConfigSchema,
  migrations: notificationMigrations,
  setup(services: Services) {
    const settings = services.config.notifications as NotificationsConfig;
    const { db, clock, log } = services;
    const channels = new ChannelStore(db, clock);
    const subscriptions = new SubscriptionStore(db, clock);
    const outbox = new Outbox(db, clock);
    const box = services.ca.secretBox('notifications');
    const policy: AddressPolicy = { allowHttp: settings.allow_http, allowPrivate: settings.allow_private_addresses };
    const retry: RetryPolicy = { baseMs: settings.retry_base_seconds * 1000, maxMs: settings.retry_max_seconds * 1000, periodMs: settings.retry_hours * 3600_000 };
    const timeoutMs = Math.round(settings.timeout_seconds * 1000);
    const tags = services.provided.has(TagsRef) ? services.provided.get(TagsRef) : null;
    const now = () => clock.now().toISOString();
    const LOOP = 'notifications:deliver';

    function open(channel: ChannelRecord): OpenChannel {
      return {
        id: channel.id,
        kind: channel.kind,
        url: channel.url_sealed ? box.openString(channel.url_sealed) : null,
        headers: channel.headers_sealed ? (JSON.parse(box.openString(channel.headers_sealed)) as Record<string, string>) : {},
        recipients: channel.recipients,
        secret: channel.secret_sealed ? box.openString(channel.secret_sealed) : null,
      };
    }

    /** A channel opened, or a failed attempt saying why it cannot be (its stored values do not open with this control plane's key). */
    function openForSending(channel: ChannelRecord): OpenChannel | AttemptResult {
      try {
        return open(channel);
      } catch (err) {
        log.warn({ channel_id: channel.id, err: { message: (err as Error).message } }, 'notifications: a channel’s stored URL, headers or secret cannot be opened');
        return { ok: false, status_code: null, latency_ms: 0, error: 'the channel’s stored URL, headers or secret cannot be opened with this control plane’s key: set them again (PATCH the channel)' };
      }
    }

    function shownUrl(channel: ChannelRecord): string | null {
      if (!channel.url_sealed) return null;
      const url = new URL(box.openString(channel.url_sealed));
      return url.pathname !== '/' || url.search ? `${url.origin}/…` : url.origin;
    }

    const channelView = (c: ChannelRecord, secret?: string) => ({
      id: c.id,
      name: c.name,
      kind: c.kind,
      url: shownUrl(c),
      header_names: c.header_names,
      recipients: c.recipients,
      signed: Boolean(c.secret_sealed),
      ...(secret ? { secret } : {}),
      created_at: c.created_at,
      updated_at: c.updated_at,
    });

    const subscriptionView = (s: SubscriptionRecord) => ({
      id: s.id,
      channel_id: s.channel_id,
      event_types: s.event_types,
      resource_ids: s.resource_ids,
      tags: s.tags,
      min_severity: s.min_severity,
      project_id: s.project_id ?? null,
      created_at: s.created_at,
    });

    const deliveryView = (d: DeliveryRecord, attempts: Array<{ at: string; status_code: number | null; latency_ms: number; error: string | null }>) => ({
      id: d.id,
      channel_id: d.channel_id,
      subscription_id: d.subscription_id,
      event_id: d.event_id,
      event_type: d.event_type,
      status: d.status,
      next_attempt_at: d.status === 'pending' ? new Date(d.due_ms).toISOString() : null,
      give_up_at: new Date(d.give_up_ms).toISOString(),
      last_error: d.last_error,
      delivered_at: d.delivered_at,
      created_at: d.created_at,
      event: d.event,
      attempts: attempts.map(({ at, status_code, latency_ms, error }) => ({ at, status_code, latency_ms, error })),
    });

    async function requireChannel(idOrName: string): Promise<ChannelRecord> {
      const channel = await channels.findByIdOrName(idOrName);
      if (!channel) throw notFound(`No notification channel ${idOrName}`);
      return channel;
    }

    /** Checks what a channel of `kind` is given (400 naming the field) and answers the columns it sets. */
    async function channelFields(kind: string, given: { url?: string; headers?: Record<string, string>; recipients?: string[] }, creating: boolean): Promise<Partial<ChannelRecord>> {
      const out: Partial<ChannelRecord> = {};
      if (kind === 'email') {
        if (given.url !== undefined) throw field('body.url', 'is not taken by an email channel: give recipients');
        if (given.headers !== undefined) throw field('body.headers', 'are not taken by an email channel');
        if (creating && !given.recipients) throw field('body.recipients', 'are required for an email channel (one or more addresses)');
        if (given.recipients) out.recipients = [...new Set(given.recipients)];
        return out;
      }
      if (given.recipients !== undefined) throw field('body.recipients', `are taken by email channels only, not ${kind}`);
      if (creating && given.url === undefined) throw field('body.url', `is required for a ${kind} channel`);
      if (given.url !== undefined) out.url_sealed = box.seal(await checkReceiverUrl(given.url, 'body.url', policy));
      if (given.headers !== undefined) {
        for (const name of Object.keys(given.headers)) {
          if (RESERVED_HEADERS.has(name.toLowerCase())) throw field(`body.headers.${name}`, 'is set by hangar itself and cannot be given');
        }
        const names = Object.keys(given.headers);
        out.headers_sealed = names.length ? box.seal(JSON.stringify(given.headers)) : null;
        out.header_names = names;
      }
      return out;
    }

    // ——— matching events to subscriptions ———

    /** Subscriptions as last read (re-read at most every 2 s, and at once after a change here). */
    let cache: { at: number; list: SubscriptionRecord[] } | null = null;
    const currentSubscriptions = async () => {
      if (!cache || Date.now() - cache.at > 2000) cache = { at: Date.now(), list: await subscriptions.findAll() };
      return cache.list;
    };

    /**
     * The project of an event's resource, looked up once per event: what the event carries
     * (`data.project_id`: an alert's), else the resource's scope resolver; null for none.
     */
    const projectOf = (event: NotificationEvent): (() => Promise<string | null>) => {
      let found: Promise<string | null> | null = null;
      return () =>
        (found ??= (async () => {
          if (typeof event.data.project_id === 'string' && event.data.project_id) return event.data.project_id;
          if (!event.resource) return null;
          const { type, id } = event.resource;
          return (await projectsOfResources(services.provided, [{ type, id }]).catch(() => new Map<string, string | null>())).get(`${type}|${id}`) ?? null;
        })());
    };

    async function matches(s: SubscriptionRecord, event: NotificationEvent, project: () => Promise<string | null>): Promise<boolean> {
      if (!s.event_types.includes(event.type)) return false;
      if (severityRank(event.severity) < severityRank(s.min_severity)) return false;
      if (s.resource_ids.length && !(event.resource && s.resource_ids.includes(event.resource.id))) return false;
      if (s.project_id && (await project()) !== s.project_id) return false;
      const wanted = Object.entries(s.tags);
      if (wanted.length) {
        if (!event.resource || !tags) return false;
        const carried = await tags.of(event.resource.type as ResourceType, event.resource.id).catch(() => ({}) as Record<string, string>);
        if (!wanted.every(([k, v]) => carried[k] === v)) return false;
      }
      return true;
    }

    /** One delivery per channel that a subscription matching the event names. */
    async function targetsOf(event: NotificationEvent) {
      const byChannel = new Map<string, string>();
      const project = projectOf(event);
      for (const s of await currentSubscriptions()) {
        if (!byChannel.has(s.channel_id) && (await matches(s, event, project))) byChannel.set(s.channel_id, s.id);
      }
      return [...byChannel].map(([channel_id, subscription_id]) => ({ channel_id, subscription_id }));
    }

    /** NotificationsApi.prepare: the matching now, the outbox rows in the producer's transaction; sent once it commits. */
    async function prepare(described: NewEvent): Promise<((trx: Knex.Transaction) => Promise<void>) | null> {
      const event = eventOf(described, clock.now());
      const targets = await targetsOf(event);
      if (!targets.length) return null;
      return async (trx) => {
        await outbox.enqueue(event, targets, retry.periodMs, trx);
        void trx.executionPromise?.then(
          () => poke(),
          () => undefined,
        );
      };
    }
    services.provided.provide(NotificationsRef, { prepare });

    // ——— sending ———

    async function send(delivery: DeliveryRecord, signal: AbortSignal): Promise<AttemptResult> {
      const channel = await channels.get(delivery.channel_id);
      if (!channel) return { ok: false, status_code: null, latency_ms: 0, error: 'the channel was deleted', final: true };
      const opened = openForSending(channel);
      if ('error' in opened) return opened;
      if (channel.kind === 'email') return mailTo(opened, delivery.event, delivery.id, services.mail, { from: settings.mail_from, timeoutMs, signal });
      return postTo(opened, delivery.event, delivery.id, { policy, timeoutMs, signal, now: () => clock.now() });
    }

    const dispatcher = new Dispatcher(outbox, send, {
      concurrency: settings.concurrency,
      channelConcurrency: Math.min(settings.channel_concurrency, settings.concurrency),
      holdMs: timeoutMs + 15_000,
      retry,
      log,
      isLeader: async () => (await db.leadership.leader(`loop:${LOOP}`)) === db.leadership.holder,
    });

    /** Sends at once what this process just wrote, when it is the one that sends (else the leader's next turn does: turn() asks). */
    function poke(): void {
      if (!services.serving || services.shutdown.aborted) return;
      void dispatcher.turn().catch((err: Error) => log.warn({ err: { message: err.message } }, 'notifications: looking at the outbox failed'));
    }

    // Events of bus topics: their outbox rows are written by their publishers, in the transaction of the change (core/events.ts keepWith).
    const unkeep = keepEvents(services.events, prepare);

    return {
      async close() {
        unkeep();
        await dispatcher.close();
      },
      loops: [
        ...(services.serving ? [{ name: LOOP, once: true, immediately: true, intervalMs: settings.poll_interval_ms, run: () => dispatcher.turn() }] : []),
        ...retentionLoops({ name: 'notifications:retention', days: settings.retention_days, clock, log, what: 'notifications: deliveries', prune: (before) => outbox.prune(before) }),
      ],
      routes: [
        defineRoute({
          method: 'POST',
          path: '/v1/notifications/channels',
          auth: { role: 'admin' },
          summary: 'Create a notification channel; a webhook’s signing secret is answered this once',
          status: 201,
          schemas: { body: CreateChannel, response: ChannelView },
          async handler(req) {
            const body = req.body;
            if (await channels.findOne({ name: body.name })) throw conflict(`A notification channel named ${body.name} exists`);
            const fields = await channelFields(body.kind, body, true);
            const secret = body.kind === 'webhook' ? newSecret() : undefined;
            const created = await channels.insert({
              id: newId('nch'),
              name: body.name,
              kind: body.kind,
              url_sealed: null,
              headers_sealed: null,
              header_names: [],
              recipients: [],
              ...fields,
              secret_sealed: secret ? box.seal(secret) : null,
              created_at: now(),
              updated_at: now(),
            });
            return channelView(created, secret);
          },
        }),
        defineRoute({
          method: 'GET',
          path: '/v1/notifications/channels',
          auth: { role: 'admin' },
          summary: 'List notification channels (never their secrets, header values or chat webhook paths)',
          schemas: { query: PageQuery, response: Type.Array(ChannelView) },
          handler: async (req) => Reply.page(await channels.page({ limit: req.query.limit, cursor: req.query.cursor }), (c) => channelView(c)),
        }),
        defineRoute({
          method: 'GET',
          path: '/v1/notifications/channels/{id}',
          auth: { role: 'admin' },
          summary: 'Get a notification channel by id or name',
          schemas: { params: IdParams, response: ChannelView },
          handler: async (req) => channelView(await requireChannel(req.params.id)),
        }),
        defineRoute({
          method: 'PATCH',
          path: '/v1/notifications/channels/{id}',
          auth: { role: 'admin' },
          summary: 'Change a notification channel: name, URL, headers, recipients; rotate a webhook’s secret (the new one answered this once)',
          schemas: { params: IdParams, body: PatchChannel, response: ChannelView },
          async handler(req) {
            const channel = await requireChannel(req.params.id);
            const body = req.body;
            if (body.rotate_secret && channel.kind !== 'webhook') throw field('body.rotate_secret', `is for webhook channels; a ${channel.kind} channel is not signed`);
            if (body.name && body.name !== channel.name && (await channels.findOne({ name: body.name }))) throw conflict(`A notification channel named ${body.name} exists`);
            const fields = await channelFields(channel.kind, body, false);
            const secret = body.rotate_secret ? newSecret() : undefined;
            const changed = await channels.change(channel.id, { ...fields, ...(body.name ? { name: body.name } : {}), ...(secret ? { secret_sealed: box.seal(secret) } : {}) });
            return channelView(changed, secret);
          },
        }),
        defineRoute({
          method: 'DELETE',
          path: '/v1/notifications/channels/{id}',
          auth: { role: 'admin' },
          summary: 'Delete a notification channel with its subscriptions and its deliveries (sent or not)',
          status: 204,
          schemas: { params: IdParams },
          async handler(req) {
            const channel = await requireChannel(req.params.id);
            await db.knex.transaction(async (trx) => {
              await subscriptions.query(trx).where({ channel_id: channel.id }).delete();
              await outbox.forgetChannel(channel.id, trx);
              await channels.remove(channel.id, trx);
            });
            cache = null;
            return Reply.noContent();
          },
        }),
        defineRoute({
          method: 'POST',
          path: '/v1/notifications/channels/{id}/test',
          auth: { role: 'admin' },
          summary: 'Send a test notification (type notification.test) to a channel now and answer what the receiver said: ok, status code, latency, error',
          description: `Signed and keyed like any delivery; not kept in the outbox and not retried. Bounded by notifications.timeout_seconds.`,
          schemas: { params: IdParams, response: TestResult },
          async handler(req) {
            const channel = await requireChannel(req.params.id);
            const event = eventOf(
              { type: 'notification.test', severity: 'info', resource: null, message: `test notification for channel ${channel.name}, sent by ${req.principal?.name ?? 'an administrator'}`, data: { channel_id: channel.id } },
              clock.now(),
            );
            const key = newId('ntest');
            const opened = openForSending(channel);
            if ('error' in opened) return opened;
            if (channel.kind === 'email') return mailTo(opened, event, key, services.mail, { from: settings.mail_from, timeoutMs, signal: req.signal });
            return postTo(opened, event, key, { policy, timeoutMs, signal: req.signal, now: () => clock.now() });
          },
        }),
        defineRoute({
          method: 'POST',
          path: '/v1/notifications/subscriptions',
          auth: { role: 'admin' },
          summary: 'Subscribe a channel to events: types, and optionally resources, tags and a least severity',
          status: 201,
          schemas: { body: CreateSubscription, response: SubscriptionView },
          async handler(req) {
            const body = req.body;
            body.event_types.forEach((type, i) => {
              if (!(type in EVENT_TYPES)) throw field(`body.event_types[${i}]`, `is an unknown event type ${JSON.stringify(type)}; known: ${Object.keys(EVENT_TYPES).join(', ')}`);
            });
            if (body.tags && Object.keys(body.tags).length && !tags) throw field('body.tags', 'need the tags plugin, which this control plane does not load');
            const channel = await channels.findByIdOrName(body.channel_id);
            if (!channel) throw field('body.channel_id', `names no notification channel (${body.channel_id})`);
            let projectId: string | null = null;
            if (body.project !== undefined) {
              const grants = services.provided.find(ProjectGrantsRef);
              if (!grants) throw field('body.project', 'needs the projects plugin, which this control plane does not load');
              projectId = await grants.find(body.project);
              if (!projectId) throw field('body.project', `names no project (${body.project})`);
            }
            const created = await subscriptions.insert({
              id: newId('nsub'),
              channel_id: channel.id,
              event_types: [...new Set(body.event_types)],
              resource_ids: [...new Set(body.resource_ids ?? [])],
              tags: body.tags ?? {},
              min_severity: body.min_severity ?? 'info',
              project_id: projectId,
              created_at: now(),
              updated_at: now(),
            });
            cache = null;
            return subscriptionView(created);
          },
        }),
        defineRoute({
          method: 'GET',
          path: '/v1/notifications/subscriptions',
          auth: { role: 'admin' },
          summary: 'List subscriptions (channel_id= for one channel’s)',
          schemas: {
            query: Type.Object({ ...PageQuery.properties, channel_id: Type.Optional(Type.String({ minLength: 1, maxLength: 100 })) }, { additionalProperties: false }),
            response: Type.Array(SubscriptionView),
          },
          async handler(req) {
            const channelId = req.query.channel_id as string | undefined;
            const where = channelId ? (q: Knex.QueryBuilder) => void q.where({ channel_id: channelId }) : undefined;
            return Reply.page(await subscriptions.page({ limit: req.query.limit, cursor: req.query.cursor, where }), subscriptionView);
          },
        }),
        defineRoute({
          method: 'DELETE',
          path: '/v1/notifications/subscriptions/{id}',
          auth: { role: 'admin' },
          summary: 'Delete a subscription (deliveries already in the outbox are still made)',
          status: 204,
          schemas: { params: IdParams },
          async handler(req) {
            if (!(await subscriptions.remove(req.params.id))) throw notFound(`No subscription ${req.params.id}`);
            cache = null;
            return Reply.noContent();
          },
        }),
        defineRoute({
          method: 'GET',
          path: '/v1/notifications/deliveries',
          auth: { role: 'admin' },
          summary: 'List deliveries, oldest first, each with its attempts (status code, latency, error)',
          schemas: { query: DeliveriesQuery, response: Type.Array(DeliveryView) },
          async handler(req) {
            const q = req.query;
            const page = await outbox.page({
              limit: q.limit,
              cursor: q.cursor,
              where: q.channel_id || q.status || q.event_type ? (b) => void b.where({ ...(q.channel_id ? { channel_id: q.channel_id } : {}), ...(q.status ? { status: q.status } : {}), ...(q.event_type ? { event_type: q.event_type } : {}) }) : undefined,
            });
            const attempts = await outbox.attemptsOf(page.items.map((d) => d.id));
            return Reply.page(page, (d) => deliveryView(d, attempts.get(d.id) ?? []));
          },
        }),
        defineRoute({
          method: 'GET',
          path: '/v1/notifications/deliveries/{id}',
          auth: { role: 'admin' },
          summary: 'Get one delivery with every attempt',
          schemas: { params: IdParams, response: DeliveryView },
          async handler(req) {
            const delivery = await outbox.get(req.params.id);
            if (!delivery) throw notFound(`No delivery ${req.params.id}`);
            return deliveryView(delivery, (await outbox.attemptsOf([delivery.id])).get(delivery.id) ?? []);
          },
        }),
        defineRoute({
          method: 'POST',
          path: '/v1/notifications/deliveries/{id}/redeliver',
          auth: { role: 'admin' },
          summary: 'Send a delivered or failed delivery again, with the same idempotency key and a new retry period (409 while it is still on its way)',
          status: 202,
          schemas: { params: IdParams, response: DeliveryView },
          async handler(req) {
            const existing = await outbox.get(req.params.id);
            if (!existing) throw notFound(`No delivery ${req.params.id}`);
            const again = await outbox.redeliver(existing.id, retry.periodMs);
            if (!again) throw conflict(`Delivery ${existing.id} is ${existing.status}: it is still on its way`);
            poke();
            return deliveryView(again, (await outbox.attemptsOf([again.id])).get(again.id) ?? []);
          },
        }),
      ],
    };
  },
});
