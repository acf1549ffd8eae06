import { defineServiceRef } from '../../core/plugin.js';
import type { InstanceStore } from './store.js';

/** The compute plugin's contract: what other plugins import of it (importing this never loads the plugin). */

/** What the compute plugin provides: its instances (the runner's `plugin('compute')`). */
export const ComputeRef = defineServiceRef<{ instances: InstanceStore }>('compute', 'compute instances (the compute plugin)');
