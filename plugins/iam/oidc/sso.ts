import type * as OpenidClient from 'openid-client';
import type { Clock } from '../../../core/clock.js';
import { sha256Hex, type SecretBox } from '../../../core/crypto.js';
import type { Store } from '../../../core/db/store.js';
import { badRequest, conflict, forbidden, HttpError, unauthorized } from '../../../core/errors.js';
import { randomToken } from '../../../core/ids.js';
import type { Logger } from '../../../core/log.js';
import { MEMBER_CHANGES, PROJECT_MEMBERS, type ProjectsApi } from '../../projects/api.js';
import type { MaxLifetime } from '../keys.js';
import type { UserRecord, UserStore } from '../users.js';
import type { OidcConfig } from './config.js';
import { groupsOf, mapGroups } from './mapping.js';
import { SSO_FLOWS, SSO_IDENTITIES } from './migrations.js';

/**
 * openid-client (with oauth4webapi and jose) is loaded by the first SSO login's discovery
 * (`SingleSignOn.provider`, which every use below follows), not with every start of a control plane.
 */
let oidc: typeof OpenidClient;

/** What an SSO user's password column holds: no password hash verifies against it, so a password login never succeeds. */
export const NO_PASSWORD = '!sso';
const USERNAME = /^[A-Za-z0-9._@-]{1,20}$/;
const DEVICE_GRANT = 'urn:ietf:params:oauth:grant-type:device_code';

/** The 502 of a provider that does not answer as one should (its own words are logged, never repeated). */
const providerFailed = (what: string) => new HttpError(502, `The OpenID provider ${what}: see the control plane's log`);

/**
 * Why an ID token (or the token answer) was refused, in fixed words: the library's message names
 * the check that failed; nothing of the token is repeated.
 */
function refusal(err: unknown): HttpError | null {
  const messages: string[] = [];
  for (let e = err as { message?: string; cause?: unknown } | undefined, i = 0; e && i < 5; e = e.cause as typeof e, i++) if (e.message) messages.push(e.message);
  const text = messages.join(' | ');
  const why = (reason: string) => unauthorized(`The provider's ID token was refused: ${reason}; nobody was logged in`);
  if (/signature verification failed|KEY_SELECTION|no applicable key|JWS/i.test(text) || (err as { code?: string })?.code === 'OAUTH_KEY_SELECTION_FAILED') return why('its signature does not verify against the provider’s keys (JWKS)');
  if (/"aud"|audience|"azp"/.test(text)) return why('it is not meant for this client (audience)');
  if (/"exp"|expiration|"iat"|"nbf"/.test(text)) return why('it has expired (or is not valid yet)');
  if (/nonce/.test(text)) return why('its nonce is not the one this login sent');
  if (/"iss"|issuer/.test(text)) return why('it was not issued by the configured issuer');
  return null;
}

export interface SsoDeps {
  store: Store;
  clock: Clock;
  users: UserStore;
  box: SecretBox;
  log: Logger;
  projects: () => ProjectsApi | undefined;
}

export interface BrowserStart {
  location: string;
  binding: string;
}

export type DevicePoll = { status: 'pending'; interval: number } | { status: 'approved'; user: UserRecord };

/** A row of the SSO flows table (./migrations.ts) as read back (timestamps as the driver gives them). */
interface FlowRow {
  id: string;
  kind: string;
  binding: string | null;
  sealed: string;
  expires_at: string | Date;
}

/**
 * Single sign-on with an OpenID Connect provider (openid-client): its discovery read lazily and
 * kept, the dashboard's authorization code flow with PKCE, the CLI's device flow (RFC 8628) run
 * by hangar so that the client secret stays on the server, ID tokens verified against the
 * provider's keys (signature, issuer, audience, expiry, nonce), and users made or updated from the
 * claims, their groups mapped to roles at every login.
 */
export class SingleSignOn {
  private discovered: Promise<OpenidClient.Configuration> | null = null;

  constructor(
    readonly config: OidcConfig,
    private readonly deps: SsoDeps,
  ) {}

  /** The provider's configuration, discovered at first use and kept; a failed discovery is tried again next time. */
  private async provider(): Promise<OpenidClient.Configuration> {
    this.discovered ??= (async () => {
      oidc ??= await import('openid-client');
      const c = await oidc.discovery(this.config.issuerUrl, this.config.client_id, undefined, oidc.ClientSecretBasic(this.config.clientSecret), {
        execute: this.config.allow_http ? [oidc.allowInsecureRequests] : [],
        timeout: 10,
      });
      // ID tokens from the token endpoint too are verified against the provider's JWKS (cached by the library).
      oidc.enableNonRepudiationChecks(c);
      return c;
    })();
    try {
      return await this.discovered;
    } catch (err) {
      this.discovered = null;
      this.deps.log.warn({ err: { message: (err as Error).message }, issuer: this.config.issuer }, 'sso: the provider’s discovery failed');
      throw providerFailed(`at ${this.config.issuer} did not answer its discovery (/.well-known/openid-configuration)`);
    }
  }

  /** The longest an API key of an SSO user lives (its CLI login's, or one it makes itself): iam.oidc.cli_key_lifetime_hours. */
  keyCap(): MaxLifetime {
    const hours = this.config.cli_key_lifetime_hours;
    return { ms: hours * 3600_000, says: `${hours} hours for a single sign-on user (iam.oidc.cli_key_lifetime_hours)` };
  }

  /** Whether the user is linked to a provider account (an SSO user). */
  async linked(userid: string): Promise<boolean> {
    return Boolean(await this.deps.store.knex(SSO_IDENTITIES).where({ userid }).first('userid'));
  }

  private now(): Date {
    return this.deps.clock.now();
  }

  private async saveFlow(kind: 'browser' | 'device', secret: Record<string, unknown>, extra: { binding?: string; interval?: number; expiresIn?: number } = {}): Promise<string> {
    const now = this.now();
    const handle = randomToken(43);
    const lifetime = Math.min(extra.expiresIn ?? Infinity, this.config.login_timeout_seconds);
    await this.deps.store.knex(SSO_FLOWS).insert({
      id: sha256Hex(handle),
      kind,
      binding: extra.binding ? sha256Hex(extra.binding) : null,
      sealed: this.deps.box.seal(JSON.stringify(secret)),
      interval: extra.interval ?? null,
      next_poll_at: kind === 'device' ? now.toISOString() : null,
      created_at: now.toISOString(),
      expires_at: new Date(now.getTime() + lifetime * 1000).toISOString(),
    });
    return handle;
  }

  /**
   * Refuses a new login while iam.oidc.max_open_logins are under way (each is a row; an unauthenticated
   * caller must not fill the store): 503 with Retry-After, the time until the first of them expires.
   * Counted then inserted: concurrent starts may pass the cap by a few, which is all it needs.
   */
  private async assertRoom(now: Date): Promise<void> {
    const max = this.config.max_open_logins;
    const open = () => this.deps.store.knex(SSO_FLOWS).where('expires_at', '>', now.toISOString());
    const [row] = await open().count<{ n: string | number }[]>({ n: '*' });
    if (Number(row?.n ?? 0) < max) return;
    const first = await open().min<{ at: string | Date | null }[]>({ at: 'expires_at' });
    const seconds = Math.max(1, Math.ceil((new Date(first[0]?.at ?? now).getTime() - now.getTime()) / 1000));
    throw new HttpError(503, `Too many SSO logins under way (${max}, iam.oidc.max_open_logins); try again in ${seconds} s`, undefined, { 'Retry-After': String(seconds) });
  }

  async purgeExpired(): Promise<number> {
    return this.deps.store.knex(SSO_FLOWS).where('expires_at', '<', this.now().toISOString()).delete();
  }

  /** Begins a dashboard login: the provider's authorization URL (state, nonce, S256 code challenge) and the value of the browser's binding cookie. */
  async startBrowser(redirectUri: string): Promise<BrowserStart> {
    await this.assertRoom(this.now());
    const provider = await this.provider();
    const nonce = oidc.randomNonce();
    const verifier = oidc.randomPKCECodeVerifier();
    const binding = randomToken(43);
    const state = await this.saveFlow('browser', { nonce, verifier, redirect_uri: redirectUri }, { binding });
    const url = oidc.buildAuthorizationUrl(provider, {
      redirect_uri: redirectUri,
      scope: this.config.scopes.join(' '),
      state,
      nonce,
      code_challenge: await oidc.calculatePKCECodeChallenge(verifier),
      code_challenge_method: 'S256',
    });
    return { location: url.href, binding };
  }

  /**
   * Takes the browser flow a state names out of the store, if the binding cookie is its own: it is
   * used once (a replayed state finds nothing), and only by the browser that began it (one without
   * its cookie burns nothing: the flow stays for its browser). Null when there is none, it has
   * expired, or another took it.
   */
  private async takeFlow(state: string, bindingCookie: string | null): Promise<{ row: FlowRow; secret: Record<string, string> } | null> {
    const id = sha256Hex(state);
    const row = await this.deps.store.knex(SSO_FLOWS).where({ id, kind: 'browser' }).first();
    if (!row) return null;
    const binding = bindingCookie ? sha256Hex(bindingCookie) : null;
    if (!binding || binding !== row.binding) {
      throw badRequest('This login was begun in another browser (its cookie is missing): sign in again from this one');
    }
    const taken = await this.deps.store.knex(SSO_FLOWS).where({ id, kind: 'browser', binding }).delete();
    if (!taken || new Date(row.expires_at).getTime() <= this.now().getTime()) return null;
    return { row, secret: JSON.parse(this.deps.box.openString(row.sealed)) as Record<string, string> };
  }

  /** The provider's redirect back to the dashboard: the code exchanged (PKCE), the ID token verified, the user made or updated. */
  async finishBrowser(query: Record<string, unknown>, search: string, bindingCookie: string | null): Promise<UserRecord> {
    const state = typeof query.state === 'string' ? query.state : '';
    if (!state) throw badRequest('Validation failed: query.state is missing: begin the login at GET /v1/auth/oidc/start', [{ path: 'query.state', message: 'is required' }]);
    const flow = await this.takeFlow(state, bindingCookie);
    if (!flow) throw badRequest('This login’s state is unknown, used already or expired: sign in again');
    if (typeof query.error === 'string') {
      const code = /^[a-z_]{1,64}$/.test(query.error) ? ` (${query.error})` : '';
      throw unauthorized(`The provider did not log you in${code}: sign in again`);
    }
    if (typeof query.code !== 'string' || !query.code) throw badRequest('Validation failed: query.code is missing', [{ path: 'query.code', message: 'is required' }]);
    const provider = await this.provider();
    const tokens = await this.exchange(() =>
      oidc.authorizationCodeGrant(provider, new URL(`${flow.secret.redirect_uri}${search}`), {
        pkceCodeVerifier: flow.secret.verifier,
        expectedState: state,
        expectedNonce: flow.secret.nonce,
        idTokenExpected: true,
      }),
    );
    return this.signIn(provider, tokens);
  }

  /** Calls the token endpoint; its refusals and a refused ID token become the 4xx saying why. */
  private async exchange<T>(call: () => Promise<T>): Promise<T> {
    try {
      return await call();
    } catch (err) {
      if (err instanceof HttpError) throw err;
      if (err instanceof oidc.ResponseBodyError) {
        const code = /^[a-z_]{1,64}$/.test(err.error) ? ` (${err.error})` : '';
        throw badRequest(`The provider refused to exchange the login's code${code}: sign in again`);
      }
      const refused = refusal(err);
      if (refused) throw refused;
      this.deps.log.warn({ err: { message: (err as Error).message } }, 'sso: the token exchange failed');
      throw providerFailed('answered the token exchange with something that is not a valid answer');
    }
  }

  /** Begins a CLI login (device flow) at the provider; hangar keeps the device code and hands out its own poll handle. */
  async startDevice(): Promise<{ handle: string; user_code: string; verification_uri: string; verification_uri_complete: string | null; expires_in: number; interval: number }> {
    await this.assertRoom(this.now());
    const provider = await this.provider();
    if (!provider.serverMetadata().device_authorization_endpoint) throw new HttpError(501, 'The OpenID provider offers no device authorization (RFC 8628): hangar login --sso cannot use it');
    let answer: Awaited<ReturnType<typeof oidc.initiateDeviceAuthorization>>;
    try {
      answer = await oidc.initiateDeviceAuthorization(provider, { scope: this.config.scopes.join(' ') });
    } catch (err) {
      if (err instanceof oidc.ResponseBodyError) throw badRequest(`The provider refused to begin a device login${/^[a-z_]{1,64}$/.test(err.error) ? ` (${err.error})` : ''}`);
      this.deps.log.warn({ err: { message: (err as Error).message } }, 'sso: the device authorization failed');
      throw providerFailed('did not begin the device login');
    }
    const interval = answer.interval ?? 5;
    const expiresIn = Math.min(answer.expires_in, this.config.login_timeout_seconds);
    const handle = await this.saveFlow('device', { device_code: answer.device_code }, { interval, expiresIn });
    return {
      handle,
      user_code: answer.user_code,
      verification_uri: answer.verification_uri,
      verification_uri_complete: answer.verification_uri_complete ?? null,
      expires_in: expiresIn,
      interval,
    };
  }

  /** One poll of a device login: pending (ask again after `interval`), or the user it logged in. */
  async pollDevice(handle: string): Promise<DevicePoll> {
    const knex = this.deps.store.knex;
    const id = sha256Hex(handle);
    const row = await knex(SSO_FLOWS).where({ id, kind: 'device' }).first();
    const now = this.now();
    if (!row || new Date(row.expires_at).getTime() <= now.getTime()) {
      if (row) await knex(SSO_FLOWS).where({ id }).delete();
      throw badRequest('This device login is unknown, finished or expired: run hangar login --sso again');
    }
    const interval = Number(row.interval ?? 5);
    if (row.next_poll_at && new Date(row.next_poll_at).getTime() > now.getTime()) return { status: 'pending', interval };
    const { device_code } = JSON.parse(this.deps.box.openString(row.sealed)) as { device_code: string };
    const provider = await this.provider();
    const later = async (wait: number) => {
      await knex(SSO_FLOWS).where({ id }).update({ interval: wait, next_poll_at: new Date(now.getTime() + wait * 1000).toISOString() });
      return { status: 'pending' as const, interval: wait };
    };
    let tokens: Awaited<ReturnType<typeof oidc.genericGrantRequest>>;
    try {
      tokens = await oidc.genericGrantRequest(provider, DEVICE_GRANT, { device_code });
    } catch (err) {
      if (err instanceof oidc.ResponseBodyError) {
        if (err.error === 'authorization_pending') return later(interval);
        if (err.error === 'slow_down') return later(interval + 5);
        await knex(SSO_FLOWS).where({ id }).delete();
        if (err.error === 'access_denied') throw forbidden('The login was declined at the provider');
        if (err.error === 'expired_token') throw badRequest('The device login expired before it was approved: run hangar login --sso again');
      }
      await knex(SSO_FLOWS).where({ id }).delete();
      return this.exchange(() => Promise.reject(err));
    }
    // Approved: the flow is used once (a concurrent poll that also got through finds it gone).
    if (!(await knex(SSO_FLOWS).where({ id }).delete())) throw badRequest('This device login is finished already');
    return { status: 'approved', user: await this.signIn(provider, tokens) };
  }

  /** The verified claims of a token answer (and the userinfo's groups when the ID token carries none); then the user. */
  private async signIn(provider: OpenidClient.Configuration, tokens: OpenidClient.TokenEndpointResponse & OpenidClient.TokenEndpointResponseHelpers): Promise<UserRecord> {
    const claims = tokens.claims();
    if (!claims) throw unauthorized('The provider answered no ID token: nobody was logged in');
    let all: Record<string, unknown> = { ...claims };
    if (all[this.config.groups_claim] === undefined && tokens.access_token && provider.serverMetadata().userinfo_endpoint) {
      try {
        all = { ...(await oidc.fetchUserInfo(provider, tokens.access_token, claims.sub)), ...all };
      } catch (err) {
        // Logging in without them would take the user's role and memberships away.
        this.deps.log.warn({ err: { message: (err as Error).message } }, 'sso: the userinfo endpoint did not answer the groups');
        throw providerFailed(`did not answer its userinfo request, where the groups (${this.config.groups_claim}) come from; nobody was logged in`);
      }
    }
    return this.account(String(claims.iss), String(claims.sub), all);
  }

  /**
   * The hangar user of a provider account, made at its first login, its role and its memberships of
   * the projects the mapping names set from its groups at every login. The link is (issuer, subject):
   * a local user of the same name is never taken over (409 until an admin renames or deletes it).
   */
  async account(issuer: string, subject: string, claims: Record<string, unknown>): Promise<UserRecord> {
    const { store, users, clock, log } = this.deps;
    const groups = groupsOf(claims, this.config.groups_claim);
    const mapped = mapGroups(this.config, groups);
    const link = await store.knex(SSO_IDENTITIES).where({ issuer, subject }).first();
    if (!mapped.role) {
      // Removed at the provider: what it had here goes before the refusal, not at some later login.
      if (link) await this.cutOff(link.userid, mapped.projects);
      throw forbidden('None of your groups at the provider gives you a role in this hangar (iam.oidc.roles; iam.oidc.default_role is null): ask its administrators');
    }
    const now = clock.now().toISOString();
    const name = typeof claims.name === 'string' ? claims.name.slice(0, 50) : null;
    let user: UserRecord;
    if (link) {
      const linked = await users.get(link.userid);
      if (!linked) throw forbidden('The hangar user of this SSO account was deleted: an admin decides whether it comes back');
      user = linked;
      if (user.role !== mapped.role || (name && user.name !== name)) {
        user = (await users.update(user.userid, { role: mapped.role, ...(name && user.name !== name ? { name } : {}) })).user;
        log.info({ user_id: user.userid, role: user.role }, 'sso: role or name updated from the provider');
      }
      await store.knex(SSO_IDENTITIES).where({ issuer, subject }).update({ last_login_at: now });
    } else {
      const username = claims[this.config.username_claim];
      if (typeof username !== 'string' || !USERNAME.test(username)) {
        throw forbidden(`The provider's ${this.config.username_claim} claim is not a hangar username (1 to 20 letters, digits, . _ @ -): set iam.oidc.username_claim to another claim`);
      }
      if (await users.findForLogin('username', username)) {
        throw conflict(`A hangar user named ${username} exists already and is not this SSO account: an SSO login never takes over a local user (an admin renames or deletes it first)`);
      }
      user = await store.knex.transaction(async (trx) => {
        const made = await users.create({ username, name, email: null, passwordHash: NO_PASSWORD, role: mapped.role! }, trx);
        await trx(SSO_IDENTITIES).insert({ issuer, subject, userid: made.userid, created_at: now, last_login_at: now });
        return made;
      });
      log.info({ user_id: user.userid, username, role: user.role }, 'sso: user created at its first login');
    }
    await this.applyMemberships(user, mapped.projects);
    return user;
  }

  /**
   * A linked user the provider gives no role any more: in one transaction its API keys deleted, its
   * sessions and tokens ended, its memberships of the projects the mapping manages removed, and its
   * role lowered to user (no password, no key, no session: nothing logs it in until the provider
   * gives it a role again).
   */
  private async cutOff(userid: string, managed: Map<string, string | null>): Promise<void> {
    if (!(await this.deps.users.get(userid))) return; // deleted: nothing left to take
    const projects = this.deps.projects();
    const ids: string[] = [];
    for (const ref of managed.keys()) {
      const project = await projects?.find(ref);
      if (project) ids.push(project.id);
    }
    const { keys_deleted, demoted, user } = await this.deps.users.cutOff(userid, 'user', async (trx) => {
      if (ids.length) await trx(PROJECT_MEMBERS).where({ userid }).whereIn('project_id', ids).delete();
    });
    if (ids.length) await this.deps.store.notices.publish(MEMBER_CHANGES, userid);
    this.deps.log.warn({ user_id: userid, keys_deleted, role: user.role, demoted }, 'sso: the provider gives this user no role any more: its keys, sessions and managed memberships are gone');
  }

  /** Sets the user's memberships of the projects the mapping names (removing those no group maps to now); other projects' are left alone. */
  private async applyMemberships(user: UserRecord, wanted: Map<string, string | null>): Promise<void> {
    if (!wanted.size) return;
    const projects = this.deps.projects();
    if (!projects) {
      this.deps.log.warn('sso: iam.oidc.projects maps groups to projects, but the projects plugin is not loaded');
      return;
    }
    const knex = this.deps.store.knex;
    let changed = false;
    const now = this.deps.clock.now().toISOString();
    for (const [ref, role] of wanted) {
      const project = await projects.find(ref);
      if (!project) {
        this.deps.log.warn({ project: ref }, 'sso: iam.oidc.projects names a project that does not exist');
        continue;
      }
      if (role && !(await projects.rolePermissions(project.id, role))) {
        this.deps.log.warn({ project: project.name, role }, 'sso: iam.oidc.projects names a role the project does not have; the membership is left as it is');
        continue;
      }
      const existing = await knex(PROJECT_MEMBERS).where({ project_id: project.id, userid: user.userid }).first('role');
      if (role === null) {
        if (existing) changed = (await knex(PROJECT_MEMBERS).where({ project_id: project.id, userid: user.userid }).delete()) > 0 || changed;
      } else if (existing?.role !== role) {
        await knex(PROJECT_MEMBERS).insert({ project_id: project.id, userid: user.userid, role, created_at: now, updated_at: now }).onConflict(['project_id', 'userid']).merge(['role', 'updated_at']);
        changed = true;
      }
    }
    if (changed) await this.deps.store.notices.publish(MEMBER_CHANGES, user.userid);
  }
}
