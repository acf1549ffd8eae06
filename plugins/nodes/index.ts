import { createHash, createPublicKey, randomBytes, X509Certificate } from 'node:crypto';
import { isDeepStrictEqual } from 'node:util';
import { Type } from '@sinclair/typebox';
import { sha256Hex } from '../../core/crypto.js';
import { badRequest, conflict, notFound, unauthorized } from '../../core/errors.js';
import { Reply } from '../../core/http/reply.js';
import { newId } from '../../core/ids.js';
import { recordRemover } from '../../core/events.js';
import { definePlugin, defineServiceRef, type Services } from '../../core/plugin.js';
import { rateLimitSetting, type RateLimit } from '../../core/ratelimit.js';
import { AgentBinariesRef } from '../system/index.js';
import { TaggableResources } from '../tags/index.js';
import { AgentLogs, AgentStop, AgentUpdate, OsCheckUpdates, OsReboot, OsUpdate, OverlayPeers } from '../../core/tasks/host-kinds.js';
import type { TaskKind } from '../../core/tasks/kinds.js';
import { ScanUnmanaged } from '../../core/orchestrator.js';
import { taskView, type Task } from '../../core/tasks/queue.js';
import { HeartbeatCadence } from './cadence.js';
import { EVENT_LIMIT_MAX, EventLog, eventView } from './events.js';
import { HeartbeatWrites } from './heartbeats.js';
import { JOIN_TOKENS, NODES, nodeMigrations } from './migrations.js';
import { NodeStore, nodeStatus, nodeView, type NodeRecord } from './nodes.js';
import { OverlayAddresses } from './overlay.js';
import { Heartbeat, InterfaceName, IpAddress, NodeName, NodeParams, NodeTaskParams, NodeView, TaskRef } from './schemas.js';

/** How often the heartbeats of online nodes are written (together); what readers see lags by this much at most. */
const HEARTBEAT_FLUSH_MS = 250;

export const NodesConfigSchema = Type.Object(
  {
    heartbeat_interval_seconds: Type.Integer({ minimum: 1, default: 10, description: 'the shortest interval told to agents in heartbeat replies (a large fleet gets a longer one)' }),
    offline_after_seconds: Type.Integer({ minimum: 1, default: 35, description: 'no heartbeat for this long → offline (scaled with the interval)' }),
    max_heartbeats_per_second: Type.Number({
      exclusiveMinimum: 0,
      default: 100,
      description: 'the heartbeat budget of the whole fleet: the interval is the fleet size ÷ this, at least heartbeat_interval_seconds',
    }),
    join_token_ttl_seconds: Type.Integer({ minimum: 10, default: 600 }),
    overlay_subnet: Type.String({ default: '10.210.0.0/16', description: 'WireGuard overlay; the first host is the control plane' }),
    overlay_port: Type.Integer({ minimum: 1, maximum: 65535, default: 51820 }),
    log_lines_default: Type.Integer({ minimum: 1, default: 100 }),
    log_lines_max: Type.Integer({ minimum: 1, default: 10000 }),
    join_failures_per_address: rateLimitSetting(
      20,
      900,
      'refused POST /v1/nodes/join calls per client address; past it every join from that address is refused (429) for the rest of the window, and no more join_failed events are stored for it',
    ),
    event_retention_days: Type.Integer({ minimum: 0, default: 30, description: 'node events older than this are deleted; 0 keeps them for ever' }),
    event_prune_interval_seconds: Type.Integer({ minimum: 1, default: 3600, description: 'how often node events past their retention are deleted' }),
  },
  { additionalProperties: false, default: {} },
);

export interface NodesConfig {
  heartbeat_interval_seconds: number;
  offline_after_seconds: number;
  max_heartbeats_per_second: number;
  join_token_ttl_seconds: number;
  overlay_subnet: string;
  overlay_port: number;
  log_lines_default: number;
  log_lines_max: number;
  join_failures_per_address: RateLimit;
  event_retention_days: number;
  event_prune_interval_seconds: number;
}

/** What other plugins (agent-internal, ssh deploy, swarms…) use of this one. */
export interface NodesApi {
  nodes: NodeStore;
  events: EventLog;
  overlay: OverlayAddresses;
  settings: NodesConfig;
  /** The heartbeat interval announced to agents, by fleet size. */
  cadence: HeartbeatCadence;
  /** Applies an agent heartbeat to the node (as just read by the caller); returns the node after it. */
  heartbeat(node: NodeRecord, facts: Record<string, any>): Promise<NodeRecord>;
  /** Queues a fresh peer list to every overlay member. */
  publishPeers(): Promise<void>;
}

export const NodesRef = defineServiceRef<NodesApi>('nodes', 'nodes and their events (the nodes plugin)');

export function nodesOf(services: Services): NodesApi {
  return services.provided.get(NodesRef);
}

function isP256PublicKey(pem: string): boolean {
  try {
    return createPublicKey(pem).asymmetricKeyDetails?.namedCurve === 'prime256v1';
  } catch {
    return false;
  }
}

const ARCHITECTURES: Record<string, string> = { x64: 'amd64', x86_64: 'amd64', amd64: 'amd64', arm64: 'arm64', aarch64: 'arm64' };

const TokenCreate = Type.Object(
  {
    node_id: Type.Optional(Type.String({ pattern: '^node-[0-9a-z]+$', description: 'bind the token to a node created beforehand' })),
    ttl_seconds: Type.Optional(Type.Integer({ minimum: 10, maximum: 7 * 86400 })),
  },
  { additionalProperties: false },
);

const JoinBody = Type.Object(
  {
    token: Type.String({ minLength: 10, maxLength: 300 }),
    hostname: Type.String({ minLength: 1, maxLength: 255 }),
    public_key: Type.String({ minLength: 50, maxLength: 4000, description: 'the agent key pair’s public half (PEM, SPKI); the private key never leaves the machine' }),
    architecture: Type.Optional(Type.String({ maxLength: 20 })),
    ip_address: Type.Optional(IpAddress),
    wg_public_key: Type.Optional(Type.String({ pattern: '^[A-Za-z0-9+/]{42}[AEIMQUYcgkosw048]=$', description: 'WireGuard public key (base64)' })),
    wg_port: Type.Optional(Type.Integer({ minimum: 1, maximum: 65535 })),
  },
  { additionalProperties: false },
);

export default definePlugin({
  name: 'nodes',
  description: 'nodes, join tokens, overlay addresses, node operations, node events',
  provides: [NodesRef],
  optionalDeps: [AgentBinariesRef],
  configSchema: NodesConfigSchema,
  migrations: nodeMigrations,
  setup(services) {
    const { db, clock, tasks, ca, log } = services;
    const settings = services.config.nodes as NodesConfig;
    const nodes = new NodeStore(db, clock);
    const forget = recordRemover(services.events, 'node', nodes);
    const events = new EventLog(db, clock, services.events);
    services.metrics.gauge('hangar_agents', 'Nodes by what their agent’s heartbeats say: online, offline, pending (never heard from), stopped', ['connection'], async (set) => {
      for (const connection of ['online', 'offline', 'pending', 'stopped']) set({ connection }, 0);
      const rows: Array<{ connection: string; n: number | string }> = await nodes.query().where({ removing: false }).select('connection').count({ n: '*' }).groupBy('connection');
      for (const row of rows) set({ connection: row.connection }, Number(row.n));
    });
    const overlay = new OverlayAddresses(db, clock, settings.overlay_subnet);
    const now = () => clock.now().toISOString();
    const cadence = new HeartbeatCadence({
      floorSeconds: settings.heartbeat_interval_seconds,
      offlineAfterSeconds: settings.offline_after_seconds,
      maxPerSecond: settings.max_heartbeats_per_second,
      // Heartbeats renew the leases of the tasks an agent holds: at least two per lease.
      ceilingSeconds: Math.floor((services.config.tasks.lease_seconds as number) / 2),
    });
    const heartbeatWrites = new HeartbeatWrites(db.knex, db.dialect, NODES);
    const countFleet = async () => {
      const [row] = await nodes.query().where({ removing: false }).whereNot({ connection: 'pending' }).count({ n: '*' });
      cadence.setFleet(Number(row?.n ?? 0));
    };

    async function publishPeers(): Promise<void> {
      const members = (await nodes.findAll({ removing: false })).filter((n) => n.wg_public_key && n.overlay_ip);
      const peers = members.map((n) => ({
        node_id: n.id,
        public_key: n.wg_public_key,
        endpoint: n.ip_address ? `${n.ip_address.includes(':') ? `[${n.ip_address}]` : n.ip_address}:${n.wg_port ?? settings.overlay_port}` : null,
        allowed_ips: [`${n.overlay_ip}/32`],
      }));
      for (const member of members) {
        await tasks.enqueue({
          nodeId: member.id,
          kind: OverlayPeers,
          payload: { address: `${member.overlay_ip}/${overlay.prefix}`, listen_port: member.wg_port ?? settings.overlay_port, peers: peers.filter((p) => p.node_id !== member.id) },
          replacePending: true,
        });
      }
    }

    /** Changes a node; a change of its status (pending → ready, ready → needs_reboot…) is a node_status_changed event. */
    async function changeNode(node: NodeRecord, patch: Partial<NodeRecord>, why: string): Promise<NodeRecord> {
      const before = nodeStatus(node);
      const after = await nodes.change(node.id, patch);
      if (nodeStatus(after) !== before) {
        await events.record({ nodeId: node.id, kind: 'node_status_changed', message: `${before} → ${nodeStatus(after)}: ${why}`, data: { from: before, to: nodeStatus(after) } });
      }
      return after;
    }

    async function setConnection(node: NodeRecord, connection: NodeRecord['connection'], why: string): Promise<NodeRecord> {
      if (node.connection === connection) return node;
      return changeNode(node, { connection }, why);
    }

    async function heartbeat(node: NodeRecord, facts: Record<string, any>): Promise<NodeRecord> {
      const nodeId = node.id;
      const arch = ARCHITECTURES[String(facts.architecture)] ?? String(facts.architecture);
      const patch: Partial<NodeRecord> = {
        hostname: facts.hostname,
        architecture: arch,
        agent_version: facts.agent_version,
        last_heartbeat_at: now(),
        resources: facts.resources ?? null,
        facts: {
          os: facts.os ?? null,
          kernel: facts.kernel ?? null,
          addresses: facts.addresses ?? [],
          docker: facts.docker ?? null,
          k3s: facts.k3s ?? null,
          wireguard: facts.wireguard ?? null,
          pending_updates: facts.pending_updates ?? null,
          gpus: facts.gpus ?? [],
        },
        reboot_required: Boolean(facts.reboot_required),
      };
      if (!node.ip_address && Array.isArray(facts.addresses)) {
        const primary = facts.addresses.find((a: { family: string; address: string }) => a.family === 'IPv4' && !a.address.startsWith('127.'));
        if (primary) patch.ip_address = primary.address;
      }
      // Coming (back) online, or a change of status, is written at once (with its event); otherwise
      // the write joins the next batch, and carries only what changed (for most heartbeats, only the time).
      if (node.connection !== 'online' || node.reboot_required !== patch.reboot_required) {
        const why = node.connection !== 'online' ? 'heartbeat received' : `the agent reports ${patch.reboot_required ? 'that a reboot is required' : 'no reboot required'}`;
        return changeNode(node, { ...patch, connection: 'online' }, why);
      }
      const { last_heartbeat_at: at, ...reported } = patch;
      const changed = Object.entries(reported).filter(([key, value]) => !isDeepStrictEqual(value, node[key as keyof NodeRecord]));
      heartbeatWrites.add(nodeId, at!, changed.length ? nodes.codec.encode({ ...Object.fromEntries(changed), updated_at: at }) : null);
      return { ...node, ...patch } as NodeRecord;
    }

    const api: NodesApi = { nodes, events, overlay, settings, cadence, heartbeat, publishPeers };
    services.provided.provide(NodesRef, api);
    services.provided.contribute(TaggableResources, { type: 'node', exists: async (id) => Boolean(await nodes.get(id)) });

    // Results that change what hangar knows of a node.
    services.events.subscribe('task.completed', (payload) => {
      const task = payload as Task;
      const result = (task.result ?? {}) as Record<string, any>;
      const apply = async () => {
        const node = await nodes.get(task.node_id);
        if (!node) return;
        if (task.kind === AgentStop.name) await setConnection(node, 'stopped', 'agent stopped on request');
        if (task.kind === OsUpdate.name || task.kind === OsCheckUpdates.name) {
          const facts = { ...(node.facts ?? {}), pending_updates: result.pending_updates ?? null };
          const why = `${task.kind} reports ${result.reboot_required ? 'that a reboot is required' : 'no reboot required'}`;
          await changeNode(node, { facts, reboot_required: Boolean(result.reboot_required) }, why);
        }
      };
      apply().catch((err: Error) => log.error({ task_id: task.id, err: { message: err.message } }, 'applying a task result failed'));
    });
    services.events.subscribe('task.failed', (payload) => {
      const task = payload as Task;
      events
        .record({ nodeId: task.node_id, kind: 'task_failed', message: `${task.kind} failed: ${task.error}`, data: { task_id: task.id, kind: task.kind } })
        .catch((err: Error) => log.error({ err: { message: err.message } }, 'recording a task failure failed'));
    });

    /** Queues a task for a node the caller got from requireLive (a removing node has no certificate to fetch it with). */
    const queue = async (node: NodeRecord, kind: TaskKind, payload: Record<string, unknown> = {}, readOnce = false) =>
      Reply.accepted(taskView(await tasks.enqueue({ nodeId: node.id, kind, payload, readOnce, subject: node.id })));

    /** Whether a machine has joined as this node (a join token was used for it, or it heartbeated). */
    async function hasJoined(node: NodeRecord): Promise<boolean> {
      if (node.connection !== 'pending') return true;
      return Boolean(await db.knex(JOIN_TOKENS).where({ used_by_node: node.id }).first('id'));
    }

    async function setAvailability(id: string, availability: NodeRecord['availability']) {
      await nodes.requireLive(id);
      const updated = await nodes.change(id, { availability });
      await events.record({ nodeId: id, kind: `node_${availability === 'active' ? 'uncordoned' : availability}`, message: `availability set to ${availability}` });
      // Orchestrator plugins (swarm, kubernetes) act on this for their members.
      services.events.publish('node.availability', { node: updated, availability });
      return nodeView(updated);
    }

    async function readTask(nodeId: string, taskId: string, kind: string) {
      await nodes.require(nodeId);
      const task = await tasks.take(taskId, { nodeId, kind });
      const view = taskView(task);
      return view;
    }

    return {
      close: () => heartbeatWrites.flush().then(() => undefined),
      loops: [
        {
          name: 'nodes:heartbeat-writes',
          intervalMs: HEARTBEAT_FLUSH_MS,
          run: () => heartbeatWrites.flush().then(() => undefined),
        },
        {
          name: 'nodes:offline-detection',
          once: true,
          intervalMs: Math.max(1000, Math.floor((settings.offline_after_seconds * 1000) / 4)),
          async run() {
            // Heartbeats still queued here count: a node whose heartbeat just came is not silent.
            await heartbeatWrites.flush();
            await countFleet();
            const grace = cadence.offlineAfterSeconds;
            const cutoff = new Date(clock.now().getTime() - grace * 1000).toISOString();
            const silent = await nodes.query().where({ connection: 'online' }).where('last_heartbeat_at', '<', cutoff);
            for (const row of silent) await setConnection(nodes.decode(row), 'offline', `no heartbeat for ${grace} s`);
          },
        },
        {
          name: 'nodes:finish-removals',
          once: true,
          intervalMs: 5000,
          async run() {
            for (const node of await nodes.findAll({ removing: true })) {
              if ((await tasks.countOpen(node.id)) > 0) continue;
              await forget(node.id);
              await tasks.forgetCapabilities(node.id);
              await events.record({ nodeId: node.id, identifier: node.ip_address ?? node.hostname, kind: 'node_removed', message: `node ${node.id} (${node.name}) removed` });
            }
          },
        },
        ...(settings.event_retention_days
          ? [
              {
                name: 'nodes:event-retention',
                intervalMs: settings.event_prune_interval_seconds * 1000,
                async run() {
                  const before = new Date(clock.now().getTime() - settings.event_retention_days * 86_400_000);
                  const pruned = await events.prune(before);
                  if (pruned) log.info({ pruned, before: before.toISOString() }, 'nodes: events past their retention deleted');
                },
              },
            ]
          : []),
      ],
      routes: [
        // ---- join tokens -------------------------------------------------------------
        {
          method: 'POST',
          path: '/v1/nodes/token',
          auth: { role: 'admin' },
          summary: 'Create a single-use join token; it reserves an overlay address for the node that will join',
          status: 201,
          schemas: {
            body: TokenCreate,
            response: Type.Object({ id: Type.String(), token: Type.String(), expires_at: Type.String(), overlay_ip: Type.String(), ca_sha256: Type.String() }),
          },
          async handler(req) {
            if (req.body.node_id) {
              const bound = await nodes.require(req.body.node_id);
              if (await hasJoined(bound)) throw conflict(`Node ${bound.id} has already joined`);
            }
            const id = newId('tok');
            // A fixed prefix: a token never starts with '-', which command lines would take for an option.
            const secret = `hjt1${randomBytes(24).toString('base64url')}`;
            const caSha256 = ca.operatorCertificates ? '' : createHash('sha256').update(new X509Certificate(ca.caPem).raw).digest('hex');
            const token = `${secret}.${caSha256}`;
            const expires = new Date(clock.now().getTime() + (req.body.ttl_seconds ?? settings.join_token_ttl_seconds) * 1000).toISOString();
            const ip = await overlay.reserve(id);
            await db.knex(JOIN_TOKENS).insert({
              id,
              token_hash: sha256Hex(secret),
              node_id: req.body.node_id ?? null,
              overlay_ip: ip,
              expires_at: expires,
              created_by: req.principal?.id ?? null,
              created_at: now(),
            });
            return { id, token, expires_at: expires, overlay_ip: ip, ca_sha256: caSha256 };
          },
        },
        {
          method: 'DELETE',
          path: '/v1/nodes/token/{id}',
          auth: { role: 'admin' },
          summary: 'Revoke an unused join token and drop its overlay reservation; 404 when it was used',
          schemas: { params: Type.Object({ id: Type.String({ pattern: '^tok-[0-9a-z]+$' }) }) },
          async handler(req) {
            const token = await db.knex(JOIN_TOKENS).where({ id: req.params.id }).whereNull('used_at').first();
            if (!token) throw notFound(`No unused join token ${req.params.id}`);
            await db.knex(JOIN_TOKENS).where({ id: token.id }).delete();
            await overlay.release(token.id);
            return { id: token.id, revoked: true };
          },
        },
        {
          method: 'POST',
          path: '/v1/nodes/join',
          auth: 'public',
          summary: 'A machine joins with a token: it gets its node id, a client certificate and its overlay address',
          status: 201,
          errors: [401, 429],
          schemas: { body: JoinBody },
          async handler(req) {
            const caller = req.ip.replace(/^::ffff:/, '');
            // Refused joins are counted per address: past the limit the address is refused outright
            // (and stores no more join_failed events), so guessing tokens cannot fill the event log.
            const failures: Array<[string, RateLimit]> = [[`join-failure:address:${caller}`, settings.join_failures_per_address]];
            await services.limits.assertAllowed(failures, 'refused joins from this address');
            // The key is checked before the token is spent, so a bad request can be retried.
            if (!isP256PublicKey(req.body.public_key)) {
              throw badRequest('Validation failed: body.public_key is not a P-256 public key in PEM (SPKI)', [{ path: 'body.public_key', message: 'is not a P-256 public key in PEM (SPKI)' }]);
            }
            const [secret] = req.body.token.split('.');
            const token = await db.knex(JOIN_TOKENS).where({ token_hash: sha256Hex(secret ?? '') }).first();
            const fail = async (why: string) => {
              await services.limits.count(failures, 'refused joins from this address').catch(() => undefined);
              await events.record({ nodeId: token?.node_id ?? null, identifier: caller, kind: 'join_failed', message: `join refused for ${req.body.hostname}: ${why}`, data: { hostname: req.body.hostname } });
              return unauthorized('The join token is invalid, expired or already used');
            };
            if (!token) throw await fail('unknown token');
            if (token.used_at) throw await fail('token already used');
            if (new Date(token.expires_at).getTime() <= clock.now().getTime()) throw await fail('token expired');
            if (token.node_id) {
              const bound = await nodes.get(token.node_id);
              if (!bound || bound.removing || (await hasJoined(bound))) throw await fail(`the node the token was made for is ${bound ? 'taken' : 'gone'}`);
            }
            // Claim the token first: of two joins with one token, exactly one wins.
            const claimed = await db.knex(JOIN_TOKENS).where({ id: token.id }).whereNull('used_at').update({ used_at: now() });
            if (!claimed) throw await fail('token already used');
            const nodeId = token.node_id ?? newId('node');
            const ipAddress = req.body.ip_address ?? caller;
            const arch = req.body.architecture ? (ARCHITECTURES[req.body.architecture] ?? req.body.architecture) : null;
            const values = {
              hostname: req.body.hostname,
              ip_address: ipAddress,
              architecture: arch,
              overlay_ip: token.overlay_ip,
              wg_public_key: req.body.wg_public_key ?? null,
              wg_port: req.body.wg_port ?? null,
            };
            if (token.node_id) {
              await nodes.change(nodeId, values);
            } else {
              await nodes.insert({ id: nodeId, name: req.body.hostname, ...values, connection: 'pending', availability: 'active', created_at: now(), updated_at: now() });
            }
            await db.knex(JOIN_TOKENS).where({ id: token.id }).update({ used_by_node: nodeId });
            await overlay.transfer(token.overlay_ip, nodeId);
            const cert = await ca.issueClientCertificate(nodeId, req.body.public_key);
            await events.record({ nodeId, kind: 'node_joined', message: `${req.body.hostname} joined from ${ipAddress}`, data: { token_id: token.id } });
            if (values.wg_public_key) await publishPeers();
            return {
              node_id: nodeId,
              certificate: cert.cert_pem,
              ca_pem: cert.ca_pem,
              overlay_ip: token.overlay_ip,
              overlay_prefix: overlay.prefix,
              control_plane_overlay_ip: overlay.controlPlaneAddress,
              heartbeat_interval_seconds: cadence.intervalSeconds,
            };
          },
        },
        // ---- events --------------------------------------------------------------------
        {
          method: 'POST',
          path: '/v1/nodes/events',
          auth: { role: 'admin' },
          summary: 'Record a node event',
          status: 201,
          schemas: {
            body: Type.Object(
              {
                node_id: Type.Optional(Type.String({ maxLength: 64 })),
                identifier: Type.Optional(Type.String({ maxLength: 255, description: 'an IP address or hostname, for machines without a node id yet' })),
                kind: Type.String({ pattern: '^[a-z][a-z0-9_.-]{0,63}$' }),
                message: Type.Optional(Type.String({ maxLength: 4000 })),
                data: Type.Optional(Type.Record(Type.String(), Type.Any())),
              },
              { additionalProperties: false },
            ),
          },
          async handler(req) {
            if (!req.body.node_id && !req.body.identifier) throw badRequest('Validation failed: give node_id or identifier', [{ path: 'body.node_id', message: 'or body.identifier is required' }]);
            if (req.body.node_id) await nodes.require(req.body.node_id);
            return eventView(await events.record({ nodeId: req.body.node_id, identifier: req.body.identifier, kind: req.body.kind, message: req.body.message, data: req.body.data }));
          },
        },
        {
          method: 'GET',
          path: '/v1/nodes/events',
          auth: 'authenticated',
          summary: 'Node events, oldest first',
          schemas: {
            query: Type.Object(
              {
                node_id: Type.Optional(Type.String({ maxLength: 64 })),
                identifier: Type.Optional(Type.String({ maxLength: 255 })),
                since: Type.Optional(Type.String({ format: 'date-time' })),
                limit: Type.Optional(Type.Integer({ minimum: 1, maximum: EVENT_LIMIT_MAX })),
              },
              { additionalProperties: false },
            ),
          },
          async handler(req) {
            return (await events.list({ nodeId: req.query.node_id, identifier: req.query.identifier, since: req.query.since, limit: req.query.limit })).map(eventView);
          },
        },
        // ---- nodes ---------------------------------------------------------------------
        {
          method: 'POST',
          path: '/v1/nodes',
          auth: { role: 'admin' },
          summary: 'Create a node record ahead of its agent (bind a join token to it, or deploy to it)',
          status: 201,
          schemas: {
            body: Type.Object(
              { name: NodeName, ip_address: Type.Optional(IpAddress), interface: Type.Optional(InterfaceName), is_control_plane: Type.Optional(Type.Boolean()) },
              { additionalProperties: false },
            ),
            response: NodeView,
          },
          async handler(req) {
            if (req.body.is_control_plane && (await nodes.findOne({ is_control_plane: true }))) throw conflict('There is already a control-plane node');
            const node = await nodes.insert({
              id: newId('node'),
              name: req.body.name,
              ip_address: req.body.ip_address ?? null,
              interface: req.body.interface ?? null,
              is_control_plane: req.body.is_control_plane ?? false,
              connection: 'pending',
              availability: 'active',
              created_at: now(),
              updated_at: now(),
            });
            await events.record({ nodeId: node.id, kind: 'node_created', message: `node ${node.name} created` });
            return nodeView(node);
          },
        },
        {
          method: 'GET',
          path: '/v1/nodes',
          auth: 'authenticated',
          summary: 'List nodes',
          schemas: {
            query: Type.Object(
              {
                status: Type.Optional(Type.Array(Type.String({ enum: ['pending', 'ready', 'offline', 'needs_reboot', 'cordoned', 'drained', 'removing'] }))),
                limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000 })),
                cursor: Type.Optional(Type.String()),
              },
              { additionalProperties: false },
            ),
            response: Type.Array(NodeView),
          },
          async handler(req) {
            const wanted = req.query.status as string[] | undefined;
            if (!wanted?.length) return Reply.page(await nodes.page({ limit: req.query.limit, cursor: req.query.cursor }), nodeView);
            // Status is derived from several columns: page through and keep the matches.
            const items: NodeRecord[] = [];
            let cursor: string | null | undefined = req.query.cursor;
            const limit = req.query.limit ?? 100;
            let more = false;
            do {
              const page = await nodes.page({ limit: 500, cursor });
              for (const n of page.items) {
                if (!wanted.includes(nodeStatus(n))) continue;
                if (items.length === limit) {
                  more = true;
                  break;
                }
                items.push(n);
              }
              cursor = page.next_cursor;
            } while (cursor && !more);
            // The next page starts after the last item returned, not after the last one looked at.
            const last = items[items.length - 1];
            return Reply.page({ items, next_cursor: more && last ? nodes.cursorAfter(last) : null }, nodeView);
          },
        },
        {
          method: 'GET',
          path: '/v1/nodes/{id}',
          auth: 'authenticated',
          summary: 'Get a node',
          schemas: { params: NodeParams, response: NodeView },
          handler: async (req) => nodeView(await nodes.require(req.params.id)),
        },
        {
          method: 'PATCH',
          path: '/v1/nodes/{id}',
          auth: { role: 'admin' },
          summary: 'Rename the node’s display label (never the machine, swarm or Kubernetes)',
          schemas: { params: NodeParams, body: Type.Object({ name: NodeName }, { additionalProperties: false }), response: NodeView },
          async handler(req) {
            await nodes.require(req.params.id);
            return nodeView(await nodes.change(req.params.id, { name: req.body.name }));
          },
        },
        {
          method: 'DELETE',
          path: '/v1/nodes/{id}',
          auth: { role: 'admin' },
          summary: 'Remove a node: revoke its certificates, release its overlay address; the record goes once its work has drained; 409 while it is a cluster member unless forced',
          status: 202,
          schemas: {
            params: NodeParams,
            query: Type.Object(
              { force: Type.Optional(Type.Boolean({ description: 'remove it even while it is a member of a swarm or cluster (one it manages is left without a manager, failed)' })) },
              { additionalProperties: false },
            ),
            response: NodeView,
          },
          async handler(req) {
            const node = await nodes.require(req.params.id);
            const memberships = await services.clusters.membershipsOf(node.id);
            if (memberships.length && !req.query.force) {
              const { cluster, manages } = memberships[0]!;
              const noun = cluster.backend === 'swarm' ? 'swarm' : 'cluster';
              throw conflict(
                `Node ${node.id} ${manages ? 'manages' : 'is a member of'} ${noun} ${cluster.name} (${cluster.id}): remove it from the ${noun} first` +
                  `${cluster.backend === 'swarm' ? ` (POST /v1/swarms/${cluster.id}/leave)` : ''}, or pass force=true` +
                  `${manages ? ` to delete it anyway and leave the ${noun} without this manager` : ''}`,
                memberships.map((m) => ({ [`${m.cluster.backend === 'swarm' ? 'swarm' : 'cluster'}_id`]: m.cluster.id, role: m.role })),
              );
            }
            if (memberships.length) await services.clusters.detachNode(node.id);
            await ca.revokeNode(node.id);
            await overlay.release(node.id);
            await tasks.cancelForNode(node.id, 'the node is being removed');
            const updated = await nodes.change(node.id, { removing: true, overlay_ip: null });
            await events.record({ nodeId: node.id, kind: 'node_removing', message: `node ${node.name} is being removed` });
            services.events.publish('node.removing', updated);
            if (node.wg_public_key) await publishPeers();
            return nodeView(updated);
          },
        },
        {
          method: 'POST',
          path: '/v1/nodes/{id}/ip',
          auth: { role: 'admin' },
          summary: 'Change the node’s address or pinned interface; for the control-plane node optionally reissue the API certificate',
          schemas: {
            params: NodeParams,
            body: Type.Object(
              { ip_address: Type.Optional(IpAddress), interface: Type.Optional(InterfaceName), regenerate_cert: Type.Optional(Type.Boolean()) },
              { additionalProperties: false },
            ),
          },
          async handler(req) {
            const node = await nodes.require(req.params.id);
            const { ip_address, interface: iface, regenerate_cert } = req.body;
            if (!ip_address && !iface) {
              throw badRequest('Validation failed: give ip_address, interface or both', [{ path: 'body.ip_address', message: 'or body.interface is required' }]);
            }
            if (regenerate_cert && !node.is_control_plane) throw badRequest('regenerate_cert is accepted only for the control-plane node');
            const updated = await nodes.change(node.id, { ...(ip_address ? { ip_address } : {}), ...(iface ? { interface: iface } : {}) });
            await events.record({ nodeId: node.id, kind: 'node_address_changed', message: `address ${node.ip_address ?? '-'} → ${updated.ip_address ?? '-'}, interface ${updated.interface ?? '-'}` });
            const body: Record<string, unknown> = nodeView(updated);
            if (regenerate_cert) {
              try {
                const { added_sans } = await ca.reissueServerCertificate([updated.ip_address!].filter(Boolean));
                body.certificate = { reissued: true, added_sans };
              } catch (err) {
                body.certificate = { reissued: false, added_sans: [], error: (err as Error).message };
              }
            }
            if (ip_address && node.wg_public_key) await publishPeers();
            return body;
          },
        },
        {
          method: 'POST',
          path: '/v1/nodes/{id}/cordon',
          auth: { role: 'admin' },
          summary: 'Mark unschedulable; running workloads are left alone',
          schemas: { params: NodeParams },
          handler: (req) => setAvailability(req.params.id, 'cordoned'),
        },
        {
          method: 'POST',
          path: '/v1/nodes/{id}/drain',
          auth: { role: 'admin' },
          summary: 'Cordon and move workloads off',
          schemas: { params: NodeParams },
          handler: (req) => setAvailability(req.params.id, 'drained'),
        },
        {
          method: 'POST',
          path: '/v1/nodes/{id}/uncordon',
          auth: { role: 'admin' },
          summary: 'Return a cordoned or drained node to service',
          schemas: { params: NodeParams },
          async handler(req) {
            const node = await nodes.require(req.params.id);
            if (node.availability === 'active') throw conflict(`Node ${node.id} is not cordoned or drained`);
            return setAvailability(node.id, 'active');
          },
        },
        {
          method: 'POST',
          path: '/v1/nodes/{id}/gpu-overcommit',
          auth: { role: 'admin' },
          summary: 'Set how many workloads may share one GPU (1, 2, 4 or 8)',
          schemas: {
            params: NodeParams,
            body: Type.Object({ gpu_overcommit_factor: Type.Integer({ enum: [1, 2, 4, 8] }) }, { additionalProperties: false }),
          },
          async handler(req) {
            await nodes.require(req.params.id);
            return nodeView(await nodes.change(req.params.id, { gpu_overcommit_factor: req.body.gpu_overcommit_factor }));
          },
        },
        {
          method: 'POST',
          path: '/v1/nodes/{id}/update-agent',
          auth: { role: 'admin' },
          summary: 'Queue an agent update: it downloads the new executable, checks it and restarts itself',
          status: 202,
          schemas: { params: NodeParams, response: TaskRef },
          async handler(req) {
            const node = await nodes.require(req.params.id);
            if (nodeStatus(node) !== 'ready') throw conflict(`Node ${node.id} is ${nodeStatus(node)}; update-agent needs it ready`);
            const binaries = services.provided.find(AgentBinariesRef);
            const binary = node.architecture ? binaries?.describe(node.architecture) : null;
            if (!binary) throw conflict(`No agent executable is built for ${node.architecture ?? 'an unknown architecture'}; run npm run build`);
            return queue(node, AgentUpdate, { architecture: node.architecture, version: binary.version, sha256: binary.sha256 });
          },
        },
        ...([
          ['os-update', OsUpdate, 'Queue a full OS package upgrade; the node needs a reboot afterwards when the OS says so'],
          ['check-updates', OsCheckUpdates, 'Re-check pending OS package updates now instead of at the daily check'],
          ['reboot', OsReboot, 'Queue a reboot'],
          ['stop', AgentStop, 'Stop the agent; the machine and its workloads keep running and the node shows offline'],
        ] as const).map(([verb, kind, summary]) => ({
          method: 'POST' as const,
          path: `/v1/nodes/{id}/${verb}`,
          auth: { role: 'admin' },
          summary,
          status: 202,
          schemas: { params: NodeParams, response: TaskRef },
          async handler(req: { params: { id: string } }) {
            return queue(await nodes.requireLive(req.params.id), kind);
          },
        })),
        {
          method: 'POST',
          path: '/v1/nodes/{id}/logs',
          auth: { role: 'admin' },
          summary: 'Queue a fetch of the agent’s log: the last `lines` (default 100, max 10000), or everything after `since`',
          status: 202,
          schemas: {
            params: NodeParams,
            query: Type.Object(
              { lines: Type.Optional(Type.Integer({ minimum: 1, maximum: 10000 })), since: Type.Optional(Type.String({ format: 'date-time' })) },
              { additionalProperties: false },
            ),
            response: TaskRef,
          },
          async handler(req) {
            const node = await nodes.requireLive(req.params.id);
            const payload = req.query.since ? { since: new Date(req.query.since).toISOString() } : { lines: Math.min(req.query.lines ?? settings.log_lines_default, settings.log_lines_max) };
            return queue(node, AgentLogs, payload, true);
          },
        },
        {
          method: 'GET',
          path: '/v1/nodes/{id}/logs/{taskId}',
          auth: { role: 'admin' },
          summary: 'The log fetch: status, and the lines once completed (read once)',
          schemas: { params: NodeTaskParams },
          handler: (req) => readTask(req.params.id, req.params.taskId, AgentLogs.name),
        },
        {
          method: 'POST',
          path: '/v1/nodes/{id}/cert',
          auth: { role: 'admin' },
          summary: 'Issue a client certificate (and key) for the node; shown once',
          status: 201,
          schemas: { params: NodeParams },
          async handler(req) {
            const node = await nodes.requireLive(req.params.id);
            const cert = await ca.issueClientCertificate(node.id);
            await events.record({ nodeId: node.id, kind: 'certificate_issued', message: `client certificate ${cert.serial} issued` });
            return { node_id: node.id, serial: cert.serial, certificate: cert.cert_pem, private_key: cert.key_pem, ca_pem: cert.ca_pem, expires_at: cert.expires_at };
          },
        },
        {
          method: 'POST',
          path: '/v1/nodes/{id}/cert/revoke',
          auth: { role: 'admin' },
          summary: 'Revoke every client certificate of the node; its agent is refused from the next request on',
          schemas: { params: NodeParams },
          async handler(req) {
            const node = await nodes.require(req.params.id);
            const revoked = await ca.revokeNode(node.id);
            await events.record({ nodeId: node.id, kind: 'certificates_revoked', message: `${revoked} certificate(s) revoked` });
            return { node_id: node.id, revoked };
          },
        },
        {
          method: 'POST',
          path: '/v1/nodes/{id}/unmanaged',
          auth: { role: 'admin' },
          summary: 'Scan the node’s orchestrator for workloads hangar did not create',
          status: 202,
          schemas: {
            params: NodeParams,
            query: Type.Object({ backend: Type.Union([Type.Literal('swarm'), Type.Literal('k8s')]) }, { additionalProperties: false }),
            response: TaskRef,
          },
          async handler(req) {
            const node = await nodes.requireLive(req.params.id);
            return queue(node, ScanUnmanaged, { backend: req.query.backend }, true);
          },
        },
        {
          method: 'GET',
          path: '/v1/nodes/{id}/unmanaged/{taskId}',
          auth: { role: 'admin' },
          summary: 'The scan: status, then `resources` when completed or `error` when failed (read once)',
          schemas: { params: NodeTaskParams },
          async handler(req) {
            const view = await readTask(req.params.id, req.params.taskId, ScanUnmanaged.name);
            const result = (view.result ?? {}) as { resources?: unknown[] };
            return { task_id: view.task_id, status: view.status, ...(view.status === 'completed' ? { resources: result.resources ?? [] } : {}), ...(view.error ? { error: view.error } : {}) };
          },
        },
      ],
    };
  },
});

export { Heartbeat };
