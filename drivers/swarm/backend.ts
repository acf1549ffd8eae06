import { defineBackend } from '../../core/clusters/backend.js';
import { SWARM_MEMBERSHIP_CALLS } from './membership-calls.js';

/**
 * The swarm backend's control-plane half: its membership task kinds, how bundle parts are named,
 * and the policies its driver deploys with (the `swarms:` settings `publish_mode` and `endpoint_mode`).
 */
export default defineBackend({
  name: 'swarm',
  noun: 'swarm',
  taskKinds: SWARM_MEMBERSHIP_CALLS,
  // `docker stack deploy` names a stack's services <stack>_<service>.
  componentAddress: (bundle, component) => `${bundle}_${component}`,
  settings(config) {
    const swarms = (config.swarms ?? {}) as { publish_mode?: string; endpoint_mode?: string };
    return { publish_mode: swarms.publish_mode ?? 'ingress', endpoint_mode: swarms.endpoint_mode ?? 'vip' };
  },
});
