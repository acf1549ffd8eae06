import type { TSchema } from '@sinclair/typebox';
import type { AuthRequirement, ListenerName, RegisteredRoute, RouteDef, Services } from './plugin.js';
import { Reply } from './http/reply.js';
import { versionInfo } from './version.js';

type Json = Record<string, unknown>;

/** JSON Schema without TypeBox's symbol keys (JSON.stringify drops them; this does it eagerly). */
function plain(schema: TSchema | undefined): Json | undefined {
  return schema ? (JSON.parse(JSON.stringify(schema)) as Json) : undefined;
}

const ERROR_SCHEMA = {
  type: 'object',
  required: ['error', 'message', 'request_id'],
  properties: {
    error: { type: 'string', description: 'HTTP reason phrase' },
    message: { type: 'string' },
    details: { type: 'array', items: { type: 'object' } },
    request_id: { type: 'string' },
  },
};

function security(auth: AuthRequirement): Json[] | undefined {
  if (auth === 'public') return [];
  if (auth === 'agent') return [{ mutualTLS: [] }];
  return [{ bearerJwt: [] }, { hmac: [] }];
}

function describeAuth(auth: AuthRequirement): string {
  if (auth === 'public') return 'No authentication.';
  if (auth === 'agent') return 'Agents only: a client certificate issued by the control plane CA (CN = node id).';
  if (auth === 'authenticated') return 'Any authenticated caller (JWT or HMAC).';
  const self = auth.orSelf ? `, or the user whose id is \`{${auth.orSelf}}\`` : '';
  return `Requires role \`${auth.role}\`${self} (JWT or HMAC).`;
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

/** The OpenAPI 3.1 document of one listener, generated from the route table. */
export function buildOpenApi(routes: readonly RegisteredRoute[], listener: ListenerName, version: string): Json {
  const paths: Record<string, Record<string, Json>> = {};
  for (const { plugin, route } of routes) {
    if ((route.listener ?? 'control') !== listener) continue;
    const status = String(route.status ?? 200);
    const data = plain(route.schemas?.response);
    const responses: Json = {
      [status]: {
        description: 'Success',
        content: { 'application/json': { schema: { type: 'object', properties: { data: data ?? {} } } } },
      },
      default: { description: 'Error', content: { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } } },
    };
    const body = plain(route.schemas?.body);
    const op: Json = {
      operationId: `${route.method.toLowerCase()}${route.path.replace(/[{}]/g, '').replace(/[^a-zA-Z0-9]+(\w)/g, (_, c: string) => c.toUpperCase())}`,
      summary: route.summary,
      description: [route.description, describeAuth(route.auth)].filter(Boolean).join('\n\n'),
      tags: [plugin],
      parameters: parameters(route),
      responses,
      security: security(route.auth),
      'x-hangar-auth': route.auth,
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
    summary: `OpenAPI 3.1 document of the ${listener} API, generated from the route table`,
    handler: () => Reply.raw(JSON.stringify(buildOpenApi(services.routeTable(), listener, versionInfo.version)), 'application/json'),
  };
}
