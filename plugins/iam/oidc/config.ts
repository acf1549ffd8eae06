import { readFileSync } from 'node:fs';
import { Type, type Static } from '@sinclair/typebox';
import { ConfigError } from '../../../core/errors.js';
import { rateLimitSetting } from '../../../core/ratelimit.js';

const GroupName = Type.String({ minLength: 1, maxLength: 256, description: 'a value of the groups claim' });

/** `iam.oidc`: single sign-on with an OpenID Connect provider (docs/sso.md). Absent: off. */
export const OidcSettingsSchema = Type.Object(
  {
    issuer: Type.String({ minLength: 1, maxLength: 2000, description: 'the provider’s issuer URL (its /.well-known/openid-configuration is read from it); https unless allow_http' }),
    client_id: Type.String({ minLength: 1, maxLength: 500 }),
    client_secret_file: Type.String({
      minLength: 1,
      maxLength: 4096,
      description: 'a file holding the client secret (its first line): the secret itself is never in the configuration, an answer or a log line',
    }),
    scopes: Type.Array(Type.String({ minLength: 1, maxLength: 200, pattern: '^[\\x21\\x23-\\x5b\\x5d-\\x7e]+$' }), {
      default: ['openid', 'profile', 'email', 'groups'],
      minItems: 1,
      maxItems: 50,
      description: 'asked for at login; openid is added when missing',
    }),
    groups_claim: Type.String({ minLength: 1, maxLength: 200, default: 'groups', description: 'the ID token claim (an array of strings) holding the user’s groups' }),
    username_claim: Type.String({ minLength: 1, maxLength: 200, default: 'preferred_username', description: 'the claim a new SSO user’s hangar username is taken from' }),
    roles: Type.Array(
      Type.Object({ group: GroupName, role: Type.Union([Type.Literal('admin'), Type.Literal('auditor'), Type.Literal('user')]) }, { additionalProperties: false }),
      { default: [], maxItems: 1000, description: 'provider group → installation role; the widest role of the user’s groups wins (admin, auditor, user)' },
    ),
    default_role: Type.Union([Type.Literal('user'), Type.Literal('auditor'), Type.Null()], {
      default: 'user',
      description: 'the installation role of a user none of whose groups is in roles; null: such a user is refused',
    }),
    projects: Type.Array(
      Type.Object(
        {
          group: GroupName,
          project: Type.String({ minLength: 1, maxLength: 100, description: 'the project’s name or id' }),
          role: Type.String({ minLength: 1, maxLength: 63, pattern: '^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$', description: 'a built-in project role or one of the project’s custom roles' }),
        },
        { additionalProperties: false },
      ),
      {
        default: [],
        maxItems: 1000,
        description:
          'provider group → a role in a project. The projects named here are the provider’s to manage: an SSO user’s membership of each follows its groups at every login (removed when no group maps to it)',
      },
    ),
    allow_http: Type.Boolean({ default: false, description: 'accept an http issuer (tests on loopback only: tokens would cross the network in the clear)' }),
    cli_key_lifetime_hours: Type.Integer({ minimum: 1, maximum: 24 * 90, default: 12, description: 'how long the API key `hangar login --sso` stores lives, and the longest any API key of an SSO user may (its access follows the provider only at its logins)' }),
    login_timeout_seconds: Type.Integer({ minimum: 60, maximum: 3600, default: 600, description: 'how long a login begun at the dashboard or the CLI may take at the provider' }),
    logins_begun_per_address: rateLimitSetting(
      30,
      600,
      'SSO logins begun (GET /v1/auth/oidc/start and POST /v1/auth/oidc/device together) per client address; past it they are refused (429) until the window ends',
    ),
    max_open_logins: Type.Integer({
      minimum: 1,
      maximum: 1_000_000,
      default: 10_000,
      description: 'SSO logins under way (begun, not finished or expired) in the whole installation; past it a new one is refused (503 with Retry-After) until one ends',
    }),
  },
  { additionalProperties: false, description: 'single sign-on with an OpenID Connect provider (docs/sso.md); leave it out to turn it off' },
);
export const OidcConfigSchema = Type.Optional(OidcSettingsSchema);

export type OidcSettings = Static<typeof OidcSettingsSchema>;

/** The settings checked beyond their schema, with the client secret read from its file. */
export interface OidcConfig extends OidcSettings {
  issuerUrl: URL;
  clientSecret: string;
}

/** Checks `iam.oidc` where the schema cannot (the issuer's scheme, the secret's file): a ConfigError naming the key stops the start. */
export function loadOidcConfig(settings: OidcSettings): OidcConfig {
  let issuerUrl: URL;
  try {
    issuerUrl = new URL(settings.issuer);
  } catch {
    throw new ConfigError(`iam.oidc.issuer: "${settings.issuer}" is not a URL (e.g. https://login.example.com/realms/ops)`);
  }
  if (issuerUrl.protocol !== 'https:' && !(issuerUrl.protocol === 'http:' && settings.allow_http)) {
    throw new ConfigError(`iam.oidc.issuer must be an https URL (an http one only with iam.oidc.allow_http: true, for tests on loopback)`);
  }
  if (issuerUrl.search || issuerUrl.hash) throw new ConfigError('iam.oidc.issuer must have no query or fragment');
  let clientSecret: string;
  try {
    clientSecret = readFileSync(settings.client_secret_file, 'utf8').split(/\r?\n/)[0]!.trim();
  } catch (err) {
    throw new ConfigError(`iam.oidc.client_secret_file: cannot read ${settings.client_secret_file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
  if (!clientSecret) throw new ConfigError(`iam.oidc.client_secret_file: ${settings.client_secret_file} is empty (its first line is the client secret)`);
  const scopes = settings.scopes.includes('openid') ? settings.scopes : ['openid', ...settings.scopes];
  return { ...settings, scopes, issuerUrl, clientSecret };
}
