import { createHmac, randomBytes } from 'node:crypto';
import { Type } from '@sinclair/typebox';
import { establishPrincipal, type Authenticator } from '../../core/auth/index.js';
import type { Clock } from '../../core/clock.js';
import { safeEqual, sha256Hex } from '../../core/crypto.js';
import { createTables, type Migration } from '../../core/db/migrations.js';
import type { Store } from '../../core/db/store.js';
import { forbidden, unauthorized } from '../../core/errors.js';
import { Reply } from '../../core/http/reply.js';
import { defineRoute, type HangarRequest, type RouteDef } from '../../core/plugin.js';
import type { Identity } from './identity.js';
import { Password, UserView } from './schemas.js';
import { USER_CHANGES, type UserRecord } from './users.js';
import { recordId } from '../../core/db/columns.js';

export const SESSIONS = 'iam_sessions';
export const SESSION_COOKIE = 'hangar_session';
export const CSRF_HEADER = 'x-csrf-token';
/** Notices on this topic name a user one of whose sessions ended (logout): long-lived requests of that session end. */
export const SESSION_CHANGES = 'iam.sessions';

export const sessionMigrations: Migration[] = [
  createTables('004_sessions', {
    [SESSIONS]: (t) => {
      /** sha256 of the cookie's value: the value itself is never stored. */
      recordId(t);
      t.uuid('userid').notNullable().index();
      /** The user's token epoch when the session began: a password change ends it. */
      t.integer('token_epoch').notNullable();
      t.timestamp('created_at', { useTz: true }).notNullable();
      t.timestamp('expires_at', { useTz: true }).notNullable().index();
    },
  }),
];

const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);

/** The value of one cookie in a Cookie header. */
export function cookie(header: string | undefined, name: string): string | null {
  for (const part of (header ?? '').split(';')) {
    const eq = part.indexOf('=');
    if (eq > 0 && part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim();
  }
  return null;
}

/**
 * Whether a request a browser may have sent from another site's page comes from this control
 * plane's own origin: its `Origin`, when the browser sent one, is this origin (a request without
 * one — curl, the CLI, a browser's same-origin GET — is not a cross-site page's write).
 */
export function sameOrigin(ctx: HangarRequest['ctx']): boolean {
  const origin = ctx.get('origin');
  return !origin || origin === `${ctx.protocol}://${ctx.host}`;
}

/**
 * What a browser login must show to be this control plane's own dashboard logging in (login CSRF:
 * a page elsewhere would otherwise log the victim's browser into the attacker's account): it must
 * come from this origin — a browser names the page's origin in `Origin` and, in `Sec-Fetch-Site`,
 * whether it is this site. Its body is JSON like every write's: a form or a `text/plain` body, which
 * any page can make a browser send without asking first, is the pipeline's 415 before the body is
 * read (core/http/body.ts unsupportedContentType), and an `application/*+json` one needs a CORS
 * preflight, which this origin never grants to another.
 */
function assertOwnDashboard(ctx: HangarRequest['ctx']): void {
  const site = ctx.get('sec-fetch-site').toLowerCase();
  if (!sameOrigin(ctx) || (site && site !== 'same-origin' && site !== 'none')) {
    throw forbidden('A dashboard login is accepted from this control plane’s own pages only, not from another site');
  }
}

const setCookie = (value: string, maxAge: number) => `${SESSION_COOKIE}=${value}; Path=/; HttpOnly; Secure; SameSite=Strict; Max-Age=${maxAge}`;

/**
 * Browser sessions for the dashboard: `POST /v1/iam/session` checks a username and password (with
 * the same lockouts as `/v1/iam/login`) and sets an `HttpOnly; Secure; SameSite=Strict` cookie
 * holding a random token (only its hash is stored). The `session` authenticator accepts the cookie
 * on the control API; every write (anything but GET/HEAD/OPTIONS) must also carry the session's
 * CSRF token in `X-CSRF-Token` and, when the browser sends an `Origin`, come from this origin.
 * A session ends at logout, at its expiry, when its user is deleted, or when the password changes.
 */
export class Sessions {
  constructor(
    private readonly store: Store,
    private readonly clock: Clock,
    private readonly identity: Identity,
    private readonly csrfKey: Buffer,
    private readonly lifetimeSeconds: number,
  ) {}

  csrfToken(sessionId: string): string {
    return createHmac('sha256', this.csrfKey).update(sessionId).digest('base64url');
  }

  async start(user: UserRecord): Promise<{ cookie: string; id: string; expiresAt: string }> {
    const value = randomBytes(32).toString('base64url');
    const id = sha256Hex(value);
    const now = this.clock.now();
    const expiresAt = new Date(now.getTime() + this.lifetimeSeconds * 1000).toISOString();
    await this.store.knex(SESSIONS).insert({ id, userid: user.userid, token_epoch: user.token_epoch, created_at: now.toISOString(), expires_at: expiresAt });
    return { cookie: setCookie(value, this.lifetimeSeconds), id, expiresAt };
  }

  async end(id: string, userid: string): Promise<void> {
    const ended = await this.store.knex(SESSIONS).where({ id }).delete();
    if (ended) await this.store.notices.publish(SESSION_CHANGES, userid);
  }

  /** The session's row and its user when both are live, else the 401 saying why. */
  private async live(id: string): Promise<{ expiresAt: number; user: UserRecord }> {
    const row = await this.store.knex(SESSIONS).where({ id }).first();
    const expiresAt = row ? new Date(row.expires_at).getTime() : 0;
    if (!row || expiresAt <= this.clock.now().getTime()) throw unauthorized('The session has ended or expired: log in again');
    const user = await this.identity.users.get(row.userid);
    if (!user || user.token_epoch !== Number(row.token_epoch)) {
      await this.end(id, row.userid);
      throw unauthorized('The session has ended (the user was deleted, or its password or role changed): log in again');
    }
    return { expiresAt, user };
  }

  async purgeExpired(): Promise<number> {
    return this.store.knex(SESSIONS).where('expires_at', '<', this.clock.now().toISOString()).delete();
  }

  authenticator(): Authenticator {
    return {
      name: 'session',
      authenticate: async ({ ctx, listener }) => {
        const value = listener === 'control' ? cookie(ctx.get('cookie'), SESSION_COOKIE) : null;
        if (!value) return null;
        const id = sha256Hex(value);
        const { expiresAt, user } = await this.live(id);
        if (!SAFE_METHODS.has(ctx.method)) {
          if (!sameOrigin(ctx)) throw unauthorized('A session cookie is accepted on writes from this control plane’s own origin only, not from another site’s page');
          const sent = ctx.get(CSRF_HEADER);
          if (!sent || !safeEqual(sent, this.csrfToken(id))) {
            throw unauthorized('A write with the session cookie needs the X-CSRF-Token header: the csrf_token that POST or GET /v1/iam/session answered');
          }
        }
        return { id: user.userid, name: user.name ?? user.username, role: user.role, method: 'session', exp: Math.floor(expiresAt / 1000), expires_at: new Date(expiresAt).toISOString(), session_id: id };
      },
      // A session's principal holds while the session and its user live, with the user's role of the moment.
      revokedBy: [USER_CHANGES, SESSION_CHANGES],
      revalidate: async (principal) => {
        const { user } = await this.live(String(principal.session_id));
        return { ...principal, name: user.name ?? user.username, role: user.role };
      },
    };
  }

  /** POST, GET and DELETE /v1/iam/session. */
  routes(view: (user: UserRecord) => Promise<unknown>): RouteDef[] {
    const SessionView = Type.Object({
      user: UserView,
      csrf_token: Type.Union([Type.String(), Type.Null()], { description: 'send it as X-CSRF-Token on every write; null when the caller is not using a session' }),
      expires_at: Type.Union([Type.String(), Type.Null()]),
    });
    const current = async (req: HangarRequest) => {
      const user = await this.identity.users.require(req.principal!.id);
      const session = req.principal!.method === 'session' ? String(req.principal!.session_id) : null;
      return {
        user: await view(user),
        csrf_token: session ? this.csrfToken(session) : null,
        expires_at: session ? new Date(Number(req.principal!.exp) * 1000).toISOString() : null,
      };
    };
    return [
      defineRoute({
        method: 'POST',
        path: '/v1/iam/session',
        auth: 'public',
        summary: 'Log in a browser: sets the HttpOnly session cookie and answers the CSRF token for writes',
        description:
          'The same credentials and lockouts as POST /v1/iam/login. The cookie is HttpOnly, Secure, SameSite=Strict; writes with it need X-CSRF-Token. ' +
          'Only this control plane’s own pages may log in: the body must be Content-Type: application/json (415 otherwise), and a request whose Origin or Sec-Fetch-Site names another site is a 403.',
        status: 201,
        errors: [401, 403, 429],
        schemas: {
          body: Type.Object({ username: Type.String({ minLength: 1, maxLength: 120 }), password: Password }, { additionalProperties: false }),
          response: SessionView,
        },
        handler: async (req) => {
          assertOwnDashboard(req.ctx);
          const user = await this.identity.login('username', req.body.username, req.body.password, req.ip);
          if (!user) throw unauthorized('Invalid username or password');
          establishPrincipal(req.ctx, { id: user.userid, name: user.name ?? user.username, role: user.role, method: 'password' });
          const session = await this.start(user);
          return Reply.data({ user: await view(user), csrf_token: this.csrfToken(session.id), expires_at: session.expiresAt }, 201, { 'Set-Cookie': session.cookie });
        },
      }),
      defineRoute({
        method: 'GET',
        path: '/v1/iam/session',
        auth: 'authenticated',
        permission: 'account:read',
        summary: 'Who is logged in, and the session’s CSRF token (the dashboard asks on load)',
        schemas: { response: SessionView },
        handler: current,
      }),
      defineRoute({
        method: 'DELETE',
        path: '/v1/iam/session',
        auth: 'authenticated',
        permission: 'account:write',
        summary: 'Log out: the session ends and its cookie is cleared',
        handler: async (req) => {
          if (req.principal!.method === 'session') await this.end(String(req.principal!.session_id), req.principal!.id);
          return Reply.data({ ended: req.principal!.method === 'session' }, 200, { 'Set-Cookie': setCookie('', 0) });
        },
      }),
    ];
  }
}
