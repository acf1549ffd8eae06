import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { agentDriverFaults, missingDriverMethods, type AgentDriver } from '../../core/clusters/backend.js';
import type { OrchestratorDriver } from '../../core/orchestrator.js';
import type { DriverCall } from '../../core/tasks/kinds.js';
import { importFile } from '../../core/typescript.js';
import { BUILTIN_AGENT_DRIVERS } from '../builtin-drivers.js';
import type { Executor } from './types.js';

/**
 * The orchestrator backends this agent has a driver for, by backend: those it was built with
 * (agent/builtin-drivers.ts), then those {@link loadAgentDrivers} adds from `--driver` modules. A
 * built-in driver is made on its first call (an agent that never runs one keeps the driver and its
 * client out of memory).
 */
export const AGENT_DRIVERS: Record<string, AgentDriver> = Object.fromEntries(BUILTIN_AGENT_DRIVERS.map((d) => [d.backend, d]));

/** The backends this agent runs calls of (its heartbeat advertises them). */
export function agentBackends(): string[] {
  return Object.keys(AGENT_DRIVERS);
}

/** What the agent reports of this machine's runtimes: each driver's node fact (`docker`, `k3s`…) by name. */
export function runtimeFacts(): Record<string, Record<string, unknown>> {
  return Object.fromEntries(Object.values(AGENT_DRIVERS).flatMap((d) => (d.nodeFact ? [[d.nodeFact.name, d.nodeFact.probe()]] : [])));
}

const drivers = new Map<string, Promise<OrchestratorDriver>>();

/**
 * A driver module by path, imported (TypeScript through tsx, as for the control plane's drivers) by
 * `hangar agent` run by Node from the hangar package, sources or build. The single executable
 * cannot load modules from files (its require() resolves nothing outside it): its drivers are
 * chosen when it is built (scripts/build.mjs `--driver`), so it says so.
 */
async function loadModule(file: string): Promise<Record<string, unknown>> {
  // node:sea is newer than the oldest Node hangar runs on (20.6): without it, this is no executable.
  const inExecutable = await import('node:sea').then((sea) => sea.isSea()).catch(() => false);
  if (inExecutable) {
    throw new Error('the agent executable loads no driver modules at run time: build one that has them (node scripts/build.mjs agent --driver MODULE), or run `hangar agent --driver` from the hangar package (Node 20)');
  }
  return importFile(pathToFileURL(file).href);
}

/**
 * Adds the agent drivers of these modules (paths; `hangar agent --driver`). Each module's default
 * export is an `AgentDriver` (core/clusters/backend.ts, defineAgentDriver) for a backend this agent
 * has no driver for yet; its driver is made now and must implement the workload, object and scan
 * interfaces and its own calls. Anything else is an error naming the module and what is wrong.
 */
export async function loadAgentDrivers(specs: readonly string[]): Promise<void> {
  // Those it was built with first (an executable's `--driver` modules are checked only now).
  for (const faults of BUILTIN_AGENT_DRIVERS.map(agentDriverFaults)) {
    if (faults.length) throw new Error(`this agent was built with a driver that is not an agent driver: ${faults.join('; ')}`);
  }
  const twice = BUILTIN_AGENT_DRIVERS.map((d) => d.backend).find((b, i, all) => all.indexOf(b) !== i);
  if (twice) throw new Error(`this agent was built with two ${twice} drivers`);
  for (const spec of specs) {
    let mod: Record<string, unknown>;
    try {
      mod = await loadModule(path.resolve(spec));
    } catch (err) {
      throw new Error(`cannot load driver module ${spec}: ${(err as Error).message}`, { cause: err });
    }
    const faults = agentDriverFaults(mod.default);
    if (faults.length) throw new Error(`driver module ${spec} is not an agent driver: ${faults.join('; ')}`);
    const agentDriver = mod.default as AgentDriver;
    if (AGENT_DRIVERS[agentDriver.backend]) throw new Error(`driver module ${spec}: this agent already has a ${agentDriver.backend} driver`);
    const driver = await agentDriver.create();
    const missing = missingDriverMethods(driver, agentDriver.kinds);
    if (missing.length) throw new Error(`driver module ${spec} (backend ${agentDriver.backend}) does not implement ${missing.join(', ')}`);
    AGENT_DRIVERS[agentDriver.backend] = agentDriver;
    drivers.set(agentDriver.backend, Promise.resolve(driver));
  }
}

/** The driver for a backend, against this machine's runtime (the Docker socket for swarm). */
function driverFor(backend: string): Promise<OrchestratorDriver> {
  const known = AGENT_DRIVERS[backend];
  if (!known) return Promise.reject(new Error(`this agent has no ${backend} driver (it has: ${agentBackends().join(', ')})`));
  let driver = drivers.get(backend);
  if (!driver) drivers.set(backend, (driver = Promise.resolve(known.create())));
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
