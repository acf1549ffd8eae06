import { ORCHESTRATOR_METHODS, type OrchestratorCall, type SwarmDriver } from '../../core/orchestrator.js';
import type { Executor } from './types.js';

let swarm: Promise<SwarmDriver> | null = null;

/**
 * The driver for a backend, against this machine's engine (the Docker socket for swarm). Loaded on
 * the first call: an agent that never runs one keeps the driver and its Docker client out of memory.
 */
function driverFor(backend: string): Promise<SwarmDriver> {
  if (backend === 'swarm') {
    return (swarm ??= import('../../drivers/swarm/index.js').then(({ createSwarmDriver }) =>
      createSwarmDriver({ socketPath: process.env.HANGAR_DOCKER_SOCKET ?? '/var/run/docker.sock' }),
    ));
  }
  return Promise.reject(new Error(`this agent has no ${backend} driver (it has: swarm)`));
}

/** Runs one method of the orchestrator driver; its return value is the task's result. */
export const orchestratorCall: Executor = async ({ payload, log }) => {
  const call = payload as OrchestratorCall;
  if (!(ORCHESTRATOR_METHODS as readonly string[]).includes(call.method)) throw new Error(`unknown orchestrator method ${JSON.stringify(call.method)}`);
  const driver = await driverFor(call.backend);
  log.info({ backend: call.backend, method: call.method }, 'orchestrator call');
  const method = driver[call.method] as (...args: unknown[]) => Promise<unknown>;
  return method.apply(driver, Array.isArray(call.args) ? call.args : []);
};

/** The unmanaged scan: what runs on this machine's orchestrator that hangar did not create. */
export const unmanagedScan: Executor = async ({ payload }) => (await driverFor(String(payload.backend ?? 'swarm'))).scanUnmanaged();
