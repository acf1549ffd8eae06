import { useEffect, useState } from 'preact/hooks';
import { call, narrowToProject } from './api';
import { PERMISSIONS, PROJECT_KINDS, type Route } from './api.gen';

/** A project the caller sees, with its role there and what that role grants (docs/tenancy.md "Roles"). */
export interface ProjectAccess {
  id: string;
  name: string;
  /** The caller's role in it; null where it is no member (an installation admin or auditor sees every project). */
  role: string | null;
  permissions: ReadonlySet<string>;
}

/** What the signed-in user may do: the dashboard shows the buttons it grants, and the API stays the judge. */
export interface Access {
  userId: string;
  /** The installation role. */
  role: string;
  /** What the installation role grants (GET /v1/iam/whoami). */
  permissions: ReadonlySet<string>;
  projects: ProjectAccess[];
  /** The header's project (null: every project the caller sees). */
  project: string | null;
}

let access: Access | null = null;
const listeners = new Set<(next: Access | null) => void>();

function publish(next: Access | null): void {
  access = next;
  narrowToProject(next?.project ?? null);
  for (const l of listeners) l(next);
}

/** Installation admins and auditors see every project; the others, the projects they are members of. */
export const seesEveryProject = (a: Pick<Access, 'role'>) => a.role === 'admin' || a.role === 'auditor';

/** The chosen project is kept per user across reloads. */
const storageKey = (userId: string) => `hangar.project.${userId}`;

/**
 * Reads who the caller is and the projects it works in, and keeps the chosen project if it is still
 * one of them. A member's projects and what its role grants in each come from whoami (so a custom
 * role without `projects:read` still gets the buttons its other permissions allow); admins and
 * auditors choose among every project, with their installation role's permissions. A member of a
 * single project works in it; others start with every project.
 */
export async function loadAccess(): Promise<Access> {
  const me = await call('GET /v1/iam/whoami');
  const everyProject = seesEveryProject(me.data);
  // Without the projects plugin (plugins: leaves it out) there are no projects to choose.
  const every = everyProject ? ((await call('GET /v1/projects', { query: { limit: 1000 } }).catch(() => null))?.data ?? []) : [];
  const projects: ProjectAccess[] = everyProject
    ? every.map((p) => ({ id: p.id, name: p.name, role: p.role, permissions: new Set<string>() }))
    : me.data.projects.map((p) => ({ id: p.id, name: p.name, role: p.role, permissions: new Set(p.permissions) }));
  const stored = localStorage.getItem(storageKey(me.data.user.id));
  const project = projects.some((p) => p.id === stored) ? stored : !everyProject && projects.length === 1 ? projects[0]!.id : null;
  const next = { userId: me.data.user.id, role: me.data.role, permissions: new Set(me.data.permissions), projects, project };
  publish(next);
  return next;
}

/** Chooses the header's project (null: every project): lists narrow to it, creates default to it. */
export function chooseProject(id: string | null): void {
  if (!access) return;
  if (id) localStorage.setItem(storageKey(access.userId), id);
  else localStorage.removeItem(storageKey(access.userId));
  publish({ ...access, project: id });
}

/** Forgets the caller (logged out). */
export function forgetAccess(): void {
  publish(null);
}

/**
 * Whether the caller's roles grant what `route` needs (its declared permission): for a project's
 * kinds, the role in `project` (the resource's), else in the header's project, else in any of its
 * projects; for the installation's kinds, its installation role.
 */
export function can(route: Route, project?: string | null): boolean {
  if (!access) return false;
  const permission = PERMISSIONS[route];
  if (!PROJECT_KINDS.has(permission.split(':')[0]!) || seesEveryProject(access)) return access.permissions.has(permission);
  const where = project ?? access.project;
  return access.projects.some((p) => (!where || p.id === where) && p.permissions.has(permission));
}

export function useAccess(): Access | null {
  const [value, set] = useState(access);
  useEffect(() => {
    listeners.add(set);
    return () => void listeners.delete(set);
  }, []);
  return value;
}
