import type { TSchema } from '@sinclair/typebox';
import type { HangarConfig } from '../../config/schema.js';
import { badRequest } from '../errors.js';
import type { Logger } from '../log.js';
import { ORCHESTRATOR_CALLS, type OrchestratorDriver } from '../orchestrator.js';
import { isDriverCall, type PayloadOf, type ResultOf, type TaskKind } from '../tasks/kinds.js';

/** The request and view field that names a cluster of a backend: `swarm_id` for swarms, `cluster_id` for every other kind. */
export type ClusterField = 'swarm_id' | 'cluster_id';

/**
 * How hangar's API names the clusters of a backend. All optional: a backend that says nothing is
 * named `cluster_id`, its clusters are resources of type `cluster`, and it has no cluster API of
 * its own (no path for a load balancer).
 */
export interface ClusterApiNaming {
  /** The field requests and views name its clusters by (default `cluster_id`). */
  field?: ClusterField;
  /** What one of its clusters is as a resource — tags, cleanup, `resource.deleted`, its ids' prefix: `swarm`, or `cluster` (the default) for any other kind. */
  resourceType?: 'swarm' | 'cluster';
  /** What the API's summaries and its own messages call one of its clusters: `Kubernetes cluster` (default: the backend's noun). */
  title?: string;
  /** Where its cluster API lives (`/v1/swarms`); the cluster's own paths are `<path>/{id}/…`. */
  path?: string;
  /** The request that adds a node to cluster `id`, as messages name it: `POST /v1/swarms/swm-1/join`. */
  join?(clusterId: string): string;
  /** The request that takes node `nodeId` out of cluster `id`, as messages name it. */
  leave?(clusterId: string, nodeId: string): string;
}

/** One hangar secret or config in a bundle: its key in the bundle and the name of the hangar object it uses. */
export interface BundleObjectEntry {
  kind: 'secret' | 'config';
  key: string;
  name: string;
}

/** A part of a bundle the load balancer routes a domain to. */
export interface BundleRoute {
  /** The part (a compose service). */
  service: string;
  domain: string;
  port: number;
}

/** What hangar reads from a bundle before its cluster sees it. */
export interface ParsedBundle {
  /** Each part (a compose service, a Deployment) and the replicas it asks for (null: one per node). */
  desired: Record<string, number | null>;
  /** The domains it asks the load balancer to route. */
  routes: BundleRoute[];
  /** The hangar secrets and configs it uses (resolved to their current versions before each deploy). */
  objects: BundleObjectEntry[];
  /** The named volumes each part mounts, by their name in the runtime (a hangar volume's `hangar-vol-<name>`); absent: the format does not say. */
  mounts?: Record<string, string[]>;
}

/**
 * The bundle format a backend deploys (core/orchestrator.ts DeployBundle): what a service of the
 * services API is on its clusters. Requests carry the bundle base64-encoded in `field`.
 */
export interface BundleFormat {
  /** Its name, stored with each service and shown as the service's `backend`: `compose`, `manifest`. */
  name: string;
  /** The request and view field that carries it: `compose_file`, `manifest`. */
  field: string;
  /** The schema of that field in requests (its description is the API's). */
  schema: TSchema;
  /** What a service of this format is, in messages: `compose stack on a swarm`. */
  describes: string;
  /** The bundle's deploy answers the objects it applied (kept as the service's `applied_objects`). */
  appliedObjects?: boolean;
  /**
   * Reads and checks the bundle's text (a 400 naming what is wrong): `bundle` is its name in the
   * runtime, `defaultDomain` the domain a routed part gets when it names none. Unless
   * `installationAdmin` (core/auth/permissions.ts unlimitedAdmin: the caller is an installation
   * admin with all its power), the format's privilege check refuses what asks the machines for more
   * than a workload of a project gets (a host path, a privileged container, the host's network, a
   * cluster-scoped object…): a 400 naming each such part (docs/tenancy.md). `namespace`: where the
   * service's objects go, for a format that has {@link namespaceOf} (null: the backend's own).
   */
  parse(text: string, context: { bundle: string; defaultDomain(part: string): string; installationAdmin: boolean; namespace?: string | null }): ParsedBundle;
  /**
   * For a format whose objects live in namespaces (manifests): the namespace a new service of this
   * project goes in (`hangar-project-<name>`), kept with the service. A non-admin's bundle is
   * confined to it: checked here, and applied with the project's own credentials there.
   */
  namespaceOf?(project: { id: string; name: string }): string;
}

/**
 * What a format's privilege check found (problems naming each part, `services.web.privileged: …`),
 * thrown as the one 400 that lists them all, each a detail on the bundle's field. Nothing: nothing thrown.
 */
export function refusePrivileges(problems: readonly string[], field: string): void {
  if (problems.length) throw badRequest(`Validation failed: ${problems.join('; ')}`, problems.map((message) => ({ path: `body.${field}`, message })));
}

/**
 * How a backend keeps hangar's secrets and configs: `versioned`, each version a new immutable
 * runtime object `<name>-v<version>` that workloads are redeployed onto (swarm); `in-place`, one
 * runtime object under the object's own name in a namespace whose value is replaced and whose
 * users are rolled out (Kubernetes; its driver has core/orchestrator.ts's in-place object calls).
 */
export interface ObjectSemantics {
  semantics: 'versioned' | 'in-place';
  /** Why the runtime refuses this runtime name (`is too long: …`), or null when it takes it. */
  refuseName?(runtimeName: string): string | null;
}

/** How a backend runs a cluster's load balancer (the gateway's `<cluster path>/{id}/lb`). */
export interface LoadBalancerProfile {
  /** The image it runs, from the configuration (`gateway.image`). */
  image(config: HangarConfig): string;
  /** The balancer's workload name in the runtime for a cluster of this name. */
  runtimeName(clusterName: string): string;
  /** What runs, for the API's summary: `HAProxy on the manager`. */
  runs: string;
}

/** What a node's agent reports of the runtime a backend needs on it (its heartbeat's `<name>` fact, the node's view). */
export interface NodeFact {
  /** The fact's name in heartbeats and node views: `docker`, `k3s`. */
  name: string;
  /** Its schema in the heartbeat. */
  schema: TSchema;
}

/**
 * What the control plane knows of an orchestrator backend (swarm, k8s): the control-plane half of
 * its driver package. The other half, the agent driver ({@link AgentDriver}), runs on the agents
 * and implements the workload, object and scan interfaces of core/orchestrator.ts and the
 * backend's membership interface. A backend is loaded by configuration: a `drivers:` entry whose
 * driver has `kind: 'orchestrator'` and creates one of these (the built-in `swarm` and `k8s`
 * entries of the catalogue, or a module path); docs/architecture.md, "Adding a backend".
 *
 * Plugins ask a backend what they need to know of it (its naming, bundle format, object semantics,
 * volume staging, load balancer) and never branch on its name.
 */
export interface ClusterBackend {
  /** The name clusters, tasks and agents use: `swarm`, `k8s`. */
  name: string;
  /** One of its clusters in messages, lower case: "swarm web has no manager", "cluster web". */
  noun: string;
  /** Its own task kinds (its membership calls), registered with the task queue. */
  taskKinds: readonly TaskKind[];
  /** The address inside the cluster of one part of a bundle (what a load balancer sends a domain to). */
  componentAddress(bundle: string, component: string): string;
  /** The backend's policies, added to the calls that take `settings` (how ports are published…). */
  settings(config: HangarConfig): Record<string, string | number | boolean>;
  /** How the API names its clusters (default: `cluster_id`, type `cluster`, no cluster API). */
  api?: ClusterApiNaming;
  /**
   * Where a volume is staged (core/orchestrator.ts StageVolume): on every member, each engine
   * holding its own definition (`node`, the default: swarm's named volumes), or once for the whole
   * cluster through its manager (`cluster`: Kubernetes' PersistentVolume and claim).
   */
  volumeStaging?: 'node' | 'cluster';
  /** The bundle format of its services (none: the services API refuses its clusters). */
  bundles?: BundleFormat;
  /** How it keeps secrets and configs (none: the secrets API refuses its clusters). */
  objects?: ObjectSemantics;
  /** How its clusters' load balancer runs (none: its clusters take no load balancer). */
  loadBalancer?: LoadBalancerProfile;
  /** What its agents report of their machine's runtime. */
  nodeFact?: NodeFact;
  /**
   * Deleting one of its clusters destroys everything that runs on it, hangar's or not (Kubernetes:
   * k3s is uninstalled; a swarm: every member leaves it). A DELETE without force then asks the cluster's unmanaged scan first and
   * refuses (409) while it finds workloads hangar did not create, naming their namespaces.
   */
  deleteChecksUnmanaged?: boolean;
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
  /** What the agent reports of this machine's runtime in each heartbeat, as the fact `name` (the backend's {@link NodeFact}). */
  nodeFact?: { name: string; probe(): Record<string, unknown> };
  /**
   * Its kinds that are no driver calls because they need the agent's own context (downloads from
   * the control plane, the data dir), by kind (k3s installs: drivers/kubernetes/k3s-executors.ts).
   */
  executors?: ReadonlyArray<ExecutorEntry>;
}

/**
 * What a task the agent runs with its own context is given (agent/executors/types.ts calls it
 * `ExecutorContext`); `payload` is its kind's payload ({@link KindExecutor}).
 */
export interface AgentExecutorContext<P = Record<string, unknown>> {
  payload: P;
  log: Logger;
  dataDir: string;
  /** The agent's own log file (JSON lines). */
  logFile: string;
  /** Runs once the task's result has been reported (stop, reboot, restart after update). */
  after(action: () => void | Promise<void>): void;
  /** GET a path of the control API over mutual TLS, as bytes. */
  download(pathAndQuery: string): Promise<{ status: number; body: Buffer; headers: Record<string, string | string[] | undefined> }>;
  /** Stops heartbeats and waits for one in flight, so none lands after the result (stop, reboot). */
  quiesce(): Promise<void>;
  /** Asks the agent to refresh its view of OS updates in the next heartbeat. */
  setPendingUpdates(count: number | null): void;
  /** Tells the control plane how far the task is (plain numbers and words, no secret): sent at most once a second, the latest wins. */
  progress(value: Record<string, number | string | null>): void;
}

/** A task the agent runs with its own context: what it returns is the task's output, what it throws fails the task. */
export type AgentExecutor<P = Record<string, unknown>, R = unknown> = (context: AgentExecutorContext<P>) => Promise<R>;

/** The executor of one declared kind: it receives the kind's payload and answers its result, as the kind declares them. */
export type KindExecutor<K extends TaskKind> = AgentExecutor<PayloadOf<K>, ResultOf<K>>;

/** A kind with its executor, as the agent keeps them (by the kind's name). */
export type ExecutorEntry = readonly [TaskKind, AgentExecutor];

/**
 * Pairs a kind with its typed executor. The agent checks a task's payload against its kind's schema
 * before it runs the executor (agent/agent.ts), and the control plane checks the result when it is
 * reported, so the executor gets and gives what the kind declares.
 */
export function executorFor<K extends TaskKind>(kind: K, run: KindExecutor<K>): ExecutorEntry {
  return [kind, run as unknown as AgentExecutor];
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
  const { api, bundles, objects, loadBalancer, nodeFact } = value;
  if (api !== undefined) {
    if (!isObject(api) || (api.field !== undefined && api.field !== 'swarm_id' && api.field !== 'cluster_id')) faults.push('api.field: swarm_id or cluster_id');
    else if (api.resourceType !== undefined && api.resourceType !== 'swarm' && api.resourceType !== 'cluster') faults.push('api.resourceType: swarm or cluster');
    else if (api.path !== undefined && (typeof api.path !== 'string' || !/^\/v1(\/[a-z0-9-]+)+$/.test(api.path))) faults.push('api.path: a path under /v1 (/v1/nomad/clusters)');
  }
  if (bundles !== undefined && (!isObject(bundles) || ['name', 'field', 'describes'].some((k) => typeof bundles[k] !== 'string') || !isObject(bundles.schema) || typeof bundles.parse !== 'function')) {
    faults.push('bundles: {name, field, schema, describes, parse()}');
  }
  if (objects !== undefined && (!isObject(objects) || (objects.semantics !== 'versioned' && objects.semantics !== 'in-place'))) faults.push('objects.semantics: versioned or in-place');
  if (loadBalancer !== undefined && (!isObject(loadBalancer) || typeof loadBalancer.image !== 'function' || typeof loadBalancer.runtimeName !== 'function' || typeof loadBalancer.runs !== 'string')) {
    faults.push('loadBalancer: {image(), runtimeName(), runs}');
  }
  if (nodeFact !== undefined && (!isObject(nodeFact) || typeof nodeFact.name !== 'string' || !isObject(nodeFact.schema))) faults.push('nodeFact: {name, schema}');
  return faults;
}

/** What keeps `value` from being an {@link AgentDriver} module's export (empty when it is one). */
export function agentDriverFaults(value: unknown): string[] {
  if (!isObject(value)) return ['its default export is not an object (defineAgentDriver({...}))'];
  const faults: string[] = [];
  if (typeof value.backend !== 'string' || !BACKEND_NAME.test(value.backend)) faults.push('backend: a lower-case name (a-z, 0-9, -; up to 32)');
  if (!isKindList(value.kinds)) faults.push('kinds: a list of task kinds (its membership calls)');
  if (typeof value.create !== 'function') faults.push('create(): a function answering the driver');
  const { nodeFact } = value;
  if (nodeFact !== undefined && (!isObject(nodeFact) || typeof nodeFact.name !== 'string' || typeof nodeFact.probe !== 'function')) faults.push('nodeFact: {name, probe()}');
  return faults;
}

/** The driver methods `driver` lacks: every call of the workload, object and scan interfaces, and its backend's own. */
export function missingDriverMethods(driver: unknown, kinds: readonly TaskKind[]): string[] {
  const methods = [...ORCHESTRATOR_CALLS, ...kinds.filter(isDriverCall)].map((call) => call.method);
  return methods.filter((method) => !isObject(driver) || typeof driver[method] !== 'function');
}
