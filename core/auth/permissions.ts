/**
 * Permissions: what a route needs, which roles grant it, and the one function that decides
 * (docs/tenancy.md). A permission is a verb on a resource kind, `<kind>:<verb>`: `services:deploy`,
 * `secrets:read-metadata`, `volumes:restore`, `nodes:write`, `iam:admin`.
 *
 * Every route has exactly one. A route declares it (`RouteDef.permission`) only where it differs
 * from the default that {@link defaultPermission} derives from its path and method:
 *
 * - `public` routes need `public:call` (anyone), `agent` routes `agent:call` (a machine's client
 *   certificate; no user holds it);
 * - otherwise the kind is the path's first segment after `/v1/` (the first segment for paths
 *   without `/v1/`), renamed by {@link PATH_KINDS} where the path names a kind otherwise
 *   (`/v1/swarms/…` and `/v1/kubernetes/…` are `clusters`, `/v1/compute/…` is `instances`…);
 * - the verb is the kind's read verb for GET (`read`; `read-metadata` for secrets) and its write
 *   verb for every other method (`write`; `deploy` for services and instances, `admin` for iam).
 *
 * Nothing here reads the store or the request: the projects layer builds on these sets.
 */

/** `<kind>:<verb>`. */
export type Permission = `${string}:${string}`;

/** Where a kind's resources live: the installation's, a project's, the caller's own, or nobody's (the pseudo-kinds). */
export type KindScope = 'installation' | 'project' | 'caller' | 'none';

export interface KindDef {
  scope: KindScope;
  /** Every verb of the kind; the first is its read verb. */
  verbs: readonly string[];
  /** The verb a GET needs by default. */
  read: string;
  /** The verb any other method needs by default. */
  write: string;
  /**
   * Held only by the role of the same name (the scrape token's `metrics`), not by admins nor
   * auditors: a credential that reads it sits in a monitoring system's configuration and reads
   * nothing else, and a person's credential does not sit there.
   */
  dedicated?: boolean;
  /**
   * A project's kind whose resources of no project are the installation's (alerts: those on a
   * project's resources are the project's, those on nodes and certificates the installation's).
   * Those are reached as an installation kind's are: by the installation role the route's auth
   * lets in (`user`'s grants counting on an `authenticated` route), with a credential of the
   * installation (core/auth/scope.ts).
   */
  unowned?: 'installation';
  about: string;
}

/**
 * Verbs that change nothing: an auditor holds every permission with one of them. `logs` and
 * `inspect` ask a machine for something (a workload's logs, a scan of what runs there) and answer
 * it; they leave nothing changed behind.
 */
export const READ_VERBS: ReadonlySet<string> = new Set(['read', 'read-metadata', 'logs', 'inspect']);

const kind = (scope: KindScope, verbs: readonly string[], about: string, extra: Partial<KindDef> = {}): KindDef => ({
  scope,
  verbs,
  read: READ_VERBS.has(verbs[0]!) ? verbs[0]! : 'read',
  write: 'write',
  about,
  ...extra,
});

/** The resource kinds of the built-in plugins and their verbs. */
export const KINDS: Readonly<Record<string, KindDef>> = {
  account: kind('caller', ['read', 'write'], "the caller's own session and tokens, and who it is (GET /v1/iam/whoami)"),
  alerts: kind('project', ['read'], "alerts. An alert on a project's resource is the project's, one on a node or a certificate the installation's", { unowned: 'installation' }),
  // The installation's: a silence keeps an alert from the operator's notifications and from hangar_alerts_firing, not only from its project.
  'alert-silences': kind('installation', ['write'], 'silences of alerts (what the installation is told, and its metric)'),
  audit: kind('installation', ['read'], 'the audit log'),
  backups: kind('project', ['read', 'write'], 'backup targets and schedules'),
  cleanup: kind('installation', ['write'], 'removal of unmanaged things a scan found on a machine'),
  clusters: kind('project', ['read', 'write', 'credentials'], 'swarms and Kubernetes clusters, their members and load balancers; credentials hands out a kubeconfig'),
  configs: kind('project', ['read', 'write'], 'configs (non-secret files given to workloads)'),
  events: kind('installation', ['read'], 'the event journal and stream'),
  iam: kind('installation', ['read', 'admin'], 'users and their API keys (a user always reads and manages its own account)', { write: 'admin' }),
  instances: kind('project', ['read', 'deploy', 'logs'], 'compute instances: deploy creates, changes, scales, stops, starts, rolls back and removes them', { write: 'deploy' }),
  loadbalancers: kind('project', ['read', 'write'], 'load balancers and gateway routes'),
  metrics: kind('installation', ['read'], 'GET /metrics (the scrape token only)', { dedicated: true }),
  nodes: kind('installation', ['read', 'write', 'logs', 'inspect'], 'machines, join tokens, SSH deployment; inspect reads availability tasks and unmanaged scans'),
  notifications: kind('installation', ['read', 'write'], 'notification channels, subscriptions and deliveries'),
  'object-stores': kind('project', ['read', 'write'], 'S3 object stores'),
  projects: kind('project', ['read', 'write', 'members'], 'projects; members manages who belongs to one, with which role'),
  secrets: kind('project', ['read-metadata', 'write'], 'secrets: their metadata is readable, their values never', { read: 'read-metadata' }),
  services: kind('project', ['read', 'deploy', 'logs'], 'services: deploy creates, changes, stops, starts, rolls back and removes them', { write: 'deploy' }),
  'ssh-profiles': kind('installation', ['read', 'write'], 'SSH profiles for deploying the agent'),
  tags: kind('project', ['read', 'write'], 'tags on resources'),
  volumes: kind('project', ['read', 'write', 'backup', 'restore'], 'volumes, their backups and restores'),
  public: kind('none', ['call'], 'routes open to anyone, without credentials'),
  agent: kind('none', ['call'], 'routes for machine agents (a client certificate issued by the control plane)'),
};

/** Path segments (after `/v1/`) that name a kind by another word. */
export const PATH_KINDS: Readonly<Record<string, string>> = {
  swarms: 'clusters',
  kubernetes: 'clusters',
  compute: 'instances',
  s3: 'object-stores',
  gateway: 'loadbalancers',
};

/** What {@link defaultPermission} reads of a route (a RouteDef is one). */
export interface PermissionRoute {
  method: string;
  path: string;
  auth: 'public' | 'authenticated' | 'agent' | { role: string; orSelf?: string };
  permission?: Permission;
}

const PERMISSION = /^([a-z][a-z0-9-]*):([a-z][a-z0-9-]*)$/;

/** The kind and verb of a permission; null when it is not `<kind>:<verb>` (lower case, digits and dashes). */
export function parsePermission(text: string): { kind: string; verb: string } | null {
  const m = PERMISSION.exec(text);
  return m ? { kind: m[1]!, verb: m[2]! } : null;
}

/** The kind a path names by the rule above (unknown kinds are kept: a plugin's own kind). */
export function kindOfPath(path: string): string {
  const segments = path.split('/').filter(Boolean);
  const first = segments[0] === 'v1' ? segments[1] : segments[0];
  const name = (first ?? 'root').toLowerCase().replace(/[^a-z0-9-]/g, '-');
  return PATH_KINDS[name] ?? name;
}

/** The permission a route needs when it declares none (the rule in this file's comment). */
export function defaultPermission(route: PermissionRoute): Permission {
  if (route.auth === 'public') return 'public:call';
  if (route.auth === 'agent') return 'agent:call';
  const k = kindOfPath(route.path);
  const def = KINDS[k];
  const verb = route.method === 'GET' ? (def?.read ?? 'read') : (def?.write ?? 'write');
  return `${k}:${verb}`;
}

/** The one permission a route needs: the one it declares, else the default. */
export function permissionOf(route: PermissionRoute): Permission {
  return route.permission ?? defaultPermission(route);
}

/** Whether the verb of a permission changes nothing. */
export function isReadPermission(permission: string): boolean {
  const parsed = parsePermission(permission);
  return Boolean(parsed && READ_VERBS.has(parsed.verb));
}

/** Every permission of the built-in kinds. */
export function catalogue(): Permission[] {
  return Object.entries(KINDS).flatMap(([k, def]) => def.verbs.map((v) => `${k}:${v}` as Permission));
}

// ---------------------------------------------------------------------------------------------
// Installation roles

export const INSTALLATION_ROLES = ['admin', 'auditor', 'user'] as const;
export type InstallationRole = (typeof INSTALLATION_ROLES)[number];

export const INSTALLATION_ROLE_ABOUT: Readonly<Record<InstallationRole, string>> = {
  admin: 'every permission (except those of dedicated kinds: metrics:read belongs to the scrape token)',
  auditor: 'every permission whose verb changes nothing (read, read-metadata, logs, inspect), and its own account; nothing else',
  user: 'what every authenticated caller could do before roles had permissions: the permissions of routes open to any authenticated caller, and its own account',
};

/**
 * What the `user` role (and any role hangar does not know, as before) grants besides its own
 * account: the permissions of the routes open to any authenticated caller. Built from the route
 * table ({@link userGrantsOf}), so a plugin's `authenticated` route stays open to users. They open
 * only such routes: core/auth/index.ts authorize() never lets a user into a route guarded by a role
 * through them, so a permission an open route shares with a guarded one cannot widen a user's
 * access (the auth matrix test still flags such a pair: it makes whoami's list misleading).
 */
export type UserGrants = ReadonlySet<Permission>;

/** The permissions `user` holds, from the route table. */
export function userGrantsOf(routes: readonly PermissionRoute[]): UserGrants {
  return new Set(routes.filter((r) => r.auth === 'authenticated').map(permissionOf));
}

/**
 * Routes a user would be let into by {@link userGrantsOf} though they are guarded by a role: a
 * permission two routes share, one open to any caller and one for admins. Each must declare a
 * permission of its own (checked at start-up and by the auth matrix).
 */
export function widenedRoutes(routes: readonly PermissionRoute[]): string[] {
  const grants = userGrantsOf(routes);
  return routes.filter((r) => typeof r.auth === 'object' && grants.has(permissionOf(r))).map((r) => `${r.method} ${r.path} (${permissionOf(r)})`);
}

/** Who is asking, as far as permissions go (a Principal is one). */
export interface PermissionHolder {
  role: string;
  /**
   * A credential narrower than its user's role (a scoped API key): only these, and only those the
   * role grants too. Absent: everything the role grants.
   */
  permissions?: readonly string[];
  /**
   * A credential limited to one project (a project-scoped API key): the project's id. It acts on
   * that project's resources only; a resource of another project is answered as one that does not
   * exist (404), and its `permissions` are of the project's kinds (and `account:read`). Absent:
   * the installation (whatever the permissions reach).
   */
  project_id?: string;
}

/**
 * An installation admin with all its power: role `admin`, and a credential limited neither to a
 * project nor to a list of permissions (an admin's project key or listed key is not one). What asks
 * a machine for more than a workload gets (a bundle's bind mount of a host path, a privileged
 * container, a cluster-scoped object…) is theirs alone.
 */
export function unlimitedAdmin(principal: PermissionHolder | null | undefined): boolean {
  return principal?.role === 'admin' && !principal.project_id && !principal.permissions;
}

/** Whether a role grants a permission (before a credential's own narrowing). */
export function roleGrants(role: string, permission: string, userGrants: UserGrants): boolean {
  const parsed = parsePermission(permission);
  if (!parsed) return false;
  const def = KINDS[parsed.kind];
  if (parsed.kind === 'agent') return false;
  if (parsed.kind === 'public') return true;
  if (def?.dedicated) return role === parsed.kind;
  if (parsed.kind === 'account') return true;
  if (role === 'admin') return true;
  if (role === 'auditor') return READ_VERBS.has(parsed.verb);
  return userGrants.has(permission as Permission);
}

/**
 * The decision: whether this principal may do what the permission names. Its role grants it
 * ({@link roleGrants}) and, for a credential with its own list, the list names it.
 */
export function permitted(principal: PermissionHolder, permission: string, userGrants: UserGrants): boolean {
  if (!roleGrants(principal.role, permission, userGrants)) return false;
  return !principal.permissions || principal.permissions.includes(permission) || permission === 'public:call';
}

/**
 * Whether the principal's role reads whatever the installation holds, admins' business included
 * (events of tasks and of SSH profiles): admin and auditor.
 */
export function readsEverything(principal: PermissionHolder): boolean {
  return principal.role === 'admin' || principal.role === 'auditor';
}

/** Every permission (of the built-in kinds and of these routes) the principal holds, sorted. */
export function permissionsHeld(principal: PermissionHolder, routes: readonly PermissionRoute[], userGrants: UserGrants): Permission[] {
  const all = new Set<Permission>([...catalogue(), ...routes.map(permissionOf)]);
  all.delete('public:call');
  const held = [...all].filter((p) => permitted(principal, p, userGrants));
  // A route guarded by a role of another name is that role's (a plugin's own role).
  for (const r of routes) if (typeof r.auth === 'object' && r.auth.role === principal.role) held.push(permissionOf(r));
  return [...new Set(held)].sort();
}

// ---------------------------------------------------------------------------------------------
// Project roles (the projects layer assigns them; here they are sets of permissions)

export const PROJECT_ROLES = ['viewer', 'deployer', 'maintainer', 'owner'] as const;
export type ProjectRole = (typeof PROJECT_ROLES)[number];

const projectKinds = Object.entries(KINDS).filter(([, def]) => def.scope === 'project');

// A viewer also gets its own kubeconfig of the project's clusters: hangar binds a non-admin's to
// its read-only `hangar-user-view` ClusterRole (docs/kubernetes.md: workloads' shapes, no logs,
// ConfigMaps or Secrets), as a user gets one (new in this release: before, admins' only).
const VIEWER: Permission[] = [...projectKinds.map(([k, def]) => `${k}:${def.read}` as Permission), 'clusters:credentials'];
const DEPLOYER: Permission[] = [...VIEWER, 'services:deploy', 'services:logs', 'instances:deploy', 'instances:logs'];
const MAINTAINER: Permission[] = [
  ...DEPLOYER,
  ...projectKinds.flatMap(([k, def]) => (k === 'projects' ? [] : def.verbs.map((v) => `${k}:${v}` as Permission))),
];
const OWNER: Permission[] = [...MAINTAINER, 'projects:write', 'projects:members'];

/**
 * The built-in project roles: viewer reads (and gets its own read-only kubeconfig); deployer also
 * operates workloads and reads their logs;
 * maintainer also manages clusters, secrets, configs, volumes (backups, restores), object stores,
 * load balancers, backups and tags; owner also changes the project and its members.
 */
export const PROJECT_ROLE_PERMISSIONS: Readonly<Record<ProjectRole, readonly Permission[]>> = {
  viewer: [...new Set(VIEWER)].sort(),
  deployer: [...new Set(DEPLOYER)].sort(),
  maintainer: [...new Set(MAINTAINER)].sort(),
  owner: [...new Set(OWNER)].sort(),
};

/**
 * Problems of a custom role's permission list (each names the entry): not `<kind>:<verb>`, or a
 * kind that is not a project's, or a verb the kind does not have. Empty when it is acceptable.
 */
export function projectPermissionProblems(list: readonly string[]): string[] {
  const problems: string[] = [];
  list.forEach((p, i) => {
    const parsed = parsePermission(p);
    const def = parsed && KINDS[parsed.kind];
    if (!parsed) problems.push(`[${i}] "${p}" is not <kind>:<verb>`);
    else if (!def || def.scope !== 'project') {
      problems.push(`[${i}] "${p}": ${parsed.kind} is not a project's kind (one of ${projectKinds.map(([k]) => k).join(', ')})`);
    } else if (!def.verbs.includes(parsed.verb)) problems.push(`[${i}] "${p}": ${parsed.kind} has the verbs ${def.verbs.join(', ')}`);
  });
  return problems;
}
