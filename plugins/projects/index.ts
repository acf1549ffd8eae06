import { Type } from '@sinclair/typebox';
import type { Knex } from 'knex';
import type { Principal } from '../../core/auth/index.js';
import { PROJECT_ROLE_PERMISSIONS, projectPermissionProblems } from '../../core/auth/permissions.js';
import { ClusterViewFields } from '../../core/clusters/directory.js';
import { CLUSTERS } from '../../core/clusters/migrations.js';
import { ClusterProjectsRef } from '../../core/clusters/projects.js';
import { ProjectGrantsRef, ScopeResolvers } from '../../core/auth/scope.js';
import { clusterResolver, ONE_PROJECT, PROJECT_LIST, projectGrants, projectResolver } from './grants.js';
import { paginate, StampedRepository } from '../../core/db/repository.js';
import { badRequest, conflict, HttpError, notFound } from '../../core/errors.js';
import { Reply } from '../../core/http/reply.js';
import { DnsName, NodeRef, PageQuery } from '../../core/http/resources.js';
import { newId } from '../../core/ids.js';
import { definePlugin, defineRoute } from '../../core/plugin.js';
import { IdentityRef, USERS, type UserRecord } from '../iam/api.js';
import {
  BUILTIN_ROLES,
  DEFAULT_PROJECT,
  DEFAULT_PROJECT_PROPERTY,
  MEMBER_CHANGES,
  NODE_GRANTS,
  PROJECTS,
  PROJECT_MEMBERS,
  PROJECT_ROLES,
  ProjectsRef,
  type Membership,
  type ProjectRecord,
  type ProjectsApi,
} from './api.js';
import { projectMetricsRoute } from './metrics.js';
import { nodeGrants } from './nodes.js';
import { projectMigrations } from './migrations.js';

const Description = Type.String({ maxLength: 500 });
const ProjectView = Type.Object({
  id: Type.String(),
  name: Type.String(),
  description: Type.Union([Type.String(), Type.Null()]),
  role: Type.Union([Type.String(), Type.Null()], { description: 'the caller’s role in the project (null: not a member; an installation admin sees every project)' }),
  created_at: Type.String(),
  updated_at: Type.String(),
});
const ProjectParams = Type.Object({ id: Type.String({ minLength: 1, maxLength: 100, description: 'the project’s id or name' }) });
const MemberParams = Type.Object({ id: ProjectParams.properties.id, user: Type.String({ minLength: 1, maxLength: 100, description: 'the user’s id or username' }) });
const RoleName = Type.String({ pattern: '^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$', description: 'lowercase letters, digits and inner hyphens; at most 63 characters' });
const RoleParams = Type.Object({ id: ProjectParams.properties.id, name: RoleName });
const MemberView = Type.Object({
  project_id: Type.String(),
  user_id: Type.String(),
  username: Type.String(),
  name: Type.Union([Type.String(), Type.Null()]),
  role: Type.String(),
  permissions: Type.Array(Type.String()),
  created_at: Type.String(),
  updated_at: Type.String(),
});
const RoleView = Type.Object({
  name: Type.String(),
  description: Type.Union([Type.String(), Type.Null()]),
  builtin: Type.Boolean(),
  permissions: Type.Array(Type.String()),
});

const builtin = (role: string): role is (typeof BUILTIN_ROLES)[number] => (BUILTIN_ROLES as readonly string[]).includes(role);
/** An installation admin, on a credential that is not limited to a project (a scoped API key acts in its own project only). */
const isAdmin = (principal: Principal | null) => principal?.role === 'admin' && !principal.project_id;
/** Installation admins, and auditors (who read everything and change nothing), see every project. */
const seesEveryProject = (principal: Principal | null) => isAdmin(principal) || (principal?.role === 'auditor' && !principal.project_id);
/** A credential limited to a project (a scoped API key) sees no other: as a project it is not a member of. */
const outOfScope = (principal: Principal | null, projectId: string) => Boolean(principal?.project_id && principal.project_id !== projectId);
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

class ProjectStore extends StampedRepository<ProjectRecord> {}

interface MemberRow {
  project_id: string;
  userid: string;
  role: string;
  created_at: string;
  updated_at: string;
}

export default definePlugin({
  name: 'projects',
  description: 'projects: who may use which clusters (members with a role, custom roles as sets of permissions)',
  deps: [IdentityRef],
  provides: [ProjectsRef, ClusterProjectsRef, ProjectGrantsRef],
  migrations: projectMigrations,
  setup(services) {
    const { db, clock } = services;
    const identity = services.provided.get(IdentityRef);
    const projects = new ProjectStore(db, PROJECTS, { dates: ['created_at', 'updated_at'] }, clock);
    const now = () => clock.now().toISOString();
    const iso = (v: unknown) => (v instanceof Date ? v.toISOString() : String(v));
    /** Live users only: a deleted user (kept for the audit trail) is a member of nothing. */
    const liveUsers = (k: Knex) => k(USERS).whereNull('deleted_at').select('userid');
    const members = () => db.knex(PROJECT_MEMBERS).whereIn('userid', liveUsers(db.knex));

    async function customRole(projectId: string, name: string): Promise<{ name: string; description: string | null; permissions: string[] } | null> {
      const row = await db.knex(PROJECT_ROLES).where({ project_id: projectId, name }).first();
      return row ? { name: row.name, description: row.description ?? null, permissions: JSON.parse(row.permissions) as string[] } : null;
    }
    /** The permissions a role of a project grants (built-in: the catalogue's; custom: its own list; an unknown name: none). */
    async function permissionsOf(projectId: string, role: string): Promise<string[]> {
      if (builtin(role)) return [...PROJECT_ROLE_PERMISSIONS[role]];
      return (await customRole(projectId, role))?.permissions ?? [];
    }
    async function membership(projectId: string, userid: string): Promise<Membership | null> {
      const row: MemberRow | undefined = await members().where({ project_id: projectId, userid }).first();
      if (!row) return null;
      return { project_id: projectId, userid, role: row.role, permissions: builtin(row.role) ? null : await permissionsOf(projectId, row.role) };
    }
    const find = async (ref: string) => (await projects.get(ref)) ?? (await projects.findOne({ name: ref }));

    /** A project the caller may see (an admin or auditor: any; anyone else: those it is a member of), or the 404 an unknown one gets. */
    async function requireVisible(principal: Principal | null, ref: string): Promise<{ project: ProjectRecord; member: Membership | null }> {
      const found = await find(ref);
      const project = found && !outOfScope(principal, found.id) ? found : null;
      const member = project && principal ? await membership(project.id, principal.id) : null;
      // A project the caller is not in answers as one that does not exist: its name tells nothing.
      if (!project || (!seesEveryProject(principal) && !member && !(principal?.project_id && principal.role === 'admin'))) throw notFound(`No project ${ref}`);
      return { project, member };
    }
    /** As requireVisible, and the caller holds `permission` there (installation admins hold every one); a 403 otherwise. */
    async function requireAllowed(principal: Principal | null, ref: string, permission: string): Promise<{ project: ProjectRecord; member: Membership | null }> {
      const found = await requireVisible(principal, ref);
      if (isAdmin(principal)) return found;
      // A scoped key holds what its list names (within its owner's, which the authenticator checked).
      const held = principal?.project_id ? (principal.permissions ?? []) : found.member ? await permissionsOf(found.project.id, found.member.role) : [];
      if (!held.includes(permission)) {
        const role = found.member ? `your role in project ${found.project.name} (${found.member.role})` : `you are not a member of project ${found.project.name}: your installation role (${principal?.role})`;
        throw new HttpError(403, 'Insufficient permissions', [{ path: 'role', message: `${role} does not grant ${permission}: ask an owner of the project or an installation admin` }]);
      }
      return found;
    }

    async function requireUser(ref: string): Promise<UserRecord> {
      const user = UUID.test(ref) ? await identity.users.get(ref) : await identity.users.findForLogin('username', ref);
      if (!user) throw notFound(`No user ${ref}`);
      return user;
    }

    const view = (project: ProjectRecord, role: string | null) => ({
      id: project.id,
      name: project.name,
      description: project.description ?? null,
      role,
      created_at: project.created_at,
      updated_at: project.updated_at,
    });
    async function memberView(row: MemberRow, user?: Pick<UserRecord, 'username' | 'name'>) {
      const who = user ?? (await identity.users.get(row.userid));
      return {
        project_id: row.project_id,
        user_id: row.userid,
        username: who?.username ?? row.userid,
        name: who?.name ?? null,
        role: row.role,
        permissions: await permissionsOf(row.project_id, row.role),
        created_at: iso(row.created_at),
        updated_at: iso(row.updated_at),
      };
    }
    const roleView = (role: { name: string; description: string | null; permissions: string[] }, isBuiltin: boolean) => ({ name: role.name, description: role.description, builtin: isBuiltin, permissions: role.permissions });

    /** The project a caller's request names or defaults to, which it may use; `field` is where it was named (for the 400). */
    async function usable(principal: Principal | null, ref: string, field: string, why: string, seesAll = isAdmin): Promise<string> {
      const project = await find(ref);
      const ok = project && !outOfScope(principal, project.id) && (seesAll(principal) || principal?.project_id || (principal && (await membership(project.id, principal.id))));
      if (!project || !ok) throw badRequest(`Validation failed: ${field}: no project ${ref}${why}`, [{ path: field, message: `names no project you are a member of${why}` }]);
      return project.id;
    }

    const api: ProjectsApi = {
      async projectOfCluster(clusterId) {
        const row = await db.knex(CLUSTERS).where({ id: clusterId }).first('project_id');
        return (row?.project_id as string | null | undefined) ?? null;
      },
      membership,
      async membershipsOf(userid) {
        const rows: MemberRow[] = await members().where({ userid }).orderBy('project_id');
        return Promise.all(rows.map(async (r) => ({ project_id: r.project_id, userid, role: r.role, permissions: builtin(r.role) ? null : await permissionsOf(r.project_id, r.role) })));
      },
      async visibleTo(principal) {
        if (principal.project_id) return [principal.project_id];
        if (seesEveryProject(principal)) return null;
        return (await members().where({ userid: principal.id }).select('project_id')).map((r: { project_id: string }) => r.project_id);
      },
      find,
      async rolePermissions(projectId, role) {
        if (builtin(role)) return [...PROJECT_ROLE_PERMISSIONS[role]];
        return (await customRole(projectId, role))?.permissions ?? null;
      },
      async projectForNew(principal, named, field = 'body.project_id') {
        if (named !== undefined) return usable(principal, named, field, '');
        const own = principal ? (await identity.users.properties(principal.id).catch(() => [])).find((p) => p.name === DEFAULT_PROJECT_PROPERTY && p.value) : undefined;
        if (own?.value) return usable(principal, own.value, field, ` (your user property ${DEFAULT_PROJECT_PROPERTY} names it: change it, or name the project in ${field})`);
        if (!(await find(DEFAULT_PROJECT))) {
          throw badRequest(`Validation failed: ${field} is required: there is no project named ${DEFAULT_PROJECT} to put it in`, [{ path: field, message: 'is required (no default project)' }]);
        }
        return usable(principal, DEFAULT_PROJECT, field, ` (the default project: name the project in ${field})`);
      },
    };
    services.provided.provide(ProjectsRef, api);
    services.provided.provide(ProjectGrantsRef, projectGrants(api));
    services.provided.contribute(ScopeResolvers, clusterResolver(db));
    services.provided.contribute(ScopeResolvers, projectResolver(db));
    services.provided.provide(ClusterProjectsRef, {
      forNew: (principal, named) => api.projectForNew(principal, named),
      resolve: (principal, ref) => usable(principal, ref, 'query.project', '', seesEveryProject),
    });
    services.provided.contribute(ClusterViewFields, async (cluster) => ({ project_id: cluster.project_id ?? null }));

    const announce = (userid: string) => db.notices.publish(MEMBER_CHANGES, userid);
    /** Whether `role` makes its holder a real owner: the built-in `owner`, or a role granting every permission an owner has. */
    async function ownerRole(projectId: string, role: string): Promise<boolean> {
      if (role === 'owner') return true;
      const held = new Set(await permissionsOf(projectId, role));
      return PROJECT_ROLE_PERMISSIONS.owner.every((p) => held.has(p));
    }
    /**
     * Whether a project would still have a real owner (see ownerRole) without `except`. Managing members
     * alone (a narrow custom role holding `projects:members`) does not make one.
     */
    async function keepsAnOwner(projectId: string, except: string): Promise<boolean> {
      const rows: MemberRow[] = await members().where({ project_id: projectId }).whereNot({ userid: except });
      for (const row of rows) if (await ownerRole(projectId, row.role)) return true;
      return false;
    }
    /** The permissions `role` grants that the caller's own role does not (none for an installation admin). */
    async function beyondCaller(principal: Principal | null, project: ProjectRecord, member: Membership | null, role: string): Promise<string[]> {
      if (isAdmin(principal) || !member) return [];
      const mine = new Set(await permissionsOf(project.id, member.role));
      return (await permissionsOf(project.id, role)).filter((p) => !mine.has(p));
    }
    /** A non-admin gives no role wider than its own. */
    async function checkGrant(principal: Principal | null, project: ProjectRecord, member: Membership | null, role: string): Promise<void> {
      const wider = await beyondCaller(principal, project, member, role);
      if (wider.length) throw new HttpError(403, 'Insufficient permissions', [{ path: 'body.role', message: `${role} grants what your role (${member?.role}) does not: ${wider.join(', ')}` }]);
    }
    /** A non-admin changes or removes no member whose current role grants anything its own role does not: no one wider than itself. */
    async function checkActOn(principal: Principal | null, project: ProjectRecord, member: Membership | null, target: { username: string; role: string }, act: string): Promise<void> {
      const wider = await beyondCaller(principal, project, member, target.role);
      if (wider.length) {
        throw new HttpError(403, 'Insufficient permissions', [
          {
            path: 'params.user',
            message: `${target.username}'s role (${target.role}) grants what your role (${member?.role}) does not: ${wider.join(', ')}; you cannot ${act} a member wider than you: ask an owner of the project or an installation admin`,
          },
        ]);
      }
    }
    /** A non-admin leaves its project with a real owner: `userid` (holding `role` now) may stop being one only while another remains. Admins may. */
    async function checkKeepsOwner(principal: Principal | null, project: ProjectRecord, username: string, userid: string, role: string, next: string | null): Promise<void> {
      if (isAdmin(principal) || !(await ownerRole(project.id, role))) return;
      if (next !== null && (await ownerRole(project.id, next))) return;
      if (!(await keepsAnOwner(project.id, userid))) throw conflict(`${username} is the last owner of project ${project.name}: make another member owner first`);
    }

    return {
      routes: [
        defineRoute({
          method: 'POST',
          path: '/v1/projects',
          auth: { role: 'admin' },
          // Creating and deleting projects is the installation's (no project role grants it).
          permission: 'projects:create',
          summary: 'Create a project (installation admins)',
          status: 201,
          schemas: { body: Type.Object({ name: DnsName, description: Type.Optional(Description) }, { additionalProperties: false }), response: ProjectView },
          async handler(req) {
            if (await projects.findOne({ name: req.body.name })) throw conflict(`A project named ${req.body.name} exists`);
            const at = now();
            const project = await projects.insert({ id: newId('prj'), name: req.body.name, description: req.body.description ?? null, created_at: at, updated_at: at });
            return view(project, null);
          },
        }),
        defineRoute({
          method: 'GET',
          path: '/v1/projects',
          scope: PROJECT_LIST,
          auth: 'authenticated',
          summary: 'List the projects the caller is a member of (installation admins: every project); ?node= those of them a node is granted to',
          schemas: {
            query: Type.Object({ ...PageQuery.properties, node: Type.Optional(Type.String({ pattern: NodeRef.pattern, description: 'only the projects this node is granted to (of those the caller sees)' })) }, { additionalProperties: false }),
            response: Type.Array(ProjectView),
          },
          async handler(req) {
            const principal = req.principal!;
            const admin = seesEveryProject(principal);
            const { node } = req.query;
            const page = await projects.page({
              limit: req.query.limit,
              cursor: req.query.cursor,
              where: (q) => {
                if (node !== undefined) void q.whereIn('id', db.knex(NODE_GRANTS).where({ node_id: node }).select('project_id'));
                if (admin) return;
                if (principal.project_id) void q.where({ id: principal.project_id });
                else void q.whereIn('id', members().where({ userid: principal.id }).select('project_id'));
              },
            });
            const roles = new Map<string, string>(
              (await members().where({ userid: principal.id }).whereIn('project_id', page.items.map((p) => p.id)).select('project_id', 'role')).map((r: MemberRow) => [r.project_id, r.role]),
            );
            return Reply.page(page, (p) => view(p, roles.get(p.id) ?? null));
          },
        }),
        defineRoute({
          method: 'GET',
          path: '/v1/projects/{id}',
          scope: ONE_PROJECT,
          auth: 'authenticated',
          summary: 'Get a project (its members and installation admins)',
          schemas: { params: ProjectParams, response: ProjectView },
          async handler(req) {
            const { project, member } = await requireVisible(req.principal, req.params.id);
            return view(project, member?.role ?? null);
          },
        }),
        defineRoute({
          method: 'PATCH',
          path: '/v1/projects/{id}',
          scope: ONE_PROJECT,
          auth: 'authenticated',
          errors: [403],
          summary: 'Rename a project or change its description (installation admins, and members whose role grants projects:write: owners)',
          schemas: {
            params: ProjectParams,
            body: Type.Object({ name: Type.Optional(DnsName), description: Type.Optional(Type.Union([Description, Type.Null()])) }, { additionalProperties: false }),
            response: ProjectView,
          },
          preserveNullValues: true,
          async handler(req) {
            if (req.body.name === undefined && req.body.description === undefined) {
              throw badRequest('Validation failed: give name or description to change', [{ path: 'body', message: 'needs at least one of name, description' }]);
            }
            const { project, member } = await requireAllowed(req.principal, req.params.id, 'projects:write');
            if (req.body.name !== undefined && req.body.name !== project.name && (await projects.findOne({ name: req.body.name }))) throw conflict(`A project named ${req.body.name} exists`);
            const changed = await projects.change(project.id, { ...(req.body.name !== undefined ? { name: req.body.name } : {}), ...(req.body.description !== undefined ? { description: req.body.description } : {}) });
            return view(changed, member?.role ?? null);
          },
        }),
        defineRoute({
          method: 'DELETE',
          path: '/v1/projects/{id}',
          scope: ONE_PROJECT,
          auth: { role: 'admin' },
          permission: 'projects:delete',
          summary: 'Delete a project (installation admins): refused (409) while it owns clusters; its members and roles go with it',
          schemas: { params: ProjectParams, response: Type.Object({ id: Type.String(), deleted: Type.Literal(true) }) },
          async handler(req) {
            const { project } = await requireVisible(req.principal, req.params.id);
            const owned: Array<{ id: string; name: string }> = await db.knex(CLUSTERS).where({ project_id: project.id }).orderBy('name').limit(6).select('id', 'name');
            if (owned.length) {
              const named = owned.slice(0, 5).map((c) => `${c.name} (${c.id})`).join(', ');
              throw conflict(`Project ${project.name} owns clusters: ${named}${owned.length > 5 ? ', …' : ''}; delete them or move them to another project first`);
            }
            const userids: string[] = (await db.knex(PROJECT_MEMBERS).where({ project_id: project.id }).select('userid')).map((r: { userid: string }) => r.userid);
            await db.knex.transaction(async (trx) => {
              await trx(PROJECT_MEMBERS).where({ project_id: project.id }).delete();
              await trx(PROJECT_ROLES).where({ project_id: project.id }).delete();
              await projects.remove(project.id, trx);
            });
            for (const userid of userids) await announce(userid);
            return { id: project.id, deleted: true as const };
          },
        }),
        defineRoute({
          method: 'GET',
          path: '/v1/projects/{id}/members',
          scope: ONE_PROJECT,
          auth: 'authenticated',
          summary: 'List the members of a project with their roles and permissions (its members and installation admins)',
          schemas: { params: ProjectParams, query: PageQuery, response: Type.Array(MemberView) },
          async handler(req) {
            const { project } = await requireVisible(req.principal, req.params.id);
            const page = await paginate(members().where({ project_id: project.id }), {
              keys: ['userid'],
              limit: req.query.limit,
              cursor: req.query.cursor,
              decode: (row) => row as unknown as MemberRow,
              cursors: db.cursors,
              list: `${PROJECT_MEMBERS}:${project.id}`,
            });
            return Reply.pageOf(page, (row) => memberView(row));
          },
        }),
        defineRoute({
          method: 'PUT',
          path: '/v1/projects/{id}/members/{user}',
          scope: ONE_PROJECT,
          auth: 'authenticated',
          permission: 'projects:members',
          errors: [403],
          summary: 'Add a user to a project with a role, or change its role (installation admins, and owners of the project)',
          schemas: { params: MemberParams, body: Type.Object({ role: RoleName }, { additionalProperties: false }), response: MemberView },
          async handler(req) {
            const { project, member } = await requireAllowed(req.principal, req.params.id, 'projects:members');
            const { role } = req.body;
            if (!builtin(role) && !(await customRole(project.id, role))) {
              const custom = (await db.knex(PROJECT_ROLES).where({ project_id: project.id }).orderBy('name').select('name')).map((r: { name: string }) => r.name);
              throw badRequest(`Validation failed: body.role: project ${project.name} has no role ${role} (roles: ${[...BUILTIN_ROLES, ...custom].join(', ')})`, [{ path: 'body.role', message: 'is not a role of the project' }]);
            }
            const user = await requireUser(req.params.user);
            await checkGrant(req.principal, project, member, role);
            const existing: MemberRow | undefined = await db.knex(PROJECT_MEMBERS).where({ project_id: project.id, userid: user.userid }).first();
            if (existing) {
              await checkActOn(req.principal, project, member, { username: user.username, role: existing.role }, 'change');
              await checkKeepsOwner(req.principal, project, user.username, user.userid, existing.role, role);
            }
            const at = now();
            await db
              .knex(PROJECT_MEMBERS)
              .insert({ project_id: project.id, userid: user.userid, role, created_at: at, updated_at: at })
              .onConflict(['project_id', 'userid'])
              .merge(['role', 'updated_at']);
            await announce(user.userid);
            const row: MemberRow = await db.knex(PROJECT_MEMBERS).where({ project_id: project.id, userid: user.userid }).first();
            return new Reply(existing ? 200 : 201, { data: await memberView(row, user) });
          },
          status: 200,
          otherStatuses: [201],
        }),
        defineRoute({
          method: 'DELETE',
          path: '/v1/projects/{id}/members/{user}',
          scope: ONE_PROJECT,
          auth: 'authenticated',
          permission: 'projects:members',
          errors: [403],
          summary: 'Remove a user from a project, effective at its next request (installation admins, and owners of the project)',
          schemas: { params: MemberParams, response: Type.Object({ project_id: Type.String(), user_id: Type.String(), deleted: Type.Literal(true) }) },
          async handler(req) {
            const { project, member } = await requireAllowed(req.principal, req.params.id, 'projects:members');
            const user = await requireUser(req.params.user);
            const existing: MemberRow | undefined = await db.knex(PROJECT_MEMBERS).where({ project_id: project.id, userid: user.userid }).first();
            if (!existing) throw notFound(`${user.username} is not a member of project ${project.name}`);
            await checkActOn(req.principal, project, member, { username: user.username, role: existing.role }, 'remove');
            await checkKeepsOwner(req.principal, project, user.username, user.userid, existing.role, null);
            await db.knex(PROJECT_MEMBERS).where({ project_id: project.id, userid: user.userid }).delete();
            await announce(user.userid);
            return { project_id: project.id, user_id: user.userid, deleted: true as const };
          },
        }),
        defineRoute({
          method: 'GET',
          path: '/v1/projects/{id}/roles',
          scope: ONE_PROJECT,
          auth: 'authenticated',
          summary: 'List the roles of a project: the built-in ones and its custom roles, with their permissions',
          schemas: { params: ProjectParams, response: Type.Array(RoleView) },
          async handler(req) {
            const { project } = await requireVisible(req.principal, req.params.id);
            const custom = await db.knex(PROJECT_ROLES).where({ project_id: project.id }).orderBy('name');
            return [
              ...BUILTIN_ROLES.map((name) => roleView({ name, description: null, permissions: [...PROJECT_ROLE_PERMISSIONS[name]] }, true)),
              ...custom.map((r: { name: string; description: string | null; permissions: string }) => roleView({ name: r.name, description: r.description ?? null, permissions: JSON.parse(r.permissions) }, false)),
            ];
          },
        }),
        defineRoute({
          method: 'POST',
          path: '/v1/projects/{id}/roles',
          scope: ONE_PROJECT,
          auth: 'authenticated',
          permission: 'projects:members',
          errors: [403],
          summary: 'Create a custom role of a project: a named set of permissions (installation admins, and owners of the project)',
          status: 201,
          schemas: {
            params: ProjectParams,
            body: Type.Object(
              {
                name: RoleName,
                description: Type.Optional(Description),
                permissions: Type.Array(Type.String({ maxLength: 100 }), { minItems: 1, maxItems: 200, uniqueItems: true, description: '<kind>:<verb> of the project’s kinds, e.g. services:deploy, secrets:read-metadata' }),
              },
              { additionalProperties: false },
            ),
            response: RoleView,
          },
          async handler(req) {
            const { project, member } = await requireAllowed(req.principal, req.params.id, 'projects:members');
            const { name, permissions } = req.body;
            if (builtin(name)) throw conflict(`${name} is a built-in role: choose another name`);
            const problems = projectPermissionProblems(permissions);
            if (problems.length) throw badRequest(`Validation failed: body.permissions: ${problems.join('; ')}`, problems.map((message) => ({ path: 'body.permissions', message })));
            if (!isAdmin(req.principal) && member) {
              const mine = new Set(await permissionsOf(project.id, member.role));
              const wider = permissions.filter((p) => !mine.has(p));
              if (wider.length) throw new HttpError(403, 'Insufficient permissions', [{ path: 'body.permissions', message: `your role (${member.role}) does not grant ${wider.join(', ')}` }]);
            }
            if (await customRole(project.id, name)) throw conflict(`Project ${project.name} has a role named ${name}`);
            const sorted = [...permissions].sort();
            await db.knex(PROJECT_ROLES).insert({ project_id: project.id, name, description: req.body.description ?? null, permissions: JSON.stringify(sorted), created_at: now() });
            return roleView({ name, description: req.body.description ?? null, permissions: sorted }, false);
          },
        }),
        defineRoute({
          method: 'DELETE',
          path: '/v1/projects/{id}/roles/{name}',
          scope: ONE_PROJECT,
          auth: 'authenticated',
          permission: 'projects:members',
          errors: [403],
          summary: 'Delete a custom role of a project: refused (409) while a member has it (installation admins, and owners of the project)',
          schemas: { params: RoleParams, response: Type.Object({ name: Type.String(), deleted: Type.Literal(true) }) },
          async handler(req) {
            const { project } = await requireAllowed(req.principal, req.params.id, 'projects:members');
            const { name } = req.params;
            if (builtin(name)) throw conflict(`${name} is a built-in role: it cannot be deleted`);
            if (!(await customRole(project.id, name))) throw notFound(`Project ${project.name} has no role ${name}`);
            const holders: Array<{ userid: string }> = await members().where({ project_id: project.id, role: name }).limit(5).select('userid');
            if (holders.length) throw conflict(`Role ${name} is held by ${holders.length === 5 ? '5 or more members' : `${holders.length} member(s)`}: give them another role first (PUT /v1/projects/${project.id}/members/{user})`);
            await db.knex(PROJECT_ROLES).where({ project_id: project.id, name }).delete();
            return { name, deleted: true as const };
          },
        }),
        projectMetricsRoute(services),
        ...nodeGrants(services, find),
      ],
    };
  },
});
