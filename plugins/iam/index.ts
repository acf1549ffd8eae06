import os from 'node:os';
import { Type } from '@sinclair/typebox';
import { JwtService } from '../../core/auth/jwt.js';
import { PasswordPolicySchema } from '../../core/auth/password-policy.js';
import { PASSWORD_HASHERS } from '../../core/auth/passwords.js';
import { safeEqual } from '../../core/crypto.js';
import { badRequest, conflict, forbidden, notFound, unauthorized } from '../../core/errors.js';
import { Reply } from '../../core/http/reply.js';
import { definePlugin, type HangarRequest, defineRoute } from '../../core/plugin.js';
import { PageQuery } from '../../core/http/resources.js';
import { rateLimitSetting, type RateLimit } from '../../core/ratelimit.js';
import { establishPrincipal } from '../../core/auth/index.js';
import { IdentityRef, passwordPrincipal } from './api.js';
import { hmacAuthenticator, jwtAuthenticator } from './authenticators.js';
import { Identity } from './identity.js';
import { LoginLockouts } from './lockouts.js';
import { HMAC_NONCES, iamMigrations } from './migrations.js';
import {
  Deleted, DisplayName, Email, KeepApiKeys, KeyView, Password, PasswordChanged, PropertyInput, Role, TokenView, UserIdParams, UserProperty, UserView, Username,
} from './schemas.js';
import { BootstrapSecret, loadJwtSecret } from './secrets.js';
import { sameOrigin, sessionMigrations, Sessions } from './sessions.js';
import { publicKey, publicUser, UserStore, type ApiKeyRecord, type UserRecord } from './users.js';
import { daysCap, KeyScopeInput, resolveScope, tightestLifetime } from './keys.js';
import { userGrantsOf, type UserGrants } from '../../core/auth/permissions.js';
import { ProjectsRef } from '../projects/api.js';
import { whoamiRoute } from './whoami.js';
import { loadOidcConfig, OidcConfigSchema, type OidcSettings } from './oidc/config.js';
import { ssoMigrations } from './oidc/migrations.js';
import { ssoRoutes } from './oidc/routes.js';
import { SingleSignOn } from './oidc/sso.js';

const IamConfigSchema = Type.Object(
  {
    jwt_secret: Type.Union([Type.String(), Type.Null()], { default: null, description: 'base64, ≥ 64 bytes decoded (also JWT_SECRET); generated into the data dir when unset' }),
    api_server: Type.Union([Type.String(), Type.Null()], { default: null, description: 'JWT issuer, checked on every token (also API_SERVER); defaults to api.public_url or https://<hostname>:<api.port>' }),
    token_lifetime_seconds: Type.Integer({ minimum: 60, default: 3600 }),
    password_hasher: Type.Union([Type.Literal('scrypt'), Type.Literal('sha1')], { default: 'scrypt' }),
    password_policy: PasswordPolicySchema,
    session_lifetime_seconds: Type.Integer({ minimum: 300, maximum: 30 * 86400, default: 28800, description: 'how long a dashboard session (cookie) lasts' }),
    hmac_skew_seconds: Type.Integer({ minimum: 1, maximum: 3600, default: 300 }),
    announce_bootstrap_secret: Type.Boolean({ default: true, description: 'print the bootstrap secret on standard output at first start' }),
    login_failures_per_account_and_address: rateLimitSetting(
      10,
      900,
      'failed logins (POST /v1/iam/login, POST /v1/iam/session, the login API’s /login) of one account from one client address; past it that address is refused (429) for that account until the window ends',
    ),
    login_failures_per_address: rateLimitSetting(50, 900, 'failed logins per client address, whatever the accounts, before its attempts are refused (429)'),
    login_failures_per_account: rateLimitSetting(
      100,
      3600,
      'failed logins of one account from every address together (the global back-off); past it an address that failed on the account is refused (429) until the window ends, one that has not may still log in',
    ),
    api_key_max_lifetime_days: Type.Union([Type.Integer({ minimum: 1, maximum: 36500 }), Type.Null()], {
      default: null,
      description: 'the longest an API key made from now on may live, in days: a longer expiry is refused (400) and a key made without one expires then; null: no maximum (keys without expiry never expire)',
    }),
    signature_failures_per_address: rateLimitSetting(50, 900, 'signed requests with an unknown access key or a wrong signature per client address (an IPv6 /64) before its failed signatures are answered 429 instead of 401 (a right signature still goes through)'),
    oidc: OidcConfigSchema,
    bootstrap_from_loopback: Type.Boolean({
      default: true,
      description: 'accept POST /v1/bootstrap from 127.0.0.1/::1 without the secret; turn off when a reverse proxy on this host forwards requests',
    }),
  },
  { additionalProperties: false, default: {} },
);

interface IamConfig {
  jwt_secret: string | null;
  api_server: string | null;
  token_lifetime_seconds: number;
  password_hasher: 'scrypt' | 'sha1';
  password_policy: import('../../core/auth/password-policy.js').PasswordPolicy;
  hmac_skew_seconds: number;
  session_lifetime_seconds: number;
  bootstrap_from_loopback: boolean;
  announce_bootstrap_secret: boolean;
  login_failures_per_account_and_address: RateLimit;
  login_failures_per_address: RateLimit;
  login_failures_per_account: RateLimit;
  signature_failures_per_address: RateLimit;
  api_key_max_lifetime_days: number | null;
  oidc?: OidcSettings;
}

const LOOPBACK = new Set(['127.0.0.1', '::1', '::ffff:127.0.0.1']);

export default definePlugin({
  name: 'iam',
  description: 'users, API keys (HMAC), JWTs, bootstrap',
  provides: [IdentityRef],
  configSchema: IamConfigSchema,
  migrations: [...iamMigrations, ...sessionMigrations, ...ssoMigrations],
  async setup(services) {
    const { config, db, clock, ca, log } = services;
    const settings = config.iam as IamConfig;
    const issuer = settings.api_server ?? config.api.public_url ?? `https://${os.hostname()}:${config.api.port}`;
    const jwt = new JwtService(await loadJwtSecret(settings.jwt_secret, ca.keyring), issuer, settings.token_lifetime_seconds, clock);
    const users = new UserStore(db, clock, ca.secretBox('iam-api-key-secrets'));
    const lockouts = new LoginLockouts(services.limits, {
      per_account_and_address: settings.login_failures_per_account_and_address,
      per_address: settings.login_failures_per_address,
      per_account: settings.login_failures_per_account,
    });
    const identity = new Identity(users, jwt, PASSWORD_HASHERS[settings.password_hasher]!, settings.password_policy, lockouts);
    services.provided.provide(IdentityRef, identity);
    services.auth.register(jwtAuthenticator(identity));
    // Projects are a plugin of their own, set up after this one: asked for when a project's key is used.
    const projects = () => services.provided.find(ProjectsRef);
    services.auth.register(hmacAuthenticator(identity, db, clock, settings.hmac_skew_seconds, services.limits, settings.signature_failures_per_address, { projects }));
    let grants: UserGrants | undefined;
    const routeTable = () => services.routeTable().map((r) => r.route);
    /** A key as the API shows it, with its project's name. */
    const keyView = async (key: ApiKeyRecord) => publicKey(key, key.project_id ? ((await projects()?.find(key.project_id))?.name ?? null) : null, clock.now());
    const sessions = new Sessions(db, clock, identity, ca.deriveKey('iam-session-csrf'), settings.session_lifetime_seconds);
    services.auth.register(sessions.authenticator());
    // Single sign-on (docs/sso.md): the configuration is checked here, the provider asked at the first login.
    const sso = settings.oidc
      ? new SingleSignOn(loadOidcConfig(settings.oidc), { store: db, clock, users, box: ca.secretBox('iam-sso-flows'), log, projects })
      : null;

    /** A change to one's own account needs its password (checked and limited as a login is): a stolen token alone cannot take it over. */
    const confirmOwnPassword = async (user: UserRecord, password: string | undefined, what: string, address: string): Promise<void> => {
      if (!password) {
        throw badRequest(`Validation failed: body.current_password is required to change ${what}`, [{ path: 'body.current_password', message: `is required to change ${what}` }]);
      }
      if (!(await identity.confirmPassword(user, password, address))) throw forbidden('The current password is wrong');
    };

    // Emails unique without case (migration 005), unless live users already share one: named here
    // at every start, and the index made as soon as they are told apart (a PATCH or DELETE below).
    let emailIndexPending = false;
    const ensureEmailIndex = async () => {
      const clashes = await users.ensureEmailIndex();
      emailIndexPending = clashes.length > 0;
      if (emailIndexPending) {
        log.warn(
          { clashes: clashes.map((c) => c.users) },
          `iam: ${clashes.length} email address(es) belong to several live users, differing only in case (${clashes.map((c) => c.users.map((u) => u.username).join(' and ')).join('; ')}). ` +
            'They are kept as they are: a login or reset by such an email finds no one (log in by username), and emails are not yet unique without case. ' +
            'Give each its own address (PATCH /v1/iam/users/{id} with another email) or delete one; the uniqueness is then enforced at once.',
        );
      }
    };
    if (services.serving) await ensureEmailIndex();
    const afterUserChange = async () => {
      if (emailIndexPending) await ensureEmailIndex().catch((err: Error) => log.error({ err: { message: err.message } }, 'iam: making emails unique without case failed'));
    };

    const bootstrapSecret = new BootstrapSecret(config.data_dir);
    // Only a serving control plane makes and announces the secret (not the runner's terminal).
    if (services.serving && !(await users.bootstrapClaimed())) {
      const fresh = bootstrapSecret.ensure();
      if (fresh && settings.announce_bootstrap_secret) {
        // Printed once for the operator, deliberately not through the logger.
        console.log(
          `hangar: no admin yet. Bootstrap from this machine (POST /v1/bootstrap on loopback), or from elsewhere with the header\n` +
            `  X-Bootstrap-Secret: ${fresh}\n(also in ${bootstrapSecret.file}; it stops working once bootstrap is done)`,
        );
      }
    }

    const view = async (user: UserRecord) => publicUser(user, await users.properties(user.userid));
    const apiUrl = (req: HangarRequest) => config.api.public_url ?? `https://${req.ctx.host}`;

    return {
      loops: [
        {
          name: 'iam:purge-hmac-nonces',
          once: true,
          intervalMs: 60_000,
          async run() {
            await db.knex(HMAC_NONCES).where('expires_at', '<', clock.now().toISOString()).delete();
          },
        },
        { name: 'iam:purge-sessions', intervalMs: 600_000, once: true, run: async () => void (await sessions.purgeExpired()) },
        ...(sso ? [{ name: 'iam:purge-sso-flows', intervalMs: 600_000, once: true, run: async () => void (await sso.purgeExpired()) }] : []),
      ],
      routes: [
        ...sessions.routes(view),
        ...ssoRoutes({
          sso: () => sso,
          limits: services.limits,
          sessions,
          users,
          apiUrl,
          caPem: () => (ca.operatorCertificates ? null : ca.caPem),
          keyExpiry: () => {
            const cap = tightestLifetime(sso?.keyCap() ?? null, daysCap(settings.api_key_max_lifetime_days))!;
            return new Date(clock.now().getTime() + cap.ms).toISOString();
          },
        }),
        whoamiRoute(services, identity, projects),
        defineRoute({
          method: 'GET',
          path: '/v1/bootstrap',
          auth: 'public',
          summary: 'Whether hangar is bootstrapped, and whether this caller may bootstrap without the secret (the dashboard’s first-run screen)',
          schemas: {
            response: Type.Object({
              bootstrapped: Type.Boolean(),
              from_loopback: Type.Boolean({ description: 'POST /v1/bootstrap from here needs no X-Bootstrap-Secret' }),
              sso: Type.Boolean({ description: 'single sign-on is configured (iam.oidc): the login screen offers it (GET /v1/auth/oidc/start)' }),
            }),
          },
          handler: async (req) => ({ bootstrapped: await users.bootstrapClaimed(), from_loopback: settings.bootstrap_from_loopback && LOOPBACK.has(req.ip), sso: sso !== null }),
        }),
        defineRoute({
          method: 'POST',
          path: '/v1/bootstrap',
          auth: 'public',
          summary: 'Create the first admin and return its credentials once (loopback, or with X-Bootstrap-Secret)',
          status: 201,
          errors: [403],
          schemas: {
            body: Type.Object(
              {
                username: Type.Optional(Username),
                email: Type.Optional(Email),
                name: Type.Optional(DisplayName),
                password: Type.Optional(Password),
              },
              { additionalProperties: false },
            ),
            response: Type.Object({
              username: Type.String(),
              user_id: Type.String({ format: 'uuid' }),
              password: Type.Optional(Type.String({ description: 'only when generated' })),
              access_key_id: Type.String(),
              secret_access_key: Type.String(),
              api_url: Type.String(),
              ca_pem: Type.Union([Type.String(), Type.Null()], { description: 'null when the operator provided the server certificate' }),
            }, { additionalProperties: false }),
          },
          async handler(req) {
            if (await users.bootstrapClaimed()) throw conflict('hangar is already bootstrapped: the first admin was created');
            // A web page elsewhere must not claim the install through the operator's browser.
            if (!sameOrigin(req.ctx)) throw forbidden('Bootstrap from a web page is accepted from this control plane’s own dashboard only, not from another site’s page');
            const offered = req.ctx.get('x-bootstrap-secret');
            const secret = bootstrapSecret.current();
            const fromLoopback = settings.bootstrap_from_loopback && LOOPBACK.has(req.ip);
            if (!fromLoopback && !(offered && secret && safeEqual(offered, secret))) {
              throw forbidden('Bootstrap is accepted from the loopback interface, or with the X-Bootstrap-Secret printed at first start');
            }
            const generated = req.body.password ? null : identity.generatePassword();
            const passwordHash = await identity.hashAcceptable(req.body.password ?? generated!);
            const created = await users.claimBootstrap(async (trx) => {
              const user = await users.create(
                { username: req.body.username ?? 'admin', email: req.body.email, name: req.body.name ?? 'Administrator', passwordHash, role: 'admin' },
                trx,
              );
              const { key, secret: keySecret } = await users.createKey(user.userid, 'bootstrap', trx);
              return { user, key, keySecret };
            });
            bootstrapSecret.discard();
            log.info({ user_id: created.user.userid, username: created.user.username }, 'bootstrap: first admin created');
            return {
              username: created.user.username,
              user_id: created.user.userid,
              ...(generated ? { password: generated } : {}),
              access_key_id: created.key.access_key_id,
              secret_access_key: created.keySecret,
              api_url: apiUrl(req),
              ca_pem: ca.operatorCertificates ? null : ca.caPem,
            };
          },
        }),
        defineRoute({
          method: 'POST',
          path: '/v1/iam/login',
          auth: 'public',
          summary: 'Exchange username and password for a JWT',
          errors: [401, 429],
          schemas: {
            body: Type.Object({ username: Type.String({ minLength: 1, maxLength: 120 }), password: Password }, { additionalProperties: false }),
            response: Type.Object({ ...TokenView.properties, user: UserView }),
          },
          async handler(req) {
            const user = await identity.login('username', req.body.username, req.body.password, req.ip);
            if (!user) throw unauthorized('Invalid username or password');
            establishPrincipal(req.ctx, passwordPrincipal(user));
            return { ...identity.issueToken(user), token_type: 'Bearer', user: await view(user) };
          },
        }),
        defineRoute({
          method: 'POST',
          path: '/v1/iam/token',
          auth: 'authenticated',
          permission: 'account:write',
          summary: 'A JWT for the user of the API key that signed this request (HMAC only)',
          schemas: { response: TokenView },
          async handler(req) {
            if (req.principal?.method !== 'hmac') throw unauthorized('Sign this request with an API key (HMAC) to get a token');
            const user = await users.require(req.principal.id);
            return { ...identity.issueToken(user), token_type: 'Bearer' };
          },
        }),
        defineRoute({
          method: 'POST',
          path: '/v1/iam/users',
          auth: { role: 'admin' },
          summary: 'Create a user',
          status: 201,
          schemas: {
            body: Type.Object(
              {
                username: Username,
                email: Type.Optional(Email),
                name: Type.Optional(DisplayName),
                password: Password,
                role: Type.Optional(Role),
                properties: Type.Optional(Type.Array(PropertyInput, { maxItems: 100 })),
              },
              { additionalProperties: false },
            ),
            response: UserView,
          },
          async handler(req) {
            const passwordHash = await identity.hashAcceptable(req.body.password);
            const user = await users.create({ ...req.body, role: req.body.role ?? 'user', passwordHash });
            return view(user);
          },
        }),
        defineRoute({
          method: 'GET',
          path: '/v1/iam/users',
          auth: { role: 'admin' },
          summary: 'List users',
          schemas: { query: PageQuery, response: Type.Array(UserView) },
          async handler(req) {
            const page = await users.list(req.query);
            return Reply.page({ items: await Promise.all(page.items.map(view)), next_cursor: page.next_cursor });
          },
        }),
        defineRoute({
          method: 'GET',
          path: '/v1/iam/users/{id}',
          auth: { role: 'admin', orSelf: 'id' },
          summary: 'Get a user, with its properties',
          schemas: { params: UserIdParams, response: UserView },
          handler: async (req) => view(await users.require(req.params.id)),
        }),
        defineRoute({
          method: 'DELETE',
          path: '/v1/iam/users/{id}',
          auth: { role: 'admin' },
          summary: 'Delete a user (soft): it cannot log in, its tokens and keys stop working',
          schemas: { params: UserIdParams, response: UserView },
          async handler(req) {
            const user = await users.require(req.params.id);
            await users.softDelete(user.userid);
            await afterUserChange();
            return publicUser((await users.get(user.userid, { includeDeleted: true }))!);
          },
        }),
        defineRoute({
          method: 'PATCH',
          path: '/v1/iam/users/{id}',
          auth: { role: 'admin', orSelf: 'id' },
          summary: 'Change a user’s name, email or role: the role by admins only; your own name or email with your current password',
          description:
            'A new role revokes the user’s tokens and sessions issued before it (as a password change does), so a demoted admin’s token no longer works; its API keys follow the new role. ' +
            'The last admin cannot be given another role (409). Emails are unique among live users without regard to case (409). ' +
            'Changing your own name or email needs `current_password` (checked and limited as a login is).',
          errors: [403, 409, 429],
          schemas: {
            params: UserIdParams,
            body: Type.Object(
              {
                name: Type.Optional(Type.Union([DisplayName, Type.Null()])),
                email: Type.Optional(Type.Union([Email, Type.Null()], { description: 'null removes it (no password reset by email then)' })),
                role: Type.Optional(Role),
                current_password: Type.Optional(Type.String({ maxLength: 1024, description: 'your own password, to change your own name or email' })),
              },
              { additionalProperties: false },
            ),
            response: UserView,
          },
          async handler(req) {
            const caller = req.principal!;
            const user = await users.require(req.params.id);
            const { name, email, role } = req.body;
            if (name === undefined && email === undefined && role === undefined) {
              throw badRequest('Validation failed: give name, email or role to change', [{ path: 'body', message: 'needs at least one of name, email, role' }]);
            }
            if (role !== undefined && caller.role !== 'admin') throw forbidden('Only an admin changes roles');
            if (caller.id === user.userid && (name !== undefined || email !== undefined)) await confirmOwnPassword(user, req.body.current_password, 'your own name or email', req.ip);
            const { user: updated, revoked } = await users.update(user.userid, { name, email, role });
            if (revoked) log.info({ user_id: user.userid, role: updated.role }, 'role changed; earlier tokens revoked');
            if (email !== undefined) await afterUserChange();
            return view(updated);
          },
        }),
        defineRoute({
          method: 'DELETE',
          path: '/v1/iam/users/{id}/lockout',
          auth: { role: 'admin' },
          summary: 'Clear the user’s login lockouts: its failed logins from every address and its global back-off are forgotten',
          schemas: {
            params: UserIdParams,
            response: Type.Object({ cleared: Type.Integer({ minimum: 0, description: 'failure counters forgotten (one per address that failed, and the global one)' }) }, { additionalProperties: false }),
          },
          async handler(req) {
            const user = await users.require(req.params.id);
            const cleared = await identity.clearLockout(user.userid);
            log.info({ user_id: user.userid, cleared }, 'login lockouts cleared');
            return { cleared };
          },
        }),
        defineRoute({
          method: 'POST',
          path: '/v1/iam/users/{id}/properties',
          auth: { role: 'admin', orSelf: 'id' },
          summary: 'Add a property (name/value metadata) to a user',
          status: 201,
          schemas: { params: UserIdParams, body: PropertyInput, response: UserProperty },
          async handler(req) {
            await users.require(req.params.id);
            return users.addProperty(req.params.id, req.body.name, req.body.value);
          },
        }),
        defineRoute({
          method: 'DELETE',
          path: '/v1/iam/users/{id}/properties/{propertyId}',
          auth: { role: 'admin', orSelf: 'id' },
          summary: 'Remove a property from a user',
          schemas: { params: Type.Object({ id: Type.String({ format: 'uuid' }), propertyId: Type.Integer({ minimum: 1 }) }), response: Deleted },
          async handler(req) {
            if (!(await users.removeProperty(req.params.id, req.params.propertyId))) throw notFound(`No property ${req.params.propertyId} on user ${req.params.id}`);
            return { deleted: true };
          },
        }),
        defineRoute({
          method: 'PATCH',
          path: '/v1/iam/users/{id}/properties/{propertyId}',
          auth: { role: 'admin', orSelf: 'id' },
          summary: 'Change a property’s name or value',
          schemas: {
            params: Type.Object({ id: Type.String({ format: 'uuid' }), propertyId: Type.Integer({ minimum: 1 }) }),
            body: Type.Object(
              { name: Type.Optional(PropertyInput.properties.name), value: Type.Optional(PropertyInput.properties.value) },
              { additionalProperties: false, minProperties: 1 },
            ),
            response: UserProperty,
          },
          async handler(req) {
            const changed = await users.updateProperty(req.params.id, req.params.propertyId, req.body);
            if (!changed) throw notFound(`No property ${req.params.propertyId} on user ${req.params.id}`);
            return changed;
          },
        }),
        defineRoute({
          method: 'POST',
          path: '/v1/iam/users/{id}/password',
          auth: { role: 'admin', orSelf: 'id' },
          summary: 'Set a password (admins for anyone, users for themselves); the policy applies',
          description:
            'Changing your own password needs `current_password` (checked and limited as a login is), so a stolen token cannot take the account over. ' +
            "The user's tokens issued before the change stop working, and so do its API keys unless `keep_api_keys` is true (a changed password usually means the old credentials are not to be trusted).",
          schemas: {
            params: UserIdParams,
            body: Type.Object(
              {
                password: Password,
                keep_api_keys: Type.Optional(KeepApiKeys),
                current_password: Type.Optional(Type.String({ maxLength: 1024, description: 'your current password, to change your own (checked and limited as a login is)' })),
              },
              { additionalProperties: false },
            ),
            response: PasswordChanged,
          },
          async handler(req) {
            const user = await users.require(req.params.id);
            if (req.principal!.id === user.userid) await confirmOwnPassword(user, req.body.current_password, 'your own password', req.ip);
            const { keys_deleted } = await users.setPassword(user.userid, await identity.hashAcceptable(req.body.password), { keepApiKeys: req.body.keep_api_keys ?? false });
            log.info({ user_id: user.userid, keys_deleted }, 'password changed; earlier tokens revoked');
            return { updated: true, keys_deleted };
          },
        }),
        defineRoute({
          method: 'POST',
          path: '/v1/iam/users/{id}/keys',
          auth: { role: 'admin', orSelf: 'id' },
          summary: 'Create an API key pair, of the installation or of a project, with a role or permissions no wider than its owner’s, an expiry and source networks; the secret is shown only in this response',
          description:
            'Without scope fields the key acts as its owner, in the whole installation, until it is deleted (as keys always did). ' +
            '`project` limits it to one project its owner is a member of; `role` or `permissions` to what they grant (403 naming the permissions its owner lacks); ' +
            '`expires_at` or `expires_in` (30d) ends it (iam.api_key_max_lifetime_days may cap it); `source_networks` (CIDRs) limits where it is accepted from.',
          status: 201,
          errors: [403],
          schemas: {
            params: UserIdParams,
            body: Type.Object({ description: Type.Optional(Type.String({ maxLength: 200 })), ...KeyScopeInput }, { additionalProperties: false }),
            response: Type.Object({ ...KeyView.properties, secret_access_key: Type.String() }),
          },
          async handler(req) {
            const user = await users.require(req.params.id);
            grants ??= userGrantsOf(routeTable());
            const { description, ...request } = req.body;
            const scope = await resolveScope({
              request,
              owner: user,
              caller: req.principal!,
              projects: projects(),
              routes: routeTable(),
              userGrants: grants,
              now: clock.now(),
              // An SSO user's access follows the provider's groups, read at its logins only: its keys live no longer than a CLI login's.
              maxLifetime: tightestLifetime(daysCap(settings.api_key_max_lifetime_days), sso && (await sso.linked(user.userid)) ? sso.keyCap() : null),
            });
            const { key, secret } = await users.createKey(user.userid, description ?? null, undefined, scope);
            return { ...(await keyView(key)), secret_access_key: secret };
          },
        }),
        defineRoute({
          method: 'GET',
          path: '/v1/iam/users/{id}/keys',
          auth: { role: 'admin', orSelf: 'id' },
          summary: 'List API keys (never their secrets), with last-used times',
          schemas: { params: UserIdParams, response: Type.Array(KeyView) },
          async handler(req) {
            await users.require(req.params.id);
            return Promise.all((await users.listKeys(req.params.id)).map(keyView));
          },
        }),
        defineRoute({
          method: 'DELETE',
          path: '/v1/iam/users/{id}/keys/{keyId}',
          auth: { role: 'admin', orSelf: 'id' },
          summary: 'Delete an API key; requests signed with it fail from now on',
          schemas: { params: Type.Object({ id: Type.String({ format: 'uuid' }), keyId: Type.String({ minLength: 1, maxLength: 64 }) }), response: Deleted },
          async handler(req) {
            if (!(await users.deleteKey(req.params.id, req.params.keyId))) throw notFound(`No key ${req.params.keyId} for user ${req.params.id}`);
            return { deleted: true };
          },
        }),
      ],
    };
  },
});

