import { PROJECT_ROLE_PERMISSIONS, type ProjectRole } from '../../core/auth/permissions.js';
import { tableResolver, type ProjectGrants, type ScopeResolver } from '../../core/auth/scope.js';
import { CLUSTERS } from '../../core/clusters/migrations.js';
import type { Store } from '../../core/db/store.js';
import type { ProjectsApi } from './api.js';

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
