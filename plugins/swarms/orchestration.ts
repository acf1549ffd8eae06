import { Type } from '@sinclair/typebox';
import { HttpError } from '../../core/errors.js';
import type { BackgroundJobs } from '../../core/jobs.js';
import type { OrchestratorCall, OrchestratorMethod, WorkloadState } from '../../core/orchestrator.js';
import type { Services } from '../../core/plugin.js';
import { TASK_KINDS } from '../../core/tasks/kinds.js';
import { TASKS } from '../../core/tasks/migrations.js';
import { taskView } from '../../core/tasks/queue.js';
import type { MemberStore, SwarmRecord, SwarmStore } from './store.js';

export const SwarmsConfigSchema = Type.Object(
  {
    call_timeout_seconds: Type.Integer({ minimum: 5, default: 180, description: 'how long hangar waits for an agent to run one orchestrator call' }),
    observe_interval_seconds: Type.Integer({ minimum: 1, default: 15, description: 'how often each swarm manager is asked for the state of hangar’s workloads' }),
    advertise: Type.Union([Type.Literal('overlay'), Type.Literal('address')], {
      default: 'overlay',
      description: 'what swarm nodes advertise: their WireGuard overlay address when they have one, or their node address',
    }),
    publish_mode: Type.Union([Type.Literal('ingress'), Type.Literal('host')], { default: 'ingress', description: 'how workload ports are published (host: on the node running the task)' }),
    endpoint_mode: Type.Union([Type.Literal('vip'), Type.Literal('dnsrr')], { default: 'vip', description: 'service discovery: one virtual IP, or DNS round robin over the tasks' }),
    local_domain: Type.String({ default: 'hangar.local', pattern: '^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$', description: 'default domains are <name>.<swarm>.<local_domain>' }),
    drain_wait_seconds: Type.Integer({ minimum: 0, default: 10, description: 'how long a leaving worker is drained before it leaves' }),
  },
  { additionalProperties: false, default: {} },
);

export interface SwarmsConfig {
  call_timeout_seconds: number;
  observe_interval_seconds: number;
  advertise: 'overlay' | 'address';
  publish_mode: 'ingress' | 'host';
  endpoint_mode: 'vip' | 'dnsrr';
  local_domain: string;
  drain_wait_seconds: number;
}

/** A kind of workload other plugins run on swarms: named in 409s, removed by forced deletes and cleanup. */
export interface WorkloadKind {
  /** The resource type as cleanup names it: instance, service, s3, loadbalancer. */
  type: string;
  inSwarm(swarmId: string): Promise<Array<{ id: string; name: string }>>;
  /** Removes whatever exists of the resource in the runtime, then its record; false when unknown. */
  forceRemove(id: string): Promise<boolean>;
}

/** An orchestrator call the agent could not carry out; the message is the agent's reason. */
export class OrchestratorError extends Error {
  constructor(
    readonly method: string,
    reason: string,
  ) {
    super(reason);
  }
}

export interface ObservedSwarm {
  swarm: SwarmRecord;
  workloads: WorkloadState[];
  /** Runtime node id → hangar node id. */
  nodeIds: Map<string, string>;
}

export interface SwarmsApi {
  swarms: SwarmStore;
  members: MemberStore;
  settings: SwarmsConfig;
  jobs: BackgroundJobs;
  /** Runs any task on a node's agent and waits for its outcome (host tasks such as volume preparation); throws OrchestratorError. */
  runTask<T = unknown>(nodeId: string, kind: string, payload: Record<string, unknown>, options?: { timeoutMs?: number; subject?: string }): Promise<T>;
  /** Runs a driver method on a node's agent and waits for the result; throws OrchestratorError. */
  call<T = unknown>(nodeId: string, method: OrchestratorMethod, args: unknown[], options?: { timeoutMs?: number; subject?: string }): Promise<T>;
  /** The same, on the swarm's manager. */
  onManager<T = unknown>(swarm: SwarmRecord, method: OrchestratorMethod, args: unknown[]): Promise<T>;
  registerWorkloads(kind: WorkloadKind): void;
  workloadKind(type: string): WorkloadKind | undefined;
  /** Everything of every kind running on a swarm. */
  workloadsIn(swarmId: string): Promise<Array<{ type: string; id: string; name: string }>>;
  nodeIdsByRuntime(swarmId: string): Promise<Map<string, string>>;
  /** The address a node is reached at by other members: its overlay address when it has one and `advertise` is `overlay`. */
  addressOf(node: { overlay_ip: string | null; wg_public_key: string | null; ip_address: string | null }): string | null;
  /**
   * Queues a log read on the swarm's manager (`workloadLogs` of a service or `bundleLogs` of a
   * stack) as a read-once task about `subject`; the task view for a 202.
   */
  queueLogs(swarm: SwarmRecord, method: 'workloadLogs' | 'bundleLogs', target: string, options: { lines?: number; since?: string }, subject: string): Promise<ReturnType<typeof taskView>>;
  /** A log read's state, and its lines once done (read once: a second read is a 404). */
  readLogs(taskId: string, subject: string): Promise<Record<string, unknown>>;
  /** Adds fields to the swarm view (the gateway adds `load_balancer`). */
  extendView(fn: (swarm: SwarmRecord) => Promise<Record<string, unknown>>): void;
  /** Removes a swarm whatever its state: forced removal of its workloads, members leave where they can, the record goes. */
  forceRemove(id: string): Promise<boolean>;
  /** Subscribes to each swarm observation (the state of every workload on it). */
  onObserved(listener: (observed: ObservedSwarm) => Promise<void>): void;
  /** Runs before a swarm's record is removed, for records that go with it (secrets and configs). */
  beforeRemoved(hook: (swarmId: string) => Promise<void>): void;
}

export function swarmsOf(services: Services): SwarmsApi {
  const api = services.provided.get('swarms') as SwarmsApi | undefined;
  if (!api) throw new Error('the swarms plugin must be loaded (and listed before this plugin)');
  return api;
}

/** An orchestrator failure as an HTTP answer: the runtime refused what was asked (409), with its reason. */
export function asHttpError(err: unknown, what: string): Error {
  if (err instanceof OrchestratorError) return new HttpError(409, `${what} failed: ${err.message}`);
  return err as Error;
}

/**
 * Runs one task on a node's agent and waits for its outcome; throws OrchestratorError with the
 * agent's reason, or when no result came in time.
 */
export function taskRunner(services: Services, settings: SwarmsConfig) {
  return async function runTask<T>(nodeId: string, kind: string, payload: Record<string, unknown>, options: { timeoutMs?: number; subject?: string; what?: string } = {}): Promise<T> {
    const task = await services.tasks.enqueue({ nodeId, kind, payload, subject: options.subject });
    const timeoutMs = options.timeoutMs ?? settings.call_timeout_seconds * 1000;
    const done = await services.tasks.settle(task.id, { timeoutMs, signal: services.shutdown });
    // The payload may hold secret values; nothing needs the task once its outcome is known.
    // A call nobody waits for any more must not run later either: a still-pending one is withdrawn.
    if (done.status !== 'leased') await services.db.knex(TASKS).where({ id: task.id }).delete();
    const what = options.what ?? kind;
    if (done.status === 'completed') return done.result as T;
    if (done.status === 'failed') throw new OrchestratorError(what, done.error ?? 'the agent reported a failure');
    throw new OrchestratorError(what, `no result from the agent on node ${nodeId} within ${Math.round(timeoutMs / 1000)} s (is it online?)`);
  };
}

/** Orchestrator calls over {@link taskRunner}: one `orchestrator.call` task per driver method. */
export function orchestratorCalls(runTask: ReturnType<typeof taskRunner>) {
  return <T>(nodeId: string, method: OrchestratorMethod, args: unknown[], options: { timeoutMs?: number; subject?: string } = {}): Promise<T> => {
    const payload: OrchestratorCall = { backend: 'swarm', method, args };
    return runTask<T>(nodeId, TASK_KINDS.orchestratorCall, payload as never, { ...options, what: method });
  };
}

/** Log reads of workloads and stacks: read-once tasks on the manager, like a node's log fetch. */
export function logReads(services: Services) {
  const kind = TASK_KINDS.orchestratorCall;
  return {
    async queueLogs(swarm: SwarmRecord, method: 'workloadLogs' | 'bundleLogs', target: string, options: { lines?: number; since?: string }, subject: string) {
      if (!swarm.manager_node_id) throw new HttpError(409, `Swarm ${swarm.name} has no manager`);
      const args = [target, options.since ? { since: new Date(options.since).toISOString() } : { lines: options.lines ?? 100 }];
      const payload: OrchestratorCall = { backend: 'swarm', method, args };
      return taskView(await services.tasks.enqueue({ nodeId: swarm.manager_node_id, kind, payload: payload as never, readOnce: true, subject }));
    },
    async readLogs(taskId: string, subject: string) {
      const view = taskView(await services.tasks.take(taskId, { subject, kind }));
      const { result, ...rest } = view as typeof view & { result?: { lines?: string[] } };
      return { ...rest, ...(result ? { lines: result.lines ?? [] } : {}) };
    },
  };
}
