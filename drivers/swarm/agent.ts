import { existsSync } from 'node:fs';
import { defineAgentDriver } from '../../core/clusters/backend.js';
import { EXEC_CALLS } from '../../core/orchestrator.js';
import { SWARM_MEMBERSHIP_CALLS } from './membership-calls.js';

/** The Docker Engine's socket on this machine. */
const socketPath = () => process.env.HANGAR_DOCKER_SOCKET ?? '/var/run/docker.sock';

/**
 * The swarm backend's agent half (the control-plane half is ./backend.ts), built into the agent
 * (agent/builtin-drivers.ts): the driver against the local Docker Engine, made on its first call,
 * and whether this machine has the engine.
 */
export default defineAgentDriver({
  backend: 'swarm',
  kinds: [...SWARM_MEMBERSHIP_CALLS, ...EXEC_CALLS],
  create: () => import('./index.js').then(({ createSwarmDriver }) => createSwarmDriver({ socketPath: socketPath() })),
  nodeFact: { name: 'docker', probe: () => ({ present: existsSync('/var/run/docker.sock') }) },
});
