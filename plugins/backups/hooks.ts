import { Type, type Static } from '@sinclair/typebox';
import type { Principal } from '../../core/auth/index.js';
import { permitted, userGrantsOf, type Permission } from '../../core/auth/permissions.js';
import { ScopeGate, ScopeResolvers, type RouteScope } from '../../core/auth/scope.js';
import { execSupported, placeExec, type ExecPlacement } from '../../core/clusters/exec.js';
import { badRequest, conflict, forbidden, notFound } from '../../core/errors.js';
import type { Services } from '../../core/plugin.js';
import type { Task } from '../../core/tasks/queue.js';

/** How long a pre or post command may run unless its request says otherwise. */
const DEFAULT_TIMEOUT_S = 600;

export const Hook = Type.Object(
  {
    workload: Type.String({ minLength: 1, maxLength: 100, description: 'the compute instance or service (id or name), in the volume’s project, in a running container of which the command runs' }),
    // At most 64 words of 4 KiB: pre and post together stay far under the API's 1 MiB body limit.
    command: Type.Array(Type.String({ maxLength: 4096 }), {
      minItems: 1,
      maxItems: 64,
      description: 'the program and its arguments, run without a shell (["sh", "-c", "pg_dump … > /data/dump.sql"] for one); shown on the run, so put no secret here (the container’s own environment has them)',
    }),
    timeout_s: Type.Optional(Type.Integer({ minimum: 1, maximum: 86_400, description: `how long it may run (default ${DEFAULT_TIMEOUT_S}); then it is killed and counts as failed` })),
  },
  { additionalProperties: false },
);
export type HookInput = Static<typeof Hook>;

/** A pre or post command as a schedule keeps it: its workload by id (and name, for messages). */
export interface HookSpec {
  workload: { type: string; id: string; name: string };
  command: string[];
  timeout_s: number;
}

/** A pre or post command as a run keeps it: what was asked and what happened. */
export interface HookRun extends HookSpec {
  /** `pending` (not started), `running`, `succeeded` (exit 0), `failed`, `skipped`. */
  status: 'pending' | 'running' | 'succeeded' | 'failed';
  node_id: string | null;
  container: string | null;
  exit_code: number | null;
  timed_out: boolean;
  /** The end of its standard output and error (at most 64 KiB), hangar's secrets of the target blanked out. */
  output: string | null;
  truncated: boolean;
  /** Why it did not run, or did not end with 0. */
  error: string | null;
  started_at: string | null;
  finished_at: string | null;
  /** A post command: the status the run ends with once it has run (the backup's own outcome). */
  then?: 'succeeded' | 'failed';
}

const HookRunView = Type.Object({
  workload: Type.Object({ type: Type.String(), id: Type.String(), name: Type.String() }),
  command: Type.Array(Type.String()),
  timeout_s: Type.Integer(),
  status: Type.String({ description: 'pending, running, succeeded (exit code 0) or failed' }),
  node_id: Type.Union([Type.String(), Type.Null()], { description: 'the node whose container ran it' }),
  container: Type.Union([Type.String(), Type.Null()]),
  exit_code: Type.Union([Type.Integer(), Type.Null()]),
  timed_out: Type.Boolean(),
  output: Type.Union([Type.String(), Type.Null()], { description: 'the end of its output (standard output and error, at most 64 KiB)' }),
  truncated: Type.Boolean({ description: 'output before what is shown was dropped' }),
  error: Type.Union([Type.String(), Type.Null()]),
  started_at: Type.Union([Type.String(), Type.Null()]),
  finished_at: Type.Union([Type.String(), Type.Null()]),
});
/** What a run shows of its pre or post command (null: it had none). */
export const HookRunField = Type.Union([HookRunView, Type.Null()]);
/** What a schedule shows of its pre or post command. */
export const HookSpecField = Type.Union([Type.Object({ workload: HookRunView.properties.workload, command: Type.Array(Type.String()), timeout_s: Type.Integer() }), Type.Null()]);

export const hookRunView = (h: HookRun | null | undefined) => (h ? { ...h, then: undefined } : null);
export const hookSpecView = (h: HookSpec | null | undefined) => (h ? { workload: h.workload, command: h.command, timeout_s: h.timeout_s } : null);

/** A command not started yet. */
export const pendingHook = (spec: HookSpec): HookRun => ({
  ...spec,
  status: 'pending',
  node_id: null,
  container: null,
  exit_code: null,
  timed_out: false,
  output: null,
  truncated: false,
  error: null,
  started_at: null,
  finished_at: null,
});

/**
 * Pre and post commands of backups (`pre`/`post` on POST /v1/volumes/{id}/backups and on schedules):
 * resolving the workload they name (in the request's project, which the caller may deploy to), where
 * to run them (a node running a container of it), and their outcome from their task.
 */
export function backupHooks(services: Services) {
  const clusters = services.clusters;
  let grants: ReturnType<typeof userGrantsOf> | undefined;
  const gate = new ScopeGate(services.provided, () => (grants ??= userGrantsOf(services.routeTable().map((r) => r.route))));

  /**
   * The workload a command names, checked as a request naming it would be (core/auth/scope.ts): in
   * the project of the resource the request acts on (`anchor`: the volume, or a schedule's target),
   * which the caller may deploy to (`instances:deploy`, `services:deploy`) — another project's is a
   * 404 to a member and a 400 to an installation admin, as everywhere. Unknown: 404. On a backend
   * that runs no commands in containers (Kubernetes for now): 409.
   */
  async function resolve(field: 'pre' | 'post', input: HookInput, anchor: { kind: string; id: string; permission: Permission }, principal: Principal | null): Promise<HookSpec> {
    const workload = await clusters.workloads.findRuntime(input.workload);
    if (!workload) throw notFound(`No workload ${input.workload} (body.${field}.workload: a compute instance or a service, by id or name)`);
    const deploy = `${workload.type}s:deploy` as Permission;
    // The command runs in the workload's container: the caller must be able to deploy the workload
    // itself, not only to back the volume up (a key limited to backups runs no command anywhere).
    if (principal && !gate.active && !permitted(principal, deploy, (grants ??= userGrantsOf(services.routeTable().map((r) => r.route))))) {
      throw forbidden(`Insufficient permissions: body.${field} runs a command in ${workload.type} ${workload.name}, which needs ${deploy}`);
    }
    if (gate.active && principal) {
      if (!services.provided.contributions(ScopeResolvers).some((r) => r.kind === workload.type)) throw conflict(`${workload.type} ${workload.name} belongs to no project hangar can tell: it cannot run a backup’s commands`);
      const scope: RouteScope = {
        of: [
          { kind: anchor.kind, from: 'body.anchor' },
          { kind: workload.type, from: `body.${field}.workload`, noun: workload.type, permission: deploy },
        ],
      };
      const access = await gate.access(principal, anchor.permission);
      const request = { params: {}, body: { anchor: anchor.id, [field]: { workload: workload.id } } };
      await gate.check(access, scope, anchor.permission, request, 'body', new Map());
      // Access worked out for the backup's permission can be everywhere (an admin's key limited to
      // backups): the workload is checked again with what the caller may deploy.
      const workloadOnly: RouteScope = { of: [{ kind: workload.type, from: `body.${field}.workload`, noun: workload.type, permission: deploy }] };
      await gate.check(await gate.access(principal, deploy), workloadOnly, deploy, request, 'body', new Map());
    }
    const cluster = await clusters.require(workload.cluster_id);
    if (!execSupported(clusters, cluster.backend)) {
      throw conflict(`${workload.type} ${workload.name} runs on ${clusters.nounOf(cluster)} ${cluster.name}, where hangar does not run commands in containers yet (pre and post commands run on swarms only)`);
    }
    return { workload: { type: workload.type, id: workload.id, name: workload.name }, command: input.command, timeout_s: input.timeout_s ?? DEFAULT_TIMEOUT_S };
  }

  /** Both of a request's commands; refused with consistency `stop` (the workload they run in may be one it stops). */
  async function resolveBoth(body: { pre?: HookInput; post?: HookInput; consistency?: string }, anchor: { kind: string; id: string; permission: Permission }, principal: Principal | null) {
    const field = body.pre ? 'pre' : 'post';
    if ((body.pre || body.post) && body.consistency === 'stop') {
      throw badRequest(`Validation failed: body.${field}: pre and post commands are not run with consistency stop (the workloads using the volume are stopped then); back it up live with them, or stop without them`, [
        { path: `body.${field}`, message: 'not with consistency stop' },
      ]);
    }
    return {
      pre: body.pre ? await resolve('pre', body.pre, anchor, principal) : null,
      post: body.post ? await resolve('post', body.post, anchor, principal) : null,
    };
  }

  /** Where a command runs now: a node running a container of its workload (409 when the workload is gone or runs nothing). */
  async function place(spec: HookSpec): Promise<ExecPlacement> {
    const workload = await clusters.workloads.findRuntime(spec.workload.id);
    if (!workload) throw conflict(`${spec.workload.type} ${spec.workload.name} (${spec.workload.id}) is gone`);
    return placeExec(clusters, workload, spec.command, spec.timeout_s);
  }

  /**
   * A command's outcome from its task: succeeded when it exited with 0 in time. The values of
   * `secrets` (the target's keys, which the command never gets) are blanked out of its output.
   */
  function outcome(hook: HookRun, task: Task | null, secrets: string[], at: string): HookRun {
    const done = { ...hook, finished_at: at };
    if (!task) return { ...done, status: 'failed', error: 'its task is gone: the agent’s outcome was never recorded' };
    if (task.status === 'failed') return { ...done, status: 'failed', error: task.error ?? 'the agent reported a failure' };
    const result = task.result as { exit_code: number | null; timed_out: boolean; output: string; truncated: boolean; container: string };
    let output = result.output;
    for (const secret of secrets.filter((s) => s.length >= 8)) output = output.split(secret).join('[redacted]');
    const ok = result.exit_code === 0 && !result.timed_out;
    const error = ok ? null : result.timed_out ? `it was still running after ${hook.timeout_s} s and was killed` : `it exited with ${result.exit_code}`;
    return { ...done, status: ok ? 'succeeded' : 'failed', exit_code: result.exit_code, timed_out: result.timed_out, output, truncated: result.truncated, container: result.container, error };
  }

  return { resolveBoth, place, outcome };
}

/** The last line of a command's output, for the run's error (null: it wrote nothing). */
export function lastLine(hook: HookRun): string | null {
  const line = hook.output?.trimEnd().split('\n').pop()?.trim();
  return line ? line.slice(0, 300) : null;
}
