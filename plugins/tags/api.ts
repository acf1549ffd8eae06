import { ScopeResolvers } from '../../core/auth/scope.js';
import { badRequest } from '../../core/errors.js';
import type { ServiceRegistry } from '../../core/provided.js';
import { defineServiceRef, type Services } from '../../core/plugin.js';
import type { ResourceResolver } from '../../core/resources.js';

/** The tags plugin's contract: what other plugins import of it (importing this never loads the plugin). */

export { TaggableResources, type ResourceResolver } from '../../core/resources.js';

export const RESOURCE_TYPES = ['node', 'swarm', 'instance', 'volume', 'secret', 'config', 'service', 's3', 'loadbalancer', 'cluster'] as const;
export type ResourceType = (typeof RESOURCE_TYPES)[number];

/**
 * The project scope kind (core/auth/scope.ts) of each type whose resources belong to projects: a
 * tag acts, and is seen, in its resource's project. Nodes are the installation's: their tags are
 * installation roles' alone.
 */
export const TAGGED_KINDS: Readonly<Partial<Record<ResourceType, string>>> = {
  swarm: 'cluster',
  cluster: 'cluster',
  instance: 'instance',
  volume: 'volume',
  secret: 'secret',
  config: 'config',
  service: 'service',
  s3: 'object-store',
  loadbalancer: 'loadbalancer',
};

/**
 * The kind of resource an event or an alert names by `type`: a resource type above, or an audit
 * entry's permission kind (core/auth/permissions.ts: `volumes`, `instances`…).
 */
const PROJECT_KIND_OF: Readonly<Record<string, string>> = {
  ...(TAGGED_KINDS as Record<string, string>),
  clusters: 'cluster',
  instances: 'instance',
  volumes: 'volume',
  secrets: 'secret',
  configs: 'config',
  services: 'service',
  'object-stores': 'object-store',
  loadbalancers: 'loadbalancer',
};

/**
 * The projects of resources named by type and id, through the scope resolvers of the loaded
 * plugins (core/auth/scope.ts `ScopeResolvers`): `type|id` → project id, or null for a resource of
 * no project (a node, a certificate), one that is gone, or a kind no loaded plugin resolves.
 */
export async function projectsOfResources(provided: ServiceRegistry, refs: ReadonlyArray<{ type: string; id: string }>): Promise<Map<string, string | null>> {
  const out = new Map<string, string | null>();
  const byKind = new Map<string, Set<string>>();
  for (const { type, id } of refs) {
    out.set(`${type}|${id}`, null);
    const kind = PROJECT_KIND_OF[type];
    if (kind) byKind.set(kind, (byKind.get(kind) ?? new Set()).add(id));
  }
  const resolvers = provided.contributions(ScopeResolvers);
  for (const [kind, ids] of byKind) {
    const resolver = resolvers.find((r) => r.kind === kind);
    if (!resolver) continue;
    const found = await resolver.projectsOf([...ids]);
    for (const { type, id } of refs) if (PROJECT_KIND_OF[type] === kind && found.has(id)) out.set(`${type}|${id}`, found.get(id) ?? null);
  }
  return out;
}

export interface Tag {
  resource_type: ResourceType;
  resource_id: string;
  key: string;
  value: string;
}

export interface TagsApi {
  /** The tags of one resource, as a key → value map. */
  of(type: ResourceType, id: string): Promise<Record<string, string>>;
  /** The ids of the resources of `type` that carry every one of these tags (key → value). */
  withAll(type: ResourceType, tags: Record<string, string>): Promise<string[]>;
}

export const TagsRef = defineServiceRef<TagsApi>('tags', 'tags (the tags plugin)');

/** The resolver of a type whose paths take ids only (`<prefix>-…`): anything else is a 400 saying so. */
export function idsOnly(type: ResourceType, prefix: string, get: (id: string) => Promise<{ id: string } | null>): ResourceResolver {
  return async (ref) => {
    if (!ref.startsWith(`${prefix}-`)) {
      throw badRequest(`Validation failed: resource_id of a ${type} is its id (${prefix}-…): ${type}s are not addressed by name`, [{ path: 'resource_id', message: `must be a ${type} id` }]);
    }
    return (await get(ref))?.id ?? null;
  };
}

export function tagsOf(services: Services): TagsApi {
  return services.provided.get(TagsRef);
}
