import { Type } from '@sinclair/typebox';
import type { Principal } from '../../core/auth/index.js';
import { INSTALLATION_ROLE_ABOUT, INSTALLATION_ROLES, permissionsHeld, userGrantsOf, type InstallationRole } from '../../core/auth/permissions.js';
import { defineRoute, type RouteDef, type Services } from '../../core/plugin.js';
import type { ProjectsApi } from '../projects/api.js';
import type { Identity } from './identity.js';

/** How a credential of each authenticator's principals is called in the answer. */
const CREDENTIAL_KINDS: Record<string, string> = { jwt: 'jwt', session: 'session', hmac: 'api_key' };

export const WhoamiView = Type.Object(
  {
    user: Type.Object(
      {
        id: Type.String(),
        username: Type.Union([Type.String(), Type.Null()], { description: 'null for a caller that is no user' }),
        name: Type.String(),
        email: Type.Union([Type.String(), Type.Null()]),
      },
      { additionalProperties: false },
    ),
    role: Type.String({ description: 'the installation role (admin, auditor, user, or another name: then it holds what user holds)' }),
    role_about: Type.String({ description: 'what the role grants, in words' }),
    credential: Type.Object(
      {
        kind: Type.String({ description: 'jwt, session (the dashboard’s cookie) or api_key (an HMAC-signed request)' }),
        expires_at: Type.Union([Type.String({ format: 'date-time' }), Type.Null()], { description: 'when it stops working; null: it does not expire (an API key until it is deleted)' }),
        access_key_id: Type.Optional(Type.String({ description: 'the API key that signed the request' })),
        key_description: Type.Optional(Type.Union([Type.String(), Type.Null()])),
        scope: Type.Optional(Type.Union([Type.Literal('installation'), Type.Literal('project')], { description: 'an API key’s: the installation, or the one project it is limited to' })),
        project_id: Type.Optional(Type.Union([Type.String(), Type.Null()])),
        project_name: Type.Optional(Type.Union([Type.String(), Type.Null()])),
        key_role: Type.Optional(Type.Union([Type.String(), Type.Null()], { description: 'the role the key was made with (null: a permission list, or its owner’s own)' })),
        limited: Type.Optional(Type.Boolean({ description: 'whether the key holds less than its owner (a role or a permission list): `permissions` says what' })),
        source_networks: Type.Optional(Type.Array(Type.String(), { description: 'where the key is accepted from; empty: anywhere' })),
      },
      { additionalProperties: false },
    ),
    permissions: Type.Array(Type.String(), { description: 'every permission the caller holds, sorted (docs/tenancy.md); a project’s key: what it holds in its project' }),
    projects: Type.Array(
      Type.Object(
        {
          id: Type.String(),
          name: Type.String(),
          role: Type.Union([Type.String(), Type.Null()], { description: 'the caller’s role in the project (built-in or custom); null for an admin’s key limited to a project it is no member of' }),
          permissions: Type.Array(Type.String(), { description: 'what this credential holds in the project by that role (within an API key’s list), sorted' }),
        },
        { additionalProperties: false },
      ),
      {
        description:
          'the projects the caller is a member of (a project’s key: its project only), each with the caller’s role and what it grants there; empty without the projects plugin. The installation role’s `permissions` hold everywhere besides',
      },
    ),
  },
  { additionalProperties: false },
);

type ProjectGrant = { id: string; name: string; role: string | null; permissions: string[] };

/**
 * The caller's projects and what it holds in each: its memberships (a project's key: its one
 * project, where `principal.permissions` is already what the key holds), each role's permissions
 * within an API key's list. Read from the store at each request, as every check is.
 */
async function grantsByProject(principal: Principal, projects: ProjectsApi | undefined): Promise<ProjectGrant[]> {
  if (!projects) return [];
  const memberships = await projects.membershipsOf(principal.id);
  const limitedTo = typeof principal.project_id === 'string' ? principal.project_id : null;
  const list = Array.isArray(principal.permissions) ? new Set<string>(principal.permissions) : null;
  const out: ProjectGrant[] = [];
  for (const projectId of limitedTo ? [limitedTo] : memberships.map((m) => m.project_id)) {
    const project = await projects.find(projectId);
    if (!project) continue;
    const role = memberships.find((m) => m.project_id === projectId)?.role ?? null;
    const byRole = limitedTo ? [...(list ?? [])] : ((await projects.rolePermissions(projectId, role!)) ?? []);
    out.push({ id: project.id, name: project.name, role, permissions: byRole.filter((p) => limitedTo || !list || list.has(p)).sort() });
  }
  return out.sort((a, b) => a.name.localeCompare(b.name));
}

/** `GET /v1/iam/whoami`: who the caller is, with which credential until when, and what it may do. */
export function whoamiRoute(services: Services, identity: Identity, projects: () => ProjectsApi | undefined): RouteDef {
  let grants: ReturnType<typeof userGrantsOf> | undefined;
  const routes = () => services.routeTable().map((r) => r.route);
  return defineRoute({
    method: 'GET',
    path: '/v1/iam/whoami',
    auth: 'authenticated',
    permission: 'account:read',
    summary: 'Who you are: your user, installation role and its permissions, your projects with your role and its permissions in each, and the credential this request used (kind, expiry)',
    description: 'Never answers a secret: for an API key, its access key id and description only.',
    schemas: { response: WhoamiView },
    async handler(req) {
      const principal = req.principal as Principal;
      // The route table is complete once the control plane serves: what users hold is read once.
      grants ??= userGrantsOf(routes());
      const user = await identity.users.get(principal.id);
      const credential: Record<string, unknown> & { kind: string; expires_at: string | null } = {
        kind: CREDENTIAL_KINDS[principal.method] ?? principal.method,
        // A session knows its end to the millisecond; a token to the second (its `exp`).
        expires_at: typeof principal.expires_at === 'string' ? principal.expires_at : typeof principal.exp === 'number' ? new Date(principal.exp * 1000).toISOString() : null,
      };
      if (principal.method === 'hmac' && user) {
        const found = await identity.users.liveKey(user.userid, String(principal.key_id));
        if (found) {
          const { key } = found;
          Object.assign(credential, {
            access_key_id: key.access_key_id,
            key_description: key.description,
            scope: key.project_id ? 'project' : 'installation',
            project_id: key.project_id,
            project_name: key.project_id ? ((await projects()?.find(key.project_id))?.name ?? null) : null,
            key_role: key.role,
            limited: Boolean(key.permissions),
            source_networks: key.source_networks ?? [],
          });
        }
      }
      const known = (INSTALLATION_ROLES as readonly string[]).includes(principal.role);
      return {
        user: { id: principal.id, username: user?.username ?? null, name: principal.name, email: user?.email ?? null },
        role: principal.role,
        role_about: known ? INSTALLATION_ROLE_ABOUT[principal.role as InstallationRole] : `not a built-in role: it holds what user holds (${INSTALLATION_ROLE_ABOUT.user}), and the routes guarded by ${principal.role}`,
        credential,
        // A project's key holds what its list names in its project (checked against its owner's membership by the authenticator).
        permissions: principal.project_id ? [...(principal.permissions ?? [])] : permissionsHeld(principal, routes(), grants),
        projects: await grantsByProject(principal, projects()),
      };
    },
  });
}
