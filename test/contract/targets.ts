import type { DriverTarget } from './target.js';
import { swarmInTheLab } from './targets/swarm-lab.js';
import { swarmOnHostEngine } from './targets/swarm-host.js';
import { kubernetesOnControlPlane } from './targets/kubernetes.js';

/** Every orchestrator driver the contract suite runs against; a new backend adds one line. */
export const TARGETS: Array<() => DriverTarget> = [swarmOnHostEngine, swarmInTheLab, kubernetesOnControlPlane];
