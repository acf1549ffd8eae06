import { PROJECT_ROLE_PERMISSIONS, type ProjectRole } from '../../core/auth/permissions.js';
import { tableResolver, type ProjectGrants, type RouteScope, type ScopeResolver } from '../../core/auth/scope.js';
import { CLUSTERS } from '../../core/clusters/migrations.js';
import type { Store } from '../../core/db/store.js';
import { PROJECTS, type ProjectsApi } from './api.js';

/** What memberships grant, for the scope step of every project's route (core/auth/scope.ts): read from the store at each request. */
export function projectGrants(api: ProjectsApi): ProjectGrants {
  return {
    async grantsOf(userId) {
      const out = new Map<string, readonly string[]>();
      for (const m of await api.membershipsOf(userId)) out.set(m.project_id, m.permissions ?? PROJECT_ROLE_PERMISSIONS[m.role as ProjectRole] ?? []);
      return out;
    },
    async find(ref) {
      return (await api.find(ref))?.id ?? null;
    },
  };
}

/** Clusters (swarms and Kubernetes clusters) belong to a project by their `project_id`, by id or name. */
export const clusterResolver = (db: Store): ScopeResolver => tableResolver('cluster', () => db.knex, CLUSTERS, { via: 'project_id' });

/** A project is its own (by id or name): the projects' routes are scoped as every project's resource is. */
export const projectResolver = (db: Store): ScopeResolver => ({
  kind: 'project',
  async projectsOf(refs) {
    const rows: Array<{ id: string; name: string }> = await db
      .knex(PROJECTS)
      .where((w) => void w.whereIn('id', [...refs]).orWhereIn('name', [...refs]))
      .select('id', 'name');
    const out = new Map<string, string | null>();
    for (const row of rows) for (const ref of [row.id, row.name]) if (refs.includes(ref)) out.set(ref, row.id);
    return out;
  },
});

/** The scope of a route on one project (its path's `{id}`), and of the list of projects. */
export const ONE_PROJECT: RouteScope = { of: [{ kind: 'project', from: 'params.id' }] };
export const PROJECT_LIST: RouteScope = { list: 'project' };
