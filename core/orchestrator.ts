/**
 * The contract between the control plane and the orchestrator drivers (swarm here, Kubernetes
 * later). The control plane never calls a driver itself: it queues a typed task (a
 * {@link DriverCall}: `workload.deploy`, `object.create`…) on the right machine; that machine's
 * agent calls the method of its driver for the payload's `backend` with the payload's named input
 * and reports what it answers. Payloads and results are TypeBox schemas, checked on both sides;
 * the TypeScript types below are derived from them.
 */
import { Type, type Static } from '@sinclair/typebox';
import { defineDriverCall, sensitive, type DriverMethods } from './tasks/kinds.js';
import { FIRST_AGENT_VERSION } from './tasks/host-kinds.js';
import { Nullable } from './validation.js';

/** The version whose agents run the typed orchestrator calls below (instead of `orchestrator.call`). */
export const TYPED_TASKS_VERSION = '0.2.0';
/** The first agents that place a bundle in its project's namespace with the project's credentials (namespace, confined). */
export const BUNDLE_PLACEMENT_VERSION = '0.3.0';
const PLACED_SINCE = { namespace: BUNDLE_PLACEMENT_VERSION, confined: BUNDLE_PLACEMENT_VERSION, project: BUNDLE_PLACEMENT_VERSION };

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

const Labels = Type.Record(Type.String(), Type.String());

export const WorkloadRole = Type.Union([Type.Literal('instance'), Type.Literal('loadbalancer'), Type.Literal('dns'), Type.Literal('s3')]);
export type WorkloadRole = Static<typeof WorkloadRole>;

/**
 * A node's availability for new work, as hangar has it (the driver translates: swarm's
 * active / pause / drain; Kubernetes' uncordon / cordon / drain).
 */
export const NodeAvailability = Type.Union([Type.Literal('schedulable'), Type.Literal('cordoned'), Type.Literal('drained')]);
export type NodeAvailability = Static<typeof NodeAvailability>;

export const PortSpec = Type.Object({
  published: Type.Integer({ minimum: 0, maximum: 65535 }),
  target: Type.Integer({ minimum: 0, maximum: 65535 }),
  protocol: Type.Optional(Type.Union([Type.Literal('tcp'), Type.Literal('udp')])),
});
export type PortSpec = Static<typeof PortSpec>;

/** Where a volume's data lives: a folder shared over NFS (named the same on every node), or a folder on one node. */
export const VolumeSource = Type.Union([
  Type.Object({ nfs: Type.Object({ name: Type.String({ minLength: 1 }), server: Type.String({ minLength: 1 }), path: Type.String({ pattern: '^/' }) }) }),
  Type.Object({ host_path: Type.Object({ node_id: Type.String({ minLength: 1 }), path: Type.String({ pattern: '^/' }) }) }),
]);
export type VolumeSource = Static<typeof VolumeSource>;

export const VolumeMount = Type.Object({ source: VolumeSource, target: Type.String({ pattern: '^/' }), read_only: Type.Optional(Type.Boolean()) });
export type VolumeMount = Static<typeof VolumeMount>;

export const ObjectRef = Type.Object({
  /** The runtime object's name (a secret or config version). */
  name: Type.String({ minLength: 1 }),
  /** Path inside the container (a secret defaults to /run/secrets/<target>). */
  target: Type.String(),
});
export type ObjectRef = Static<typeof ObjectRef>;

/**
 * A health check a workload declares: exactly one probe (an HTTP GET of a path on a container port,
 * a TCP connection to a port, or a command run in the container) and how often it runs. Drivers
 * render it: a swarm service's Docker healthcheck, a Kubernetes container's readinessProbe.
 */
export const HealthSpec = Type.Object(
  {
    http: Type.Optional(
      Type.Object(
        {
          path: Type.String({ pattern: "^/[A-Za-z0-9._~/%?=&+:@,;-]*$", maxLength: 1024, description: 'the path to GET (an answer 200-399 is healthy)' }),
          port: Type.Integer({ minimum: 1, maximum: 65535, description: 'the container port' }),
        },
        { additionalProperties: false },
      ),
    ),
    tcp: Type.Optional(Type.Object({ port: Type.Integer({ minimum: 1, maximum: 65535, description: 'the container port that must accept a connection' }) }, { additionalProperties: false })),
    command: Type.Optional(Type.Array(Type.String({ minLength: 1, maxLength: 4096 }), { minItems: 1, maxItems: 100, description: 'run in the container: exit 0 is healthy' })),
    interval_s: Type.Optional(Type.Integer({ minimum: 1, maximum: 3600, description: 'seconds between checks (default 10)' })),
    timeout_s: Type.Optional(Type.Integer({ minimum: 1, maximum: 3600, description: 'seconds one check may take (default 5)' })),
    retries: Type.Optional(Type.Integer({ minimum: 1, maximum: 100, description: 'failed checks in a row before unhealthy (default 3)' })),
    start_period_s: Type.Optional(Type.Integer({ minimum: 0, maximum: 3600, description: 'seconds after start during which failures do not count (default 0)' })),
  },
  { additionalProperties: false },
);
export type HealthSpec = Static<typeof HealthSpec>;

/**
 * How an update of a workload rolls out: so many tasks at a time, a pause between batches, how long
 * each new task is watched and what share may fail, the order of old and new, and what a failure
 * does (rollback: the runtime returns to the previous spec by itself). Drivers render it (a swarm
 * service's UpdateConfig).
 */
export const RolloutSpec = Type.Object(
  {
    parallelism: Type.Optional(Type.Integer({ minimum: 1, maximum: 100, description: 'tasks updated at a time (default 1)' })),
    delay_s: Type.Optional(Type.Integer({ minimum: 0, maximum: 3600, description: 'seconds between batches (default 0)' })),
    monitor_s: Type.Optional(Type.Integer({ minimum: 1, maximum: 3600, description: 'seconds each new task is watched for a failure (default 5)' })),
    max_failure_ratio: Type.Optional(Type.Number({ minimum: 0, maximum: 1, description: 'the share of tasks that may fail before the failure action (default 0)' })),
    order: Type.Optional(Type.Union([Type.Literal('start-first'), Type.Literal('stop-first')], { description: 'start-first (default): the new task before the old one stops' })),
    on_failure: Type.Optional(Type.Union([Type.Literal('rollback'), Type.Literal('pause')], { description: 'rollback (default): return to the previous spec; pause: stop the rollout' })),
  },
  { additionalProperties: false },
);
export type RolloutSpec = Static<typeof RolloutSpec>;

/** A health check's timings with the defaults filled in (what drivers render). */
export function healthTimings(health: HealthSpec): { interval_s: number; timeout_s: number; retries: number; start_period_s: number } {
  return { interval_s: health.interval_s ?? 10, timeout_s: health.timeout_s ?? 5, retries: health.retries ?? 3, start_period_s: health.start_period_s ?? 0 };
}

/** What is wrong with a health check beyond its schema (null when nothing): exactly one probe, a timeout within the interval. */
export function healthFault(health: HealthSpec): { field: string; message: string } | null {
  const probes = (['http', 'tcp', 'command'] as const).filter((k) => health[k] !== undefined);
  if (probes.length !== 1) return { field: '', message: `give exactly one of http, tcp and command (got ${probes.length ? probes.join(' and ') : 'none'})` };
  const { interval_s, timeout_s } = healthTimings(health);
  if (timeout_s > interval_s) return { field: '.timeout_s', message: `timeout_s (${timeout_s}) must not exceed interval_s (${interval_s})` };
  return null;
}

/**
 * One long-running workload hangar creates directly (an instance, a load balancer, an object
 * store), said as what the user wants; each driver translates it into its orchestrator's terms.
 */
export const WorkloadSpec = Type.Object({
  /** The workload's name in the runtime (hangar's naming: `inst-<name>`, `s3-<name>`). */
  name: Type.String({ minLength: 1 }),
  role: WorkloadRole,
  /** hangar's id of the resource; stored in the {@link HANGAR_LABELS.id} label. */
  resource_id: Type.String({ minLength: 1 }),
  image: Type.String({ minLength: 1 }),
  /** 0 keeps the workload defined but stopped. */
  replicas: Type.Integer({ minimum: 0 }),
  env: Type.Optional(Labels),
  command: Type.Optional(Type.Array(Type.String())),
  args: Type.Optional(Type.Array(Type.String())),
  /** Limits per replica, and GPUs reserved per replica. */
  resources: Type.Optional(
    Type.Object({ cpus: Type.Optional(Type.Number({ minimum: 0 })), memory_mb: Type.Optional(Type.Number({ minimum: 0 })), gpus: Type.Optional(Type.Integer({ minimum: 0 })) }),
  ),
  platform: Type.Optional(Type.Object({ os: Type.Optional(Type.String()), architecture: Type.Optional(Type.String()) })),
  /** Where replicas may run, by hangar node id (a folder on one node pins the workload there too). */
  placement: Type.Optional(Type.Object({ node_ids: Type.Array(Type.String({ minLength: 1 })) })),
  volumes: Type.Optional(Type.Array(VolumeMount)),
  /** How it is reached: published ports, and whether the load balancer routes a domain to it. */
  exposure: Type.Optional(Type.Object({ ports: Type.Optional(Type.Array(PortSpec)), routed: Type.Optional(Type.Boolean()), domain: Type.Optional(Type.String()) })),
  secrets: Type.Optional(Type.Array(ObjectRef)),
  configs: Type.Optional(Type.Array(ObjectRef)),
  /** Each replica's hostname names its workload and its slot (`inst-web-2`). */
  replica_hostnames: Type.Optional(Type.Boolean()),
  labels: Type.Optional(Labels),
  /** Its health check (none: the image's own HEALTHCHECK, if any, on a swarm). */
  health: Type.Optional(HealthSpec),
  /** How an update rolls out (none: the driver's own defaults). */
  rollout: Type.Optional(RolloutSpec),
  /** hangar's revision number of this spec, kept with what runs so that a rollback can name the revision it returned to. */
  revision: Type.Optional(Type.Integer({ minimum: 1 })),
});
export type WorkloadSpec = Static<typeof WorkloadSpec>;

export const WorkloadTask = Type.Object({
  /** The runtime's id of the node the task runs on. */
  runtime_node_id: Nullable(Type.String()),
  state: Type.String(),
  desired_state: Type.String(),
  message: Nullable(Type.String()),
  error: Nullable(Type.String()),
  updated_at: Nullable(Type.String()),
});
export type WorkloadTask = Static<typeof WorkloadTask>;

/** The task the runtime changed last (the first of equals), or null when there is none. */
export function latestTask(tasks: WorkloadTask[]): WorkloadTask | null {
  const time = (t: WorkloadTask) => (t.updated_at ? Date.parse(t.updated_at) || 0 : 0);
  return tasks.reduce<WorkloadTask | null>((latest, t) => (!latest || time(t) > time(latest) ? t : latest), null);
}

/**
 * Why the runtime cannot run a workload, when its newest task says so: it failed or was rejected
 * with an error (an image nobody has: a swarm rejects every new task with `No such image`, and
 * tries again every few seconds for ever). Null while the newest task starts or runs, or ended
 * without an error. What an observer of any resource tells its user (compute, gateway).
 */
export function taskFailure(tasks: WorkloadTask[]): string | null {
  const newest = latestTask(tasks);
  return newest?.error && ['failed', 'rejected'].includes(newest.state) ? `latest task ${newest.state}: ${newest.error}` : null;
}

/** What the runtime says about one workload. */
export const WorkloadState = Type.Object({
  name: Type.String(),
  labels: Labels,
  image: Type.String(),
  /** Desired replicas the runtime holds (null for global services). */
  replicas: Nullable(Type.Integer({ minimum: 0 })),
  running: Type.Integer({ minimum: 0 }),
  tasks: Type.Array(WorkloadTask),
  /** Ports published, as the runtime has them. */
  ports: Type.Array(PortSpec),
  /** Limits as the runtime has them. */
  limits: Type.Object({ cpus: Nullable(Type.Number()), memoryMb: Nullable(Type.Number()) }),
  /** The bundle (compose stack) the workload belongs to, if any, and its key in the bundle. */
  stack: Nullable(Type.String()),
  component: Type.Optional(Nullable(Type.String())),
  /**
   * The last rollout as the runtime tells it (a swarm's UpdateStatus: `updating`, `completed`,
   * `rollback_started`, `rollback_completed`, `paused`…; Kubernetes in the same words), if any.
   */
  rollout: Type.Optional(
    Nullable(
      Type.Object({
        state: Type.String(),
        message: Nullable(Type.String()),
        /** After a rollback or a pause: hangar's revision that runs now, when the runtime keeps it. */
        revision: Type.Optional(Nullable(Type.Integer())),
      }),
    ),
  ),
});
export type WorkloadState = Static<typeof WorkloadState>;

export const LogOptions = Type.Object({
  lines: Type.Optional(Type.Integer({ minimum: 1 })),
  since: Type.Optional(Type.String()),
});
export type LogOptions = Static<typeof LogOptions>;

export const UnmanagedResource = Type.Object({
  kind: Type.String(),
  id: Type.String(),
  name: Type.String(),
  image: Type.Optional(Type.String()),
  stack: Type.Optional(Nullable(Type.String())),
  labels: Labels,
  /** The namespace it runs in, on a backend that has namespaces (Kubernetes). */
  namespace: Type.Optional(Type.String()),
});
export type UnmanagedResource = Static<typeof UnmanagedResource>;

/** A route the load balancer serves: requests for `domain` go to `service:port` inside the cluster. */
export const Route = Type.Object({
  domain: Type.String(),
  service: Type.String(),
  port: Type.Integer({ minimum: 1, maximum: 65535 }),
  /** What the route comes from: `instance`, `service` or `s3`, and that record's id. */
  source: Type.String(),
  source_id: Type.String(),
});
export type Route = Static<typeof Route>;

/** The cluster's load balancer: where it runs, what it answers on, and its routing table. */
export const LoadBalancerSpec = Type.Object({
  /** Runtime name of the balancer's workload. */
  name: Type.String({ minLength: 1 }),
  resource_id: Type.String({ minLength: 1 }),
  image: Type.String({ minLength: 1 }),
  http_port: Type.Integer({ minimum: 1, maximum: 65535 }),
  /** The hangar node it runs on (its configuration is written there). */
  node_id: Type.String({ minLength: 1 }),
  routes: Type.Array(Route),
  /** The container's command, when the image's default is not the balancer (tests use a shell). */
  command: Type.Optional(Type.Array(Type.String())),
  /** How this backend's balancer is run (the gateway's settings: configuration folders, reload signal, publish mode). */
  settings: Type.Optional(Type.Record(Type.String(), Type.String())),
});
export type LoadBalancerSpec = Static<typeof LoadBalancerSpec>;

export const BundleState = Type.Object({ name: Type.String(), services: Type.Array(WorkloadState) });
export type BundleState = Static<typeof BundleState>;

const Removed = Type.Object({ removed: Type.Boolean() });

/**
 * What the control plane adds to calls about a cluster (core fills them in, plugins never do):
 * the members' runtime ids by hangar node id, and the backend's policies (how ports are published…).
 */
export const ClusterContext = {
  cluster_nodes: Type.Optional(Type.Record(Type.String(), Type.String(), { description: 'hangar node id → the runtime’s node id' })),
  settings: Type.Optional(Type.Record(Type.String(), Type.Union([Type.String(), Type.Number(), Type.Boolean()]), { description: 'the backend’s policies' })),
};
/**
 * Where a bundle lives, for a backend with namespaces (Kubernetes; swarm ignores both): the
 * service's namespace (the driver's own when left out), and whether it is applied, read and removed
 * with its project's own credentials there (a non-admin's bundle) instead of the agent's.
 */
export const BundlePlacement = {
  namespace: Type.Optional(Type.String({ pattern: '^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$', description: 'the namespace of the bundle’s objects that name none, and of its inventory' })),
  confined: Type.Optional(Type.Boolean({ description: 'applied as the project’s user of the namespace (impersonated: hangar:project:<namespace>, which has no token), so the API server refuses what the project may not do' })),
};
const Lines = Type.Object({ lines: Type.Array(Type.String()) });
const Name = Type.String({ minLength: 1 });
const ObjectKind = Type.Union([Type.Literal('secret'), Type.Literal('config')]);

// ---- the workload interface ------------------------------------------------------------------

export const DeployWorkload = defineDriverCall({
  name: 'workload.deploy',
  description: 'create the workload, or update it in place (a rolling update) when it exists',
  lane: 'orchestrator',
  minAgentVersion: TYPED_TASKS_VERSION,
  method: 'deployWorkload',
  input: Type.Object({ spec: WorkloadSpec, ...ClusterContext }),
  result: WorkloadState,
});

export const RemoveWorkload = defineDriverCall({
  name: 'workload.remove',
  description: 'remove a workload (removed: false when there was none)',
  lane: 'orchestrator',
  minAgentVersion: TYPED_TASKS_VERSION,
  method: 'removeWorkload',
  input: Type.Object({ name: Name }),
  result: Removed,
});

export const ScaleWorkload = defineDriverCall({
  name: 'workload.scale',
  description: 'set a workload’s replica count, keeping the rest of its spec',
  lane: 'orchestrator',
  minAgentVersion: TYPED_TASKS_VERSION,
  method: 'scaleWorkload',
  input: Type.Object({ name: Name, replicas: Type.Integer({ minimum: 0 }) }),
  result: WorkloadState,
});

export const WorkloadLogs = defineDriverCall({
  name: 'workload.logs',
  description: 'a workload’s logs, timestamped, merged over its tasks',
  lane: 'reads',
  minAgentVersion: TYPED_TASKS_VERSION,
  method: 'workloadLogs',
  input: Type.Object({ name: Name, ...LogOptions.properties }),
  result: Lines,
});

export const InspectWorkloads = defineDriverCall({
  name: 'workload.inspect',
  description: 'the state of workloads by name or by stack (everything when neither is given); unknown names are left out',
  lane: 'reads',
  minAgentVersion: TYPED_TASKS_VERSION,
  method: 'inspectWorkloads',
  input: Type.Object({ names: Type.Optional(Type.Array(Name)), stacks: Type.Optional(Type.Array(Name)) }),
  result: Type.Object({ workloads: Type.Array(WorkloadState) }),
});

export const DeployBundle = defineDriverCall({
  name: 'bundle.deploy',
  description: 'deploy a bundle (a compose stack on swarm) with hangar’s secrets and configs; prune removes parts no longer in it',
  lane: 'orchestrator',
  minAgentVersion: TYPED_TASKS_VERSION,
  fieldsSince: PLACED_SINCE,
  method: 'deployBundle',
  input: Type.Object({
    name: Name,
    /** The bundle as the user wrote it (a compose file). */
    spec: Type.String({ minLength: 1 }),
    /** The hangar secrets and configs it uses, by its own key: the runtime object of their current version. */
    objects: Type.Optional(Type.Array(Type.Object({ kind: ObjectKind, key: Type.String({ minLength: 1 }), name: Name }))),
    /** Its parts the load balancer routes to. */
    routed: Type.Optional(Type.Array(Type.String({ minLength: 1 }))),
    /** Health checks declared for its parts (by part: a compose service, a Deployment), over the bundle's own. */
    health: Type.Optional(Type.Record(Type.String(), HealthSpec)),
    prune: Type.Boolean(),
    ...BundlePlacement,
    /** The project the bundle belongs to: a backend with namespaces makes `namespace` for it (labelled with it) on first use. */
    project: Type.Optional(Type.Object({ id: Type.String({ minLength: 1 }), name: Type.String({ minLength: 1 }) })),
    ...ClusterContext,
  }),
  result: BundleState,
});

export const RemoveBundle = defineDriverCall({
  name: 'bundle.remove',
  description: 'remove a bundle and wait until its parts are gone',
  lane: 'orchestrator',
  minAgentVersion: TYPED_TASKS_VERSION,
  fieldsSince: PLACED_SINCE,
  method: 'removeBundle',
  input: Type.Object({ name: Name, ...BundlePlacement }),
  result: Removed,
});

export const BundleLogs = defineDriverCall({
  name: 'bundle.logs',
  description: 'the logs of every service of a bundle, merged in time order, each line prefixed with its service',
  lane: 'reads',
  minAgentVersion: TYPED_TASKS_VERSION,
  fieldsSince: PLACED_SINCE,
  method: 'bundleLogs',
  input: Type.Object({ name: Name, ...BundlePlacement, ...LogOptions.properties }),
  result: Lines,
});

export const ApplyLoadBalancer = defineDriverCall({
  name: 'loadbalancer.apply',
  description: 'deploy the load balancer, or rewrite its configuration and reload it in place',
  lane: 'orchestrator',
  minAgentVersion: TYPED_TASKS_VERSION,
  method: 'applyLoadBalancer',
  input: Type.Object({ spec: LoadBalancerSpec, ...ClusterContext }),
  result: WorkloadState,
});

export const RemoveLoadBalancer = defineDriverCall({
  name: 'loadbalancer.remove',
  description: 'remove the load balancer',
  lane: 'orchestrator',
  minAgentVersion: TYPED_TASKS_VERSION,
  method: 'removeLoadBalancer',
  input: Type.Object({ name: Name }),
  result: Removed,
});

export const SetNodeAvailability = defineDriverCall({
  name: 'node.availability',
  description: 'set a member node’s availability for scheduling',
  lane: 'orchestrator',
  minAgentVersion: TYPED_TASKS_VERSION,
  method: 'setNodeAvailability',
  input: Type.Object({
    runtime_node_id: Name,
    availability: NodeAvailability,
    drain_timeout_seconds: Type.Optional(Type.Integer({ minimum: 1, description: 'how long a drain may wait for evictions and for evicted workloads to go (a backend whose drain is immediate ignores it)' })),
  }),
  result: Type.Object({ availability: NodeAvailability }),
});

export const WORKLOAD_CALLS = [
  DeployWorkload,
  RemoveWorkload,
  ScaleWorkload,
  WorkloadLogs,
  InspectWorkloads,
  DeployBundle,
  RemoveBundle,
  BundleLogs,
  ApplyLoadBalancer,
  RemoveLoadBalancer,
  SetNodeAvailability,
] as const;

// ---- the object interface (secrets and configs) -----------------------------------------------

export const CreateObject = defineDriverCall({
  name: 'object.create',
  description: 'create a secret or config (immutable: a new value is a new object); answers the existing one’s id when the name is taken',
  lane: 'orchestrator',
  minAgentVersion: TYPED_TASKS_VERSION,
  method: 'createObject',
  input: Type.Object({ kind: ObjectKind, name: Name, data: sensitive(Type.String({ description: 'the value, base64' })), labels: Labels }),
  result: Type.Object({ id: Type.String({ minLength: 1 }) }),
});

export const RemoveObject = defineDriverCall({
  name: 'object.remove',
  description: 'remove a secret or config by name (refused while a workload uses it)',
  lane: 'orchestrator',
  minAgentVersion: TYPED_TASKS_VERSION,
  method: 'removeObject',
  input: Type.Object({ kind: ObjectKind, name: Name }),
  result: Removed,
});

export const StageVolume = defineDriverCall({
  name: 'volume.stage',
  description: 'make a volume mountable on this node: its NFS share, or (on the node holding the folder) the folder itself',
  lane: 'host',
  minAgentVersion: TYPED_TASKS_VERSION,
  method: 'stageVolume',
  input: Type.Object({
    name: Name,
    nfs: Type.Object({ server: Type.String({ minLength: 1 }), path: Type.String({ pattern: '^/' }) }),
    /** Set on the node that holds the folder: it is used in place (no NFS to itself). */
    local_path: Nullable(Type.String({ pattern: '^/' })),
    labels: Labels,
  }),
  result: Type.Object({ name: Type.String() }),
});

export const UnstageVolume = defineDriverCall({
  name: 'volume.unstage',
  description: 'forget a staged volume on this node (refused while a workload uses it); the data stays',
  lane: 'host',
  minAgentVersion: TYPED_TASKS_VERSION,
  method: 'unstageVolume',
  input: Type.Object({ name: Name }),
  result: Removed,
});

export const OBJECT_CALLS = [CreateObject, RemoveObject, StageVolume, UnstageVolume] as const;

// ---- objects kept in place (an optional interface) -----------------------------------------------
//
// On a backend whose workloads name secrets and configs themselves (Kubernetes: a Deployment's
// secretKeyRef, envFrom, volumes), a hangar object is ONE runtime object under its own name in a
// namespace, changed in place; the workloads that use it are found on the cluster and rolled out
// (`kubectl rollout restart`). Swarm keeps immutable versions instead (CreateObject above). A backend
// with these calls lists them among its own task kinds; the secrets plugin uses them on its clusters.

const Namespace = Type.String({ pattern: '^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$', description: 'the namespace the object lives in' });

export const PutObject = defineDriverCall({
  name: 'object.put',
  description: 'write a secret or config under its own name in a namespace: create it (409 when one of that name is not this hangar object), or replace its value in place',
  lane: 'orchestrator',
  minAgentVersion: TYPED_TASKS_VERSION,
  method: 'putObject',
  input: Type.Object({
    kind: ObjectKind,
    namespace: Namespace,
    name: Name,
    data: sensitive(Type.String({ description: 'the value, base64' })),
    labels: Labels,
    /** false: create only; true: the object exists and gets the new value. */
    replace: Type.Boolean(),
  }),
  result: Type.Object({ id: Type.String({ minLength: 1 }) }),
});

export const DeleteObject = defineDriverCall({
  name: 'object.delete',
  description: 'delete a secret or config of a namespace (refused, naming them, while workloads use it)',
  lane: 'orchestrator',
  minAgentVersion: TYPED_TASKS_VERSION,
  method: 'deleteObject',
  input: Type.Object({ kind: ObjectKind, namespace: Namespace, name: Name }),
  result: Removed,
});

export const ObjectUsers = defineDriverCall({
  name: 'object.users',
  description: 'the workloads of a namespace that use each of these secrets or configs (`deployment/web`), by object name',
  lane: 'reads',
  minAgentVersion: TYPED_TASKS_VERSION,
  method: 'objectUsers',
  input: Type.Object({ kind: ObjectKind, namespace: Namespace, names: Type.Array(Name) }),
  result: Type.Object({ users: Type.Record(Type.String(), Type.Array(Type.String())) }),
});

export const RestartWorkload = defineDriverCall({
  name: 'workload.restart',
  description: 'roll out a workload of a namespace again with the same spec (`kubectl rollout restart`): new pods read the objects’ current values',
  lane: 'orchestrator',
  minAgentVersion: TYPED_TASKS_VERSION,
  method: 'restartWorkload',
  input: Type.Object({ namespace: Namespace, workload: Type.String({ pattern: '^(deployment|statefulset|daemonset)/[a-z0-9]([-a-z0-9.]*[a-z0-9])?$' }) }),
  result: Type.Object({ restarted_at: Type.String() }),
});

export const IN_PLACE_OBJECT_CALLS = [PutObject, DeleteObject, ObjectUsers, RestartWorkload] as const;
export type InPlaceObjectDriver = DriverMethods<typeof IN_PLACE_OBJECT_CALLS>;

// ---- commands in a workload's container (an optional interface) ---------------------------------
//
// A backup's pre and post commands (a database dump before the snapshot) run in a running container
// of a workload. The call is queued on the node that runs one (a task of the workload there, as the
// cluster's inspection says) and runs against that machine's runtime. A backend that can do it lists
// these calls among its own task kinds; the control plane refuses the commands on one that does not.

/** The most of a command's output kept (its end): what a run shows of it. */
export const EXEC_OUTPUT_BYTES = 64 * 1024;

export const ExecInWorkload = defineDriverCall({
  name: 'workload.exec',
  description: 'run a command in a running container of a workload on this machine (no shell unless the command is one), answering its exit code and the end of its output',
  lane: 'maintenance',
  minAgentVersion: BUNDLE_PLACEMENT_VERSION,
  method: 'execInWorkload',
  input: Type.Object({
    /** The runtime's workload names to look for a container of (an instance's one, a bundle's parts). */
    names: Type.Array(Name, { minItems: 1, maxItems: 100 }),
    command: Type.Array(Type.String({ maxLength: 8192 }), { minItems: 1, maxItems: 256 }),
    timeout_s: Type.Integer({ minimum: 1, maximum: 86_400 }),
  }),
  result: Type.Object({
    /** The command's exit code; null when it was still running at its timeout. */
    exit_code: Nullable(Type.Integer()),
    timed_out: Type.Boolean(),
    /** The end of its standard output and error, interleaved as written (at most EXEC_OUTPUT_BYTES). */
    output: Type.String(),
    /** Whether output before what is kept was dropped. */
    truncated: Type.Boolean(),
    /** The container it ran in (the runtime's id, short). */
    container: Type.String(),
    duration_seconds: Type.Number({ minimum: 0 }),
  }),
});

export const EXEC_CALLS = [ExecInWorkload] as const;
export type ExecDriver = DriverMethods<typeof EXEC_CALLS>;

// ---- the scan interface -------------------------------------------------------------------------

export const ScanUnmanaged = defineDriverCall({
  name: 'orchestrator.unmanaged-scan',
  description: 'everything running that hangar did not create',
  lane: 'reads',
  minAgentVersion: FIRST_AGENT_VERSION,
  method: 'scanUnmanaged',
  input: Type.Object({}),
  result: Type.Object({ resources: Type.Array(UnmanagedResource) }),
});

export const SCAN_CALLS = [ScanUnmanaged] as const;

/** Every backend-neutral driver call. */
export const ORCHESTRATOR_CALLS = [...WORKLOAD_CALLS, ...OBJECT_CALLS, ...SCAN_CALLS] as const;

export type WorkloadDriver = DriverMethods<typeof WORKLOAD_CALLS>;
export type ObjectDriver = DriverMethods<typeof OBJECT_CALLS>;
export type ScanDriver = DriverMethods<typeof SCAN_CALLS>;

/** Deploys, changes and inspects workloads on one orchestrator, from one of its control nodes. */
export type OrchestratorDriver = WorkloadDriver & ObjectDriver & ScanDriver & { readonly backend: string };
