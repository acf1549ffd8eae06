import type { OrchestratorDriver } from '../../core/orchestrator.js';
import type { DriverCall, TaskKind } from '../../core/tasks/kinds.js';
import { SWARM_MEMBERSHIP_CALLS } from '../../drivers/swarm/membership-calls.js';
import type { Executor } from './types.js';

/** An orchestrator driver this agent has: how to make it, and its backend's own task kinds (membership). */
interface AgentBackend {
  kinds: readonly TaskKind[];
  /** Loaded on the first call: an agent that never runs one keeps the driver and its client out of memory. */
  create(): Promise<OrchestratorDriver>;
}

/** The orchestrator backends this agent has a driver for. */
export const AGENT_DRIVERS: Record<string, AgentBackend> = {
  swarm: {
    kinds: SWARM_MEMBERSHIP_CALLS,
    create: () =>
      import('../../drivers/swarm/index.js').then(({ createSwarmDriver }) => createSwarmDriver({ socketPath: process.env.HANGAR_DOCKER_SOCKET ?? '/var/run/docker.sock' })),
  },
};

export const AGENT_BACKENDS = Object.keys(AGENT_DRIVERS);

const drivers = new Map<string, Promise<OrchestratorDriver>>();

/** The driver for a backend, against this machine's engine (the Docker socket for swarm). */
function driverFor(backend: string): Promise<OrchestratorDriver> {
  const known = AGENT_DRIVERS[backend];
  if (!known) return Promise.reject(new Error(`this agent has no ${backend} driver (it has: ${AGENT_BACKENDS.join(', ')})`));
  let driver = drivers.get(backend);
  if (!driver) drivers.set(backend, (driver = known.create()));
  return driver;
}

/** Runs one driver call: the method of the payload's backend's driver, with the rest of the payload as its input. */
export function driverExecutor(call: DriverCall): Executor {
  return async ({ payload, log }) => {
    const { backend, ...input } = payload as { backend: string } & Record<string, unknown>;
    const driver = (await driverFor(backend)) as unknown as Record<string, ((input: unknown) => Promise<unknown>) | undefined>;
    const method = driver[call.method];
    if (typeof method !== 'function') throw new Error(`the ${backend} driver of this agent has no ${call.method} (${call.name})`);
    log.info({ backend, kind: call.name }, 'orchestrator call');
    return method.call(driver, input);
  };
}
