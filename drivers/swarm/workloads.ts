import { HANGAR_LABELS, type LogOptions, type MountSpec, type ObjectRef, type PortSpec, type WorkloadSpec, type WorkloadState } from '../../core/orchestrator.js';
import { attempt, body, checkName, failure, isNotFound, SwarmDriverError, type Raw, type SwarmContext } from './client.js';
import { logLineCount, mergeLines, serviceLogLines } from './logs.js';
import { findObjectId, type ObjectKind } from './objects.js';
import { findService, listServices, stackServices, stateOf, statesOf } from './state.js';

const MB = 1024 * 1024;

function checkSpec(spec: WorkloadSpec): void {
  if (!spec || typeof spec !== 'object') throw new SwarmDriverError('deployWorkload needs a workload spec');
  checkName('service', spec.name);
  if (typeof spec.image !== 'string' || !spec.image.trim()) throw new SwarmDriverError(`service ${spec.name}: no image`);
  if (!Number.isInteger(spec.replicas) || spec.replicas < 0) throw new SwarmDriverError(`service ${spec.name}: replicas must be a whole number, 0 or more (got ${JSON.stringify(spec.replicas)})`);
}

export function portConfigs(ports: PortSpec[] | undefined, publishMode: 'ingress' | 'host' | undefined): Raw[] {
  return (ports ?? []).map((p) => ({ Protocol: p.protocol ?? 'tcp', TargetPort: p.target, PublishedPort: p.published, PublishMode: publishMode ?? 'ingress' }));
}

function mountOf(mount: MountSpec): Raw {
  if (mount.type === 'bind') return { Type: 'bind', Source: mount.source, Target: mount.target, ReadOnly: !!mount.readOnly };
  if (mount.type !== 'volume') throw new SwarmDriverError(`unknown mount type ${JSON.stringify((mount as { type?: unknown }).type)}: volume or bind`);
  const volumeOptions: Raw = {};
  if (mount.driverOptions && Object.keys(mount.driverOptions).length) volumeOptions.DriverConfig = { Name: 'local', Options: { ...mount.driverOptions } };
  if (mount.labels && Object.keys(mount.labels).length) volumeOptions.Labels = { ...mount.labels };
  return { Type: 'volume', Source: mount.source, Target: mount.target, ReadOnly: !!mount.readOnly, ...(Object.keys(volumeOptions).length ? { VolumeOptions: volumeOptions } : {}) };
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

/** The engine's service spec for a hangar workload. */
export async function serviceSpecOf(ctx: SwarmContext, spec: WorkloadSpec): Promise<Raw> {
  const labels: Record<string, string> = { [HANGAR_LABELS.role]: spec.role, [HANGAR_LABELS.id]: spec.resourceId, ...(spec.labels ?? {}) };
  const container: Raw = { Image: spec.image, Labels: { ...labels } };
  if (spec.env) container.Env = Object.entries(spec.env).map(([k, v]) => `${k}=${v}`);
  if (spec.command?.length) container.Command = [...spec.command];
  if (spec.args?.length) container.Args = [...spec.args];
  if (spec.hostname) container.Hostname = spec.hostname;
  if (spec.mounts?.length) container.Mounts = spec.mounts.map(mountOf);
  const secrets = await objectRefs(ctx, 'secret', spec.name, spec.secrets);
  const configs = await objectRefs(ctx, 'config', spec.name, spec.configs);
  if (secrets) container.Secrets = secrets;
  if (configs) container.Configs = configs;

  const resources: Raw = {};
  const limits: Raw = {};
  if (spec.limits?.cpus) limits.NanoCPUs = Math.round(spec.limits.cpus * 1e9);
  if (spec.limits?.memoryMb) limits.MemoryBytes = Math.round(spec.limits.memoryMb * MB);
  if (Object.keys(limits).length) resources.Limits = limits;
  const generic = Object.entries(spec.reservations ?? {}).map(([Kind, Value]) => ({ DiscreteResourceSpec: { Kind, Value } }));
  if (generic.length) resources.Reservations = { GenericResources: generic };

  const placement: Raw = {};
  if (spec.constraints?.length) placement.Constraints = [...spec.constraints];
  if (spec.platform && (spec.platform.os || spec.platform.architecture)) {
    placement.Platforms = [{ ...(spec.platform.os ? { OS: spec.platform.os } : {}), ...(spec.platform.architecture ? { Architecture: spec.platform.architecture } : {}) }];
  }

  return {
    Name: spec.name,
    Labels: labels,
    TaskTemplate: {
      ContainerSpec: container,
      Resources: resources,
      RestartPolicy: { Condition: 'on-failure', Delay: 5e9, MaxAttempts: 0 },
      Placement: placement,
      ...(spec.networks?.length ? { Networks: spec.networks.map((Target) => ({ Target })) } : {}),
    },
    Mode: { Replicated: { Replicas: spec.replicas } },
    // stop-first: host-mode ports of the old and the new task would collide with start-first.
    UpdateConfig: { Parallelism: 1, Delay: 0, Order: 'stop-first', FailureAction: 'pause', Monitor: 5e9, MaxFailureRatio: 0 },
    RollbackConfig: { Parallelism: 1, Order: 'stop-first', FailureAction: 'pause' },
    EndpointSpec: { Mode: spec.endpointMode ?? 'vip', Ports: portConfigs(spec.ports, spec.publishMode) },
  };
}

/** Updates a service to `spec` at the version just read (the engine refuses a stale version). */
async function updateService(ctx: SwarmContext, existing: Raw, spec: Raw, what: string): Promise<void> {
  await attempt(what, () => ctx.docker.getService(existing.ID).update(body(spec, { version: existing.Version?.Index })));
}

export async function deployWorkload(ctx: SwarmContext, spec: WorkloadSpec): Promise<WorkloadState> {
  checkSpec(spec);
  const serviceSpec = await serviceSpecOf(ctx, spec);
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
