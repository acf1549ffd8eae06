import { generateKeyPairSync } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import Provider from 'oidc-provider';
import type { TestDialect } from './dialects.js';
import { startHangar, type TestHangar } from './hangar.js';

/**
 * A real OpenID provider for tests: the certified `oidc-provider` package in this process, on
 * loopback (http; hangar accepts it with iam.oidc.allow_http), with one confidential client, the
 * device flow, its own development login page (any password) and consent granted to the client
 * beforehand. Accounts are the test's: `accounts[login]` gives a user's claims (groups…).
 */
export interface TestProvider {
  issuer: string;
  clientId: string;
  clientSecret: string;
  /** The provider's signing key (private JWK): a test re-signs tokens with it to make one that is wrong in one way only. */
  signingJwk: Record<string, unknown>;
  accounts: Map<string, { groups: string[]; name?: string; preferred_username?: string }>;
  /**
   * When set, rewrites the ID token of the next token endpoint answers (the test's forged, expired,
   * wrong-audience tokens): the provider's own answer, one claim changed, re-signed.
   */
  tamper: ((idToken: string) => Promise<string>) | null;
  /** When set, the userinfo endpoint answers 500 (a provider failing where the groups come from). */
  failUserinfo: boolean;
  /** Registers hangar's redirect URI (known once hangar listens) and starts answering. */
  serve(redirectUris: string[]): void;
  stop(): Promise<void>;
}

/** Listens first (hangar's configuration needs the issuer), answers once `serve` names hangar's redirect URI. */
export async function startProvider(options: { clientId?: string; clientSecret?: string } = {}): Promise<TestProvider> {
  const server: Server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const issuer = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const signingJwk = { ...privateKey.export({ format: 'jwk' }), kid: 'test-signing-key', use: 'sig', alg: 'RS256' } as Record<string, unknown>;
  const clientId = options.clientId ?? 'hangar-test';
  const clientSecret = options.clientSecret ?? 'a-client-secret-only-the-provider-and-hangar-know';
  const accounts = new Map<string, { groups: string[]; name?: string; preferred_username?: string }>();
  const handle: TestProvider = { issuer, clientId, clientSecret, signingJwk, accounts, tamper: null, failUserinfo: false, serve: () => undefined, stop: async () => undefined };
  handle.serve = (redirectUris) => serve(handle, server, redirectUris);
  handle.stop = () =>
    new Promise<void>((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    });
  return handle;
}

function serve(handle: TestProvider, server: Server, redirectUris: string[]): void {
  const { issuer, clientId, clientSecret, signingJwk, accounts } = handle;
  const provider = new Provider(issuer, {
    clients: [
      {
        client_id: clientId,
        client_secret: clientSecret,
        redirect_uris: redirectUris,
        grant_types: ['authorization_code', 'urn:ietf:params:oauth:grant-type:device_code'],
        response_types: ['code'],
        token_endpoint_auth_method: 'client_secret_basic',
      },
    ],
    jwks: { keys: [signingJwk as never] },
    claims: { openid: ['sub'], profile: ['name', 'preferred_username'], groups: ['groups'] },
    scopes: ['openid', 'profile', 'email', 'groups'],
    // The scope's claims in the ID token itself (as most providers put groups there).
    conformIdTokenClaims: false,
    features: { devInteractions: { enabled: true }, deviceFlow: { enabled: true } },
    pkce: { required: () => true },
    cookies: { keys: ['test-provider-cookie-key'], long: { secure: false }, short: { secure: false } },
    ttl: { AccessToken: 600, AuthorizationCode: 120, IdToken: 600, DeviceCode: 600, Grant: 600, Interaction: 600, Session: 600 },
    async findAccount(_ctx, id) {
      const account = accounts.get(id);
      if (!account) return undefined;
      return {
        accountId: id,
        async claims() {
          return { sub: id, name: account.name ?? id, preferred_username: account.preferred_username ?? id, groups: account.groups };
        },
      };
    },
    // Consent for the first-party client is given beforehand: the login page is the only step.
    async loadExistingGrant(ctx) {
      const grantId = ctx.oidc.result?.consent?.grantId || ctx.oidc.session!.grantIdFor(ctx.oidc.client!.clientId);
      if (grantId) return ctx.oidc.provider.Grant.find(grantId);
      const grant = new ctx.oidc.provider.Grant({ clientId: ctx.oidc.client!.clientId, accountId: ctx.oidc.session!.accountId });
      grant.addOIDCScope('openid profile email groups');
      grant.addOIDCClaims(['name', 'preferred_username', 'groups']);
      await grant.save();
      return grant;
    },
  });
  // The test's hook on the token endpoint's answer (provider.use: koa middleware around the provider's own).
  provider.use(async (ctx, next) => {
    if (ctx.path === '/me' && handle.failUserinfo) {
      ctx.status = 500;
      ctx.body = { error: 'server_error' };
      return;
    }
    await next();
    if (ctx.path === '/token' && handle.tamper && ctx.status === 200 && ctx.body && typeof (ctx.body as { id_token?: unknown }).id_token === 'string') {
      const body = ctx.body as { id_token: string };
      ctx.body = { ...body, id_token: await handle.tamper(body.id_token) };
    }
  });
  server.on('request', provider.callback());
}

/**
 * A provider and a control plane configured to log in through it (iam.oidc: its issuer over http on
 * loopback, its client, the client secret in a file of the control plane's data dir, and `oidc`'s
 * mapping), the provider knowing hangar's redirect URI.
 */
export async function startHangarWithProvider(dialect: TestDialect, options: { plugins: string[]; oidc: Record<string, unknown> }): Promise<{ idp: TestProvider; t: TestHangar }> {
  const idp = await startProvider();
  const storage = dialect.freshStorage();
  const secretFile = path.join(storage.dataDir, 'oidc-client-secret');
  writeFileSync(secretFile, `${idp.clientSecret}\n`, { mode: 0o600 });
  const oidc = { issuer: idp.issuer, client_id: idp.clientId, client_secret_file: secretFile, allow_http: true, ...options.oidc };
  const t = await startHangar(dialect, { plugins: options.plugins, storage, overrides: { iam: { oidc } } }).catch(async (err: unknown) => {
    await idp.stop();
    throw err;
  });
  idp.serve([`${t.url}/v1/auth/oidc/callback`]);
  return { idp, t };
}

/** A cookie jar and manual redirects, for driving the provider's pages (and hangar's callback) the way a browser would. */
export class Browserish {
  private readonly jar = new Map<string, Map<string, string>>();

  private cookiesFor(url: URL): string {
    const jar = this.jar.get(url.host);
    return jar ? [...jar].map(([k, v]) => `${k}=${v}`).join('; ') : '';
  }

  private keep(url: URL, res: Response): void {
    for (const line of res.headers.getSetCookie()) {
      const [pair, ...attrs] = line.split(';');
      const eq = pair!.indexOf('=');
      const name = pair!.slice(0, eq).trim();
      const value = pair!.slice(eq + 1).trim();
      const jar = this.jar.get(url.host) ?? new Map<string, string>();
      const expired = attrs.some((a) => /^\s*max-age=0\s*$/i.test(a) || /^\s*expires=thu, 01 jan 1970/i.test(a));
      if (expired || !value) jar.delete(name);
      else jar.set(name, value);
      this.jar.set(url.host, jar);
    }
  }

  cookie(host: string, name: string): string | undefined {
    return this.jar.get(host)?.get(name);
  }

  setCookie(host: string, name: string, value: string | null): void {
    const jar = this.jar.get(host) ?? new Map<string, string>();
    if (value === null) jar.delete(name);
    else jar.set(name, value);
    this.jar.set(host, jar);
  }

  /** One request, no redirect followed; `dispatcher`-free: hangar's TLS is taken on trust through NODE_TLS_REJECT_UNAUTHORIZED-free fetch of http only. */
  async fetch(url: string, init: { method?: string; form?: Record<string, string> } = {}): Promise<Response> {
    const target = new URL(url);
    const headers: Record<string, string> = { cookie: this.cookiesFor(target) };
    let body: string | undefined;
    if (init.form) {
      headers['content-type'] = 'application/x-www-form-urlencoded';
      body = new URLSearchParams(init.form).toString();
    }
    const res = await fetch(target, { method: init.method ?? (body ? 'POST' : 'GET'), headers, body, redirect: 'manual' });
    this.keep(target, res);
    return res;
  }

  /**
   * Follows redirects on the provider's own pages until one leaves for `stopAt` (hangar's callback),
   * answering its login form as `login`; returns that last URL.
   */
  async logInAtProvider(start: string, login: string, stopAt: string): Promise<string> {
    let url = start;
    for (let hops = 0; hops < 20; hops++) {
      if (url.startsWith(stopAt)) return url;
      const res = await this.fetch(url);
      if (res.status >= 300 && res.status < 400) {
        url = new URL(res.headers.get('location')!, url).href;
        continue;
      }
      const html = await res.text();
      if (res.status !== 200) throw new Error(`provider answered ${res.status} at ${url}: ${html.slice(0, 300)}`);
      const action = /<form[^>]*action="([^"]+)"/.exec(html)?.[1];
      if (!action || !html.includes('name="login"')) throw new Error(`no login form at ${url}: ${html.slice(0, 300)}`);
      const posted = await this.fetch(new URL(action.replace(/&amp;/g, '&'), url).href, { form: { prompt: 'login', login, password: 'any' } });
      if (posted.status < 300 || posted.status >= 400) throw new Error(`login form answered ${posted.status}: ${(await posted.text()).slice(0, 300)}`);
      url = new URL(posted.headers.get('location')!, url).href;
    }
    throw new Error('too many redirects at the provider');
  }

  /**
   * Approves a device login at the provider as its user would in a browser: the verification page
   * (the code filled in), the confirmation, the login form answered as `login`, until a page with
   * no form (the provider's success page), whose text is returned.
   */
  async approveDevice(start: string, login: string): Promise<string> {
    let res = await this.fetch(start);
    let url = start;
    for (let hops = 0; hops < 20; hops++) {
      if (res.status >= 300 && res.status < 400) {
        url = new URL(res.headers.get('location')!, url).href;
        res = await this.fetch(url);
        continue;
      }
      const html = await res.text();
      if (res.status !== 200) throw new Error(`provider answered ${res.status} at ${url}: ${html.slice(0, 300)}`);
      const formTag = /<form\b[^>]*>/.exec(html)?.[0];
      if (!formTag) return html;
      const attr = (tag: string, name: string) => new RegExp(`\\b${name}="([^"]*)"`).exec(tag)?.[1];
      const fields: Record<string, string> = {};
      for (const input of html.match(/<input\b[^>]*>/g) ?? []) {
        const name = attr(input, 'name');
        if (name && attr(input, 'type') === 'hidden') fields[name] = (attr(input, 'value') ?? '').replace(/&amp;/g, '&');
      }
      if (html.includes('name="login"')) Object.assign(fields, { prompt: 'login', login, password: 'any' });
      const code = new URL(start).searchParams.get('user_code');
      if (code && fields.user_code === undefined && html.includes('name="user_code"')) fields.user_code = code;
      url = new URL((attr(formTag, 'action') ?? url).replace(/&amp;/g, '&'), url).href;
      res = await this.fetch(url, { form: fields });
    }
    throw new Error('too many pages at the provider');
  }
}

/** The cookie binding a dashboard login to the browser that began it (plugins/iam/oidc/routes.ts). */
export const SSO_BINDING_COOKIE = '__Host-hangar_sso';

/** The name=value pair of cookie `name` among Set-Cookie headers. */
export const cookiePair = (header: string | string[] | undefined, name: string) =>
  ([] as string[])
    .concat(header ?? [])
    .map((h) => h.split(';')[0]!)
    .find((p) => p.startsWith(`${name}=`));

/**
 * The whole dashboard login through hangar's routes: GET /v1/auth/oidc/start, the provider's login
 * page answered as `login`, and hangar's callback with the binding cookie (its answer in `res`).
 */
export async function ssoLogin(t: TestHangar, login: string) {
  const start = await t.request('GET', '/v1/auth/oidc/start');
  if (start.status !== 302) throw new Error(`GET /v1/auth/oidc/start answered ${start.status}: ${start.text}`);
  const binding = cookiePair(start.headers['set-cookie'], SSO_BINDING_COOKIE)!;
  const back = await new Browserish().logInAtProvider(String(start.headers.location), login, `${t.url}/v1/auth/oidc/callback`);
  const pathAndQuery = back.slice(t.url.length);
  const res = await t.request('GET', pathAndQuery, { headers: { cookie: binding } });
  return { start, res, session: cookiePair(res.headers['set-cookie'], 'hangar_session'), pathAndQuery, binding };
}
