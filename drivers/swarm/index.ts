import { defineDriver } from '../../core/plugin.js';
import type { SwarmDriver } from '../../core/orchestrator.js';

export interface SwarmDriverOptions {
  /** The Docker Engine socket (default /var/run/docker.sock). */
  socketPath?: string;
}

/** The swarm driver: dockerode against the local engine, and the docker CLI for `stack deploy`. */
export function createSwarmDriver(_options: SwarmDriverOptions = {}): SwarmDriver {
  throw new Error('drivers/swarm: not implemented yet');
}

export default defineDriver<SwarmDriver>({
  name: 'swarm',
  kind: 'orchestrator',
  create: () => createSwarmDriver(),
});
