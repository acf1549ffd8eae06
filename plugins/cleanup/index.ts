import { Type } from '@sinclair/typebox';
import { badRequest, notFound } from '../../core/errors.js';
import { ClusterRemovals } from '../../core/clusters/directory.js';
import { definePlugin, defineRoute } from '../../core/plugin.js';
import { TaggableResources } from '../tags/api.js';
import { VolumesRef } from '../volumes/api.js';

/** The workloads of every kind, volumes, and clusters: swarms, and those of the other backends (`cluster`). */
const RESOURCE_TYPES = ['instance', 'swarm', 'volume', 's3', 'loadbalancer', 'service', 'cluster'] as const;

export default definePlugin({
  name: 'cleanup',
  description: 'force-clean resources stuck in an error state: what exists in the runtime, then the record',
  optionalDeps: [VolumesRef],
  setup(services) {
    /** Removes a resource by force: a workload by its plugin, a volume by the volumes plugin, a cluster by its backend's cluster API. */
    async function forceRemove(type: (typeof RESOURCE_TYPES)[number], id: string): Promise<boolean> {
      if (type === 'volume') {
        const volumes = services.provided.find(VolumesRef);
        if (!volumes) throw badRequest('Volumes need the volumes plugin, which is not loaded');
        return volumes.forceRemove(id);
      }
      const kind = services.clusters.workloadKind(type);
      if (kind) return kind.forceRemove(id);
      const clusterApis = services.provided.contributions(ClusterRemovals).filter((r) => r.type === type);
      if (!clusterApis.length) throw badRequest(`No loaded plugin manages ${type} resources`);
      for (const api of clusterApis) if (await api.forceRemove(id)) return true;
      return false;
    }

    return {
      routes: [
        defineRoute({
          method: 'POST',
          path: '/v1/cleanup/{resourceType}/{resourceId}',
          auth: { role: 'admin' },
          summary: 'Force-clean a resource stuck in an error state: remove what exists of it in the runtime (failures ignored) and its record',
          schemas: {
            params: Type.Object({ resourceType: Type.Union(RESOURCE_TYPES.map((t) => Type.Literal(t))), resourceId: Type.String({ minLength: 1, maxLength: 100 }) }),
            response: Type.Object(
              { resource_type: Type.Union(RESOURCE_TYPES.map((t) => Type.Literal(t))), resource_id: Type.String(), removed: Type.Literal(true) },
              { additionalProperties: false },
            ),
          },
          handler: async (req) => {
            const { resourceType, resourceId: ref } = req.params;
            // By id, or by name where the type's own paths take names (the resource plugins resolve them).
            const resolve = services.provided.contributions(TaggableResources).find((r) => r.type === resourceType)?.resolve;
            const resourceId = (resolve && (await resolve(ref))) || ref;
            if (!(await forceRemove(resourceType, resourceId))) throw notFound(`No ${resourceType} ${ref}`);
            services.log.info({ resource_type: resourceType, resource_id: resourceId }, 'resource force-cleaned');
            return { resource_type: resourceType, resource_id: resourceId, removed: true };
          },
        }),
      ],
    };
  },
});
