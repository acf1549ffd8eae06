import type { PortSpec, WorkloadState, WorkloadTask } from '../../core/orchestrator.js';
import { attempt, isNotFound, failure, segment, type Raw, type SwarmContext } from './client.js';

export const STACK_LABEL = 'com.docker.stack.namespace';
/** The service label holding hangar's revision of its spec: after the engine rolls an update back, the spec it returned to names it. */
export const REVISION_LABEL = 'io.hangar.revision';

/** Desired states of a task that is meant to run (or is being placed). */
const LIVE_DESIRED = new Set(['running', 'ready', 'accepted', 'pending', 'assigned', 'new']);
/** How many finished or failed tasks (most recent first) a state keeps, for their errors. */
const PAST_TASKS = 5;

/** A service by its exact name (a name that only matches some other service's id prefix is not it), or null. */
export async function findService(ctx: SwarmContext, name: string): Promise<Raw | null> {
  try {
    const service = (await ctx.docker.getService(segment(name)).inspect()) as Raw;
    return service?.Spec?.Name === name ? service : null;
  } catch (err) {
    if (isNotFound(err)) return null;
    throw failure(`inspecting service ${name}`, err);
  }
}

export async function listServices(ctx: SwarmContext, filters?: Record<string, string[]>): Promise<Raw[]> {
  return (await attempt('listing services', () => ctx.docker.listServices(filters ? { filters } : {}))) as Raw[];
}

/** The engine filter for what belongs to a stack (services, networks, secrets, configs, containers). */
export const stackFilter = (stack: string) => ({ label: [`${STACK_LABEL}=${stack}`] });

export function stackServices(ctx: SwarmContext, stack: string): Promise<Raw[]> {
  return listServices(ctx, stackFilter(stack));
}

function portsOf(service: Raw): PortSpec[] {
  const ports: Raw[] = service.Endpoint?.Ports ?? service.Spec?.EndpointSpec?.Ports ?? [];
  return ports.map((p) => ({ published: p.PublishedPort ?? 0, target: p.TargetPort ?? 0, protocol: p.Protocol === 'udp' ? 'udp' : 'tcp' }));
}

function taskOf(task: Raw): WorkloadTask {
  return {
    runtime_node_id: task.NodeID || null,
    state: task.Status?.State ?? 'unknown',
    desired_state: task.DesiredState ?? 'unknown',
    message: task.Status?.Message || null,
    error: task.Status?.Err || null,
    updated_at: task.UpdatedAt ?? task.Status?.Timestamp ?? null,
  };
}

const time = (task: Raw) => Date.parse(task.UpdatedAt ?? task.Status?.Timestamp ?? '') || 0;

/**
 * How long after a rollout's end a change of the service is still that rollout's: the engine stamps
 * the service again as it records a rollback's end, a few milliseconds after CompletedAt.
 */
const ROLLOUT_END_STAMP_MS = 1000;

/** A value as JSON with its keys in order; an empty one (none, [], {}, '') as null. */
function canonical(value: unknown): string {
  if (value === undefined || value === null || value === '' || (Array.isArray(value) && !value.length)) return 'null';
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`;
  if (typeof value === 'object') {
    const entries = Object.entries(value as Raw).filter(([, v]) => canonical(v) !== 'null');
    return entries.length ? `{${entries.sort(([a], [b]) => a.localeCompare(b)).map(([k, v]) => `${JSON.stringify(k)}:${canonical(v)}`).join(',')}}` : 'null';
  }
  return JSON.stringify(value);
}

/** ContainerSpec fields the engine may give a task with a default of its own when the template has none. */
const ENGINE_DEFAULTS = new Set(['Isolation', 'Init']);

/**
 * Whether a task runs the container the service's task template asks for: every field either sets
 * is the same in both (a field the new template dropped — a command, a mount — still on the task is
 * an update not yet rolled out), except the defaults the engine fills in on the task alone. Empty
 * values equal absent ones.
 */
function runsTemplate(template: Raw | undefined, task: Raw | undefined): boolean {
  const wanted: Raw = template?.ContainerSpec ?? {};
  const running: Raw = task?.ContainerSpec ?? {};
  const fields = new Set([...Object.keys(wanted), ...Object.keys(running).filter((f) => !(ENGINE_DEFAULTS.has(f) && !(f in wanted)))]);
  return [...fields].every((field) => canonical(wanted[field]) === canonical(running[field]));
}

/**
 * The service's last rollout as the engine tells it, unless the service was changed since it ended
 * (an update of the same spec after a rollback leaves the engine's UpdateStatus as it was). A
 * change the engine has not started rolling out yet — its UpdateStatus still tells the rollout
 * before, or none, while tasks of the spec before still run — is `updating` already.
 */
export function rolloutOf(service: Raw, tasks: Raw[] = []): WorkloadState['rollout'] {
  const status = service.UpdateStatus;
  const revision = Number(service.Spec?.Labels?.[REVISION_LABEL]);
  const told = status?.State && !(status.CompletedAt && service.UpdatedAt && Date.parse(service.UpdatedAt) > Date.parse(status.CompletedAt) + ROLLOUT_END_STAMP_MS);
  if (!told) {
    const pending = tasks.some((t) => t.DesiredState === 'running' && t.Spec && !runsTemplate(service.Spec?.TaskTemplate, t.Spec));
    return pending ? { state: 'updating', message: null, ...(Number.isInteger(revision) && revision > 0 ? { revision } : {}) } : null;
  }
  const state = String(status.State);
  return {
    state,
    message: status.Message ? String(status.Message) : null,
    // What the spec names runs (or is being rolled out); a paused rollout runs a mix of two.
    ...(!state.endsWith('paused') && Number.isInteger(revision) && revision > 0 ? { revision } : {}),
  };
}

/** WorkloadState from a service's inspect answer and its tasks. */
export function toState(service: Raw, tasks: Raw[]): WorkloadState {
  const spec = service.Spec ?? {};
  const container = spec.TaskTemplate?.ContainerSpec ?? {};
  const limits = spec.TaskTemplate?.Resources?.Limits ?? {};
  const labels: Record<string, string> = { ...(spec.Labels ?? {}) };
  const sorted = [...tasks].sort((a, b) => time(b) - time(a));
  const live = sorted.filter((t) => LIVE_DESIRED.has(t.DesiredState));
  const past = sorted.filter((t) => !LIVE_DESIRED.has(t.DesiredState)).slice(0, PAST_TASKS);
  return {
    name: spec.Name,
    labels,
    image: container.Image ?? '',
    replicas: typeof spec.Mode?.Replicated?.Replicas === 'number' ? spec.Mode.Replicated.Replicas : spec.Mode?.Replicated ? 1 : null,
    running: tasks.filter((t) => t.Status?.State === 'running' && t.DesiredState === 'running').length,
    tasks: [...live, ...past].map(taskOf),
    ports: portsOf(service),
    limits: {
      cpus: typeof limits.NanoCPUs === 'number' && limits.NanoCPUs > 0 ? limits.NanoCPUs / 1e9 : null,
      memoryMb: typeof limits.MemoryBytes === 'number' && limits.MemoryBytes > 0 ? limits.MemoryBytes / (1024 * 1024) : null,
    },
    stack: labels[STACK_LABEL] ?? null,
    rollout: rolloutOf(service, tasks),
    // `docker stack deploy` names a stack's services <stack>_<key>.
    component: labels[STACK_LABEL] && String(spec.Name).startsWith(`${labels[STACK_LABEL]}_`) ? String(spec.Name).slice(labels[STACK_LABEL].length + 1) : null,
  };
}

/** The states of several services, with one task query for all of them. */
export async function statesOf(ctx: SwarmContext, services: Raw[]): Promise<WorkloadState[]> {
  if (services.length === 0) return [];
  const tasks = (await attempt('listing tasks', () => ctx.docker.listTasks({ filters: { service: services.map((s) => s.ID as string) } }))) as Raw[];
  const byService = new Map<string, Raw[]>();
  for (const task of tasks) {
    const list = byService.get(task.ServiceID) ?? [];
    list.push(task);
    byService.set(task.ServiceID, list);
  }
  return services.map((service) => toState(service, byService.get(service.ID) ?? []));
}

/** The current state of a service by name (null when it is gone). */
export async function stateOf(ctx: SwarmContext, name: string): Promise<WorkloadState | null> {
  const service = await findService(ctx, name);
  if (!service) return null;
  const [state] = await statesOf(ctx, [service]);
  return state ?? null;
}
