import type { TLSSocket } from 'node:tls';
import type { Context } from 'koa';
import { forbidden, HttpError, unauthorized } from '../errors.js';
import type { AgentIdentity, AuthRequirement } from '../plugin.js';
import type { Pki } from '../pki/pki.js';
import { permitted, type UserGrants } from './permissions.js';

/** Who is calling, as established by an authenticator. */
export interface Principal {
  /** User id (or another subject id for non-user principals). */
  id: string;
  name: string;
  role: string;
  /** How the caller proved who it is, e.g. `jwt` or `hmac`. */
  method: string;
  /**
   * A credential narrower than its user's role (a scoped API key): the permissions it is limited
   * to (core/auth/permissions.ts). Absent: whatever the role grants.
   */
  permissions?: readonly string[];
  /**
   * A credential limited to one project (a project-scoped API key): its id. Resources of other
   * projects are out of its reach (core/auth/scope.ts ScopeGate.access). Absent: the installation.
   */
  project_id?: string;
  /** Authenticator-specific facts (e.g. the API key id). */
  [key: string]: unknown;
}

/** What an authenticator sees of a request. */
export interface AuthInput {
  ctx: Context;
  /**
   * The body exactly as received, read on the first call under the full limit. Only an
   * authenticator whose credentials cover the body (a signature) calls it, once the headers alone
   * have checked out, naming whose body slots it takes (core/http/body.ts): the user the credentials
   * name (`principal:<userid>`, with every other credential of that user), or null for credentials
   * that name nobody (an unknown access key, read as a known one is so that the two cannot be told
   * apart), which take a slot of the client address among callers without credentials.
   */
  body(owner: string | null): Promise<Buffer>;
  listener: string;
}

/**
 * One way of proving identity (JWT, HMAC…). Returns null when the request carries none of its
 * credentials, a Principal when they are valid, and throws a 401 HttpError when they are present but bad.
 * Headers first: a request without credentials has its body read under the small limit for callers
 * without credentials, or not at all on a route that needs them.
 */
export interface Authenticator {
  name: string;
  authenticate(input: AuthInput): Promise<Principal | null>;
  /**
   * For requests that outlive their start (an event stream): whether a principal this authenticator
   * returned would still be accepted now. Answers it as it would be now (its role may have changed),
   * or throws a 401 HttpError saying why it would be refused (user deleted, key removed, session
   * ended, password changed). Any other error is a failure to tell (the store is unreachable).
   * Without it, a principal holds until its `exp`.
   */
  revalidate?(principal: Principal): Promise<Principal>;
  /**
   * Store notice topics (core/db/notices.ts) whose key is a principal's `id` (null: any) and which
   * announce a change that may revoke this authenticator's principals: holders of long-lived
   * requests revalidate theirs when one arrives.
   */
  revokedBy?: readonly string[];
}

/** The pluggable authentication step: plugins register authenticators (the identity plugin adds JWT and HMAC). */
export class AuthRegistry {
  private readonly authenticators: Authenticator[] = [];

  /**
   * Adds an authenticator after those registered so far; `first` puts it before them (for one that
   * recognises a narrow credential, e.g. a bearer token valid on one path, which a broader one
   * would otherwise refuse as malformed).
   */
  register(authenticator: Authenticator, options: { first?: boolean } = {}): void {
    if (options.first) this.authenticators.unshift(authenticator);
    else this.authenticators.push(authenticator);
  }

  get names(): string[] {
    return this.authenticators.map((a) => a.name);
  }

  /** First authenticator that recognises the request's credentials wins. */
  async identify(input: AuthInput): Promise<Principal | null> {
    for (const authenticator of this.authenticators) {
      const principal = await authenticator.authenticate(input);
      if (principal) {
        this.issuers.set(principal, authenticator);
        return principal;
      }
    }
    return null;
  }

  /** Which authenticator returned each principal still in use (for {@link revalidate}). */
  private readonly issuers = new WeakMap<Principal, Authenticator>();

  /**
   * The principal as its authenticator would accept it now (see {@link Authenticator.revalidate}):
   * throws the 401 when it would be refused. A principal whose authenticator cannot tell is
   * answered as it is.
   */
  async revalidate(principal: Principal): Promise<Principal> {
    const authenticator = this.issuers.get(principal);
    if (!authenticator?.revalidate) return principal;
    const now = await authenticator.revalidate(principal);
    this.issuers.set(now, authenticator);
    return now;
  }

  /** Every notice topic that may revoke a principal of a registered authenticator. */
  get revocationTopics(): string[] {
    return [...new Set(this.authenticators.flatMap((a) => a.revokedBy ?? []))];
  }
}

/** The agent identity of an mTLS request: a client certificate the CA signed, unrevoked, CN = node id. */
export async function agentFromTls(ctx: Context, pki: Pki): Promise<AgentIdentity> {
  const socket = ctx.req.socket as TLSSocket;
  const cert = typeof socket.getPeerCertificate === 'function' ? socket.getPeerCertificate() : null;
  if (!cert || !cert.subject) {
    throw new HttpError(401, 'Authentication required', [{ path: 'tls', message: 'present a client certificate issued by this control plane (CN = node id)' }]);
  }
  if (!socket.authorized) throw unauthorized('The client certificate was not issued by this control plane');
  const nodeId = String(cert.subject.CN ?? '');
  if (!nodeId || !(await pki.isUsable(cert.serialNumber, nodeId))) {
    throw unauthorized('The client certificate has been revoked or is unknown');
  }
  return { nodeId, serial: cert.serialNumber };
}

export interface AuthOutcome {
  principal: Principal | null;
  agent: AgentIdentity | null;
}

/**
 * A public route that has just established who the caller is (a login checked a password) tells the
 * pipeline: the request's observers (the audit log) and its access log line then name that
 * principal, as they name the caller of an authenticated route.
 */
export function establishPrincipal(ctx: Context, principal: Principal): void {
  const state = ctx.state as { caller?: AuthOutcome; principal?: string };
  state.caller = { principal, agent: null };
  state.principal = principal.id;
}

const NO_USER_GRANTS: UserGrants = new Set();

/** What the permission step knows of a route: the permission it needs, and what users hold (core/auth/permissions.ts). */
export interface PermissionCheck {
  permission: string;
  userGrants: UserGrants;
  /**
   * A route on a project's resources (core/auth/scope.ts): whether the caller's project roles let
   * it go on though its installation role does not grant the permission (its project is checked
   * next). There the `user` role's grants count for nothing: memberships decide.
   */
  viaProjects?(principal: Principal): Promise<boolean>;
}

/**
 * The 403 of a caller without the permission, naming it: what to ask an admin for.
 * `Insufficient permissions` stays its first words (clients match on them).
 */
export function permissionRefused(principal: Principal, permission: string): HttpError {
  const narrowed = Array.isArray(principal.permissions) && !principal.permissions.includes(permission);
  const why = narrowed ? 'this credential is limited to other permissions' : `role ${principal.role} does not grant it`;
  return forbidden(`Insufficient permissions: this needs ${permission}, and ${why}`);
}

/**
 * Authentication, then permission: the first two steps of every route. An `authenticated` route
 * lets in whoever holds its permission (core/auth/permissions.ts permitted). A route guarded by a
 * role lets in that role and (with `orSelf`) the user its path names, as before permissions, and
 * the installation roles whose permissions include the route's (admin, auditor).
 */
export async function authorize(
  requirement: AuthRequirement,
  input: AuthInput,
  registry: AuthRegistry,
  pki: Pki,
  check: PermissionCheck,
): Promise<AuthOutcome> {
  // Who called is known to the pipeline's observers (the audit log) even when the role check refuses.
  const known = (outcome: AuthOutcome) => ((input.ctx.state as { caller?: AuthOutcome }).caller = outcome);
  if (requirement === 'agent') return known({ principal: null, agent: await agentFromTls(input.ctx, pki) });
  if (requirement === 'public') {
    // Public routes still learn who calls when credentials are offered, but never fail on bad ones.
    const principal = await registry.identify(input).catch((err: unknown) => {
      if (err instanceof HttpError && err.status === 401) return null;
      throw err;
    });
    return known({ principal, agent: null });
  }
  const principal = await registry.identify(input);
  if (!principal) throw unauthorized();
  known({ principal, agent: null });
  if (check.viaProjects) {
    if (permitted(principal, check.permission, NO_USER_GRANTS) || (await check.viaProjects(principal))) return { principal, agent: null };
    throw permissionRefused(principal, check.permission);
  }
  if (requirement === 'authenticated') {
    if (permitted(principal, check.permission, check.userGrants)) return { principal, agent: null };
    throw permissionRefused(principal, check.permission);
  }
  // A role-guarded route: what `user` holds (the permissions of open routes) never opens one, so a
  // permission an open route shares with it lets no user in; an installation role's permission
  // does (admin, auditor), and so do the route's role and the user it names, within what the
  // credential itself is limited to (a scoped key).
  if (permitted(principal, check.permission, NO_USER_GRANTS)) return { principal, agent: null };
  const within = !Array.isArray(principal.permissions) || principal.permissions.includes(check.permission);
  const self = requirement.orSelf && (input.ctx as unknown as { params?: Record<string, string> }).params?.[requirement.orSelf];
  if (within && (principal.role === requirement.role || (self && self === principal.id))) return { principal, agent: null };
  throw permissionRefused(principal, check.permission);
}
