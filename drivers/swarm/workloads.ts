import { HANGAR_LABELS, healthTimings, type HealthSpec, type RolloutSpec, type LogOptions, type ObjectRef, type PortSpec, type VolumeMount, type WorkloadSpec, type WorkloadState } from '../../core/orchestrator.js';
import { attempt, body, checkName, failure, isNotFound, SwarmDriverError, type Raw, type SwarmContext } from './client.js';
import { logLineCount, mergeLines, serviceLogLines } from './logs.js';
import { ensureNetwork, findObjectId, HANGAR_EDGE_NETWORK, nfsOptions, type ObjectKind } from './objects.js';
import { findService, listServices, REVISION_LABEL, stackServices, stateOf, statesOf } from './state.js';

const MB = 1024 * 1024;

/** What the control plane adds to a call about a swarm: its members' engine node ids and the swarm's policies. */
export interface SwarmCallContext {
  cluster_nodes?: Record<string, string>;
  settings?: Record<string, string | number | boolean>;
}

/** How this swarm publishes ports and resolves services (the `swarms:` settings). */
export interface SwarmPolicy {
  publishMode: 'ingress' | 'host';
  endpointMode: 'vip' | 'dnsrr';
}

export function policyOf(settings: SwarmCallContext['settings']): SwarmPolicy {
  return {
    publishMode: settings?.publish_mode === 'host' ? 'host' : 'ingress',
    endpointMode: settings?.endpoint_mode === 'dnsrr' ? 'dnsrr' : 'vip',
  };
}

function checkSpec(spec: WorkloadSpec): void {
  if (!spec || typeof spec !== 'object') throw new SwarmDriverError('deployWorkload needs a workload spec');
  checkName('service', spec.name);
  if (typeof spec.image !== 'string' || !spec.image.trim()) throw new SwarmDriverError(`service ${spec.name}: no image`);
  if (!Number.isInteger(spec.replicas) || spec.replicas < 0) throw new SwarmDriverError(`service ${spec.name}: replicas must be a whole number, 0 or more (got ${JSON.stringify(spec.replicas)})`);
}

export function portConfigs(ports: PortSpec[] | undefined, publishMode: 'ingress' | 'host' | undefined): Raw[] {
  return (ports ?? []).map((p) => ({ Protocol: p.protocol ?? 'tcp', TargetPort: p.target, PublishedPort: p.published, PublishMode: publishMode ?? 'ingress' }));
}

/** The engine's node id of a hangar node, from the swarm's members; refused when it is no member. */
function engineNode(nodeId: string, context: SwarmCallContext, what: string): string {
  const id = context.cluster_nodes?.[nodeId];
  if (!id) throw new SwarmDriverError(`${what}: node ${nodeId} is not a member of this swarm`);
  return id;
}

/**
 * A volume as the engine mounts it: an NFS share as a named volume of the local driver (staged on
 * each node beforehand; the options create it where it was not), a folder on one node as a bind
 * (which pins the workload to that node).
 */
function mountOf(mount: VolumeMount, service: string, context: SwarmCallContext): { mount: Raw; pin: string | null } {
  const readOnly = !!mount.read_only;
  if ('host_path' in mount.source) {
    const { node_id: nodeId, path } = mount.source.host_path;
    return { mount: { Type: 'bind', Source: path, Target: mount.target, ReadOnly: readOnly }, pin: engineNode(nodeId, context, `service ${service}: the folder ${path}`) };
  }
  const { name, server, path } = mount.source.nfs;
  checkName('volume', name);
  return {
    mount: { Type: 'volume', Source: name, Target: mount.target, ReadOnly: readOnly, VolumeOptions: { DriverConfig: { Name: 'local', Options: nfsOptions(server, path) } } },
    pin: null,
  };
}

async function objectRefs(ctx: SwarmContext, kind: ObjectKind, service: string, refs: ObjectRef[] | undefined): Promise<Raw[] | undefined> {
  if (!refs?.length) return undefined;
  return Promise.all(
    refs.map(async (ref) => {
      const id = await findObjectId(ctx, kind, ref.name);
      if (!id) throw new SwarmDriverError(`service ${service}: no ${kind} named ${ref.name} on this swarm`);
      const file = { Name: ref.target || ref.name, UID: '0', GID: '0', Mode: 0o444 };
      return kind === 'secret' ? { SecretID: id, SecretName: ref.name, File: file } : { ConfigID: id, ConfigName: ref.name, File: file };
    }),
  );
}

const NS = 1e9;
const quoted = (text: string) => `'${text.replace(/'/g, `'\\''`)}'`;

/**
 * A declared health check as Docker's: a command run as it is, an HTTP GET by wget (busybox) or
 * curl, a TCP connection by nc; the timings in nanoseconds.
 */
export function healthCheckOf(health: HealthSpec): Raw {
  const t = healthTimings(health);
  return { Test: healthTest(health), Interval: t.interval_s * NS, Timeout: t.timeout_s * NS, Retries: t.retries, StartPeriod: t.start_period_s * NS };
}

/** A declared rollout as the service's UpdateConfig and RollbackConfig (safe defaults: start-first, roll back on a failure). */
export function updateConfigOf(rollout: RolloutSpec): { UpdateConfig: Raw; RollbackConfig: Raw } {
  const order = rollout.order ?? 'start-first';
  return {
    UpdateConfig: {
      Parallelism: rollout.parallelism ?? 1,
      Delay: (rollout.delay_s ?? 0) * NS,
      Order: order,
      FailureAction: rollout.on_failure ?? 'rollback',
      Monitor: (rollout.monitor_s ?? 5) * NS,
      MaxFailureRatio: rollout.max_failure_ratio ?? 0,
    },
    RollbackConfig: { Parallelism: rollout.parallelism ?? 1, Order: order, FailureAction: 'pause', Monitor: (rollout.monitor_s ?? 5) * NS },
  };
}

/** What Docker runs for a health check (its `Test`, as a compose `healthcheck.test` too). */
export function healthTest(health: HealthSpec): string[] {
  if (health.command) return ['CMD', ...health.command];
  if (health.http) {
    const url = quoted(`http://127.0.0.1:${health.http.port}${health.http.path}`);
    return ['CMD-SHELL', `wget -q -O /dev/null ${url} || curl -fsS -o /dev/null ${url}`];
  }
  return ['CMD-SHELL', `nc -z 127.0.0.1 ${health.tcp!.port}`];
}

/** The label that carries a workload's routed domain (for operators reading `docker service inspect`). */
export const DOMAIN_LABEL = 'io.hangar.domain';

/**
 * The engine's service spec for a hangar workload: the intent translated into swarm terms
 * (limits, generic GPU resources, placement constraints on engine node ids, the edge network for
 * what the load balancer routes to, the swarm's publish and endpoint modes).
 */
export async function serviceSpecOf(ctx: SwarmContext, spec: WorkloadSpec, context: SwarmCallContext, policy: SwarmPolicy = policyOf(context.settings)): Promise<Raw> {
  const labels: Record<string, string> = {
    [HANGAR_LABELS.role]: spec.role,
    [HANGAR_LABELS.id]: spec.resource_id,
    ...(spec.exposure?.domain ? { [DOMAIN_LABEL]: spec.exposure.domain } : {}),
    ...(spec.labels ?? {}),
  };
  // On the service only (not its tasks): a new revision alone restarts no task.
  const serviceLabels = spec.revision ? { ...labels, [REVISION_LABEL]: String(spec.revision) } : labels;
  const container: Raw = { Image: spec.image, Labels: { ...labels } };
  if (spec.env) container.Env = Object.entries(spec.env).map(([k, v]) => `${k}=${v}`);
  if (spec.command?.length) container.Command = [...spec.command];
  if (spec.args?.length) container.Args = [...spec.args];
  if (spec.replica_hostnames) container.Hostname = '{{.Service.Name}}-{{.Task.Slot}}';
  if (spec.health) container.Healthcheck = healthCheckOf(spec.health);
  const mounts = (spec.volumes ?? []).map((m) => mountOf(m, spec.name, context));
  if (mounts.length) container.Mounts = mounts.map((m) => m.mount);
  const secrets = await objectRefs(ctx, 'secret', spec.name, spec.secrets);
  const configs = await objectRefs(ctx, 'config', spec.name, spec.configs);
  if (secrets) container.Secrets = secrets;
  if (configs) container.Configs = configs;

  const resources: Raw = {};
  const limits: Raw = {};
  if (spec.resources?.cpus) limits.NanoCPUs = Math.round(spec.resources.cpus * 1e9);
  if (spec.resources?.memory_mb) limits.MemoryBytes = Math.round(spec.resources.memory_mb * MB);
  if (Object.keys(limits).length) resources.Limits = limits;
  if (spec.resources?.gpus) resources.Reservations = { GenericResources: [{ DiscreteResourceSpec: { Kind: 'gpu', Value: spec.resources.gpus } }] };

  const placement: Raw = {};
  const pins = new Set([...(spec.placement?.node_ids ?? []).map((n) => engineNode(n, context, `service ${spec.name}`)), ...mounts.flatMap((m) => (m.pin ? [m.pin] : []))]);
  if (pins.size > 1) throw new SwarmDriverError(`service ${spec.name}: it would have to run on ${pins.size} nodes at once (placement and local folders); a swarm service is placed on one node or on any`);
  if (pins.size) placement.Constraints = [`node.id == ${[...pins][0]}`];
  if (spec.platform && (spec.platform.os || spec.platform.architecture)) {
    placement.Platforms = [{ ...(spec.platform.os ? { OS: spec.platform.os } : {}), ...(spec.platform.architecture ? { Architecture: spec.platform.architecture } : {}) }];
  }

  return {
    Name: spec.name,
    Labels: serviceLabels,
    TaskTemplate: {
      ContainerSpec: container,
      Resources: resources,
      RestartPolicy: { Condition: 'on-failure', Delay: 5e9, MaxAttempts: 0 },
      Placement: placement,
      ...(spec.exposure?.routed ? { Networks: [{ Target: HANGAR_EDGE_NETWORK }] } : {}),
    },
    Mode: { Replicated: { Replicas: spec.replicas } },
    // Without a declared rollout, stop-first: host-mode ports of the old and the new task would collide with start-first.
    ...(spec.rollout
      ? updateConfigOf(spec.rollout)
      : { UpdateConfig: { Parallelism: 1, Delay: 0, Order: 'stop-first', FailureAction: 'pause', Monitor: 5e9, MaxFailureRatio: 0 }, RollbackConfig: { Parallelism: 1, Order: 'stop-first', FailureAction: 'pause' } }),
    EndpointSpec: { Mode: policy.endpointMode, Ports: portConfigs(spec.exposure?.ports, policy.publishMode) },
  };
}

/** Updates a service to `spec` at the version just read (the engine refuses a stale version). */
async function updateService(ctx: SwarmContext, existing: Raw, spec: Raw, what: string): Promise<void> {
  await attempt(what, () => ctx.docker.getService(existing.ID).update(body(spec, { version: existing.Version?.Index })));
}

export async function deployWorkload(ctx: SwarmContext, spec: WorkloadSpec, context: SwarmCallContext, policy?: SwarmPolicy): Promise<WorkloadState> {
  checkSpec(spec);
  // What the load balancer routes to shares its network: made sure of first.
  if (spec.exposure?.routed) await ensureNetwork(ctx, HANGAR_EDGE_NETWORK);
  const serviceSpec = await serviceSpecOf(ctx, spec, context, policy);
  const existing = await findService(ctx, spec.name);
  if (existing) {
    await updateService(ctx, existing, serviceSpec, `updating service ${spec.name}`);
  } else {
    await attempt(`creating service ${spec.name}`, () => ctx.docker.createService(body(serviceSpec)));
  }
  const state = await stateOf(ctx, spec.name);
  if (!state) throw new SwarmDriverError(`service ${spec.name} disappeared right after it was deployed`);
  return state;
}

export async function removeWorkload(ctx: SwarmContext, name: string): Promise<{ removed: boolean }> {
  const existing = await findService(ctx, name);
  if (!existing) return { removed: false };
  try {
    await ctx.docker.getService(existing.ID).remove();
    return { removed: true };
  } catch (err) {
    if (isNotFound(err)) return { removed: false };
    throw failure(`removing service ${name}`, err);
  }
}

export async function scaleWorkload(ctx: SwarmContext, name: string, replicas: number): Promise<WorkloadState> {
  if (!Number.isInteger(replicas) || replicas < 0) throw new SwarmDriverError(`scaling service ${name}: replicas must be a whole number, 0 or more (got ${JSON.stringify(replicas)})`);
  const existing = await findService(ctx, name);
  if (!existing) throw new SwarmDriverError(`scaling service ${name}: no such service`, 404);
  if (!existing.Spec?.Mode?.Replicated) throw new SwarmDriverError(`scaling service ${name}: it is a global service, not a replicated one`);
  const spec = { ...existing.Spec, Mode: { ...existing.Spec.Mode, Replicated: { ...existing.Spec.Mode.Replicated, Replicas: replicas } } };
  await updateService(ctx, existing, spec, `scaling service ${name}`);
  const state = await stateOf(ctx, name);
  if (!state) throw new SwarmDriverError(`scaling service ${name}: it disappeared`, 404);
  return state;
}

export async function workloadLogs(ctx: SwarmContext, name: string, options: LogOptions): Promise<{ lines: string[] }> {
  const existing = await findService(ctx, name);
  if (!existing) throw new SwarmDriverError(`reading the logs of service ${name}: no such service`, 404);
  const lines = await serviceLogLines(ctx, existing.ID, `service ${name}`, options);
  return { lines: mergeLines([{ prefix: '', lines }], logLineCount(options)) };
}

export async function inspectWorkloads(ctx: SwarmContext, filter: { names?: string[]; stacks?: string[] }): Promise<{ workloads: WorkloadState[] }> {
  const names = filter?.names;
  const stacks = filter?.stacks;
  const services = new Map<string, Raw>();
  if (!names && !stacks) {
    for (const service of await listServices(ctx)) services.set(service.ID, service);
  }
  for (const name of names ?? []) {
    const service = await findService(ctx, name);
    if (service) services.set(service.ID, service);
  }
  for (const stack of stacks ?? []) {
    for (const service of await stackServices(ctx, stack)) services.set(service.ID, service);
  }
  return { workloads: await statesOf(ctx, [...services.values()]) };
}
