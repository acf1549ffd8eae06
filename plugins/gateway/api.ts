import { defineServiceRef } from '../../core/plugin.js';
import type { LoadBalancerStore } from './index.js';

/** The gateway plugin's contract: what other plugins import of it (importing this never loads the plugin). */

/** What the gateway plugin provides: its load balancers (the runner's `plugin('gateway')`). */
export const GatewayRef = defineServiceRef<{ balancers: LoadBalancerStore }>('gateway', 'load balancers (the gateway plugin)');
