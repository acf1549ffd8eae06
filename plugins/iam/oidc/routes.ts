import { Type } from '@sinclair/typebox';
import { establishPrincipal } from '../../../core/auth/index.js';
import { notFound } from '../../../core/errors.js';
import { Reply } from '../../../core/http/reply.js';
import { addressKey, type RateLimiter } from '../../../core/ratelimit.js';
import { defineRoute, type HangarRequest, type RouteDef } from '../../../core/plugin.js';
import { cookie, type Sessions } from '../sessions.js';
import type { UserRecord, UserStore } from '../users.js';
import type { SingleSignOn } from './sso.js';

/**
 * The cookie that binds a dashboard login to the browser that began it (login CSRF: a callback URL
 * sent to a victim finds no cookie). `__Host-`: Secure, Path=/ and no Domain, so a sibling
 * subdomain cannot set one for this host.
 */
export const SSO_COOKIE = '__Host-hangar_sso';
/** Where the dashboard is served (plugins/dashboard). */
const DASHBOARD = '/ui/';

const ASCII = '^[\\x20-\\x7e]*$';

const bindingCookie = (value: string, maxAge: number) => `${SSO_COOKIE}=${value}; Path=/; HttpOnly; Secure; SameSite=Lax; Max-Age=${maxAge}`;

export interface SsoRouteDeps {
  sso: () => SingleSignOn | null;
  sessions: Sessions;
  users: UserStore;
  /** The control API's public URL (api.public_url), else this request's own origin. */
  apiUrl: (req: HangarRequest) => string;
  caPem: () => string | null;
  /** The store's counters (core/ratelimit.ts): logins begun per client address. */
  limits: RateLimiter;
  /** When the API key of a CLI login expires (iam.oidc.cli_key_lifetime_hours, within iam.api_key_max_lifetime_days). */
  keyExpiry: () => string;
}

const principalOf = (user: UserRecord) => ({ id: user.userid, name: user.name ?? user.username, role: user.role, method: 'oidc' });

/**
 * The single sign-on routes (docs/sso.md). Public: they are how a caller without credentials gets
 * some. Without `iam.oidc` each answers 404 saying so.
 */
export function ssoRoutes(deps: SsoRouteDeps): RouteDef[] {
  const configured = () => {
    const sso = deps.sso();
    if (!sso) throw notFound('Single sign-on is not configured on this hangar (iam.oidc)');
    return sso;
  };
  /** A login about to begin: counted against the caller's address (each stores a row, a device one also asks the provider). */
  const beginning = async (req: HangarRequest) => {
    const sso = configured();
    await deps.limits.count([[addressKey('sso-login', req.ip), sso.config.logins_begun_per_address]], 'SSO logins begun from this address (iam.oidc.logins_begun_per_address)');
    return sso;
  };
  const redirectUri = (req: HangarRequest) => `${deps.apiUrl(req)}/v1/auth/oidc/callback`;
  return [
    defineRoute({
      method: 'GET',
      path: '/v1/auth/oidc/start',
      auth: 'public',
      summary: 'Begin a dashboard login at the OpenID provider: a redirect to it (authorization code with PKCE, state and nonce)',
      description: 'Sets a short-lived HttpOnly cookie binding the login to this browser; the provider sends the browser back to GET /v1/auth/oidc/callback.',
      status: 302,
      produces: 'text/plain',
      errors: [404, 429, 502, 503],
      handler: async (req) => {
        const sso = await beginning(req);
        const started = await sso.startBrowser(redirectUri(req));
        return Reply.raw('', 'text/plain', { Location: started.location, 'Cache-Control': 'no-store', 'Set-Cookie': bindingCookie(started.binding, sso.config.login_timeout_seconds) }, 302);
      },
    }),
    defineRoute({
      method: 'GET',
      path: '/v1/auth/oidc/callback',
      auth: 'public',
      audited: true,
      summary: 'Where the OpenID provider sends the browser back: the code exchanged, the ID token verified, the dashboard session set, and a redirect to the dashboard',
      description:
        'The state is used once and must come with the cookie GET /v1/auth/oidc/start set. The ID token must verify against the provider’s keys and name this client, the nonce sent and a time not past; ' +
        'otherwise 401 (or 400) saying which, and nobody is logged in.',
      status: 302,
      produces: 'text/plain',
      errors: [401, 403, 404, 409, 502],
      schemas: {
        // OAuth's characters (RFC 6749 Appendix A: visible ASCII and space), short enough that any
        // accepted query stays far below the HTTP parser's header limit.
        query: Type.Object(
          {
            code: Type.Optional(Type.String({ maxLength: 2048, pattern: ASCII })),
            state: Type.Optional(Type.String({ maxLength: 200, pattern: ASCII })),
            iss: Type.Optional(Type.String({ maxLength: 500, pattern: ASCII })),
            error: Type.Optional(Type.String({ maxLength: 100, pattern: ASCII })),
            error_description: Type.Optional(Type.String({ maxLength: 500, pattern: ASCII })),
            session_state: Type.Optional(Type.String({ maxLength: 200, pattern: ASCII })),
          },
          { additionalProperties: false },
        ),
      },
      handler: async (req) => {
        const sso = configured();
        const user = await sso.finishBrowser(req.query as Record<string, unknown>, req.ctx.search, cookie(req.ctx.get('cookie'), SSO_COOKIE));
        establishPrincipal(req.ctx, principalOf(user));
        const session = await deps.sessions.start(user);
        req.ctx.append('Set-Cookie', session.cookie);
        req.ctx.append('Set-Cookie', bindingCookie('', 0));
        return Reply.raw('', 'text/plain', { Location: DASHBOARD, 'Cache-Control': 'no-store' }, 302);
      },
    }),
    defineRoute({
      method: 'POST',
      path: '/v1/auth/oidc/device',
      auth: 'public',
      summary: 'Begin a CLI login (hangar login --sso) with the OpenID provider’s device flow: the code to enter and where',
      description: 'hangar asks the provider (the client secret stays on the server) and keeps the device code; the caller gets its own handle to poll POST /v1/auth/oidc/device/token with.',
      status: 201,
      errors: [404, 429, 501, 502, 503],
      // A body is `{}`: `{"x": null}` is refused as any other property, not read as `{}`.
      preserveNullValues: true,
      schemas: {
        body: Type.Object({}, { additionalProperties: false }),
        response: Type.Object(
          {
            device_request: Type.String({ description: 'the handle to poll with: keep it to yourself' }),
            user_code: Type.String(),
            verification_uri: Type.String(),
            verification_uri_complete: Type.Union([Type.String(), Type.Null()]),
            expires_in: Type.Integer(),
            interval: Type.Integer({ description: 'seconds to wait between polls' }),
          },
          { additionalProperties: false },
        ),
      },
      handler: async (req) => {
        const { handle, ...started } = await (await beginning(req)).startDevice();
        return { device_request: handle, ...started };
      },
    }),
    defineRoute({
      method: 'POST',
      path: '/v1/auth/oidc/device/token',
      auth: 'public',
      summary: 'Poll a CLI login: 202 while the user has not approved it at the provider; then 200 with an expiring API key of the user (shown once)',
      description:
        'The key acts as its user, in the installation, for iam.oidc.cli_key_lifetime_hours; its user’s role and memberships follow the provider’s groups (set at this login). ' +
        'A login declined at the provider is a 403, an expired one a 400.',
      status: 200,
      otherStatuses: [202],
      errors: [403, 404, 409, 502],
      preserveNullValues: true,
      schemas: {
        body: Type.Object({ device_request: Type.String({ minLength: 1, maxLength: 200 }) }, { additionalProperties: false }),
        response: Type.Object(
          {
            status: Type.Union([Type.Literal('pending'), Type.Literal('approved')]),
            interval: Type.Optional(Type.Integer()),
            username: Type.Optional(Type.String()),
            user_id: Type.Optional(Type.String()),
            role: Type.Optional(Type.String()),
            access_key_id: Type.Optional(Type.String()),
            secret_access_key: Type.Optional(Type.String()),
            expires_at: Type.Optional(Type.String()),
            api_url: Type.Optional(Type.String()),
            ca_pem: Type.Optional(Type.Union([Type.String(), Type.Null()])),
          },
          { additionalProperties: false },
        ),
      },
      handler: async (req) => {
        const sso = configured();
        const polled = await sso.pollDevice(req.body.device_request);
        if (polled.status === 'pending') return Reply.data({ status: 'pending', interval: polled.interval }, 202);
        const { user } = polled;
        establishPrincipal(req.ctx, principalOf(user));
        const expiresAt = deps.keyExpiry();
        const { key, secret } = await deps.users.createKey(user.userid, 'hangar login --sso', undefined, { expires_at: expiresAt });
        return {
          status: 'approved' as const,
          username: user.username,
          user_id: user.userid,
          role: user.role,
          access_key_id: key.access_key_id,
          secret_access_key: secret,
          expires_at: expiresAt,
          api_url: deps.apiUrl(req),
          ca_pem: deps.caPem(),
        };
      },
    }),
  ];
}
