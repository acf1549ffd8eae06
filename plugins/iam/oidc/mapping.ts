import type { OidcSettings } from './config.js';

/** Installation roles, narrowest first: of several a user's groups give, the widest wins. */
const INSTALLATION_ROLES = ['user', 'auditor', 'admin'] as const;
/** Built-in project roles, narrowest first. */
const PROJECT_ROLES = ['viewer', 'deployer', 'maintainer', 'owner'];

/** The groups an ID token's claim holds: an array of strings (a single string counts as one group); anything else is none. */
export function groupsOf(claims: Record<string, unknown>, claim: string): string[] {
  const value = claims[claim];
  if (typeof value === 'string') return [value];
  return Array.isArray(value) ? value.filter((g): g is string => typeof g === 'string') : [];
}

/** What the mapping gives a user of these groups. */
export interface MappedAccess {
  /** The installation role; null when no group maps to one and default_role is null (the login is refused). */
  role: string | null;
  /** project (name or id, as configured) → role, for every project the mapping names; null: not a member. */
  projects: Map<string, string | null>;
}

/**
 * The installation role and project roles the mapping gives `groups`. Installation role: the widest
 * of the roles its groups map to, else `default_role`. In each project the mapping names: the widest
 * built-in role its groups map to there; a custom role only when no built-in one matches (of several
 * custom ones, the first listed). A project none of its groups maps to is null: not a member.
 */
export function mapGroups(settings: Pick<OidcSettings, 'roles' | 'default_role' | 'projects'>, groups: readonly string[]): MappedAccess {
  const held = new Set(groups);
  let role: string | null = null;
  for (const entry of settings.roles) {
    if (held.has(entry.group) && (role === null || INSTALLATION_ROLES.indexOf(entry.role) > INSTALLATION_ROLES.indexOf(role as never))) role = entry.role;
  }
  const projects = new Map<string, string | null>();
  for (const entry of settings.projects) {
    if (!projects.has(entry.project)) projects.set(entry.project, null);
    if (!held.has(entry.group)) continue;
    const current = projects.get(entry.project) ?? null;
    const rank = (r: string) => PROJECT_ROLES.indexOf(r);
    if (current === null || (rank(entry.role) > rank(current) && rank(entry.role) >= 0)) projects.set(entry.project, entry.role);
  }
  return { role: role ?? settings.default_role, projects };
}
