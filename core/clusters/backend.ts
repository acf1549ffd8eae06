import type { HangarConfig } from '../../config/schema.js';
import { ORCHESTRATOR_CALLS, type OrchestratorDriver } from '../orchestrator.js';
import { isDriverCall, type TaskKind } from '../tasks/kinds.js';

/**
 * What the control plane knows of an orchestrator backend (swarm, k8s): the control-plane half of
 * its driver package. The other half, the agent driver ({@link AgentDriver}), runs on the agents
 * and implements the workload, object and scan interfaces of core/orchestrator.ts and the
 * backend's membership interface. A backend is built in (the composition root's catalogue) or
 * loaded by configuration (`drivers:` entries whose driver has `kind: 'orchestrator'` and creates
 * one of these); docs/architecture.md, "Adding an orchestrator backend".
 */
export interface ClusterBackend {
  /** The name clusters, tasks and agents use: `swarm`, `k8s`. */
  name: string;
  /** In messages: "swarm web has no manager". */
  noun: string;
  /** Its own task kinds (its membership calls), registered with the task queue. */
  taskKinds: readonly TaskKind[];
  /** The address inside the cluster of one part of a bundle (what a load balancer sends a domain to). */
  componentAddress(bundle: string, component: string): string;
  /** The backend's policies, added to the calls that take `settings` (how ports are published…). */
  settings(config: HangarConfig): Record<string, string | number | boolean>;
  /**
   * Where a volume is staged (core/orchestrator.ts StageVolume): on every member, each engine
   * holding its own definition (`node`, the default: swarm's named volumes), or once for the whole
   * cluster through its manager (`cluster`: Kubernetes' PersistentVolume and claim).
   */
  volumeStaging?: 'node' | 'cluster';
}

export function defineBackend(backend: ClusterBackend): ClusterBackend {
  return backend;
}

/**
 * The agent's half of a driver package: the module an agent loads (built in, or named with
 * `hangar agent --driver MODULE`) to run the calls of clusters of `backend` on its machine.
 */
export interface AgentDriver {
  /** The backend whose calls it runs (a {@link ClusterBackend}'s name). */
  backend: string;
  /** The backend's own driver calls (its membership interface), beside the calls every driver has. */
  kinds: readonly TaskKind[];
  /** The driver against this machine's runtime; answers plain JSON matching each call's result schema. */
  create(): OrchestratorDriver | Promise<OrchestratorDriver>;
}

export function defineAgentDriver(driver: AgentDriver): AgentDriver {
  return driver;
}

const BACKEND_NAME = /^[a-z][a-z0-9-]{0,31}$/;
const isObject = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null;
const isKindList = (value: unknown) => Array.isArray(value) && value.every((k) => isObject(k) && typeof k.name === 'string');

/** What keeps `value` from being a {@link ClusterBackend} (empty when it is one). */
export function backendFaults(value: unknown): string[] {
  if (!isObject(value)) return ['it is not an object (defineBackend({...}))'];
  const faults: string[] = [];
  if (typeof value.name !== 'string' || !BACKEND_NAME.test(value.name)) faults.push('name: a lower-case name (a-z, 0-9, -; up to 32)');
  if (typeof value.noun !== 'string' || !value.noun) faults.push('noun: a word for messages');
  if (!isKindList(value.taskKinds)) faults.push('taskKinds: a list of task kinds (its membership calls)');
  for (const method of ['componentAddress', 'settings']) if (typeof value[method] !== 'function') faults.push(`${method}(): a function`);
  return faults;
}

/** What keeps `value` from being an {@link AgentDriver} module's export (empty when it is one). */
export function agentDriverFaults(value: unknown): string[] {
  if (!isObject(value)) return ['its default export is not an object (defineAgentDriver({...}))'];
  const faults: string[] = [];
  if (typeof value.backend !== 'string' || !BACKEND_NAME.test(value.backend)) faults.push('backend: a lower-case name (a-z, 0-9, -; up to 32)');
  if (!isKindList(value.kinds)) faults.push('kinds: a list of task kinds (its membership calls)');
  if (typeof value.create !== 'function') faults.push('create(): a function answering the driver');
  return faults;
}

/** The driver methods `driver` lacks: every call of the workload, object and scan interfaces, and its backend's own. */
export function missingDriverMethods(driver: unknown, kinds: readonly TaskKind[]): string[] {
  const methods = [...ORCHESTRATOR_CALLS, ...kinds.filter(isDriverCall)].map((call) => call.method);
  return methods.filter((method) => !isObject(driver) || typeof driver[method] !== 'function');
}
