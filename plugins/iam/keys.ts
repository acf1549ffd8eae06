import { BlockList, isIP } from 'node:net';
import { Type } from '@sinclair/typebox';
import {
  catalogue,
  INSTALLATION_ROLES,
  parsePermission,
  permissionsHeld,
  PROJECT_ROLE_PERMISSIONS,
  projectPermissionProblems,
  type PermissionRoute,
  type UserGrants,
} from '../../core/auth/permissions.js';
import { badRequest, HttpError } from '../../core/errors.js';
import type { ProjectsApi } from '../projects/api.js';
import type { ApiKeyRecord, UserRecord } from './users.js';

/**
 * Scoped, expiring API keys (docs/api-auth.md "API keys", docs/tenancy.md "Scoped API keys"): a key
 * acts for the installation or one project, with its owner's permissions there or fewer (a role or
 * a list of permissions), until it expires, from the networks it names.
 */

/** Every scoped key may say who it is (GET /v1/iam/whoami); none gets a token or a session (account:write). */
export const ALWAYS_HELD = 'account:read';

/** The scope of a key as its create request gives it. */
export const KeyScopeInput = {
  project: Type.Optional(Type.String({ minLength: 1, maxLength: 100, description: 'limit the key to this project (id or name); its owner must be a member of it (or an installation admin). Default: the installation' })),
  role: Type.Optional(
    Type.String({
      minLength: 1,
      maxLength: 63,
      pattern: '^[a-z0-9][a-z0-9_-]*$',
      description: 'the key holds what this role grants, within its owner’s: with project, a project role (viewer, deployer, maintainer, owner or one of the project’s custom roles); without, an installation role (admin, auditor, user). Default: whatever its owner holds, as it changes',
    }),
  ),
  permissions: Type.Optional(
    Type.Array(Type.String({ maxLength: 100 }), { minItems: 1, maxItems: 200, uniqueItems: true, description: 'the key holds these permissions (`<kind>:<verb>`), within its owner’s; instead of role' }),
  ),
  expires_at: Type.Optional(Type.String({ format: 'date-time', description: 'when the key stops working (in the future)' })),
  expires_in: Type.Optional(Type.String({ pattern: '^[0-9]{1,6}[smhdw]$', description: 'instead of expires_at: a lifetime from now, a number and a unit (s, m, h, d, w): 30d, 12h' })),
  source_networks: Type.Optional(
    Type.Array(Type.String({ minLength: 2, maxLength: 50 }), { maxItems: 50, uniqueItems: true, description: 'CIDRs (IPv4 or IPv6) the key is accepted from; an address alone is one host. Default: anywhere' }),
  ),
};

/** What the API shows of a key's scope. */
export const KeyScopeView = {
  scope: Type.Union([Type.Literal('installation'), Type.Literal('project')]),
  project_id: Type.Union([Type.String(), Type.Null()]),
  project_name: Type.Union([Type.String(), Type.Null()], { description: 'null for an installation key, or a project deleted since (the key no longer works)' }),
  role: Type.Union([Type.String(), Type.Null()], { description: 'the role it was made with; null: a permission list, or its owner’s own' }),
  permissions: Type.Union([Type.Array(Type.String()), Type.Null()], { description: 'what it is limited to (within its owner’s permissions of the moment); null: its owner’s' }),
  expires_at: Type.Union([Type.String({ format: 'date-time' }), Type.Null()]),
  expired: Type.Boolean(),
  source_networks: Type.Array(Type.String(), { description: 'where it is accepted from; empty: anywhere' }),
};

const UNITS: Record<string, number> = { s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000, w: 604_800_000 };

/** The milliseconds of a lifetime such as `30d`; null when it is not one. */
export function lifetimeMs(text: string): number | null {
  const m = /^(\d{1,6})([smhdw])$/.exec(text);
  return m ? Number(m[1]) * UNITS[m[2]!]! : null;
}

/** A source network in canonical text (`10.0.0.0/8`, `2001:db8::/32`; an address alone gets its full prefix), or a message saying what is wrong. */
export function parseNetwork(text: string): { network: string; address: string; prefix: number; family: 'ipv4' | 'ipv6' } | { problem: string } {
  const [address = '', prefixText, extra] = text.trim().split('/');
  const version = isIP(address);
  if (!version || extra !== undefined) return { problem: `"${text}" is not a CIDR (10.0.0.0/8, 2001:db8::/32) nor an IP address` };
  const max = version === 4 ? 32 : 128;
  const prefix = prefixText === undefined ? max : /^\d{1,3}$/.test(prefixText) ? Number(prefixText) : NaN;
  if (!(prefix >= 0 && prefix <= max)) return { problem: `"${text}": the prefix length of an IPv${version} network is 0 to ${max}` };
  return { network: `${address.toLowerCase()}/${prefix}`, address, prefix, family: version === 4 ? 'ipv4' : 'ipv6' };
}

/** Whether `address` (the client address as the app reads it: core/http/koa-app.ts clientAddress) is in one of the networks. */
export function fromNetworks(networks: readonly string[], address: string): boolean {
  if (!networks.length) return true;
  const list = new BlockList();
  for (const n of networks) {
    const parsed = parseNetwork(n);
    if ('network' in parsed) list.addSubnet(parsed.address, parsed.prefix, parsed.family);
  }
  const version = isIP(address);
  return version !== 0 && list.check(address, version === 4 ? 'ipv4' : 'ipv6');
}

/** What a key's owner holds in a project: every project permission for an installation admin, else its membership's; null when it is not a member, or the project is gone. */
export async function projectHoldings(projects: ProjectsApi, projectId: string, owner: Pick<UserRecord, 'userid' | 'role'>): Promise<readonly string[] | null> {
  if (owner.role === 'admin') return (await projects.find(projectId)) ? PROJECT_ROLE_PERMISSIONS.owner : null;
  const member = await projects.membership(projectId, owner.userid);
  if (!member) return null;
  return member.permissions ?? (await projects.rolePermissions(projectId, member.role)) ?? [];
}

const sortedUnique = (list: Iterable<string>) => [...new Set(list)].sort();

/** The 403 of a key asked wider than what its owner (or the credential making it) holds, naming what is missing. */
function wider(missing: string[], whose: string): HttpError {
  return new HttpError(403, `Insufficient permissions: the key would hold ${missing.join(', ')}, which ${whose} does not`, [
    { path: 'body', message: `${whose} does not hold ${missing.join(', ')}: ask for a narrower role or permission list` },
  ]);
}

/** A cap on a new key's lifetime: its length, and in words with the setting that sets it ("90 days (iam.api_key_max_lifetime_days)"). */
export interface MaxLifetime {
  ms: number;
  says: string;
}

/** The tighter of the caps that apply (null ones do not); null when none does. */
export function tightestLifetime(...caps: Array<MaxLifetime | null>): MaxLifetime | null {
  return caps.reduce<MaxLifetime | null>((best, cap) => (cap && (!best || cap.ms < best.ms) ? cap : best), null);
}

/** The cap iam.api_key_max_lifetime_days sets (null: none). */
export function daysCap(days: number | null): MaxLifetime | null {
  return days === null ? null : { ms: days * UNITS.d!, says: `${days} days (iam.api_key_max_lifetime_days)` };
}

export interface ScopeRequest {
  project?: string;
  role?: string;
  permissions?: string[];
  expires_at?: string;
  expires_in?: string;
  source_networks?: string[];
}

/** A key's scope as stored (columns of api_keys). */
export interface KeyScope {
  project_id: string | null;
  role: string | null;
  permissions: string[] | null;
  expires_at: string | null;
  source_networks: string[] | null;
}

/**
 * Checks a key's create request and answers its scope: 400 naming the field for what is malformed
 * (a project the owner is not in, a role or permission that does not exist, a past or too distant
 * expiry, a bad CIDR), 403 naming the permissions when it would hold what its owner — or the scoped
 * credential asking — does not.
 */
export async function resolveScope(input: {
  request: ScopeRequest;
  owner: UserRecord;
  /** The permissions the asking credential is limited to (a scoped key making a key), if any. */
  caller: { permissions?: readonly string[]; project_id?: string };
  projects: ProjectsApi | undefined;
  routes: readonly PermissionRoute[];
  userGrants: UserGrants;
  now: Date;
  /** The longest a new key may live, and the setting that says so (the tighter of iam.api_key_max_lifetime_days and, for an SSO user, iam.oidc.cli_key_lifetime_hours); null: no maximum. */
  maxLifetime: MaxLifetime | null;
}): Promise<KeyScope> {
  const { request, owner, caller, projects, routes, userGrants, now } = input;
  const invalid = (path: string, message: string) => badRequest(`Validation failed: ${path}: ${message}`, [{ path, message }]);
  if (request.role !== undefined && request.permissions !== undefined) throw invalid('body.role', 'give role or permissions, not both');
  if (request.expires_at !== undefined && request.expires_in !== undefined) throw invalid('body.expires_in', 'give expires_at or expires_in, not both');

  // Expiry: a time in the future, within the configured maximum (which is the default when set).
  let expires: number | null = null;
  if (request.expires_at !== undefined) {
    expires = Date.parse(request.expires_at);
    if (!(expires > now.getTime())) throw invalid('body.expires_at', 'must be in the future');
  } else if (request.expires_in !== undefined) {
    const ms = lifetimeMs(request.expires_in);
    if (!ms) throw invalid('body.expires_in', 'must be a positive number and a unit (s, m, h, d, w): 30d');
    expires = now.getTime() + ms;
  }
  if (input.maxLifetime !== null) {
    const latest = now.getTime() + input.maxLifetime.ms;
    if (expires === null) expires = latest;
    else if (expires > latest) {
      throw invalid(request.expires_at !== undefined ? 'body.expires_at' : 'body.expires_in', `is later than the longest lifetime allowed here, ${input.maxLifetime.says}`);
    }
  }

  const networks: string[] = [];
  for (const [i, text] of (request.source_networks ?? []).entries()) {
    const parsed = parseNetwork(text);
    if ('problem' in parsed) throw invalid(`body.source_networks[${i}]`, parsed.problem);
    networks.push(parsed.network);
  }

  let projectId: string | null = null;
  const role: string | null = request.role ?? null;
  let permissions: string[] | null = null;
  let ownerHolds: readonly string[];
  if (request.project !== undefined) {
    if (!projects) throw invalid('body.project', 'projects are not loaded here (add the projects plugin to plugins:)');
    const project = await projects.find(request.project);
    const holds = project ? await projectHoldings(projects, project.id, owner) : null;
    // A project the owner is not in answers as one that does not exist.
    if (!project || !holds) throw invalid('body.project', `no project ${request.project} that the key's owner (${owner.username}) is a member of`);
    projectId = project.id;
    ownerHolds = holds;
    if (role !== null) {
      const granted = await projects.rolePermissions(project.id, role);
      if (!granted) throw invalid('body.role', `project ${project.name} has no role ${role} (the built-in ones: viewer, deployer, maintainer, owner; or one of its custom roles)`);
      permissions = [...granted];
    } else if (request.permissions) {
      const problems = projectPermissionProblems(request.permissions.filter((p) => p !== ALWAYS_HELD));
      if (problems.length) throw badRequest(`Validation failed: body.permissions: ${problems.join('; ')}`, problems.map((message) => ({ path: 'body.permissions', message })));
      permissions = [...request.permissions];
    }
  } else {
    const held = permissionsHeld(owner, routes, userGrants);
    ownerHolds = held;
    if (role !== null) {
      if (!(INSTALLATION_ROLES as readonly string[]).includes(role)) throw invalid('body.role', `${role} is not an installation role (${INSTALLATION_ROLES.join(', ')}); a project role goes with project`);
      permissions = permissionsHeld({ role }, routes, userGrants);
    } else if (request.permissions) {
      const known = new Set<string>([...catalogue(), ...held, ...permissionsHeld({ role: 'admin' }, routes, userGrants)]);
      const problems = request.permissions.flatMap((p, i) => (!parsePermission(p) ? [`[${i}] "${p}" is not <kind>:<verb>`] : !known.has(p) ? [`[${i}] "${p}" is no permission of this installation (GET /v1/openapi.json: x-hangar-permission)`] : []));
      if (problems.length) throw badRequest(`Validation failed: body.permissions: ${problems.join('; ')}`, problems.map((message) => ({ path: 'body.permissions', message })));
      permissions = [...request.permissions];
    }
  }
  if (permissions) {
    // account:write would exchange the key for a token without its limits: a limited key never holds it.
    permissions = sortedUnique([...permissions.filter((p) => p !== 'account:write'), ALWAYS_HELD]);
    const lacking = permissions.filter((p) => p !== ALWAYS_HELD && !ownerHolds.includes(p));
    if (lacking.length) throw wider(lacking, `${owner.username}${projectId ? ` (in project ${request.project})` : ''}`);
  }
  // A limited credential makes no key wider than itself (nor one limited to nothing, which would be its owner's whole).
  if (caller.permissions) {
    const effective = permissions ?? [...ownerHolds];
    const lacking = effective.filter((p) => p !== ALWAYS_HELD && !caller.permissions!.includes(p));
    if (lacking.length) throw wider(lacking, 'the API key signing this request');
    if (caller.project_id && projectId !== caller.project_id) throw invalid('body.project', 'a key limited to a project makes keys of that project only');
  }
  return { project_id: projectId, role, permissions, expires_at: expires === null ? null : new Date(expires).toISOString(), source_networks: networks.length ? networks : null };
}

/** Whether a key has expired by `now`. */
export function expired(key: Pick<ApiKeyRecord, 'expires_at'>, now: Date): boolean {
  return key.expires_at !== null && Date.parse(key.expires_at) <= now.getTime();
}
