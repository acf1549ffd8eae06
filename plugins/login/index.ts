import { Type } from '@sinclair/typebox';
import { badRequest, unauthorized } from '../../core/errors.js';
import { Reply } from '../../core/http/reply.js';
import { renderTemplate } from '../../core/mail.js';
import { speaksForWorkers } from '../../core/workers.js';
import { establishPrincipal } from '../../core/auth/index.js';
import { definePlugin, type RouteDef, defineRoute } from '../../core/plugin.js';
import { openApiRoute } from '../../core/openapi.js';
import { Email, IdentityRef, identityOf, KeepApiKeys, Password, passwordPrincipal, USERS, type LoginIdentifier, type UserRecord } from '../iam/api.js';
import { PASSWORD_RESET_PAIRS, PASSWORD_RESETS, PasswordResets } from './resets.js';
import { rateLimitSetting, type RateLimit } from '../../core/ratelimit.js';
import { alterColumns, createTables } from '../../core/db/migrations.js';

const DEFAULT_TEMPLATE = `Hello {{name}},

someone asked to reset the password of your hangar account. If that was you, use

  token: {{token}}
  code:  {{code}}

within {{expires_minutes}} minutes. If it was not you, ignore this message: your password stays as it is.
`;

export const LoginConfigSchema = Type.Object(
  {
    host: Type.Union([Type.String(), Type.Null()], { default: null, description: 'defaults to api.host' }),
    port: Type.Integer({ minimum: 0, maximum: 65535, default: 8080 }),
    identifier: Type.Union([Type.Literal('email_or_username'), Type.Literal('email'), Type.Literal('username')], {
      default: 'email_or_username',
      description: 'what the username field of POST /login holds: an email or a username (the bootstrap admin has no email), or only one of them',
    }),
    refresh_window_seconds: Type.Integer({ minimum: 1, default: 300 }),
    reset_ttl_seconds: Type.Integer({ minimum: 60, default: 600 }),
    reset_max_attempts: Type.Integer({ minimum: 1, default: 5, description: 'wrong codes a pending reset survives; then it is burnt' }),
    reset_requests_per_account_and_address: rateLimitSetting(
      5,
      3600,
      'reset requests for one email address (known or not) from one client address; more from that address are refused (429), another address keeps its own count',
    ),
    reset_requests_per_account: rateLimitSetting(
      20,
      3600,
      'reset requests for one email address from every address together (each mails the owner): past it an address that asked for it already is refused (429), one that has not may still ask',
    ),
    reset_requests_per_address: rateLimitSetting(30, 3600, 'reset requests per client address'),
    reset_failures_per_address: rateLimitSetting(30, 900, 'refused confirmcode and resetpassword calls per client address before its attempts are refused (429)'),
    cors_origins: Type.Array(Type.String({ minLength: 1, maxLength: 300, pattern: '^(\\*|https?://[^/\\s]+)$', description: 'an origin (scheme://host[:port]) or *' }), {
      default: [],
      maxItems: 100,
      description: 'origins whose web pages may call the login API from a browser (CORS: its preflight is answered, its answers name the origin); empty (the default): none',
    }),
    MAIL_ENVELOPE: Type.Object(
      {
        from: Type.String({ default: 'hangar <noreply@localhost>' }),
        subject: Type.String({ default: 'Reset your hangar password' }),
        template: Type.String({ default: DEFAULT_TEMPLATE, description: 'placeholders: {{name}} {{username}} {{token}} {{code}} {{expires_minutes}}' }),
      },
      { additionalProperties: false, default: {} },
    ),
  },
  { additionalProperties: false, default: {} },
);

interface LoginConfig {
  host: string | null;
  port: number;
  identifier: LoginIdentifier;
  refresh_window_seconds: number;
  reset_ttl_seconds: number;
  reset_max_attempts: number;
  reset_requests_per_account_and_address: RateLimit;
  reset_requests_per_account: RateLimit;
  reset_requests_per_address: RateLimit;
  reset_failures_per_address: RateLimit;
  cors_origins: string[];
  MAIL_ENVELOPE: { from: string; subject: string; template: string };
}

/** What /login and /refreshtoken answer: the token beside the envelope, as the original login API does. */
const LoginAnswer = Type.Object(
  { token: Type.String(), data: Type.Object({ userid: Type.String({ format: 'uuid' }), name: Type.String(), role: Type.String() }, { additionalProperties: false }) },
  { additionalProperties: false },
);
const Message = (text: string) => Type.Object({ message: Type.String({ description: text }) }, { additionalProperties: false });

const ResetPair = { email: Email, token: Type.String({ minLength: 1, maxLength: 200 }), code: Type.String({ pattern: '^[0-9]{6}$' }) };

/** The login API: its own listener (default :8080), no /v1 prefix. */
export default definePlugin({
  name: 'login',
  description: 'login API: /login, /refreshtoken, password reset by email, sample protected routes',
  deps: [IdentityRef],
  configSchema: LoginConfigSchema,
  migrations: [
    createTables('001_password_resets', {
      [PASSWORD_RESETS]: (t) => {
        t.uuid('userid').primary().references('userid').inTable(USERS).onDelete('CASCADE');
        t.string('token_hash', 64).notNullable();
        t.string('code_hash', 64).notNullable();
        t.timestamp('expires_at', { useTz: true }).notNullable();
        t.integer('attempts').notNullable().defaultTo(0);
        t.timestamp('confirmed_at', { useTz: true }).nullable();
        t.timestamp('created_at', { useTz: true }).notNullable();
      },
    }),
    {
      id: '002_password_reset_pairs',
      async up(knex) {
        // Several pending pairs per user: a new request no longer replaces the owner's code.
        await knex.schema.createTable(PASSWORD_RESET_PAIRS, (t) => {
          t.increments('id').primary();
          t.uuid('userid').notNullable().references('userid').inTable(USERS).onDelete('CASCADE');
          t.string('token_hash', 64).notNullable().unique();
          t.string('code_hash', 64).notNullable();
          t.timestamp('expires_at', { useTz: true }).notNullable();
          t.integer('attempts').notNullable().defaultTo(0);
          t.timestamp('confirmed_at', { useTz: true }).nullable();
          t.timestamp('created_at', { useTz: true }).notNullable();
          t.index(['userid']);
        });
        const columns = 'userid, token_hash, code_hash, expires_at, attempts, confirmed_at, created_at';
        await knex.raw(`insert into ${PASSWORD_RESET_PAIRS} (${columns}) select ${columns} from ${PASSWORD_RESETS}`);
        await knex.schema.dropTable(PASSWORD_RESETS);
      },
    },
    // The address each pair was mailed to (hashed): a pair ends when the account's email changes.
    // Pending pairs of before have none and are refused: their owners request new ones.
    alterColumns('003_password_reset_mailed_to', PASSWORD_RESET_PAIRS, (t) => {
      t.string('mailed_to_hash', 64).nullable();
    }),
  ],
  setup(services) {
    const { config, clock, log, db, mail } = services;
    const settings = config.login as LoginConfig;
    settings.host ??= config.api.host;
    const identity = identityOf(services);
    const resets = new PasswordResets(db, clock, settings.reset_ttl_seconds, settings.reset_max_attempts);
    const userByEmail = (email: string) => identity.users.findForLogin('email', email);
    // Reset mails are sent after the answer, so a mail server that does not answer would go
    // unnoticed: say so at start-up (in the background, start-up does not wait for it), once for all workers.
    if (speaksForWorkers()) {
      void mail.check().then((problem) => {
        if (problem) {
          log.warn(
            { mail_host: config.mail.host, mail_port: config.mail.port, error: problem },
            `mail: ${config.mail.host}:${config.mail.port} does not answer, so password reset mails cannot be sent until it does; set mail.* (docs/configuration.md)`,
          );
        }
      });
    }
    /** The login API's answer: `{token, data: {userid, name, role}}`. */
    const answer = (user: Pick<UserRecord, 'userid' | 'name' | 'username' | 'role' | 'token_epoch'>) => {
      const { token } = identity.issueToken(user);
      return new Reply(200, { token, data: { userid: user.userid, name: user.name ?? user.username, role: user.role } });
    };

    async function sendResetMail(user: UserRecord, token: string, code: string): Promise<void> {
      const envelope = settings.MAIL_ENVELOPE;
      const text = renderTemplate(envelope.template, {
        name: user.name ?? user.username,
        username: user.username,
        token,
        code,
        expires_minutes: Math.round(settings.reset_ttl_seconds / 60),
      });
      try {
        await mail.send({ to: user.email!, from: envelope.from, subject: envelope.subject, text });
        log.info({ user_id: user.userid }, 'password reset mail sent');
      } catch (err) {
        log.error({ user_id: user.userid, err: { message: (err as Error).message } }, 'password reset mail could not be sent');
        // Nobody has this pair: the next request issues another instead of waiting for it to expire.
        await resets.discard(user.userid, token).catch(() => undefined);
      }
    }

    /** The emailed token and code; refusals are counted per client address (guessing across accounts). */
    async function checkPair(address: string, user: UserRecord | null, pair: { token: string; code: string }): Promise<{ id: number; confirmed: boolean }> {
      const failures: Array<[string, RateLimit]> = [[`reset-failure:address:${address}`, settings.reset_failures_per_address]];
      await services.limits.assertAllowed(failures, 'refused reset codes');
      try {
        return await resets.check(user, pair.token, pair.code);
      } catch (err) {
        await services.limits.count(failures, 'refused reset codes').catch(() => undefined);
        throw err;
      }
    }

    const routes: RouteDef[] = [
        defineRoute({
          method: 'POST',
          path: '/login',
          listener: 'login',
          auth: 'public',
          summary: `Check credentials and return a JWT (the username field holds the ${settings.identifier})`,
          produces: 'application/json',
          errors: [401, 429],
          schemas: { body: Type.Object({ username: Type.String({ maxLength: 120 }), password: Password }, { additionalProperties: false }), response: LoginAnswer },
          async handler(req) {
            const user = await identity.login(settings.identifier, req.body.username, req.body.password, req.ip);
            if (!user) throw unauthorized('Invalid credentials');
            establishPrincipal(req.ctx, passwordPrincipal(user));
            return answer(user);
          },
        }),
        defineRoute({
          method: 'POST',
          path: '/refreshtoken',
          listener: 'login',
          auth: 'authenticated',
          permission: 'account:write',
          summary: 'A new token, with name and role re-read, in the last minutes of the current one',
          produces: 'application/json',
          schemas: { response: LoginAnswer },
          async handler(req) {
            const exp = Number(req.principal!.exp);
            const opensAt = exp - settings.refresh_window_seconds;
            if (clock.now().getTime() / 1000 < opensAt) {
              throw unauthorized(`The token can be refreshed only in the last ${settings.refresh_window_seconds} s of its life, from ${new Date(opensAt * 1000).toISOString()}`);
            }
            const user = await identity.users.require(req.principal!.id).catch(() => {
              throw unauthorized('The token belongs to a user that no longer exists');
            });
            return answer(user);
          },
        }),
        defineRoute({
          method: 'POST',
          path: '/login/resetrequest',
          listener: 'login',
          auth: 'public',
          summary: 'Email a reset token and code; the answer is the same whether the address is known or not',
          errors: [429],
          schemas: { body: Type.Object({ email: Email }, { additionalProperties: false }), response: Message('the same whether or not the address is known') },
          async handler(req) {
            // Per email and client address, per address, and per email from everyone (core/ratelimit.ts
            // attempt): someone else's requests never use up the owner's own.
            const attempt = await services.limits.attempt(
              'reset-request',
              req.body.email.toLowerCase(),
              req.ip,
              { perSubjectAndAddress: settings.reset_requests_per_account_and_address, perAddress: settings.reset_requests_per_address, perSubject: settings.reset_requests_per_account },
              'password reset requests',
            );
            attempt.counted();
            const user = await userByEmail(req.body.email);
            if (user?.email) {
              // Issued and sent after the answer, so the response time does not tell known from unknown addresses.
              setImmediate(() => {
                resets
                  .issue(user.userid, user.email!)
                  .then(({ token, code }) => sendResetMail(user, token, code))
                  .catch((err: Error) => log.error({ user_id: user.userid, error: err.message }, 'issuing a password reset failed'));
              });
            }
            return { message: 'If the address belongs to an account, a reset token and code are on their way to it' };
          },
        }),
        defineRoute({
          method: 'POST',
          path: '/login/confirmcode',
          listener: 'login',
          auth: 'public',
          summary: 'Confirm the emailed token and code',
          errors: [429],
          schemas: { body: Type.Object(ResetPair, { additionalProperties: false }), response: Type.Object({ confirmed: Type.Literal(true) }, { additionalProperties: false }) },
          async handler(req) {
            const user = await userByEmail(req.body.email);
            const pair = await checkPair(req.ip, user, req.body);
            await resets.confirm(pair.id);
            return { confirmed: true };
          },
        }),
        defineRoute({
          method: 'POST',
          path: '/login/resetpassword',
          listener: 'login',
          auth: 'public',
          summary: 'Set a new password after the code was confirmed',
          description: "The user's tokens issued before the reset stop working, and so do its API keys unless `keep_api_keys` is true.",
          errors: [429],
          schemas: {
            body: Type.Object({ ...ResetPair, password: Password, keep_api_keys: Type.Optional(KeepApiKeys) }, { additionalProperties: false }),
            response: Type.Object({ reset: Type.Literal(true), keys_deleted: Type.Integer({ minimum: 0 }) }, { additionalProperties: false }),
          },
          async handler(req) {
            const user = await userByEmail(req.body.email);
            const { confirmed } = await checkPair(req.ip, user, req.body);
            if (!confirmed) throw badRequest('Confirm the code first (POST /login/confirmcode)');
            const { keys_deleted } = await identity.users.setPassword(user!.userid, await identity.hashAcceptable(req.body.password), {
              keepApiKeys: req.body.keep_api_keys ?? false,
            });
            await resets.clear(user!.userid);
            log.info({ user_id: user!.userid, keys_deleted }, 'password reset completed; earlier tokens revoked');
            return { reset: true, keys_deleted };
          },
        }),
        defineRoute({
          method: 'GET',
          path: '/sampleprotected/ping',
          listener: 'login',
          auth: 'authenticated',
          permission: 'account:read',
          summary: 'Sample of RequireAuthenticated',
          schemas: { response: Type.Object({ pong: Type.Literal(true), userid: Type.String() }, { additionalProperties: false }) },
          handler: (req) => ({ pong: true, userid: req.principal!.id }),
        }),
        defineRoute({
          method: 'GET',
          path: '/sampleprotected/pingadm',
          listener: 'login',
          auth: { role: 'admin' },
          permission: 'iam:admin',
          summary: 'Sample of RequireRole(admin)',
          schemas: { response: Type.Object({ pong: Type.Literal(true), userid: Type.String(), role: Type.String() }, { additionalProperties: false }) },
          handler: (req) => ({ pong: true, userid: req.principal!.id, role: req.principal!.role }),
        }),
        openApiRoute(services, 'login', '/openapi.json'),
    ];
    // Browsers on the configured origins may call every route of the login API (login.cors_origins).
    return { routes: settings.cors_origins.length ? routes.map((route) => ({ ...route, cors: settings.cors_origins })) : routes };
  },
});
