import type { TSchema } from '@sinclair/typebox';
import { reasonPhrase } from './errors.js';
import { permissionOf } from './auth/permissions.js';
import type { AuthRequirement, ListenerName, RegisteredRoute, RouteDef, Services } from './plugin.js';
import { Reply } from './http/reply.js';
import { versionInfo } from './version.js';
import { nullableOptionals } from './validation.js';

type Json = Record<string, unknown>;

/** JSON Schema without TypeBox's symbol keys (JSON.stringify drops them; this does it eagerly). */
function plain(schema: TSchema | undefined): Json | undefined {
  return schema ? (JSON.parse(JSON.stringify(schema)) as Json) : undefined;
}

const ERROR_SCHEMA = {
  type: 'object',
  required: ['error', 'message', 'request_id'],
  additionalProperties: false,
  properties: {
    error: { type: 'string', description: 'HTTP reason phrase' },
    message: { type: 'string' },
    details: { type: 'array', items: { type: 'object' } },
    request_id: { type: 'string' },
  },
};

/** One event of a `text/event-stream` answer (OpenAPI 3.1 has no itemSchema; tools read the schema per event). */
const SSE_EVENT = {
  type: 'object',
  required: ['data'],
  properties: { data: { type: 'string', description: 'JSON' }, event: { type: 'string' }, id: { type: 'string' }, retry: { type: 'integer' } },
};

function security(auth: AuthRequirement): Json[] | undefined {
  if (auth === 'public') return [];
  if (auth === 'agent') return [{ mutualTLS: [] }];
  return [{ bearerJwt: [] }, { hmac: [] }];
}

function describeAuth(auth: AuthRequirement, permission: string): string {
  if (auth === 'public') return 'No authentication.';
  if (auth === 'agent') return 'Agents only: a client certificate issued by the control plane CA (CN = node id).';
  const needs = `Needs the permission \`${permission}\` (JWT, session or HMAC; docs/tenancy.md)`;
  if (auth === 'authenticated') return `${needs}; the role \`user\` holds it.`;
  const self = auth.orSelf ? `, or to be the user whose id is \`{${auth.orSelf}}\`` : '';
  return `${needs}, or the role \`${auth.role}\`${self}.`;
}

function parameters(route: RegisteredRoute['route']): Json[] {
  const out: Json[] = [];
  const params = plain(route.schemas?.params)?.properties as Record<string, Json> | undefined;
  for (const [, name] of route.path.matchAll(/\{(\w+)\}/g)) {
    out.push({ name, in: 'path', required: true, schema: params?.[name!] ?? { type: 'string' } });
  }
  const query = plain(route.schemas?.query);
  const required = new Set((query?.required as string[] | undefined) ?? []);
  for (const [name, schema] of Object.entries((query?.properties as Record<string, Json> | undefined) ?? {})) {
    out.push({ name, in: 'query', required: required.has(name), schema, ...(schema.description ? { description: schema.description } : {}) });
  }
  return out;
}

const WRITES = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);

/** Whether a route answers pages: `{data: [...], next_cursor}` (its query takes a cursor). */
/** A scoped list takes `?project=` (core/auth/scope.ts) even when its own query schema does not name it. */
function scopedListParameters(route: RouteDef, params: Json[]): Json[] {
  if (!route.scope?.list || params.some((p) => p.in === 'query' && p.name === 'project')) return params;
  return [...params, { name: 'project', in: 'query', required: false, description: 'only the items of this project (id or name) that you may see', schema: { type: 'string', minLength: 1 } }];
}

export function isPaged(route: RouteDef): boolean {
  return Boolean((route.schemas?.query as { properties?: Json } | undefined)?.properties?.cursor);
}

/** The statuses a route answers with success. */
export function successStatuses(route: RouteDef): number[] {
  return [...new Set([route.status ?? 200, ...(route.otherStatuses ?? [])])].sort();
}

/**
 * The error statuses a route may answer: what core answers for any route like it, plus what the
 * route declares its handler answers.
 */
export function errorStatuses(route: RouteDef): number[] {
  const statuses = new Set<number>([400, 413, 500, ...(route.errors ?? [])]);
  if (route.auth !== 'public') statuses.add(401);
  // A role that does not grant the route's permission: any but admin's on a role-guarded route; an
  // auditor's on an open one that changes something but the caller's own account (core/auth/permissions.ts);
  // and on any route a scoped API key limited to other permissions (every one holds account:read).
  const permission = permissionOf(route);
  if (typeof route.auth === 'object' || (route.auth === 'authenticated' && permission !== 'account:read')) statuses.add(403);
  // A body arrives in time (408) and takes one of a few slots of its sender (429) and of everyone (503),
  // with credentials or without (core/http/body.ts); a write takes JSON only (415, core/http/body.ts).
  // A signed request (HMAC) has its body read before its signature is checked, on any route that takes
  // credentials, and past its address's failed signatures a failure is a 429 (plugins/iam/authenticators.ts).
  if (route.auth !== 'agent' || route.schemas?.body || WRITES.has(route.method)) [408, 429, 503].forEach((s) => statuses.add(s));
  if (route.schemas?.body || WRITES.has(route.method)) statuses.add(415);
  // Writes and lookups name things that may not exist or may clash (a unique name taken).
  if (route.path.includes('{') || route.schemas?.body || WRITES.has(route.method)) statuses.add(404);
  if (WRITES.has(route.method)) statuses.add(409);
  // A write the store refuses for want of space (core/http/koa-app.ts).
  if (WRITES.has(route.method)) statuses.add(507);
  return [...statuses].sort();
}

/** The success content of a route: the `{data}` envelope (paged or not), a raw type, or nothing (204). */
function successContent(route: RouteDef, status: number): Json | undefined {
  if (status === 204) return undefined;
  const response = plain(route.schemas?.response);
  if (route.produces) {
    const types = Array.isArray(route.produces) ? route.produces : [route.produces];
    const schemaOf = (type: string) => (type === 'application/json' ? (response ?? {}) : type === 'text/event-stream' ? SSE_EVENT : { type: 'string', format: 'binary' });
    return Object.fromEntries(types.map((type) => [type, { schema: schemaOf(type) }]));
  }
  const envelope = isPaged(route)
    ? {
        type: 'object',
        required: ['data', 'next_cursor'],
        additionalProperties: false,
        properties: {
          data: response ?? { type: 'array' },
          next_cursor: { type: ['string', 'null'], description: 'pass as `cursor` for the next page; null on the last page' },
        },
      }
    : { type: 'object', required: ['data'], additionalProperties: false, properties: { data: response ?? {} } };
  return { 'application/json': { schema: envelope } };
}

/** The OpenAPI 3.1 document of one listener, generated from the route table. */
export function buildOpenApi(routes: readonly RegisteredRoute[], listener: ListenerName, version: string): Json {
  const paths: Record<string, Record<string, Json>> = {};
  for (const { plugin, route } of routes) {
    if ((route.listener ?? 'control') !== listener) continue;
    const responses: Json = {};
    for (const status of successStatuses(route)) {
      const content = successContent(route, status);
      responses[String(status)] = { description: reasonPhrase(status), ...(content ? { content } : {}) };
    }
    for (const status of errorStatuses(route)) {
      responses[String(status)] = {
        description: reasonPhrase(status),
        content: { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } },
        ...(status === 429 || status === 503 ? { headers: { 'Retry-After': { schema: { type: 'integer' }, description: 'seconds to wait' } } } : {}),
      };
    }
    const declared = plain(route.schemas?.body);
    const body = declared && !route.preserveNullValues ? (nullableOptionals(declared) as Json) : declared;
    const op: Json = {
      operationId: `${route.method.toLowerCase()}${route.path.replace(/[{}]/g, '').replace(/[^a-zA-Z0-9]+(\w)/g, (_, c: string) => c.toUpperCase())}`,
      summary: route.summary,
      description: [route.description, describeAuth(route.auth, permissionOf(route))].filter(Boolean).join('\n\n'),
      tags: [plugin],
      parameters: scopedListParameters(route, parameters(route)),
      responses,
      security: security(route.auth),
      'x-hangar-auth': route.auth,
      'x-hangar-permission': permissionOf(route),
      // The project scope (core/auth/scope.ts): which resources' projects decide, or the kind a list answers.
      ...(route.scope ? { 'x-hangar-scope': route.scope as unknown as Json } : {}),
    };
    if (body) {
      const content: Json = { 'application/json': { schema: body } };
      if (route.xml) {
        content['application/xml'] = { schema: body };
        content['text/xml'] = { schema: body };
      }
      op.requestBody = { required: Array.isArray(body.required) && body.required.length > 0, content };
    }
    (paths[route.path] ??= {})[route.method.toLowerCase()] = op;
  }
  return {
    openapi: '3.1.0',
    info: {
      title: listener === 'control' ? 'hangar control API' : 'hangar login API',
      version,
      description: 'Generated from the route table of the loaded plugins.',
    },
    paths,
    components: {
      schemas: { Error: ERROR_SCHEMA },
      securitySchemes: {
        bearerJwt: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT' },
        hmac: { type: 'apiKey', in: 'header', name: 'X-Signature', description: 'HMAC request signing; see docs/api-auth.md' },
        mutualTLS: { type: 'mutualTLS' },
      },
    },
  };
}

/** The route that serves a listener's OpenAPI document. */
export function openApiRoute(services: Services, listener: ListenerName, path: string): RouteDef {
  return {
    method: 'GET',
    path,
    listener,
    auth: 'public',
    produces: 'application/json',
    summary: `OpenAPI 3.1 document of the ${listener} API, generated from the route table`,
    schemas: { response: { type: 'object', required: ['openapi', 'info', 'paths'], properties: { openapi: { const: '3.1.0' } } } as unknown as TSchema },
    handler: () => Reply.raw(JSON.stringify(buildOpenApi(services.routeTable(), listener, versionInfo.version)), 'application/json'),
  };
}
