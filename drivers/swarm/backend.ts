import { Type } from '@sinclair/typebox';
import { defineBackend } from '../../core/clusters/backend.js';
import { defineDriver } from '../../core/plugin.js';
import { composeFormat } from './compose-file.js';
import { EXEC_CALLS } from '../../core/orchestrator.js';
import { SWARM_MEMBERSHIP_CALLS } from './membership-calls.js';

/** Docker's limit for secret and config names, which a version's suffix must fit in. */
const MAX_OBJECT_NAME = 64;

/**
 * The swarm backend's control-plane half: how the API names swarms, their membership task kinds,
 * how bundle parts are named, the policies its driver deploys with (the `swarms:` settings
 * `publish_mode` and `endpoint_mode`), compose stacks as its services, secrets and configs as a
 * versioned object each, HAProxy as its load balancer, and the Docker Engine a node needs.
 */
export const swarmBackend = defineBackend({
  name: 'swarm',
  noun: 'swarm',
  api: {
    field: 'swarm_id',
    resourceType: 'swarm',
    path: '/v1/swarms',
    join: (id) => `POST /v1/swarms/${id}/join`,
    leave: (id) => `POST /v1/swarms/${id}/leave`,
  },
  // Its membership calls, and commands in a workload's container (a backup's pre and post).
  taskKinds: [...SWARM_MEMBERSHIP_CALLS, ...EXEC_CALLS],
  // Deleting a swarm makes every member leave it: the services someone made with `docker service create` go with it.
  deleteChecksUnmanaged: true,
  // `docker stack deploy` names a stack's services <stack>_<service>.
  componentAddress: (bundle, component) => `${bundle}_${component}`,
  settings(config) {
    const swarms = (config.swarms ?? {}) as { publish_mode?: string; endpoint_mode?: string };
    return { publish_mode: swarms.publish_mode ?? 'ingress', endpoint_mode: swarms.endpoint_mode ?? 'vip' };
  },
  bundles: composeFormat,
  objects: {
    semantics: 'versioned',
    refuseName: (runtimeName) => (runtimeName.length > MAX_OBJECT_NAME ? `is too long: the runtime name ${runtimeName} must be at most ${MAX_OBJECT_NAME} characters` : null),
  },
  loadBalancer: {
    image: (config) => (config.gateway as { image: string }).image,
    runtimeName: (cluster) => `hangar-lb-${cluster}`,
    runs: 'HAProxy on the manager',
  },
  nodeFact: { name: 'docker', schema: Type.Object({ present: Type.Boolean(), swarm: Type.Optional(Type.String()), version: Type.Optional(Type.String()) }) },
});

/** Loaded by `drivers: [swarm]` (the catalogue's built-in entry), as any orchestrator driver is. */
export default defineDriver({ name: 'swarm', kind: 'orchestrator', create: () => swarmBackend });
