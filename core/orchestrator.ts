/**
 * The contract between the control plane and the orchestrator drivers (swarm here, Kubernetes
 * later). The control plane never calls a driver itself: it queues an `orchestrator.call` task
 * naming a method of {@link OrchestratorDriver} (or {@link SwarmMembership}) and its arguments;
 * the agent on the right machine runs the method against its local engine and reports the result.
 * Everything in here is therefore plain JSON.
 */

/** Labels hangar puts on what it creates; the unmanaged scan tells hangar's workloads apart by them. */
export const HANGAR_LABELS = {
  /** What the workload is to hangar: `instance`, `loadbalancer`, `dns` or `s3`. */
  role: 'io.hangar.role',
  /** The id of the hangar record the object belongs to. */
  id: 'io.hangar.id',
  /** Secret and config objects: which hangar object and version they hold. */
  object: 'io.hangar.object',
  version: 'io.hangar.version',
} as const;

/** hangar names the compose stacks it deploys `hangar-<service name>`; their services carry no role label. */
export const HANGAR_STACK_PREFIX = 'hangar-';

/** The overlay network the load balancer shares with every workload it routes to. */
export const HANGAR_EDGE_NETWORK = 'hangar-edge';

export type WorkloadRole = 'instance' | 'loadbalancer' | 'dns' | 's3';

/** The swarm availability a node can have; hangar's cordon/drain/uncordon map to pause/drain/active. */
export type RuntimeAvailability = 'active' | 'pause' | 'drain';

export interface PortSpec {
  published: number;
  target: number;
  protocol?: 'tcp' | 'udp';
}

export interface MountSpec {
  /** `volume`: a named volume (defined on each node beforehand); `bind`: a host folder. */
  type: 'volume' | 'bind';
  source: string;
  target: string;
  readOnly?: boolean;
  /** Options of the `local` volume driver, used when a node has no definition of the volume yet. */
  driverOptions?: Record<string, string>;
  /** Labels of the volume when the engine creates it for the mount (volume mounts only). */
  labels?: Record<string, string>;
}

export interface ObjectRef {
  /** The runtime object's name (a secret or config version). */
  name: string;
  /** Path inside the container (a secret defaults to /run/secrets/<target>). */
  target: string;
}

/** One long-running workload hangar creates directly (an instance, a load balancer, an object store). */
export interface WorkloadSpec {
  name: string;
  role: WorkloadRole;
  /** hangar's id of the resource; stored in the {@link HANGAR_LABELS.id} label. */
  resourceId: string;
  image: string;
  /** 0 keeps the workload defined but stopped. */
  replicas: number;
  env?: Record<string, string>;
  command?: string[];
  args?: string[];
  ports?: PortSpec[];
  /** How ports are published: through the routing mesh (`ingress`) or on the node running a task (`host`). */
  publishMode?: 'ingress' | 'host';
  /** `vip` (one virtual IP) or `dnsrr` (DNS round robin over the tasks). */
  endpointMode?: 'vip' | 'dnsrr';
  limits?: { cpus?: number; memoryMb?: number };
  /** Generic resources reserved per task, e.g. `{ gpu: 1 }`. */
  reservations?: Record<string, number>;
  platform?: { os?: string; architecture?: string };
  mounts?: MountSpec[];
  constraints?: string[];
  networks?: string[];
  hostname?: string;
  secrets?: ObjectRef[];
  configs?: ObjectRef[];
  labels?: Record<string, string>;
}

export interface WorkloadTask {
  /** The runtime's id of the node the task runs on. */
  runtime_node_id: string | null;
  state: string;
  desired_state: string;
  message: string | null;
  error: string | null;
  updated_at: string | null;
}

/** The task the runtime changed last (the first of equals), or null when there is none. */
export function latestTask(tasks: WorkloadTask[]): WorkloadTask | null {
  const time = (t: WorkloadTask) => (t.updated_at ? Date.parse(t.updated_at) || 0 : 0);
  return tasks.reduce<WorkloadTask | null>((latest, t) => (!latest || time(t) > time(latest) ? t : latest), null);
}

/** What the runtime says about one workload. */
export interface WorkloadState {
  name: string;
  labels: Record<string, string>;
  image: string;
  /** Desired replicas the runtime holds (null for global services). */
  replicas: number | null;
  running: number;
  tasks: WorkloadTask[];
  /** Ports published, as the runtime has them. */
  ports: PortSpec[];
  /** Limits as the runtime has them. */
  limits: { cpus: number | null; memoryMb: number | null };
  /** Stack the workload belongs to (compose services), if any. */
  stack: string | null;
}

export interface LogOptions {
  lines?: number;
  since?: string;
}

export interface UnmanagedResource {
  kind: string;
  id: string;
  name: string;
  image?: string;
  stack?: string | null;
  labels: Record<string, string>;
}

/** A route the load balancer serves: requests for `domain` go to `service:port` inside the swarm. */
export interface Route {
  domain: string;
  service: string;
  port: number;
  /** What the route comes from: `instance`, `service` or `s3`, and that record's id. */
  source: string;
  source_id: string;
}

export interface LoadBalancerSpec {
  /** Runtime name of the balancer's workload. */
  name: string;
  resourceId: string;
  image: string;
  /** The balancer's configuration file, rendered by the control plane. */
  config: string;
  /** Where the configuration lives on the node running the balancer, and inside the container. */
  hostConfigDir: string;
  containerConfigDir: string;
  /** Signal that makes the balancer re-read its configuration without dropping connections. */
  reloadSignal: string;
  ports: PortSpec[];
  publishMode?: 'ingress' | 'host';
  /** The balancer runs where its configuration is written: on this runtime node. */
  runtimeNodeId: string;
  network: string;
  /** The container's command, when the image's default is not the balancer (tests use a shell). */
  command?: string[];
}

export interface BundleState {
  name: string;
  services: WorkloadState[];
}

/** Deploys, changes and inspects workloads on one orchestrator, from one of its control nodes. */
export interface OrchestratorDriver {
  readonly backend: 'swarm' | 'k8s';
  /** Creates the workload, or updates it in place (a rolling update) when it exists. */
  deployWorkload(spec: WorkloadSpec): Promise<WorkloadState>;
  removeWorkload(name: string): Promise<{ removed: boolean }>;
  scaleWorkload(name: string, replicas: number): Promise<WorkloadState>;
  workloadLogs(name: string, options: LogOptions): Promise<{ lines: string[] }>;
  /** Workloads by name; a name the runtime does not know is left out. */
  inspectWorkloads(filter: { names?: string[]; stacks?: string[] }): Promise<{ workloads: WorkloadState[] }>;
  /** Deploys a bundle (a compose stack on swarm); `prune` removes services no longer in the spec. */
  deployBundle(name: string, spec: string, options: { prune: boolean }): Promise<BundleState>;
  removeBundle(name: string): Promise<{ removed: boolean }>;
  bundleLogs(name: string, options: LogOptions): Promise<{ lines: string[] }>;
  /** Creates a secret or config object (immutable: a new value is a new object). */
  createObject(kind: 'secret' | 'config', name: string, dataBase64: string, labels: Record<string, string>): Promise<{ id: string }>;
  removeObject(kind: 'secret' | 'config', name: string): Promise<{ removed: boolean }>;
  setNodeAvailability(runtimeNodeId: string, availability: RuntimeAvailability): Promise<{ availability: RuntimeAvailability }>;
  /**
   * Everything running that hangar did not create: workloads without a {@link HANGAR_LABELS.role}
   * label that are not part of a stack named with {@link HANGAR_STACK_PREFIX}.
   */
  scanUnmanaged(): Promise<{ resources: UnmanagedResource[] }>;
  /** Deploys the load balancer, or rewrites its configuration and reloads it in place. */
  applyLoadBalancer(spec: LoadBalancerSpec): Promise<WorkloadState>;
  removeLoadBalancer(name: string): Promise<{ removed: boolean }>;
  /** Ensures an overlay network the balancer and routed workloads share exists. */
  ensureNetwork(name: string): Promise<{ id: string }>;
}

export interface SwarmMember {
  runtime_node_id: string;
  hostname: string;
  address: string | null;
  role: 'manager' | 'worker';
  state: string;
  availability: RuntimeAvailability;
  leader: boolean;
}

/** Swarm-only calls, run on the machine they concern (init and join on the joining machine). */
export interface SwarmMembership {
  /** Makes this engine a single-node swarm (idempotent when it already manages one). */
  init(advertiseAddress: string | null): Promise<{ cluster_id: string; runtime_node_id: string }>;
  joinTokens(): Promise<{ worker: string; manager: string; managers: string[] }>;
  /** Joins this engine to a swarm; returns its runtime node id. */
  join(remoteAddresses: string[], token: string, advertiseAddress: string | null): Promise<{ runtime_node_id: string }>;
  leave(force: boolean): Promise<{ left: boolean }>;
  members(): Promise<{ members: SwarmMember[] }>;
  /** Removes a node entry (after it left or when it is gone) from the manager's list. */
  removeMember(runtimeNodeId: string, force: boolean): Promise<{ removed: boolean }>;
  /** Defines a named volume on this engine (local driver with these options). */
  defineVolume(name: string, driverOptions: Record<string, string>, labels: Record<string, string>): Promise<{ name: string }>;
  removeVolumeDefinition(name: string): Promise<{ removed: boolean }>;
}

/** Method names the agent accepts in an `orchestrator.call` task; anything else is refused. */
export const ORCHESTRATOR_METHODS = [
  'deployWorkload',
  'removeWorkload',
  'scaleWorkload',
  'workloadLogs',
  'inspectWorkloads',
  'deployBundle',
  'removeBundle',
  'bundleLogs',
  'createObject',
  'removeObject',
  'setNodeAvailability',
  'scanUnmanaged',
  'applyLoadBalancer',
  'removeLoadBalancer',
  'ensureNetwork',
  'init',
  'joinTokens',
  'join',
  'leave',
  'members',
  'removeMember',
  'defineVolume',
  'removeVolumeDefinition',
] as const satisfies readonly (keyof OrchestratorDriver | keyof SwarmMembership)[];

export type OrchestratorMethod = (typeof ORCHESTRATOR_METHODS)[number];

/** Payload of an `orchestrator.call` task. */
export interface OrchestratorCall {
  backend: 'swarm' | 'k8s';
  method: OrchestratorMethod;
  args: unknown[];
}

export type SwarmDriver = OrchestratorDriver & SwarmMembership;
