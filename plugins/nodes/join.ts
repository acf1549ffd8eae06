import { createHash, createPublicKey, randomBytes, X509Certificate } from 'node:crypto';
import { Type } from '@sinclair/typebox';
import { sha256Hex } from '../../core/crypto.js';
import { badRequest, conflict, notFound, unauthorized } from '../../core/errors.js';
import { newId } from '../../core/ids.js';
import { defineRoute, type RouteDef } from '../../core/plugin.js';
import type { RateLimit } from '../../core/ratelimit.js';
import type { NodesContext, NodesPart } from './context.js';
import { JOIN_TOKENS, NODES } from './migrations.js';
import type { NodeRecord } from './nodes.js';
import { AGENT_ARCHITECTURES, joinCommand, joinUrls } from './join-command.js';
import { architectureName } from './presence.js';
import { IpAddress } from './schemas.js';

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

interface JoinToken {
  id: string;
  node_id: string | null;
  overlay_ip: string;
  expires_at: string;
  used_at: string | null;
}

/** Another join claimed the token (or the node it is bound to) first: the losing join's transaction rolls back; the message is its join_failed event's reason. */
class TokenTaken extends Error {}

function isP256PublicKey(pem: string): boolean {
  try {
    return createPublicKey(pem).asymmetricKeyDetails?.namedCurve === 'prime256v1';
  } catch {
    return false;
  }
}

/**
 * Joining: single-use join tokens (each reserving an overlay address) and the join itself. A join
 * is one transaction — the token claimed, the node inserted (or the node the token was made for
 * filled in), the overlay address handed from the token to the node, the client certificate
 * recorded — so a failure at any step leaves the token unused and no node behind, and of two joins
 * with one token exactly one gets a node.
 */
export function joining(ctx: NodesContext): NodesPart {
  const { services, settings, nodes, events, overlay, cadence, now, publishPeers } = ctx;
  const { db, clock, ca } = services;

  /** Whether a machine has joined as this node (a join token was used for it, or it heartbeated). */
  async function hasJoined(node: NodeRecord): Promise<boolean> {
    if (node.connection !== 'pending') return true;
    return Boolean(await db.knex(JOIN_TOKENS).where({ used_by_node: node.id }).first('id'));
  }

  const routes: RouteDef[] = [
    defineRoute({
      method: 'POST',
      path: '/v1/nodes/token',
      auth: { role: 'admin' },
      summary: 'Create a single-use join token; it reserves an overlay address for the node that will join',
      status: 201,
      schemas: {
        body: TokenCreate,
        response: Type.Object({
          id: Type.String(),
          token: Type.String(),
          expires_at: Type.String(),
          overlay_ip: Type.String(),
          ca_sha256: Type.String(),
          api_url: Type.String({ description: 'the URL the machine should join with: api.public_url, else the first of api.public_addresses, else an address of this host a machine can reach' }),
          api_urls: Type.Array(Type.String(), { description: 'every such URL, best first (api_url is the first)' }),
          join_commands: Type.Object(Object.fromEntries(AGENT_ARCHITECTURES.map((a) => [a, Type.String()])), {
            description: 'per architecture, the one command that downloads the agent (compressed) and joins with this token through api_url',
          }),
        }),
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
        const apiUrls = joinUrls(services.config.api, services.ports.get('control') ?? services.config.api.port, req.ctx.host);
        const joinCommands = Object.fromEntries(AGENT_ARCHITECTURES.map((a) => [a, joinCommand(apiUrls[0]!, a, token)]));
        return { id, token, expires_at: expires, overlay_ip: ip, ca_sha256: caSha256, api_url: apiUrls[0]!, api_urls: apiUrls, join_commands: joinCommands };
      },
    }),
    defineRoute({
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
    }),
    defineRoute({
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
        const token: JoinToken | undefined = await db.knex(JOIN_TOKENS).where({ token_hash: sha256Hex(secret ?? '') }).first();
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
        const nodeId = token.node_id ?? newId('node');
        const ipAddress = req.body.ip_address ?? caller;
        const values = {
          hostname: req.body.hostname,
          ip_address: ipAddress,
          architecture: req.body.architecture ? architectureName(req.body.architecture) : null,
          overlay_ip: token.overlay_ip,
          wg_public_key: req.body.wg_public_key ?? null,
          wg_port: req.body.wg_port ?? null,
        };
        let cert;
        try {
          cert = await db.knex.transaction(async (trx) => {
            // The claim comes first: of two joins with one token, exactly one gets past it (the other
            // waits for the winner's row lock on PostgreSQL, or for its turn on SQLite, and finds it used).
            const claimed = await trx(JOIN_TOKENS).where({ id: token.id }).whereNull('used_at').update({ used_at: now(), used_by_node: nodeId });
            if (!claimed) throw new TokenTaken('token already used');
            if (token.node_id) {
              // Two tokens bound to one node, used at once: the node's row lock (PostgreSQL; SQLite
              // runs one writer at a time) orders them, and the later one finds the node taken.
              await trx(NODES).where({ id: nodeId }).forUpdate().first('id');
              if (await trx(JOIN_TOKENS).where({ used_by_node: nodeId }).whereNot({ id: token.id }).first('id')) throw new TokenTaken('the node the token was made for is taken');
              await nodes.change(nodeId, values, trx);
            }
            else await nodes.insert({ id: nodeId, name: req.body.hostname, ...values, connection: 'pending', availability: 'active', created_at: now(), updated_at: now() }, trx);
            await overlay.transfer(token.overlay_ip, nodeId, trx);
            return ca.issueClientCertificate(nodeId, req.body.public_key, trx);
          });
        } catch (err) {
          if (err instanceof TokenTaken) throw await fail(err.message);
          throw err;
        }
        await events.record({ nodeId, kind: 'node_joined', message: `${req.body.hostname} joined from ${ipAddress}`, data: { token_id: token.id } });
        // Counted now, not at the next count: a fleet joining at once hears the interval its size calls for.
        if (!token.node_id) cadence.setFleet(cadence.fleetSize + 1);
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
    }),
  ];
  return { routes };
}
