import type { Knex } from 'knex';
import type { Principal } from '../../core/auth/index.js';
import { badRequest } from '../../core/errors.js';
import { defineServiceRef, type Services } from '../../core/plugin.js';

/** The projects plugin's contract: what other plugins import of it (importing this never loads the plugin). */

export const PROJECTS = 'projects';
export const PROJECT_MEMBERS = 'project_members';
export const PROJECT_ROLES = 'project_roles';
/** Which nodes are granted to which projects (node_id, project_id). */
export const NODE_GRANTS = 'project_node_grants';
/** The project the migration puts an existing installation in, and new clusters go in when nothing else is named. */
export const DEFAULT_PROJECT = 'default';
/** The user property (`/v1/iam/users/{id}/properties`) naming a user's default project (id or name). */
export const DEFAULT_PROJECT_PROPERTY = 'default_project';
/** Store notices on this topic name a user whose membership of a project changed (key: the user id). */
export const MEMBER_CHANGES = 'projects.members';

/**
 * The role every user of an installation made before projects gets in its `default` project: the
 * one that keeps exactly what they could do. Before projects a user who was not an admin could call
 * the routes open to any authenticated caller, and of the project's kinds those are all reads
 * (listing and getting clusters, instances, services, secrets' metadata, volumes, backups…): every
 * write was an admin's. `viewer` grants exactly those reads (and `projects:read`, reading the
 * project itself, which is no more than they saw), nothing else; the projects test checks this
 * against the route table. Installation admins stay admins (that role is the user's, not a
 * project's) and are members too, so that one made a user later keeps a user's access, as before.
 */
export const MIGRATED_ROLE = 'viewer';

/** The built-in project roles, narrowest first. */
export const BUILTIN_ROLES = ['viewer', 'deployer', 'maintainer', 'owner'] as const;
export type BuiltinRole = (typeof BUILTIN_ROLES)[number];

export interface ProjectRecord {
  id: string;
  name: string;
  description: string | null;
  created_at: string;
  updated_at: string;
  [key: string]: unknown;
}

export interface Membership {
  project_id: string;
  userid: string;
  /** A built-in role, or the name of one of the project's custom roles. */
  role: string;
  /** The custom role's permissions; null for a built-in role (its permissions are the catalogue's). */
  permissions: string[] | null;
}

/**
 * What the next slice (enforcing projects on every resource route) asks of projects. Every answer is
 * read from the store when asked: a member removed is refused by the very next request (no cache).
 */
export interface ProjectsApi {
  /** The project that owns a cluster (swarm or Kubernetes cluster), by the cluster's id; null when none does or there is no such cluster. */
  projectOfCluster(clusterId: string): Promise<string | null>;
  /** A user's membership of a project, or null when not a member (deleted users are members of nothing). */
  membership(projectId: string, userid: string): Promise<Membership | null>;
  /** Every project a user is a member of, with the role in each. */
  membershipsOf(userid: string): Promise<Membership[]>;
  /**
   * The ids of the projects a caller may see: null for an installation admin or auditor (every
   * project); a credential limited to a project (a scoped API key) sees that one only.
   */
  visibleTo(principal: Principal): Promise<string[] | null>;
  /** A project by id or name; null when there is none. */
  find(ref: string): Promise<ProjectRecord | null>;
  /** The permissions a role of a project grants (built-in: the catalogue's; custom: its own list); null when the project has no such role. */
  rolePermissions(projectId: string, role: string): Promise<string[] | null>;
  /**
   * Where a new resource goes: the project named (id or name), else the caller's default project
   * (its `default_project` user property, else the project named `default`). 400 naming what to fix
   * when there is none, or the caller is neither an admin nor a member of it; `field` is where the
   * request names it (default `body.project_id`).
   */
  projectForNew(principal: Principal | null, named?: string, field?: string): Promise<string>;
}

export const ProjectsRef = defineServiceRef<ProjectsApi>('projects', 'projects and their members (the projects plugin)');

export function projectsOf(services: Services): ProjectsApi {
  return services.provided.get(ProjectsRef);
}

/**
 * The project a new resource of a plugin that may run without projects goes in: `named` (the
 * request's `project_id`, id or name) or the caller's default project (ProjectsApi.projectForNew);
 * null when projects are not loaded (a 400 when the request names one then).
 */
export async function projectForNew(services: Services, principal: Principal | null, named: string | undefined, field = 'body.project_id'): Promise<string | null> {
  const projects = services.provided.find(ProjectsRef);
  if (projects) return projects.projectForNew(principal, named, field);
  if (named !== undefined) throw badRequest(`Validation failed: ${field} names a project, but no loaded plugin keeps projects (add projects to plugins:)`, [{ path: field, message: 'projects are not loaded' }]);
  return null;
}

/** What a resolver reads a resource made before projects as (its project_id null): the `default` project, when projects are loaded. */
export function defaultProjectOf(services: Services): () => Promise<string | null> {
  return async () => (await services.provided.find(ProjectsRef)?.find(DEFAULT_PROJECT))?.id ?? null;
}

/**
 * Migration step of a plugin whose rows come to belong to projects: the rows made before (a null
 * `project_id`) go to the project named `default` (the one projects' migration puts an installation
 * in) when it exists already; else they are read so until then (defaultProjectOf).
 */
export async function adoptIntoDefaultProject(knex: Knex, tables: readonly string[]): Promise<void> {
  if (!(await knex.schema.hasTable(PROJECTS))) return;
  const row = await knex(PROJECTS).where({ name: DEFAULT_PROJECT }).first('id');
  if (row) for (const table of tables) await knex(table).whereNull('project_id').update({ project_id: row.id });
}
