import { projectOfResource, ScopeResolvers, tableResolver, type RouteScope } from '../../core/auth/scope.js';
import { randomBytes } from 'node:crypto';
import type { Knex } from 'knex';
import { Type, type Static } from '@sinclair/typebox';
import path from 'node:path';
import { isUniqueViolation } from '../../core/db/repository.js';
import { notice } from '../../core/events.js';
import { badRequest, conflict, forbidden, HttpError, notFound } from '../../core/errors.js';
import { unlimitedAdmin } from '../../core/auth/permissions.js';
import type { Principal } from '../../core/auth/index.js';
import { NodeGrantHolders, requireNodeServes } from '../../core/clusters/projects.js';
import { Reply } from '../../core/http/reply.js';
import { IdParams, PageQuery, readRoutes } from '../../core/http/resources.js';
import { newId } from '../../core/ids.js';
import { nextCronRun, parseCron, shortestCronGap } from '../../core/cron.js';
import { definePlugin, type RouteDef, type Services, defineRoute } from '../../core/plugin.js';
import { BackupFolderCheck, Retention, VolumeBackup, VolumeRestore } from '../../core/tasks/backup-kinds.js';
import type { Task } from '../../core/tasks/queue.js';
import { TASKS } from '../../core/tasks/migrations.js';
import { NodesRef, nodesOf } from '../nodes/api.js';
import { defaultProjectOf, projectForNew } from '../projects/api.js';
import { TagsRef } from '../tags/api.js';
import { folderClash, foldersOverlap, NodeFolderHolders, VolumeRestorers, VolumesRef, volumesOf, VolumeUsersPoint, type VolumeRecord, type VolumeUser } from '../volumes/api.js';
import { newVolumeRestorer } from './new-volume.js';
import { BACKUP_RUNS, BACKUP_SCHEDULES, BACKUP_TARGETS, backupMigrations } from './migrations.js';
import { ProbeFailure, probeTarget } from './probe.js';
import { controlPlaneBackups, ControlPlaneBackupSettings, type ControlPlaneBackupConfig } from './control-plane.js';
import { localTargetRefusal, RunStore, ScheduleStore, TargetStore, type RunRecord, type ScheduleRecord, type TargetRecord } from './store.js';
import { BackupVerifyFailed, volumeRunTopic } from './api.js';
import { awaitsWorkloads, workloadStops, workloadsView } from './workloads.js';
import { backupHooks, Hook, HookRunField, hookRunView, HookSpecField, hookSpecView, lastLine, pendingHook, type HookRun, type HookSpec } from './hooks.js';
import { ExecInWorkload } from '../../core/orchestrator.js';

/** A write committed with a task (TaskQueue.enqueue's `within`). */
type Within = (trx: Knex.Transaction, taskId: string) => Promise<void>;

/** How to add restic to a node (also what its agent says if it is gone by the time a task runs). */
export const RESTIC_HINT = 'install Debian’s restic package on the machine (apt-get install restic); its agent reports it at the next heartbeat';

const TargetName = Type.String({ pattern: '^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}$', description: 'letters, digits, "_", "." and "-"; at most 63 characters; unique' });

const CreateTarget = Type.Object(
  {
    name: TargetName,
    kind: Type.Optional(
      Type.Union([Type.Literal('s3'), Type.Literal('local')], {
        default: 's3',
        description: 's3: an S3-compatible endpoint (endpoint, bucket, keys); local: a folder of a node (node_id, path) holding the repository, for the volumes of that node (docs/backups.md)',
      }),
    ),
    endpoint: Type.Optional(
      Type.String({
        pattern: '^https?://[A-Za-z0-9.:\\[\\]-]+(:[0-9]{1,5})?/?$',
        maxLength: 512,
        description: 'kind s3: the S3 API’s origin, http(s)://host[:port]; buckets are addressed by path',
      }),
    ),
    bucket: Type.Optional(Type.String({ pattern: '^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$', description: 'kind s3: an existing bucket' })),
    prefix: Type.Optional(
      Type.String({ pattern: '^[A-Za-z0-9!_.*()/-]*$', maxLength: 400, description: 'key prefix of the restic repository inside the bucket (default: the bucket’s root)' }),
    ),
    region: Type.Optional(Type.String({ pattern: '^[a-z0-9-]{1,64}$', description: 'default us-east-1' })),
    access_key_id: Type.Optional(Type.String({ minLength: 1, maxLength: 256, pattern: '^[\\x21-\\x7e]+$', description: 'kind s3' })),
    secret_access_key: Type.Optional(Type.String({ minLength: 1, maxLength: 1024, description: 'kind s3: stored encrypted, never answered' })),
    node_id: Type.Optional(Type.String({ minLength: 1, maxLength: 100, description: 'kind local: the node (id or name) whose folder holds the repository' })),
    path: Type.Optional(
      Type.String({ pattern: '^/', maxLength: 1024, description: 'kind local: an absolute folder on that node (made when missing)' }),
    ),
    project_id: Type.Optional(Type.String({ minLength: 1, maxLength: 100, description: 'the project it belongs to (id or name); default: your default project (with the projects plugin)' })),
  },
  { additionalProperties: false },
);

const Target = Type.Object({
  id: Type.String(),
  name: Type.String(),
  kind: Type.String({ description: 's3 or local' }),
  node_id: Type.Union([Type.String(), Type.Null()], { description: 'a local target’s node (null: an S3 target)' }),
  path: Type.Union([Type.String(), Type.Null()], { description: 'a local target’s folder on its node (null: an S3 target)' }),
  endpoint: Type.String(),
  bucket: Type.String(),
  prefix: Type.String(),
  region: Type.String(),
  access_key_id: Type.String(),
  repository: Type.String({ description: 'the restic repository the target holds' }),
  project_id: Type.Union([Type.String(), Type.Null()], { description: 'the project it belongs to (null: made before projects, the default project’s)' }),
  checked_at: Type.String(),
  created_at: Type.String(),
  updated_at: Type.String(),
});

const Run = Type.Object(
  {
    pre: Type.Optional(HookRunField),
    post: Type.Optional(HookRunField),
    phase: Type.Optional(Type.Union([Type.String(), Type.Null()], { description: 'a running backup with commands: pre, backup or post' })),
    bytes_done: Type.Optional(Type.Union([Type.Number(), Type.Null()], { description: 'while restic backs up: the bytes it has read so far; while it restores: the bytes it has written (null before its first report, and once the run ended)' })),
    bytes_total: Type.Optional(Type.Union([Type.Number(), Type.Null()], { description: 'while restic backs up: the bytes it will read (null until it has scanned the folder); while it restores: the snapshot’s size' })),
  },
  { additionalProperties: true, description: 'a backup or restore run (docs/backups.md)' },
);

/** What a run's agent last said of its progress (task.progress), while it runs. */
type RunProgress = { bytes_done?: unknown; bytes_total?: unknown } | null | undefined;

/** How long creating a local target waits for its node's agent to check the folder. */
const FOLDER_CHECK_WAIT_MS = 30_000;

const VolumeIdParams = Type.Object({ id: Type.String({ minLength: 1, maxLength: 100 }) });

/** The shortest interval of a schedule (backups.min_schedule_seconds). */
const BackupsConfigSchema = Type.Object(
  {
    schedule_check_seconds: Type.Integer({ minimum: 1, maximum: 3600, default: 30, description: 'how often one control plane looks for schedules that are due' }),
    min_schedule_seconds: Type.Integer({ minimum: 1, default: 300, description: 'the shortest every_seconds a schedule may have' }),
    control_plane: ControlPlaneBackupSettings,
  },
  { additionalProperties: false, default: {} },
);

const VolumeTags = Type.Record(Type.String({ pattern: '^[A-Za-z0-9_.:/-]{1,63}$' }), Type.String({ maxLength: 255 }), {
  minProperties: 1,
  maxProperties: 20,
  description: 'tags (key → value): every volume carrying all of them when a backup is due (tags: PUT /v1/tags)',
});

const Verify = Type.Optional(
  Type.Boolean({
    description: 'prove each backup restorable after it is taken (a restore drill: restic check with a data subset, a restore into a scratch folder compared with the snapshot); the backup gets verified, verified_at, verify_error',
  }),
);

const Consistency = Type.Optional(
  Type.Union([Type.Literal('live'), Type.Literal('stop')], {
    description: 'live (the default): the volume is backed up while in use; stop: the workloads using it are scaled to zero for the snapshot and brought back after (the gap reported on the run)',
  }),
);

const PreHook = Type.Object(Hook.properties, { additionalProperties: false, description: 'a command run in a workload’s container before the backup (a database dump): one that fails (or times out) fails the backup, and nothing is snapshotted' });
const PostHook = Type.Object(Hook.properties, { additionalProperties: false, description: 'a command run in a workload’s container after the backup, whether it succeeded or not (and after a failed pre command)' });

const CreateSchedule = Type.Object(
  {
    name: TargetName,
    target_id: Type.String({ minLength: 1, maxLength: 100, description: 'the backup target (id or name)' }),
    volume_ids: Type.Optional(Type.Array(Type.String({ minLength: 1, maxLength: 100 }), { minItems: 1, maxItems: 1000, uniqueItems: true, description: 'the volumes (ids or names) it backs up' })),
    volume_tags: Type.Optional(VolumeTags),
    every_seconds: Type.Optional(Type.Integer({ minimum: 1, maximum: 366 * 86_400, description: 'the interval between backups; the first runs at once (give this or cron)' })),
    cron: Type.Optional(Type.String({ minLength: 1, maxLength: 100, description: 'a cron expression (five fields or @daily…, in UTC): when backups run (give this or every_seconds)' })),
    verify: Verify,
    consistency: Consistency,
    pre: Type.Optional(PreHook),
    post: Type.Optional(PostHook),
    ...Retention.properties,
  },
  { additionalProperties: false },
);

const Schedule = Type.Object({
  id: Type.String(),
  name: Type.String(),
  target_id: Type.String(),
  project_id: Type.Union([Type.String(), Type.Null()], { description: 'its target’s project (null: made before projects, the default project’s)' }),
  volume_ids: Type.Array(Type.String()),
  volume_tags: Type.Union([Type.Record(Type.String(), Type.String()), Type.Null()]),
  every_seconds: Type.Union([Type.Integer(), Type.Null()]),
  cron: Type.Union([Type.String(), Type.Null()]),
  retention: Type.Object({}, { additionalProperties: true, description: 'keep_last, keep_daily, keep_weekly, keep_monthly as given' }),
  verify: Type.Boolean({ description: 'each backup is verified by a restore drill' }),
  consistency: Type.String({ description: 'live or stop' }),
  pre: HookSpecField,
  post: HookSpecField,
  next_run_at: Type.String(),
  last_run_at: Type.Union([Type.String(), Type.Null()]),
  created_at: Type.String(),
  updated_at: Type.String(),
});

const RETENTION_KEYS = ['keep_last', 'keep_daily', 'keep_weekly', 'keep_monthly'] as const;

/** When a schedule is due after a run at `at`: its interval on, or its cron expression's next minute (a year on if it has none, which its check at create rules out). */
function nextRunOf(schedule: Pick<ScheduleRecord, 'every_seconds' | 'cron'>, at: Date): Date {
  if (schedule.cron) return nextCronRun(parseCron(schedule.cron), at) ?? new Date(at.getTime() + 366 * 86_400_000);
  return new Date(at.getTime() + (schedule.every_seconds ?? 86_400) * 1000);
}

function retentionOf(s: ScheduleRecord): Record<string, number> {
  return Object.fromEntries(RETENTION_KEYS.filter((k) => s[k] != null).map((k) => [k, s[k] as number]));
}

function scheduleView(s: ScheduleRecord) {
  return {
    id: s.id,
    name: s.name,
    target_id: s.target_id,
    project_id: s.project_id ?? null,
    volume_ids: s.volume_ids,
    volume_tags: s.volume_tags ?? null,
    every_seconds: s.every_seconds ?? null,
    cron: s.cron ?? null,
    retention: retentionOf(s),
    verify: s.verify === true,
    consistency: s.consistency ?? 'live',
    pre: hookSpecView(s.pre),
    post: hookSpecView(s.post),
    next_run_at: s.next_run_at,
    last_run_at: s.last_run_at,
    created_at: s.created_at,
    updated_at: s.updated_at,
  };
}

/** Normalises a key prefix: no leading, trailing or doubled slashes; no "." or ".." segments. */
function normalisePrefix(prefix: string | undefined): string {
  const segments = (prefix ?? '').split('/').filter(Boolean);
  if (segments.some((s) => s === '.' || s === '..')) throw badRequest('Validation failed: body.prefix must not contain "." or ".." segments', [{ path: 'body.prefix', message: 'must not contain "." or ".." segments' }]);
  return segments.join('/');
}

/** Folders of the system a local target may not be in (the agent writes there as root). */
const SYSTEM_FOLDERS = ['/bin', '/boot', '/dev', '/etc', '/lib', '/lib32', '/lib64', '/proc', '/root', '/run', '/sbin', '/sys', '/usr', '/var/lib/docker', '/var/lib/hangar', '/var/lib/hangar-agent', '/var/lib/rancher'];

/** The restic repository of a target: `s3:<endpoint>/<bucket>[/<prefix>]`, or a local target's `local:<path>` (on its node). */
export const repositoryOf = (t: Pick<TargetRecord, 'kind' | 'path' | 'endpoint' | 'bucket' | 'prefix'>) =>
  t.kind === 'local' ? `local:${t.path}` : `s3:${t.endpoint.replace(/\/$/, '')}/${t.bucket}${t.prefix ? `/${t.prefix}` : ''}`;

function targetView(t: TargetRecord) {
  return {
    id: t.id,
    name: t.name,
    kind: t.kind,
    node_id: t.node_id ?? null,
    path: t.path ?? null,
    endpoint: t.endpoint,
    bucket: t.bucket,
    prefix: t.prefix,
    region: t.region,
    access_key_id: t.access_key_id,
    repository: repositoryOf(t),
    project_id: t.project_id ?? null,
    checked_at: t.checked_at,
    created_at: t.created_at,
    updated_at: t.updated_at,
  };
}

const num = (v: unknown) => (v === null || v === undefined ? null : Number(v));

function runView(r: RunRecord, progress?: RunProgress) {
  const common = {
    id: r.id,
    volume_id: r.volume_id,
    target_id: r.target_id,
    node_id: r.node_id,
    task_id: r.status === 'running' ? r.task_id : null,
    status: r.status,
    error: r.error,
    snapshot_id: r.snapshot_id,
    time: r.started_at,
    finished_at: r.finished_at,
    duration_seconds: num(r.duration_seconds),
  };
  if (r.operation === 'restore') {
    return {
      ...common,
      source_id: r.source_id,
      workloads: workloadsView(r.workloads),
      workloads_stopped_at: r.workloads_stopped_at ?? null,
      workloads_started_at: r.workloads_started_at ?? null,
      gap_seconds: num(r.gap_seconds),
      ...bytesProgress(r, progress),
    };
  }
  return {
    ...common,
    size: num(r.bytes),
    bytes_added: num(r.bytes_added),
    files: num(r.files),
    schedule_id: r.schedule_id ?? null,
    consistency: r.consistency ?? 'live',
    workloads: workloadsView(r.workloads),
    workloads_stopped_at: r.workloads_stopped_at ?? null,
    workloads_started_at: r.workloads_started_at ?? null,
    gap_seconds: num(r.gap_seconds),
    verify: r.verify === true,
    verified: r.verified ?? null,
    verified_at: r.verified_at ?? null,
    verify_error: r.verify_error ?? null,
    pre: hookRunView(r.pre),
    post: hookRunView(r.post),
    phase: r.status === 'running' ? (r.phase ?? 'backup') : null,
    ...bytesProgress(r, progress),
  };
}

/** A running run's bytes done of its total, as its agent last said; null once it ended. */
const bytesProgress = (r: RunRecord, progress?: RunProgress) => ({
  bytes_done: r.status === 'running' ? num(progress?.bytes_done) : null,
  bytes_total: r.status === 'running' ? num(progress?.bytes_total) : null,
});

/** A volume's backups and restores act in the volume's project (core/auth/scope.ts); a restore takes only the volume's own backups. */
const OF_VOLUME: RouteScope = { of: [{ kind: 'volume', from: 'params.id' }] };
/** A volume's backup (or restore): of its target's project, which is its volume's (a deleted volume's backups stay its project's). */
const RUN = { kind: 'volume-backup' } as const;

const BackupListQuery = Type.Object(
  {
    ...PageQuery.properties,
    volume_id: Type.Optional(Type.String({ minLength: 1, maxLength: 100, description: 'only the backups of this volume (its id)' })),
    target_id: Type.Optional(Type.String({ minLength: 1, maxLength: 100, description: 'only the backups in this target (its id)' })),
    status: Type.Optional(Type.Union(['stopping', 'running', 'succeeded', 'failed', 'forgotten'].map((s) => Type.Literal(s)), { description: 'only backups in this status' })),
  },
  { additionalProperties: false },
);
/** Backup targets and schedules belong to projects (a schedule to its target's): their resolvers' kinds and what a 404 calls them. */
const TARGET = { kind: 'backup-target', noun: 'backup target' } as const;
const SCHEDULE = { kind: 'backup-schedule', noun: 'backup schedule' } as const;

export default definePlugin({
  name: 'backups',
  description: 'backup targets (S3 buckets holding restic repositories) and volume backups and restores run by the agents with restic',
  deps: [NodesRef, VolumesRef],
  migrations: backupMigrations,
  configSchema: BackupsConfigSchema,
  setup(services: Services) {
    const { db, clock, log } = services;
    const settings = services.config.backups as { schedule_check_seconds: number; min_schedule_seconds: number; control_plane: ControlPlaneBackupConfig };
    const schedules = new ScheduleStore(db, clock);
    const { nodes } = nodesOf(services);
    const volumes = volumesOf(services);
    const targets = new TargetStore(db, clock);
    /** The tags plugin (schedules of volumes by tag need it); asked when used: its setup may come after this one's. */
    const requireTags = (field: string) => {
      const found = services.provided.find(TagsRef);
      if (!found) throw badRequest(`Validation failed: ${field} selects volumes by tag, but the tags plugin is not loaded (add tags to plugins:)`, [{ path: field, message: 'tags are not loaded' }]);
      return found;
    };
    const runs = new RunStore(db, clock);
    const hooks = backupHooks(services);
    const stops = workloadStops({ services, runs, what: (r) => `the ${r.operation} ${r.id} of volume ${r.volume_id}` });
    const box = services.ca.secretBox('backups');
    const jobs = services.clusters.jobs;
    const now = () => clock.now().toISOString();
    // Targets and schedules made before projects (project_id null) are read as the `default` project's.
    const defaultProject = defaultProjectOf(services);
    const targetProjects = tableResolver(TARGET.kind, () => db.knex, BACKUP_TARGETS, { via: 'project_id', defaultProject });
    services.provided.contribute(ScopeResolvers, targetProjects);
    services.provided.contribute(ScopeResolvers, tableResolver(SCHEDULE.kind, () => db.knex, BACKUP_SCHEDULES, { via: 'project_id', defaultProject }));
    services.provided.contribute(ScopeResolvers, {
      kind: RUN.kind,
      async projectsOf(refs) {
        const rows: Array<{ id: string; target_id: string }> = await db.knex(BACKUP_RUNS).whereIn('id', [...refs]).select('id', 'target_id');
        const projects = await targetProjects.projectsOf([...new Set(rows.map((r) => r.target_id))]);
        return new Map(rows.filter((r) => projects.has(r.target_id)).map((r) => [r.id, projects.get(r.target_id) ?? null]));
      },
    });
    const projectOf = (kind: string, id: string) => projectOfResource(services.provided, kind, id);

    /**
     * When a new schedule runs: at once and then every `every_seconds`, or on its cron expression
     * (its next minute first). One of the two, no more often than backups.min_schedule_seconds.
     */
    function whenOf(body: { every_seconds?: number; cron?: string }, at: Date): { cron: string | null; first: string } {
      const least = settings.min_schedule_seconds;
      const tooOften = (field: string, what: string) =>
        badRequest(`Validation failed: ${field} ${what}; a schedule runs at most every ${least} s (backups.min_schedule_seconds)`, [{ path: field, message: `must be >= ${least} s apart` }]);
      if ((body.every_seconds === undefined) === (body.cron === undefined)) {
        throw badRequest('Validation failed: body: give every_seconds (an interval) or cron (a cron expression), one of them', [{ path: 'body.every_seconds', message: 'give every_seconds or cron' }]);
      }
      if (body.every_seconds !== undefined) {
        if (body.every_seconds < least) throw tooOften('body.every_seconds', `is ${body.every_seconds} s`);
        return { cron: null, first: at.toISOString() };
      }
      let parsed;
      try {
        parsed = parseCron(body.cron!, 'body.cron');
      } catch (err) {
        throw badRequest(`Validation failed: ${(err as Error).message}`, [{ path: 'body.cron', message: 'not a cron expression hangar can run' }]);
      }
      const first = nextCronRun(parsed, at);
      if (!first) throw badRequest(`Validation failed: body.cron "${body.cron}" never runs (no such day in the next five years)`, [{ path: 'body.cron', message: 'never runs' }]);
      const gap = shortestCronGap(parsed, at);
      if (gap !== null && gap < least) throw tooOften('body.cron', `"${body.cron}" runs ${gap} s apart at its busiest`);
      return { cron: parsed.expression, first: first.toISOString() };
    }

    /** The fields a target's kind needs, and refuses those of the other kind (400 naming the field). */
    function requireKindFields(body: Static<typeof CreateTarget>, kind: 's3' | 'local'): void {
      const own = kind === 'local' ? (['node_id', 'path'] as const) : (['endpoint', 'bucket', 'access_key_id', 'secret_access_key'] as const);
      const others = kind === 'local' ? (['endpoint', 'bucket', 'prefix', 'region', 'access_key_id', 'secret_access_key'] as const) : (['node_id', 'path'] as const);
      for (const field of own) {
        if (body[field] === undefined) throw badRequest(`Validation failed: body.${field} is required for a target of kind ${kind}`, [{ path: `body.${field}`, message: `is required for kind ${kind}` }]);
      }
      for (const field of others) {
        if (body[field] !== undefined) throw badRequest(`Validation failed: body.${field} is not a field of a target of kind ${kind}`, [{ path: `body.${field}`, message: `is not a field of kind ${kind}` }]);
      }
    }

    /** An S3 target's location, checked with real requests (400 naming what failed); its columns. */
    async function checkS3Target(body: Static<typeof CreateTarget>): Promise<Partial<TargetRecord>> {
      let endpoint: URL;
      try {
        endpoint = new URL(body.endpoint!);
      } catch {
        throw badRequest('Validation failed: body.endpoint is not a URL', [{ path: 'body.endpoint', message: 'is not a URL' }]);
      }
      const location = {
        endpoint: endpoint.origin,
        bucket: body.bucket!,
        prefix: normalisePrefix(body.prefix),
        region: body.region ?? 'us-east-1',
        credentials: { accessKeyId: body.access_key_id!, secretAccessKey: body.secret_access_key! },
      };
      try {
        await probeTarget(location);
      } catch (err) {
        if (err instanceof ProbeFailure) throw badRequest(`Checking the target failed: ${err.message}`, [{ path: err.what, message: err.message }]);
        throw err;
      }
      const { endpoint: origin, bucket, prefix, region } = location;
      return { endpoint: origin, bucket, prefix, region, access_key_id: body.access_key_id!, secret_sealed: box.seal(body.secret_access_key!), node_id: null, path: null };
    }

    /**
     * A local target's folder, checked by the agent of its node (made when missing, a probe file
     * written, read back and deleted: 400 naming what failed); its columns (no S3 fields: '').
     */
    async function checkLocalTarget(nodeId: string, given: string, projectId: string | null, principal: Principal | null): Promise<Partial<TargetRecord>> {
      const folder = path.posix.normalize(given).replace(/\/+$/, '');
      if (given.split('/').some((s) => s === '.' || s === '..') || !folder) {
        throw badRequest('Validation failed: body.path must be an absolute folder without "." or ".." segments, not the root', [{ path: 'body.path', message: 'must be an absolute folder without "." or ".." segments, not the root' }]);
      }
      const system = SYSTEM_FOLDERS.find((f) => folder === f || folder.startsWith(`${f}/`));
      if (system) throw badRequest(`Validation failed: body.path is in ${system}, a folder of the system: choose one for backups (e.g. /var/backups/hangar)`, [{ path: 'body.path', message: `must not be in ${system}` }]);
      const node = await nodes.require(nodeId);
      await requireNodeServes(services.provided, principal, node, nodeId, projectId, 'the new target’s');
      await requireClearFolder(node.id, folder);
      if (node.connection === 'pending') throw conflict(`Node ${node.id} has no agent yet: join the machine first`);
      await services.tasks.requireCapable(node.id, [BackupFolderCheck]);
      const queued = await services.tasks.enqueue({ nodeId: node.id, kind: BackupFolderCheck, maxAttempts: 1, readOnce: true, payload: { path: folder } });
      const task = await services.tasks.settle(queued.id, { timeoutMs: FOLDER_CHECK_WAIT_MS, signal: services.shutdown });
      if (task.status === 'completed' || task.status === 'failed') await services.tasks.take(task.id).catch(() => undefined);
      if (task.status === 'failed') throw badRequest(`Checking the target failed: on node ${node.id}: ${task.error ?? 'no reason given'}`, [{ path: 'body.path', message: task.error ?? 'failed' }]);
      if (task.status !== 'completed') throw conflict(`Checking the target failed: the agent of node ${node.id} did not check ${folder} within ${FOLDER_CHECK_WAIT_MS / 1000} s (is it online?)`);
      return { node_id: node.id, path: folder, endpoint: '', bucket: '', prefix: '', region: '', access_key_id: '', secret_sealed: box.seal('') };
    }

    /** The local target on a node whose folder is, is inside or contains `folder` (the first by name), if any. */
    async function localTargetAround(nodeId: string, folder: string): Promise<TargetRecord | undefined> {
      return (await targets.query().where({ kind: 'local', node_id: nodeId }).orderBy('name')).map(targets.decode).find((t: TargetRecord) => foldersOverlap(folder, t.path!));
    }

    /**
     * A local target's folder keeps clear of its node's volumes (a backup of the volume would copy the
     * repository half-written, a restore would replace it by that copy) and of the other local
     * targets (one repository a folder, each target its own password): 409 naming which.
     */
    async function requireClearFolder(nodeId: string, folder: string): Promise<void> {
      const volume = (await volumes.onNode(nodeId)).find((v) => foldersOverlap(folder, v.folder));
      const target = volume ? undefined : await localTargetAround(nodeId, folder);
      const refusal = volume
        ? `${folderClash(nodeId, folder, `volume ${volume.name}`, volume.folder)}: its backups would copy the repository half-written and a restore of it would replace the repository by that copy; choose a folder outside every volume`
        : target && `${folderClash(nodeId, folder, `backup target ${target.name}`, target.path!)}: a folder holds one restic repository, and each target has its own password; choose another folder, or back up to target ${target.name}`;
      if (refusal) throw conflict(refusal, [{ path: 'body.path', message: refusal }]);
    }

    async function requireTarget(idOrName: string): Promise<TargetRecord> {
      const target = await targets.findByIdOrName(idOrName);
      if (!target) throw notFound(`No backup target ${idOrName}`);
      return target;
    }

    /** What a task needs to open a target's repository (secrets included: the task payload is sealed at rest); a local target has no keys. */
    const repositoryPayload = (t: TargetRecord) => ({
      repository: repositoryOf(t),
      password: box.openString(t.password_sealed),
      ...(t.kind === 'local' ? {} : { region: t.region, access_key_id: t.access_key_id, secret_access_key: box.openString(t.secret_sealed) }),
    });

    /**
     * A local target serves only the volumes of its node, and none whose folder is, is inside or
     * contains its own (one made before hangar refused that): 409 naming why.
     */
    function requireServes(target: TargetRecord, volume: VolumeRecord): void {
      const what = `volume ${volume.name}`;
      const refusal =
        localTargetRefusal(target, volume.node_id, what) ??
        (target.kind === 'local' && foldersOverlap(target.path!, volume.folder)
          ? `Backup target ${target.name}: ${folderClash(volume.node_id, target.path!, what, volume.folder)}: its backups would copy the repository half-written and a restore of it would replace the repository by that copy; move the repository out of the volume's folder and make a target of it there`
          : null);
      if (refusal) throw conflict(refusal, [{ path: 'target_id', message: refusal }]);
    }

    /** The volume and its node, refusing what cannot run a backup or restore there (404, 409). */
    async function requireVolumeOnResticNode(idOrName: string): Promise<VolumeRecord> {
      const volume = await volumes.require(idOrName);
      if (volume.status !== 'ready') throw conflict(`Volume ${volume.name} is not ready (${volume.status})`);
      await requireResticNode(volume.node_id, `volume ${volume.name}`);
      const busy = await busyRun(volume.id);
      if (busy) throw conflict(`A ${busy.operation} of volume ${volume.name} is ${busy.status === 'stopping' ? 'stopping its workloads' : busy.status === 'running' ? 'running' : 'bringing its workloads back'} (${busy.id}); try again when it has finished`);
      return volume;
    }

    /** A run of the volume in progress: stopping its workloads, running, or finished with its workloads not back yet. */
    async function busyRun(volumeId: string): Promise<RunRecord | null> {
      const rows: RunRecord[] = (await runs.query().where({ volume_id: volumeId }).where((q) => q.whereIn('status', ['stopping', 'running']).orWhere((p) => p.whereNotNull('workloads').whereNull('workloads_started_at')))).map(runs.decode);
      for (const r of rows) if (await abandoned(r)) r.status = 'failed';
      return rows.find((r) => r.status === 'stopping' || r.status === 'running' || awaitsWorkloads(r)) ?? null;
    }

    /**
     * A `running` run without its task for longer than a control plane's lease: its control plane
     * stopped between recording it and queueing the task (they are milliseconds apart). Failed, so
     * that it no longer holds its volume; a control plane merely slow gets no task after this (the
     * task's transaction moves the run only while it is `running`). Whether it was.
     */
    async function abandoned(run: RunRecord): Promise<boolean> {
      if (run.status !== 'running' || run.task_id || Date.parse(run.started_at) > clock.now().getTime() - services.config.clusters.op_lease_seconds * 1000) return false;
      const patch = { status: 'failed', finished_at: now(), error: 'its control plane stopped before queueing its task: nothing was run' } as const;
      const failed = await keepRunEnd({ ...run, ...patch }, (trx) => runs.abandonUnqueued(run.id, patch, trx));
      if (failed) {
        log.warn({ run_id: run.id, volume_id: run.volume_id }, `volume ${run.operation} never queued (its control plane stopped): failed`);
        services.events.publish(volumeRunTopic(run.operation, 'failed'), runView(failed));
      }
      return !!failed;
    }

    /**
     * Writes a run's end by `change` in one transaction with its notifications — volume.<operation>.<status>
     * and a failed drill's volume.backup.verify_failed (`ended`: the run as it will be) — through the
     * bus's durable listeners; the caller publishes them once written. The run after, or null when `change` changed nothing.
     */
    function keepRunEnd(ended: RunRecord, change: (trx?: Knex.Transaction) => Promise<RunRecord | null>): Promise<RunRecord | null> {
      const view = runView(ended);
      const said = [notice(volumeRunTopic(ended.operation, ended.status as 'succeeded' | 'failed'), view), ...(ended.verified === false ? [notice(BackupVerifyFailed, view)] : [])];
      return services.events.keepWith(db.knex, said, change, { log, wanted: (done) => done !== null });
    }

    /** The node holding `what` (a volume), refused when it cannot run restic (409 saying how to add it). */
    async function requireResticNode(nodeId: string, what: string): Promise<void> {
      const node = await nodes.requireLive(nodeId);
      if (node.connection === 'pending') throw conflict(`Node ${node.id} holding ${what} has no agent yet: join the machine first`);
      const restic = (node.facts as { restic?: { present?: boolean } | null } | null)?.restic;
      if (!restic?.present) {
        throw conflict(`Node ${node.id} holding ${what} has no restic, which volume backups and restores run: ${RESTIC_HINT}`, [{ path: 'node.restic', message: RESTIC_HINT }]);
      }
    }

    /** Queues the restore of a backup into a volume's folder (a new volume's: missing or empty, filled with the snapshot's folder); the run and its task. */
    const queueRestore = (volume: VolumeRecord, target: TargetRecord, source: { id: string; snapshot_id: string }, options: { newVolume: boolean; stopping?: RunRecord }) =>
      start(options.stopping ?? newRun('restore', volume, target.id, { snapshot_id: source.snapshot_id, source_id: source.id }), (_, within) =>
        services.tasks.enqueue({
          within,
          nodeId: volume.node_id,
          kind: VolumeRestore,
          subject: volume.id,
          maxAttempts: 1,
          payload: { volume_id: volume.id, folder: volume.folder, snapshot_id: source.snapshot_id, ...(options.newVolume ? { new_volume: true } : {}), ...repositoryPayload(target) },
        }),
      );

    /** Records a run's outcome from its task once (idempotent), then deletes the task: its payload holds the keys. */
    async function record(run: RunRecord, task: Task | null): Promise<void> {
      if (task && task.status !== 'completed' && task.status !== 'failed') return;
      // A backup's pre or post command ended (recordStep): the run moves on, or this is its end.
      const step = run.operation === 'backup' && (run.phase === 'pre' || run.phase === 'post') ? await recordStep(run, task) : null;
      if (step === 'moved') return;
      const finished = now();
      let patch: Partial<RunRecord>;
      if (step) patch = step;
      else if (!task) patch = { status: 'failed', error: 'its task is gone: the agent’s outcome was never recorded', finished_at: finished };
      else if (task.status === 'failed') patch = { status: 'failed', error: task.error ?? 'the agent reported a failure', finished_at: finished };
      else {
        const result = task.result as Record<string, unknown>;
        patch = {
          status: 'succeeded',
          error: null,
          snapshot_id: String(result.snapshot_id),
          finished_at: finished,
          duration_seconds: Number(result.duration_seconds ?? 0),
          ...(run.operation === 'backup' ? { bytes: Number(result.bytes ?? 0), bytes_added: Number(result.bytes_added ?? 0), files: Number(result.files ?? 0) } : {}),
          ...(run.operation === 'backup' && run.verify ? drillOf(result) : {}),
        };
      }
      const result = (task?.status === 'completed' ? task.result : null) as { forgotten?: string[]; retention_error?: string } | null;
      if (result?.retention_error) patch.error = `the snapshot was made; the retention failed: ${result.retention_error}`;
      if (run.phase === 'backup' && run.post) {
        // The backup's outcome is kept while its post command runs.
        if (!(await stillOn(run))) return;
        const next = await toPost(run, patch);
        if (next === 'moved') {
          if (result?.forgotten?.length) await forget(run.volume_id, result.forgotten);
          return;
        }
        patch = next;
      }
      // The outcome and its notifications (volume.<operation>.<status>, a failed drill's) commit together.
      let changed = await keepRunEnd({ ...run, ...patch }, (trx) => runs.changeIf(run.id, ['running'], patch, trx));
      // A restore that stopped the volume's workloads brings them back, whatever its outcome.
      if (changed?.workloads?.length) changed = await stops.bringBack(changed);
      if (run.task_id) await db.knex(TASKS).where({ id: run.task_id }).whereIn('status', ['completed', 'failed']).delete();
      if (changed && result?.forgotten?.length) await forget(run.volume_id, result.forgotten);
      if (changed) {
        services.events.publish(volumeRunTopic(run.operation, changed.status as 'succeeded' | 'failed'), runView(changed));
        if (changed.verified === false) {
          verifyFailures.inc({ volume: run.volume_id });
          services.events.publish(BackupVerifyFailed, runView(changed));
          log.warn({ run_id: run.id, volume_id: run.volume_id, target_id: run.target_id, snapshot_id: changed.snapshot_id, verify_error: changed.verify_error }, 'volume backup restore drill failed');
        }
        const line = { run_id: run.id, volume_id: run.volume_id, target_id: run.target_id, node_id: run.node_id, snapshot_id: changed.snapshot_id, error: changed.error };
        if (changed.status === 'failed') log.warn(line, `volume ${run.operation} failed`);
        else log.info(line, `volume ${run.operation} finished`);
      }
    }

    /** A restore drill's outcome from the agent's result; an agent that ran none (older than the drills) fails it, saying so. */
    function drillOf(result: Record<string, unknown>): Pick<RunRecord, 'verified' | 'verified_at' | 'verify_error'> {
      if (typeof result.verified !== 'boolean') return { verified: false, verified_at: now(), verify_error: 'the node’s agent ran no restore drill: update the agent (hangar node update-agent)' };
      return { verified: result.verified, verified_at: typeof result.verified_at === 'string' ? result.verified_at : now(), verify_error: result.verified ? null : String(result.verify_error ?? 'the drill failed') };
    }

    /** Marks the backups whose snapshots a retention removed as forgotten (they can no longer be restored). */
    async function forget(volumeId: string, shortIds: string[]): Promise<void> {
      const backups = await runs.findAll({ volume_id: volumeId, operation: 'backup', status: 'succeeded' });
      for (const b of backups.filter((b) => b.snapshot_id && shortIds.some((id) => b.snapshot_id!.startsWith(id) || id.startsWith(b.snapshot_id!)))) {
        const gone = await runs.changeIf(b.id, ['succeeded'], { status: 'forgotten' });
        if (gone) services.events.publish(volumeRunTopic('backup', 'forgotten'), runView(gone));
      }
    }

    /** Queues a volume's backup to a target (`retention` applied after it); the run and its task. */
    async function backUp(
      volume: VolumeRecord,
      target: TargetRecord,
      from: { schedule_id?: string; retention?: Record<string, number>; verify?: boolean; consistency?: 'live' | 'stop'; pre?: HookSpec | null; post?: HookSpec | null } = {},
    ): Promise<{ task: Task; run: RunRecord }> {
      requireServes(target, volume);
      await requireVolumeOnResticNode(volume.id);
      const consistency = from.consistency ?? 'live';
      // With commands, the run goes through its phases (pre, backup, post), a task each (recordStep).
      const commands = from.pre || from.post ? { pre: from.pre ? pendingHook(from.pre) : null, post: from.post ? pendingHook(from.post) : null, phase: from.pre ? ('pre' as const) : ('backup' as const) } : {};
      const fields = { ...newRun('backup', volume, target.id), schedule_id: from.schedule_id ?? null, consistency, verify: from.verify === true, verified: null, verified_at: null, verify_error: null, ...commands };
      if (from.pre) {
        // The pre command runs first, in a container of its workload (on the node running one); the backup is queued once it exited with 0.
        const placement = await hooks.place(from.pre);
        const started = { ...fields, pre: { ...pendingHook(from.pre), status: 'running' as const, node_id: placement.node_id, started_at: now() } };
        return start(started, (_, within) => services.tasks.enqueue({ within, nodeId: placement.node_id, kind: ExecInWorkload, subject: volume.id, maxAttempts: 1, payload: placement.payload }));
      }
      let run: typeof fields | RunRecord = fields;
      if (consistency === 'stop') {
        // The workloads using the volume are stopped for the snapshot, recorded first (as a restore's stop_workloads), and brought back once it is taken.
        const using = await usersOf(volume.id);
        const cannot = stops.unstoppable(using);
        if (cannot.length) {
          throw conflict(`Volume ${volume.name} is in use by ${cannot.map((u) => `${u.type} ${u.name}`).join(', ')}, which hangar cannot stop for a backup with consistency stop: stop or remove them first, or back it up live`, cannot);
        }
        const workloads = await stops.plan(volume.id, using);
        if (workloads.length) run = await stops.stopAll(await insertRun({ ...fields, ...stops.stoppingFields(workloads), task_id: null, created_at: now(), updated_at: now() }), 'backup');
      }
      return start(run, (r, within) => queueBackup(volume, target, r.id, from, within));
    }

    /** Queues the restic backup of a volume for the run `runId` (`retention` applied and `verify` drilled after it). */
    function queueBackup(volume: VolumeRecord, target: TargetRecord, runId: string, options: { retention?: Record<string, number>; verify?: boolean }, within: Within): Promise<Task> {
      const retention = options.retention && Object.keys(options.retention).length ? { retention: options.retention } : {};
      return services.tasks.enqueue({
        within,
        nodeId: volume.node_id,
        kind: VolumeBackup,
        subject: volume.id,
        maxAttempts: 1,
        payload: { volume_id: volume.id, folder: volume.folder, backup_id: runId, ...repositoryPayload(target), ...retention, ...(options.verify ? { verify: true } : {}) },
      });
    }

    /**
     * Moves a running run on from the task it waited for to the next one (its next phase), queued in
     * the same transaction, then follows it. Null when another process following the run moved it
     * first (the run no longer waits for that task): nothing is queued then.
     */
    async function advance(run: RunRecord, patch: Partial<RunRecord>, queue: (within: Within) => Promise<Task>): Promise<RunRecord | null> {
      let moved: RunRecord | null = null;
      const lost = new Error('the run was moved on by another process');
      try {
        await queue(async (trx, taskId) => {
          moved = await runs.changeWhileOn(run.id, run.task_id!, { ...patch, task_id: taskId }, trx);
          if (!moved) throw lost;
        });
      } catch (err) {
        if (err === lost) return null;
        throw err;
      }
      await db.knex(TASKS).where({ id: run.task_id }).whereIn('status', ['completed', 'failed']).delete();
      follow(moved!);
      return moved;
    }

    /** The values a command's output must never show: the target's keys (which no command gets). */
    async function secretsOf(targetId: string): Promise<string[]> {
      const target = await targets.get(targetId);
      return target ? [box.openString(target.secret_sealed), box.openString(target.password_sealed)] : [];
    }

    /**
     * The end of a backup's task when it has commands (plugins/backups/hooks.ts): after its pre
     * command, the backup is queued (it exited with 0) or the run fails (nothing snapshotted); after
     * its post command, the run ends as its backup did, the post's failure added to its error.
     * Answers `moved` when the run went on to its next task (or another process got there first),
     * else the run's final patch.
     */
    async function recordStep(run: RunRecord, task: Task | null): Promise<'moved' | Partial<RunRecord>> {
      if (!(await stillOn(run))) return 'moved';
      const at = now();
      const hook = run.phase === 'pre' ? run.pre! : run.post!;
      const done = hooks.outcome(hook, task, await secretsOf(run.target_id), at);
      const said = `${done.error}${lastLine(done) ? ` (${lastLine(done)})` : ''}`;
      if (run.phase === 'post') {
        const failure = done.status === 'failed' ? `${run.post!.then === 'succeeded' ? 'the snapshot was made; ' : ''}the post command failed: ${said}` : null;
        return { post: done, status: run.post!.then ?? 'failed', error: [run.error, failure].filter(Boolean).join('; ') || null, finished_at: at };
      }
      if (done.status === 'succeeded') {
        try {
          const volume = await volumes.require(run.volume_id);
          const target = await requireTarget(run.target_id);
          await requireResticNode(volume.node_id, `volume ${volume.name}`);
          const schedule = run.schedule_id ? await schedules.get(run.schedule_id) : null;
          await advance(run, { pre: done, phase: 'backup' }, (within) => queueBackup(volume, target, run.id, { retention: schedule ? retentionOf(schedule) : undefined, verify: run.verify === true }, within));
          return 'moved';
        } catch (err) {
          return toPost(run, { pre: done, status: 'failed', error: `the backup could not start after the pre command: ${(err as Error).message}`, finished_at: at });
        }
      }
      return toPost(run, { pre: done, status: 'failed', error: `the pre command failed: ${said}; nothing was backed up`, finished_at: at });
    }

    /** Whether a run still waits for the task it was read with: a stale read (the settle loop's, of a run another process moved on since) has nothing to do. */
    async function stillOn(run: RunRecord): Promise<boolean> {
      const current = await runs.get(run.id);
      return !!current && current.status === 'running' && current.task_id === run.task_id;
    }

    /**
     * A backup's outcome (`ended`: its status, fields and error) when it has a post command: kept on
     * the run, which stays running while the command runs in its workload's container (`moved`). A
     * post command that cannot start (its workload runs nothing now) ends the run at once, saying so.
     */
    async function toPost(run: RunRecord, ended: Partial<RunRecord>): Promise<'moved' | Partial<RunRecord>> {
      if (!run.post) return ended;
      const { status, finished_at: _finished, ...kept } = ended;
      try {
        const placement = await hooks.place(run.post);
        const post: HookRun = { ...run.post, status: 'running', node_id: placement.node_id, started_at: now(), then: status as 'succeeded' | 'failed' };
        await advance(run, { ...kept, phase: 'post', post }, (within) =>
          services.tasks.enqueue({ within, nodeId: placement.node_id, kind: ExecInWorkload, subject: run.volume_id, maxAttempts: 1, payload: placement.payload }),
        );
        return 'moved';
      } catch (err) {
        const reason = (err as Error).message;
        const post: HookRun = { ...run.post, status: 'failed', error: `it could not start: ${reason}`, finished_at: now() };
        return { ...ended, post, error: [ended.error, `the post command could not start: ${reason}`].filter(Boolean).join('; ') };
      }
    }

    /** The volumes a schedule backs up now: those it names, and those carrying its tags at this moment. */
    async function volumesOfSchedule(schedule: ScheduleRecord): Promise<string[]> {
      let tagged = schedule.volume_tags ? await requireTags('the schedule’s volume_tags').withAll('volume', schedule.volume_tags) : [];
      // Of the volumes carrying its tags, those of its project only (with projects loaded).
      const project = tagged.length ? await projectOf(SCHEDULE.kind, schedule.id) : null;
      if (project) {
        const projects = await services.provided.contributions(ScopeResolvers).find((r) => r.kind === 'volume')!.projectsOf(tagged);
        tagged = tagged.filter((id) => projects.get(id) === project);
      }
      return [...new Set([...schedule.volume_ids, ...tagged.sort()])];
    }

    /** Runs the schedules that are due (in one control plane): each claims its next run first, so it runs once. */
    async function runDueSchedules(): Promise<void> {
      const due = (await schedules.findAll()).filter((s) => Date.parse(s.next_run_at) <= clock.now().getTime());
      for (const schedule of due) {
        const at = clock.now();
        const claimed = await schedules
          .query()
          .where({ id: schedule.id, next_run_at: schedule.next_run_at })
          .update({ next_run_at: nextRunOf(schedule, at).toISOString(), last_run_at: at.toISOString(), updated_at: at.toISOString() });
        if (!claimed) continue;
        const target = await targets.get(schedule.target_id);
        for (const volumeId of await volumesOfSchedule(schedule)) {
          try {
            if (!target) throw conflict(`its backup target ${schedule.target_id} is gone`);
            const volume = await volumes.require(volumeId);
            await backUp(volume, target, { schedule_id: schedule.id, retention: retentionOf(schedule), verify: schedule.verify === true, consistency: schedule.consistency ?? 'live', pre: schedule.pre, post: schedule.post });
          } catch (err) {
            // Recorded as a failed backup (visible in the volume's list, an event and the log), and tried again at the next run.
            const message = `scheduled by ${schedule.name}: ${(err as Error).message}`;
            const row: Partial<RunRecord> = { ...newRun('backup', { id: volumeId, node_id: '' }, schedule.target_id), schedule_id: schedule.id, status: 'failed', error: message, finished_at: at.toISOString(), task_id: null, created_at: at.toISOString(), updated_at: at.toISOString() };
            const failed = (await keepRunEnd(row as RunRecord, (trx) => runs.insert(row, trx)))!;
            services.events.publish(volumeRunTopic('backup', 'failed'), runView(failed));
            log.warn({ schedule_id: schedule.id, volume_id: volumeId, error: message }, 'scheduled volume backup not started');
          }
        }
      }
    }

    const verifyFailures = services.metrics.counter('hangar_backup_verify_failures_total', 'Restore drills (verify) that failed, by volume, since this control plane started', ['volume']);
    services.metrics.gauge(
      'hangar_backup_last_success_timestamp_seconds',
      'When the last successful backup of each volume finished (Unix seconds); alert when it is too long ago',
      ['volume'],
      async (set) => {
        const rows = (await runs.query().where({ operation: 'backup' }).whereIn('status', ['succeeded', 'forgotten']).groupBy('volume_id').select('volume_id').max({ last: 'finished_at' })) as Array<{ volume_id: string; last: unknown }>;
        for (const r of rows) if (r.last) set({ volume: r.volume_id }, Math.floor(new Date(r.last as string).getTime() / 1000));
      },
      'store',
    );

    /**
     * Per volume, `column` of its latest backup among `runsOf` (the one that finished, or was
     * verified, last): what the last-backup gauges read from the store at each scrape.
     */
    async function latestPerVolume(column: string, by: 'finished_at' | 'verified_at', runsOf: (q: Knex.QueryBuilder) => Knex.QueryBuilder): Promise<Array<{ volume_id: string; value: unknown }>> {
      const latest = runsOf(runs.query().where({ operation: 'backup' })).groupBy('volume_id').select('volume_id').max({ last: by }).as('latest');
      return runsOf(db.knex(`${BACKUP_RUNS} as r`).where('r.operation', 'backup'))
        .join(latest, (on) => on.on('r.volume_id', '=', 'latest.volume_id').andOn(`r.${by}`, '=', 'latest.last'))
        .select('r.volume_id as volume_id', `r.${column} as value`);
    }
    const finishedBackups = (q: Knex.QueryBuilder) => q.whereIn('status', ['succeeded', 'forgotten']);
    for (const [name, help, column, of, value] of [
      ['hangar_backup_last_duration_seconds', 'How long the last successful backup of each volume took (restic’s own duration, seconds)', 'duration_seconds', finishedBackups, Number],
      ['hangar_backup_last_bytes', 'How many bytes the last successful backup of each volume read (restic’s bytes processed: the volume’s size then)', 'bytes', finishedBackups, Number],
      [
        'hangar_backup_last_verified',
        'The last restore drill of each volume’s backups: 1 when the snapshot was proven restorable, 0 when the drill failed (volumes never verified have none)',
        'verified',
        (q: Knex.QueryBuilder) => q.whereNotNull('verified'),
        (v: unknown) => (v === true || Number(v) === 1 ? 1 : 0),
      ],
    ] as const) {
      services.metrics.gauge(
        name,
        help,
        ['volume'],
        async (set) => {
          const by = name === 'hangar_backup_last_verified' ? 'verified_at' : 'finished_at';
          for (const r of await latestPerVolume(column, by, of)) if (r.value !== null && r.value !== undefined) set({ volume: r.volume_id }, value(r.value));
        },
        'store',
      );
    }

    /** Waits for a run's task in the background of this process (the settle loop covers any other process and restarts). */
    function follow(run: RunRecord): void {
      if (!run.task_id) return;
      jobs.run(
        `${run.operation} ${run.id} of volume ${run.volume_id}`,
        async () => {
          const task = await services.tasks.settle(run.task_id!, { timeoutMs: 24 * 3600_000, signal: services.shutdown });
          if (!services.shutdown.aborted) await record(run, task);
        },
        (err) => log.warn({ run_id: run.id, error: err.message }, 'following a volume backup task failed; the settle loop records it'),
        { resumable: false },
      );
    }

    /** Queues a run's task; the row first (its id names the snapshot), removed again when the agent is refused. */
    /** A backup or restore of `volume` with `target`, running from now (a restore names its source). */
    function newRun(operation: 'backup' | 'restore', volume: { id: string; node_id: string }, targetId: string, from: { snapshot_id?: string | null; source_id?: string } = {}): Omit<RunRecord, 'task_id' | 'created_at' | 'updated_at'> {
      return {
        id: newId(operation === 'backup' ? 'bak' : 'rst'),
        operation,
        volume_id: volume.id,
        target_id: targetId,
        node_id: volume.node_id,
        status: 'running',
        error: null,
        snapshot_id: from.snapshot_id ?? null,
        source_id: from.source_id ?? null,
        bytes: null,
        bytes_added: null,
        files: null,
        duration_seconds: null,
        started_at: now(),
        finished_at: null,
      };
    }

    /** `GET /v1/volumes/{id}/<operation>s`: a volume's backups or restores, oldest first. */
    /** A page of runs, oldest first, each with its progress while it runs: a running backup's or restore's bytes done of its total, as its agent last said (its task's progress). */
    async function pageOfRuns(where: (q: Knex.QueryBuilder) => void, query: { limit?: number; cursor?: string }) {
      const page = await runs.page({ where, limit: query.limit, cursor: query.cursor });
      const progress = new Map<string, RunProgress>();
      for (const r of page.items) if (r.status === 'running' && r.task_id && (r.phase ?? 'backup') === 'backup') progress.set(r.id, (await services.tasks.get(r.task_id))?.progress as RunProgress);
      return Reply.page(page, (r: RunRecord) => runView(r, progress.get(r.id)));
    }

    function listRuns(operation: 'backup' | 'restore', summary: string): RouteDef {
      return defineRoute({
        method: 'GET',
        path: `/v1/volumes/{id}/${operation}s`,
        auth: 'authenticated',
        scope: OF_VOLUME,
        summary,
        schemas: { params: VolumeIdParams, query: PageQuery, response: Type.Array(Run) },
        async handler(req) {
          const volume = await volumes.require(req.params.id);
          return pageOfRuns((q) => void q.where({ volume_id: volume.id, operation }), req.query);
        },
      });
    }

    /**
     * Queues a run's task: a new run's row first (its id names the snapshot), removed again when the
     * agent is refused; or a run that stopped its workloads (`stopping`, recorded), failed and its
     * workloads brought back when the task cannot be queued.
     */
    async function start(run: Omit<RunRecord, 'task_id' | 'created_at' | 'updated_at'> | RunRecord, queue: (run: RunRecord, within: Within) => Promise<Task>): Promise<{ task: Task; run: RunRecord }> {
      const stopping = run.status === 'stopping' ? (run as RunRecord) : null;
      const inserted = stopping ?? (await insertRun({ ...run, task_id: null, created_at: now(), updated_at: now() }));
      let withTask: RunRecord | null = null;
      const takenOver = conflict(
        stopping
          ? `The ${inserted.operation} ${inserted.id} was taken over by another control plane while its workloads were stopped: nothing was run`
          : `The ${inserted.operation} ${inserted.id} was failed by another control plane before its task was queued (this one was too slow): nothing was run`,
      );
      let task: Task;
      try {
        // The task and the run's move to `running` with it commit together: no control plane dying between them leaves a
        // task queued for a run taken over (failed, its workloads brought back), and one taken over meanwhile gets no task.
        task = await queue(inserted, async (trx, taskId) => {
          withTask = await runs.attachTask(inserted.id, stopping ? 'stopping' : 'running', { status: 'running', task_id: taskId, lease_until: null }, trx);
          if (!withTask) throw takenOver;
        });
      } catch (err) {
        // Taken over: its workloads are brought back by whoever took it.
        if (err === takenOver) throw err;
        if (!stopping) await runs.remove(inserted.id);
        else {
          const failed = await runs.changeIf(inserted.id, ['stopping'], { status: 'failed', lease_until: null, finished_at: now(), error: `not started: ${(err as Error).message}` });
          if (failed) await stops.bringBack(failed);
        }
        throw err;
      }
      follow(withTask!);
      return { task, run: withTask! };
    }

    /**
     * Inserts a run (`running`, or `stopping`) unless another run of its volume is in progress: the
     * store's unique index on a volume's active run (migration 010) refuses a second one started at
     * the same instant, past the busy check (409 naming the run in progress).
     */
    async function insertRun(values: Partial<RunRecord>): Promise<RunRecord> {
      try {
        return await runs.insert(values);
      } catch (err) {
        if (!(err instanceof HttpError && err.status === 409)) throw err;
        const busy = await busyRun(String(values.volume_id));
        throw conflict(`A ${busy?.operation ?? 'backup or restore'} of volume ${String(values.volume_id)} is in progress${busy ? ` (${busy.id})` : ''}; try again when it has finished`);
      }
    }

    async function usersOf(volumeId: string) {
      const all = [];
      for (const fn of services.provided.contributions(VolumeUsersPoint)) all.push(...(await fn(volumeId)));
      return all;
    }

    // A local target holds its folder (no volume in or around it) and its node's grant to its project.
    services.provided.contribute(NodeGrantHolders, {
      heldOn: async (nodeId, projectId, trx) => (await targets.findAll({ kind: 'local', node_id: nodeId, project_id: projectId }, trx)).map((t) => `backup target ${t.name}`),
    });
    services.provided.contribute(NodeFolderHolders, {
      async refusal(nodeId, folder, reads) {
        const target = await localTargetAround(nodeId, folder);
        if (!target) return null;
        if (!(await reads(TARGET.kind, target.id, 'backups:read'))) return `${folderClash(nodeId, folder, null, target.path!)}: choose another folder`;
        return `${folderClash(nodeId, folder, `backup target ${target.name}`, target.path!)}: the volume's backups would copy the repository and its restores replace it; choose another folder, or delete the target first`;
      },
    });
    // POST /v1/volumes {restore_from}: a new volume filled from a backup (plugins/backups/new-volume.ts).
    services.provided.contribute(VolumeRestorers, newVolumeRestorer({ services, runs, targets, requireResticNode, queueRestore, record, runView, projectOfTarget: (id) => projectOf(TARGET.kind, id) }));

    // The control plane's own backups (plugins/backups/control-plane.ts).
    const controlPlane = controlPlaneBackups({ services, settings: settings.control_plane, checkSeconds: settings.schedule_check_seconds, findTarget: (id) => targets.get(id), box });

    return {
      loops: [
        {
          // The control plane's own backup when backups.control_plane.cron says it is due.
          name: 'backups:control-plane',
          once: true,
          intervalMs: settings.schedule_check_seconds * 1000,
          run: () => controlPlane.checkDue(),
        },
        {
          // Starts the backups of the schedules that are due.
          name: 'backups:schedules',
          once: true,
          intervalMs: settings.schedule_check_seconds * 1000,
          run: runDueSchedules,
        },
        {
          // Records the outcome of runs no process follows (a control plane restarted or another one queued them).
          name: 'backups:settle',
          once: true,
          intervalMs: 15_000,
          async run() {
            for (const run of await runs.findAll({ status: 'running' })) {
              if (!run.task_id) {
                await abandoned(run);
                continue;
              }
              await record(run, await services.tasks.get(run.task_id));
            }
            // Runs whose control plane died while stopping their workloads, and workloads not brought back.
            await stops.settle();
          },
        },
      ],
      async resume() {
        const running = await runs.findAll({ status: 'running' });
        for (const run of running) follow(run);
        // Workloads a previous process stopped and did not bring back: in the background (a busy one is waited for).
        jobs.run('bringing back workloads stopped for backups and restores', async () => void (await stops.settleAtStart()), (err) => log.warn({ error: err.message }, 'bringing back stopped workloads failed; the settle loop tries again'), { resumable: false });
        return running.map((r) => `volume ${r.volume_id}: ${r.operation} ${r.id} (task ${r.task_id})`);
      },
      routes: [
        ...controlPlane.routes,
        defineRoute({
          method: 'POST',
          path: '/v1/backups/targets',
          auth: { role: 'admin' },
          summary: 'Create a backup target for a restic repository, in a project: an S3 bucket (and prefix), checked first by writing, reading and deleting a probe object; or a folder of a node (kind local) for the volumes of that node, checked by its agent the same way with a probe file (400 naming what failed)',
          status: 201,
          schemas: { body: CreateTarget, response: Target },
          async handler(req) {
            const body = req.body;
            const kind = body.kind ?? 's3';
            requireKindFields(body, kind);
            // The agent writes there as root, on a machine of the installation (not of a project).
            if (kind === 'local' && !unlimitedAdmin(req.principal)) throw forbidden('A local backup target is a folder its node’s agent writes as root: only an installation admin makes one');
            const projectId = await projectForNew(services, req.principal, body.project_id);
            if (await targets.findOne({ name: body.name })) throw conflict(`A backup target named ${body.name} exists`);
            const where = kind === 'local' ? await checkLocalTarget(body.node_id!, body.path!, projectId, req.principal) : await checkS3Target(body);
            // Again after the agent's check (seconds): a volume or target made meanwhile in or around the folder.
            if (kind === 'local') await requireClearFolder(where.node_id!, where.path!);
            const values = { id: newId('bkt'), name: body.name, kind, ...where, password_sealed: box.seal(randomBytes(32).toString('base64url')), project_id: projectId, checked_at: now(), created_at: now(), updated_at: now() };
            try {
              if (kind !== 'local') return targetView(await targets.insert(values));
              // A local target holds its node's grant: written with the node's row locked, its grants checked again (a revoke meanwhile).
              const node = await nodes.require(where.node_id!);
              return targetView(
                await db.knex.transaction(async (trx) => {
                  await nodes.lock(node.id, trx);
                  await requireNodeServes(services.provided, req.principal, node, node.id, projectId, 'the new target’s', trx);
                  return targets.insert(values, trx);
                }),
              );
            } catch (err) {
              if (isUniqueViolation(err)) throw conflict(`A backup target named ${body.name} exists`);
              throw err;
            }
          },
        }),
        ...readRoutes({
          path: '/v1/backups/targets',
          summaries: { list: 'List backup targets (never their keys or repository passwords)', get: 'Get a backup target by id or name (never its keys or repository password)' },
          page: (options) => targets.page(options),
          find: requireTarget,
          view: targetView,
          response: Target,
          scope: TARGET,
        }),
        defineRoute({
          method: 'DELETE',
          path: '/v1/backups/targets/{id}',
          auth: { role: 'admin' },
          scope: { of: [{ ...TARGET, from: 'params.id' }] },
          summary: 'Delete a backup target: 409 while backups recorded on it exist unless force (which forgets them too); the bucket’s objects stay',
          status: 204,
          schemas: {
            params: IdParams,
            query: Type.Object({ force: Type.Optional(Type.Boolean({ description: 'delete it with the records of its backups (the repository stays in the bucket)' })) }, { additionalProperties: false }),
          },
          async handler(req) {
            const target = await requireTarget(req.params.id);
            if (settings.control_plane.target === target.id) throw conflict(`Backup target ${target.name} holds the control plane's own backups (backups.control_plane.target): name another target there first`);
            const scheduled = (await schedules.findAll({ target_id: target.id })).map((x) => x.name);
            if (scheduled.length) throw conflict(`Backup target ${target.name} is used by backup schedule(s) ${scheduled.join(', ')}: delete them first`);
            const running = (await runs.query().where({ target_id: target.id }).whereIn('status', ['stopping', 'running']).first().then((r) => (r ? runs.decode(r) : null))) as RunRecord | null;
            if (running) throw conflict(`Backup target ${target.name} is in use by a running ${running.operation} (${running.id}); try again when it has finished`);
            const snapshots = await runs.findAll({ target_id: target.id, operation: 'backup', status: 'succeeded' });
            if (snapshots.length && !req.query.force) {
              throw conflict(`Backup target ${target.name} holds ${snapshots.length} backup(s) of volumes (${[...new Set(snapshots.map((s) => s.volume_id))].join(', ')}); delete with force=true to forget them (the bucket keeps the repository)`);
            }
            await db.knex.transaction(async (trx) => {
              await runs.query(trx).where({ target_id: target.id }).delete();
              await targets.remove(target.id, trx);
            });
            return Reply.noContent();
          },
        }),
        defineRoute({
          method: 'POST',
          path: '/v1/backups/schedules',
          auth: { role: 'admin' },
          // In its target's project, backing up volumes of that project (volumes:backup there).
          scope: { of: [{ ...TARGET, from: 'body.target_id' }, { kind: 'volume', from: 'body.volume_ids[]', permission: 'volumes:backup' }] },
          summary: 'Create a backup schedule: volumes (by id or name, and by tag) backed up to a target every every_seconds (the first at once) or on a cron expression (UTC), with a retention (keep_last/daily/weekly/monthly) applied by restic forget --prune after each, and optional pre/post commands around each',
          status: 201,
          schemas: { body: CreateSchedule, response: Schedule },
          async handler(req) {
            const body = req.body;
            const at = now();
            const when = whenOf(body, new Date(at));
            if (!body.volume_ids && !body.volume_tags) {
              throw badRequest('Validation failed: body: give volume_ids, volume_tags or both (the volumes it backs up)', [{ path: 'body.volume_ids', message: 'give volume_ids or volume_tags' }]);
            }
            if (body.volume_tags) requireTags('body.volume_tags');
            // One that does not exist answers as another project's (core/auth/scope.ts): 404.
            const target = await requireTarget(body.target_id);
            const volumeIds: string[] = [];
            for (const ref of body.volume_ids ?? []) {
              const volume = await volumes.require(ref);
              requireServes(target, volume);
              volumeIds.push(volume.id);
            }
            const commands = await hooks.resolveBoth(body, { kind: TARGET.kind, id: target.id, permission: 'backups:write' }, req.principal);
            try {
              return scheduleView(
                await schedules.insert({
                  id: newId('bks'),
                  name: body.name,
                  target_id: target.id,
                  project_id: await projectOf(TARGET.kind, target.id),
                  volume_ids: [...new Set(volumeIds)],
                  volume_tags: body.volume_tags ?? null,
                  every_seconds: body.every_seconds ?? null,
                  cron: when.cron,
                  keep_last: body.keep_last ?? null,
                  keep_daily: body.keep_daily ?? null,
                  keep_weekly: body.keep_weekly ?? null,
                  keep_monthly: body.keep_monthly ?? null,
                  verify: body.verify === true,
                  consistency: body.consistency ?? 'live',
                  ...commands,
                  next_run_at: when.first,
                  last_run_at: null,
                  created_at: at,
                  updated_at: at,
                }),
              );
            } catch (err) {
              if (isUniqueViolation(err)) throw conflict(`A backup schedule named ${body.name} exists`);
              throw err;
            }
          },
        }),
        ...readRoutes({
          path: '/v1/backups/schedules',
          summaries: { list: 'List backup schedules', get: 'Get a backup schedule by id or name' },
          page: (options) => schedules.page(options),
          find: async (idOrName: string) => {
            const found = await schedules.findByIdOrName(idOrName);
            if (!found) throw notFound(`No backup schedule ${idOrName}`);
            return found;
          },
          view: scheduleView,
          response: Schedule,
          scope: SCHEDULE,
        }),
        defineRoute({
          method: 'DELETE',
          path: '/v1/backups/schedules/{id}',
          auth: { role: 'admin' },
          scope: { of: [{ ...SCHEDULE, from: 'params.id' }] },
          summary: 'Delete a backup schedule (its backups and the running ones stay)',
          status: 204,
          schemas: { params: IdParams },
          async handler(req) {
            const found = await schedules.findByIdOrName(req.params.id);
            if (!found) throw notFound(`No backup schedule ${req.params.id}`);
            await schedules.remove(found.id);
            return Reply.noContent();
          },
        }),
        defineRoute({
          method: 'POST',
          path: '/v1/volumes/{id}/backups',
          auth: { role: 'admin' },
          // The target in the volume's project, which the caller sees (backups:read there).
          scope: { of: [...OF_VOLUME.of!, { ...TARGET, from: 'body.target_id', permission: 'backups:read' }] },
          permission: 'volumes:backup',
          summary: 'Back a volume up to a target with restic, on the agent of the node holding its folder (202 with the task), optionally between a pre and a post command run in a workload’s container (a dump); 409 when that node has no restic, or the workload runs no container',
          status: 202,
          schemas: {
            params: VolumeIdParams,
            body: Type.Object({ target_id: Type.String({ minLength: 1, maxLength: 100 }), verify: Verify, consistency: Consistency, pre: Type.Optional(PreHook), post: Type.Optional(PostHook) }, { additionalProperties: false }),
            response: Run,
          },
          async handler(req) {
            const volume = await volumes.require(req.params.id);
            const target = await requireTarget(req.body.target_id);
            const commands = await hooks.resolveBoth(req.body, { kind: 'volume', id: volume.id, permission: 'volumes:backup' }, req.principal);
            const { task, run } = await backUp(volume, target, { verify: req.body.verify === true, consistency: req.body.consistency, ...commands });
            return Reply.accepted({ task_id: task.id, backup: runView(run) });
          },
        }),
        listRuns('backup', 'A volume’s backups, oldest first: restic snapshot id, time, size, files, duration, status'),
        defineRoute({
          method: 'GET',
          path: '/v1/backups',
          auth: 'authenticated',
          // Read as a volume's backups are (GET /v1/volumes/{id}/backups): each where its volume's project grants volumes:read.
          permission: 'volumes:read',
          scope: { list: RUN.kind },
          summary: 'Every volume’s backups at once, oldest first (those of volumes deleted since too, which can still be restored into a new volume), optionally of one volume, one target or one status',
          schemas: { query: BackupListQuery, response: Type.Array(Run) },
          handler: (req) =>
            pageOfRuns((q) => {
              q.where({ operation: 'backup' });
              if (req.query.volume_id) q.where({ volume_id: req.query.volume_id });
              if (req.query.target_id) q.where({ target_id: req.query.target_id });
              if (req.query.status) q.where({ status: req.query.status });
            }, req.query),
        }),
        defineRoute({
          method: 'POST',
          path: '/v1/volumes/{id}/restore',
          auth: { role: 'admin' },
          scope: OF_VOLUME,
          permission: 'volumes:restore',
          summary: 'Restore one of a volume’s backups into it (202 with the task): its folder then holds exactly the snapshot; 409 while a workload uses the volume, unless stop_workloads (they are stopped first and brought back after)',
          status: 202,
          schemas: {
            params: VolumeIdParams,
            body: Type.Object(
              {
                snapshot_id: Type.String({ minLength: 1, maxLength: 64, description: 'a backup of this volume: its id (bak-…) or restic’s snapshot id (8 or more hex digits)' }),
                stop_workloads: Type.Optional(
                  Type.Boolean({ description: 'a volume in use: its workloads are scaled to zero first and brought back to their replicas after the restore, also when it fails (without it: 409)' }),
                ),
              },
              { additionalProperties: false },
            ),
            response: Run,
          },
          async handler(req) {
            const volume = await volumes.require(req.params.id);
            const ref = req.body.snapshot_id;
            const backups = await runs.findAll({ volume_id: volume.id, operation: 'backup', status: 'succeeded' });
            const source = backups.find((b) => b.id === ref) ?? (/^[0-9a-f]{8,64}$/.test(ref) ? backups.find((b) => b.snapshot_id?.startsWith(ref)) : undefined);
            if (!source) throw notFound(`No finished backup ${ref} of volume ${volume.name}`);
            // One restore of a volume at a time: a second one's stop_workloads would find them stopped already, and the first's return would bring them back under it.
            const restoring = await runs.findOne({ volume_id: volume.id, operation: 'restore', status: 'running' });
            if (restoring) throw conflict(`Volume ${volume.name} is being restored (${restoring.id}): wait for it to finish`);
            const target = await requireTarget(source.target_id).catch(() => {
              throw conflict(`The target of backup ${source.id} is gone`);
            });
            requireServes(target, volume);
            const using = await usersOf(volume.id);
            const named = (users: VolumeUser[]) => users.map((u) => `${u.type} ${u.name}`).join(', ');
            if (using.length && !req.body.stop_workloads) {
              throw conflict(`Volume ${volume.name} is in use by ${named(using)}: stop or remove them before a restore, or give stop_workloads: true to have them stopped for it and brought back after`, using);
            }
            const cannot = stops.unstoppable(using);
            if (cannot.length) throw conflict(`Volume ${volume.name} is in use by ${named(cannot)}, which hangar cannot stop for a restore: stop or remove them first`, cannot);
            await requireVolumeOnResticNode(volume.id);
            const source_ = { id: source.id, snapshot_id: source.snapshot_id! };
            // The run is recorded with the workloads and their replicas before any is stopped: whatever happens to this control plane, they come back.
            const workloads = using.length ? await stops.plan(volume.id, using) : [];
            let stopping: RunRecord | undefined;
            if (workloads.length) {
              const fresh = { ...newRun('restore', volume, target.id, { snapshot_id: source_.snapshot_id, source_id: source_.id }), ...stops.stoppingFields(workloads) };
              stopping = await stops.stopAll(await insertRun({ ...fresh, task_id: null, created_at: now(), updated_at: now() }), 'restore');
            }
            const { task, run } = await queueRestore(volume, target, source_, { newVolume: false, stopping });
            return Reply.accepted({ task_id: task.id, restore: runView(run) });
          },
        }),
        listRuns('restore', 'A volume’s restores, oldest first, with their status'),
      ],
    };
  },
});

