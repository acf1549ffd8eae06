import type { Context } from 'koa';
import { badRequest, forbidden, notFound } from '../errors.js';
import { defineExtensionPoint, defineServiceRef, type ServiceRegistry } from '../provided.js';
import type { Principal } from './index.js';
import { KINDS, parsePermission, permissionOf, permitted, type Permission, type PermissionRoute, type UserGrants } from './permissions.js';

/**
 * Project scopes (docs/tenancy.md "Project roles on resources"): a route on a resource that belongs
 * to a project says, as data in its route entry, where the request names that resource; core finds
 * the resource's project through the resolver registered for its kind, and lets the caller in when
 * its installation role grants the route's permission OR its role in that project does. The auth
 * matrix and the OpenAPI document read the same declaration.
 */

/** Where a request names a resource: a path parameter, a body field (`[]` walks an array of objects), or a query parameter. */
export type ScopeSource = `params.${string}` | `body.${string}` | `query.${string}`;

/**
 * A kind named by the request itself (the tags' `resource_type`): the value of the first of `from`
 * present, mapped by `kinds` (`swarm` → `cluster`, `s3` → `object-store`…). A value not listed is a
 * kind of no project (nodes: the installation's), which only installation roles reach.
 */
export interface KindAt {
  from: readonly ScopeSource[];
  kinds: Readonly<Record<string, string>>;
}

/** One resource a request names, whose project must grant the caller the permission. */
export interface ScopeRef {
  /** The kind of resource, as its resolver registers it (`cluster`, `service`, `instance`, `secret`, `config`, `volume`). */
  kind: string;
  from: ScopeSource;
  /** What it is called in a 404 (default the kind): `swarm` for `body.swarm_id`. */
  noun?: string;
  /** The permission needed in the resource's project; default the route's. */
  permission?: Permission;
  /** The value names the resource up to this separator (`vol:/data` names volume `vol`). */
  upTo?: string;
  /** The kind is named by the request (then `kind` only labels the declaration, and the noun is the value named). */
  kindAt?: KindAt;
}

/** A list whose items are of several kinds (tags): each item's kind is named by its field `type`, its resource by its field `id`. */
export interface ListOfKinds {
  type: string;
  id: string;
  kinds: Readonly<Record<string, string>>;
}

/**
 * A route's project scope. `of`: the resources it names (path ones are checked before validation,
 * body ones after it); each must be in a project whose role grants the caller the permission, and
 * all in the same project. `list`: a list of that kind, answering only the items of projects where
 * the caller holds the permission (all for installation admins and auditors), narrowed by
 * `?project=`.
 */
export interface RouteScope {
  of?: readonly ScopeRef[];
  list?: string | ListOfKinds;
}

/**
 * Finds the projects of resources of one kind by id (or name, where the kind is named so). Answers
 * a map from each ref it found to its project id (null: the resource belongs to no project, only
 * installation roles reach it); a ref it did not find is absent.
 */
export interface ScopeResolver {
  kind: string;
  projectsOf(refs: readonly string[]): Promise<Map<string, string | null>>;
  /**
   * The project of a resource of this kind from its row (as written, or as it was before its
   * delete); undefined when the row cannot tell.
   */
  projectOfRow?(row: Readonly<Record<string, unknown>>): Promise<string | null | undefined>;
}

export const ScopeResolvers = defineExtensionPoint<ScopeResolver>('auth.scope-resolvers', 'how each kind of resource finds its project (core/auth/scope.ts)');

/** What project memberships grant (the projects plugin provides it); read from the store at each call. */
export interface ProjectGrants {
  /** Every project the user is a member of → the permissions its role there grants. */
  grantsOf(userId: string): Promise<Map<string, readonly string[]>>;
  /** A project's id by id or name; null when there is none. */
  find(ref: string): Promise<string | null>;
}

export const ProjectGrantsRef = defineServiceRef<ProjectGrants>('auth.project-grants', 'what project memberships grant (the projects plugin)');

/** What the scope step decided for a request: the projects the caller may act in (null: every one). */
export interface ScopeAccess {
  /** Projects where the caller holds the route's permission; null when its installation role grants it everywhere (or projects are not loaded). */
  allowed: ReadonlySet<string> | null;
  /** Projects the caller is a member of (it knows they exist); null as above. */
  member: ReadonlySet<string> | null;
  /** Whether the caller holds a permission in a project (for refs declaring their own permission). */
  holds(project: string, permission: string): boolean;
  /**
   * Whether the caller reaches the installation's resources of a kind that keeps them beside its
   * projects' (alerts on nodes and certificates: KindDef.unowned): its installation role grants the
   * permission (`user`'s grants counting) on a credential of the installation.
   */
  installation: boolean;
  /** `?project=` of a list, resolved. */
  narrowed?: string;
}

const EVERYWHERE: Omit<ScopeAccess, 'narrowed'> = { allowed: null, member: null, holds: () => true, installation: true };

/** Whether a permission's kind keeps resources of no project as the installation's (KindDef.unowned). */
function installationOwns(permission: string): boolean {
  return KINDS[parsePermission(permission)?.kind ?? '']?.unowned === 'installation';
}

const NO_USER_GRANTS = new Set<Permission>();

/** What the scope step reads of a request. */
interface ScopeInput {
  params: unknown;
  body: unknown;
  query?: unknown;
}

/** A value at `params.id`, `body.volume_id` or `body.volumes[].volume_id`: every string found. */
function valuesAt(input: ScopeInput, from: ScopeSource): string[] {
  const [root, ...path] = from.split('.');
  let values: unknown[] = [(input as unknown as Record<string, unknown>)[root!]];
  for (const step of path) {
    const array = step.endsWith('[]');
    const key = array ? step.slice(0, -2) : step;
    values = values.flatMap((v) => {
      const next = v && typeof v === 'object' ? (v as Record<string, unknown>)[key] : undefined;
      return array ? (Array.isArray(next) ? next : []) : [next];
    });
  }
  return values.filter((v): v is string => typeof v === 'string');
}

/** The project scope step of the pipeline (core/http/koa-app.ts): one per application. */
export class ScopeGate {
  /** `userGrants`: what `user` holds (core/auth/permissions.ts), for the installation's resources of a kind that keeps them beside its projects'. */
  constructor(
    private readonly provided: ServiceRegistry,
    private readonly userGrants: () => UserGrants = () => NO_USER_GRANTS,
  ) {}

  private get projects(): ProjectGrants | undefined {
    return this.provided.find(ProjectGrantsRef);
  }

  private resolver(kind: string): ScopeResolver {
    const found = this.provided.contributions(ScopeResolvers).find((r) => r.kind === kind);
    if (!found) throw new Error(`no scope resolver for ${kind} (a route declares it; its plugin registers none)`);
    return found;
  }

  /**
   * The projects of resources of a kind. A kind the request names (`named`) that no loaded plugin
   * resolves, or none, is of no project: only installation roles reach its resources.
   */
  private async projectsOfKind(kind: string | undefined, refs: readonly string[], named: boolean): Promise<Map<string, string | null>> {
    const resolver = kind && named ? this.provided.contributions(ScopeResolvers).find((r) => r.kind === kind) : kind ? this.resolver(kind) : undefined;
    if (!resolver) return new Map(refs.map((r) => [r, null]));
    // A ref with a NUL character names nothing hangar stores (and PostgreSQL's text refuses it): not found.
    const storable = refs.filter((r) => !r.includes('\0'));
    return storable.length ? resolver.projectsOf(storable) : new Map();
  }

  /** Whether projects are in force: a plugin grants by membership. Without it, routes are decided by installation roles alone. */
  get active(): boolean {
    return Boolean(this.projects);
  }

  /**
   * Whether a caller the installation role refuses may go on: some project grants it the
   * permission (a list lets it in anyway, to answer what it may see, possibly nothing). A
   * credential limited to other permissions never.
   */
  async admits(principal: Principal, permission: string, scope: RouteScope): Promise<boolean> {
    if (Array.isArray(principal.permissions) && !principal.permissions.includes(permission)) return false;
    if (scope.list) return true;
    const access = await this.access(principal, permission);
    return access.allowed === null || access.allowed.size > 0 || access.installation;
  }

  /**
   * What the caller may reach: everything when its installation role grants the permission (on a
   * credential not limited to a project), else what its memberships grant, within what the
   * credential is limited to (a scoped key: its permissions, its one project, where its
   * installation role counts too).
   */
  async access(principal: Principal | null, permission: string): Promise<ScopeAccess> {
    return (await this.accessTo(principal, [permission])).get(permission)!;
  }

  /** {@link access} for several permissions at once, reading the caller's memberships once (the event stream's filter). */
  async accessTo(principal: Principal | null, permissions: readonly string[]): Promise<Map<string, ScopeAccess>> {
    const installation = (p: string) => Boolean(principal && permitted(principal, p, NO_USER_GRANTS));
    const out = new Map<string, ScopeAccess>();
    let grants: Map<string, readonly string[]> | undefined;
    for (const permission of permissions) {
      if (!principal || !this.projects || (installation(permission) && !principal.project_id)) {
        out.set(permission, { ...EVERYWHERE });
        continue;
      }
      const held = (grants ??= await this.projects.grantsOf(principal.id));
      const limitedTo = typeof principal.project_id === 'string' ? principal.project_id : null;
      const within = (p: string) => !Array.isArray(principal.permissions) || principal.permissions.includes(p);
      const holds = (project: string, p: string) =>
        (!limitedTo || project === limitedTo) && within(p) && (Boolean(held.get(project)?.includes(p)) || (limitedTo !== null && installation(p)));
      const projects = limitedTo ? [limitedTo] : [...held.keys()];
      out.set(permission, {
        allowed: new Set(projects.filter((id) => holds(id, permission))),
        member: new Set(projects.filter((id) => held.has(id) || installation(permission))),
        holds,
        installation: !limitedTo && installationOwns(permission) && permitted(principal, permission, this.userGrants()),
      });
    }
    return out;
  }

  /**
   * Checks the resources the request names from `source` (path parameters before validation, the
   * body after it). Not yours answers as not there: 404 `No <noun> <ref>` when the caller is not a
   * member of the resource's project; 403 when it is, and its role there does not grant the
   * permission. A path's resource that does not exist is the same 404; a body's is left to the
   * handler (which names the field). All must be in one project (400 naming the field). Query
   * parameters are checked with the body.
   */
  async check(access: ScopeAccess, scope: RouteScope, permission: string, input: ScopeInput, source: 'params' | 'body', seen: Map<string, string>): Promise<void> {
    for (const ref of scope.of ?? []) {
      if (!ref.from.startsWith(`${source}.`) && !(source === 'body' && ref.from.startsWith('query.'))) continue;
      const values = valuesAt(input, ref.from).map((v) => (ref.upTo && v.includes(ref.upTo) ? v.slice(0, v.indexOf(ref.upTo)) : v));
      if (!values.length) continue;
      const named = ref.kindAt ? ref.kindAt.from.map((f) => valuesAt(input, f)[0]).find((v) => v !== undefined) : undefined;
      // A kind the request does not name: the handler refuses it (400).
      if (ref.kindAt && named === undefined) continue;
      const kind = ref.kindAt ? ref.kindAt.kinds[named!] : ref.kind;
      const found = await this.projectsOfKind(kind, values, Boolean(ref.kindAt));
      const noun = ref.kindAt ? named! : (ref.noun ?? ref.kind);
      for (const value of values) {
        if (!found.has(value)) {
          // Installation roles get the handler's own 404; a member the same words whether it is missing or not its own.
          if (source === 'params' && access.member) throw notFound(`No ${noun} ${value}`);
          continue;
        }
        const project = found.get(value) ?? null;
        const needs = ref.permission ?? permission;
        // The installation's resource of a kind that keeps them beside its projects' (an alert on a node): as its route's auth says.
        if (project === null && needs === permission && access.installation) continue;
        if (access.member) {
          if (project === null || !access.member.has(project)) throw notFound(`No ${noun} ${value}`);
          if (!access.holds(project, needs)) {
            throw forbidden(`Insufficient permissions: this needs ${needs}, and your role in the project of ${noun} ${value} does not grant it`);
          }
        }
        if (project === null) continue;
        const [first] = [...seen];
        if (first && first[1] !== project) {
          throw badRequest(`Validation failed: ${ref.from}: ${noun} ${value} belongs to another project than ${first[0]}: a request may only join resources of one project`, [
            { path: ref.from, message: `is in another project than ${first[0]}` },
          ]);
        }
        seen.set(`${noun} ${value}`, project);
      }
    }
  }

  /**
   * `?project=` of a scoped list whose own query schema does not take it: taken off the query
   * (before validation) and resolved; a project the caller is not a member of is a 400 as one that
   * does not exist.
   */
  async narrowing(ctx: Context, access: ScopeAccess, ownQuery: boolean): Promise<string | undefined> {
    const ref = (ctx.query as Record<string, unknown>).project;
    if (ref === undefined) return undefined;
    if (!ownQuery) {
      const rest = { ...ctx.query };
      delete rest.project;
      ctx.query = rest;
    }
    const id = typeof ref === 'string' && this.projects ? await this.projects.find(ref) : null;
    if (!id || (access.member && !access.member.has(id))) {
      throw badRequest(`Validation failed: query.project: no project ${String(ref)}`, [{ path: 'query.project', message: 'names no project you are a member of' }]);
    }
    return id;
  }

  /**
   * A list's items the caller may see (and of the project `?project=` names), by their `id` (of
   * several kinds: by the fields ListOfKinds names; an item of a kind of no project is seen by
   * installation roles only; an item of no project of a kind that keeps the installation's beside
   * its projects', alerts, by whoever `access.installation` says).
   */
  async filter(list: string | ListOfKinds, access: ScopeAccess, items: unknown[]): Promise<unknown[]> {
    if (access.allowed === null && !access.narrowed) return items;
    const by = typeof list === 'string' ? { type: '', id: 'id', kinds: {} as Record<string, string> } : list;
    const field = (item: unknown, name: string) => (item as Record<string, unknown> | null)?.[name];
    const kindOf = (item: unknown) => (typeof list === 'string' ? list : by.kinds[String(field(item, by.type))]);
    const projects = new Map<unknown, string | null>();
    for (const kind of new Set(items.map(kindOf))) {
      if (!kind) continue;
      const of = items.filter((i) => kindOf(i) === kind);
      const ids = of.map((i) => field(i, by.id)).filter((id): id is string => typeof id === 'string');
      const found = await this.projectsOfKind(kind, ids, typeof list !== 'string');
      for (const item of of) projects.set(item, found.get(field(item, by.id) as string) ?? null);
    }
    return items.filter((item) => {
      const project = projects.get(item) ?? null;
      if (access.narrowed && project !== access.narrowed) return false;
      return access.allowed === null || (project === null ? access.installation : access.allowed.has(project));
    });
  }
}

/**
 * The scope of a create that puts a resource in a project (`body.project_id`, else the caller's
 * default project): members whose role there grants the route's permission are let in, another
 * project named is hidden (404 `No project <ref>`) as any project's resource is. The handler calls
 * {@link requireHeldIn} with the project the resource goes in (the default one is not in the body).
 */
export const CREATE_IN_PROJECT: RouteScope = { of: [{ kind: 'project', from: 'body.project_id' }] };

/**
 * That a caller let in by its memberships (the scope step's access, `ctx.state.scope`) holds
 * `permission` (default: the route's) in the project a new resource goes in: 403 naming it
 * otherwise. Installation roles that grant it (no access decided, or `allowed` null) hold it
 * everywhere.
 */
export function requireHeldIn(ctx: Context, projectId: string | null, permission: string = permissionOf(ctx.state.route as PermissionRoute)): void {
  const access = ctx.state.scope as ScopeAccess | null | undefined;
  if (!access || access.allowed === null) return;
  if (projectId && access.holds(projectId, permission)) return;
  throw forbidden(`Insufficient permissions: this needs ${permission}, and your role in project ${projectId ?? '(none)'} does not grant it`);
}

/**
 * Whether the caller of a scoped route (its access, `ctx.state.scope`) reads the resource `id` of
 * `kind` with `permission` (in its project, found by the kind's resolver): what an answer may name
 * of a resource other than those the request names (a folder clash's holder on a node shared
 * between projects). Installation roles that grant the route everywhere read everything.
 */
export async function readsResource(ctx: Context, provided: ServiceRegistry, kind: string, id: string, permission: string): Promise<boolean> {
  const access = ctx.state.scope as ScopeAccess | null | undefined;
  if (!access || access.allowed === null) return true;
  const project = await projectOfResource(provided, kind, id);
  return project !== null && access.holds(project, permission);
}

/** The project of one resource of `kind` by id, through its kind's scope resolver (null: none, or no resolver for the kind). */
export async function projectOfResource(provided: ServiceRegistry, kind: string, id: string): Promise<string | null> {
  return (await provided.contributions(ScopeResolvers).find((r) => r.kind === kind)?.projectsOf([id]))?.get(id) ?? null;
}

/**
 * A resolver for a kind kept in one table with `id` and `name` columns and a column leading to the
 * project: the project's id itself, or a cluster's id (then through the clusters table).
 */
export function tableResolver(
  kind: string,
  knex: () => import('knex').Knex,
  table: string,
  options: { via: 'project_id' | 'cluster_id'; where?: Record<string, string>; defaultProject?: () => Promise<string | null> },
): ScopeResolver {
  return {
    kind,
    async projectsOf(refs) {
      const k = knex();
      const where = Object.fromEntries(Object.entries(options.where ?? {}).map(([c, v]) => [`${table}.${c}`, v]));
      const q = k(table)
        .where(where)
        .where((w) => void w.whereIn(`${table}.id`, [...refs]).orWhereIn(`${table}.name`, [...refs]));
      const rows: Array<{ id: string; name: string; project_id: string | null }> =
        options.via === 'cluster_id'
          ? await q.leftJoin('clusters', 'clusters.id', `${table}.cluster_id`).select(`${table}.id`, `${table}.name`, 'clusters.project_id')
          : await q.select(`${table}.id`, `${table}.name`, `${table}.project_id`);
      const fallback = options.defaultProject && rows.some((r) => !r.project_id) ? await options.defaultProject() : null;
      const out = new Map<string, string | null>();
      const named = new Map<string, string | null>();
      for (const r of rows) {
        const project = r.project_id ?? fallback;
        if (refs.includes(r.id)) out.set(r.id, project);
        // A name that several resources share (unique per cluster only) and that leads to different
        // projects belongs to none: only installation roles reach it by that name (its id works).
        if (refs.includes(r.name)) named.set(r.name, named.has(r.name) && named.get(r.name) !== project ? null : project);
      }
      for (const [name, project] of named) if (!out.has(name)) out.set(name, project);
      return out;
    },
    async projectOfRow(row) {
      const ref = row[options.via];
      if (ref === undefined || Object.entries(options.where ?? {}).some(([c, v]) => row[c] !== v)) return undefined;
      const project =
        options.via === 'cluster_id'
          ? typeof ref === 'string'
            ? (((await knex()('clusters').where({ id: ref }).first('project_id')) as { project_id: string | null } | undefined)?.project_id ?? null)
            : null
          : ((ref as string | null) ?? null);
      return project ?? (options.defaultProject ? await options.defaultProject() : null);
    },
  };
}
