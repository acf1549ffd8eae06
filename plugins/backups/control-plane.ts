import { readFileSync, rmSync } from 'node:fs';
import path from 'node:path';
import { Type } from '@sinclair/typebox';
import { nextCronRun, parseCron, type CronSchedule } from '../../core/cron.js';
import { ConfigError, conflict } from '../../core/errors.js';
import { notice } from '../../core/events.js';
import { defineRoute, type RouteDef, type Services } from '../../core/plugin.js';
import type { SecretBox } from '../../core/crypto.js';
import { newId } from '../../core/ids.js';
import { deleteObject, listObjects, ProbeFailure, putObjectTagged, type ListedObject, type S3Location } from './probe.js';
import { ArchiveStore, type ArchiveRecord, type TargetRecord } from './store.js';
import { ControlPlaneBackupFailed, controlPlaneBackupHealth, ControlPlaneBackupSucceeded, type ControlPlaneBackupAnnouncement, type ControlPlaneBackupHealth } from './api.js';
import { CONTROL_PLANE_FAILURES } from './migrations.js';

/** Where control-plane archives are kept under a target's prefix (`hangar backup create --target` and the schedule). */
export const ARCHIVE_FOLDER = 'hangar-control-plane';

/** `hangar-control-plane-20261128T030000.250Z.hcpb`: the archive's name carries when it was made (UTC, sortable, two in one second apart). */
export function archiveName(at: Date): string {
  return `${ARCHIVE_FOLDER}-${at.toISOString().replace(/[-:]/g, '')}.hcpb`;
}

/** When an archive named by archiveName was made (null for another name); names of older releases have no milliseconds. */
export function archiveTime(key: string): Date | null {
  const m = /hangar-control-plane-(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})(?:\.(\d{3}))?Z\.hcpb$/.exec(key);
  return m ? new Date(Date.UTC(+m[1]!, +m[2]! - 1, +m[3]!, +m[4]!, +m[5]!, +m[6]!, +(m[7] ?? 0))) : null;
}

/**
 * When the next scheduled archive is due: the cron expression's first time after the newest
 * archive, or — with none yet — after the control plane started (null: the expression never comes).
 */
export function nextArchiveDue(cron: CronSchedule, newest: Date | null, startedAt: Date): Date | null {
  return nextCronRun(cron, newest ?? startedAt);
}

/** The longest a failing schedule waits before it tries again. */
const MAX_RETRY_MS = 3_600_000;

/**
 * When a schedule whose last backups failed may try again (null: none failed since the last
 * success): the check interval after the first failure, doubling with each one in a row, at most an
 * hour — so a target that stays unreachable is tried, and announced, a few times an hour, not at every check.
 */
export function retryAfterFailures(health: ControlPlaneBackupHealth, checkSeconds: number): Date | null {
  const last = health.failures.at(-1);
  if (!last) return null;
  const wait = Math.min(checkSeconds * 1000 * 2 ** Math.min(health.failures.length - 1, 20), MAX_RETRY_MS);
  return new Date(last.failed_at.getTime() + wait);
}

/** The folder of a target's control-plane archives, with the target's own keys (opened with this control plane's box). */
export function archiveLocation(target: TargetRecord, box: SecretBox): S3Location {
  return {
    endpoint: target.endpoint,
    bucket: target.bucket,
    prefix: target.prefix ? `${target.prefix}/${ARCHIVE_FOLDER}` : ARCHIVE_FOLDER,
    region: target.region,
    credentials: { accessKeyId: target.access_key_id, secretAccessKey: box.openString(target.secret_sealed) },
  };
}

/** How far ahead of this machine's clock an archive's name may be (another machine's clock) before it is not believed. */
const CLOCK_SKEW_MS = 10 * 60_000;

/**
 * When the archives in a folder were made, as far as the schedule believes them: the newest whose
 * name is not in the future (a name written by a machine whose clock ran ahead, or by anyone with
 * the bucket's keys, must not stop the schedule or hold the gauge).
 */
export function newestArchiveTime(archives: readonly ListedObject[], now: Date): Date | null {
  const believed = believedArchives(archives, now);
  return believed.length ? archiveTime(believed.at(-1)!.key) : null;
}

/** The archives (oldest first) whose names say when they were made, not later than now (and a clock's skew). */
export function believedArchives(archives: readonly ListedObject[], now: Date): ListedObject[] {
  return archives.filter((a) => (archiveTime(a.key)?.getTime() ?? Infinity) <= now.getTime() + CLOCK_SKEW_MS);
}

/**
 * The listed archives this installation recorded uploading (same key, same size, and the same ETag
 * when both are known), oldest first: what the schedule and keep_last believe. A name anyone with
 * the bucket's keys writes there, or an archive of ours overwritten, is not among them.
 */
export function recordedArchives(listed: readonly ListedObject[], recorded: readonly ArchiveRecord[]): ListedObject[] {
  const byKey = new Map(recorded.map((r) => [r.key, r]));
  return listed.filter((o) => {
    const r = byKey.get(o.key);
    return !!r && r.bytes === o.size && (!r.etag || !o.etag || r.etag === o.etag);
  });
}

/** The archives in a folder, oldest first. */
export async function listArchives(location: S3Location): Promise<ListedObject[]> {
  const folder = location.prefix ? `${location.prefix}/` : '';
  const inFolder = await listObjects({ ...location, prefix: '' }, folder);
  return inFolder.filter((o) => o.key.endsWith('.hcpb') && !o.key.slice(folder.length).includes('/')).sort((a, b) => (a.key < b.key ? -1 : 1));
}

/** `backups.control_plane`: the control plane's own backups on a cron expression, to a target. */
export const ControlPlaneBackupSettings = Type.Object(
  {
    target: Type.Union([Type.String({ pattern: '^bkt-[A-Za-z0-9]+$' }), Type.Null()], {
      default: null,
      description: 'the id (bkt-…) of the backup target the archives go to — an id, not a name, which a project maintainer could free and take again; null: no control-plane backups',
    }),
    cron: Type.Union([Type.String({ minLength: 1 }), Type.Null()], { default: null, description: 'when (five cron fields or @daily…, UTC), e.g. "0 3 * * *"' }),
    passphrase_file: Type.Union([Type.String({ minLength: 1 }), Type.Null()], { default: null, description: 'a file holding the archives’ passphrase (12 characters or more; one trailing newline dropped)' }),
    keep_last: Type.Integer({ minimum: 1, maximum: 1000, default: 7, description: 'how many archives to keep in the target; older ones are deleted after a backup' }),
  },
  { additionalProperties: false, default: {} },
);

export interface ControlPlaneBackupConfig {
  target: string | null;
  cron: string | null;
  passphrase_file: string | null;
  keep_last: number;
}

const Archive = Type.Object({
  key: Type.String({ description: 'the object key in the bucket' }),
  bytes: Type.Integer(),
  created_at: Type.String({ description: 'when it was made (from its name)' }),
});

const ListedArchive = Type.Object({
  ...Archive.properties,
  recorded: Type.Boolean({ description: 'this installation recorded uploading it (key, size, ETag): the schedule and keep_last believe only these' }),
});

const nullableTime = (description: string) => Type.Union([Type.String({ format: 'date-time' }), Type.Null()], { description });

const BackupState = Type.Object({
  target_id: Type.Union([Type.String(), Type.Null()], { description: 'backups.control_plane.target (null: the control plane is not backed up)' }),
  scheduled: Type.Boolean({ description: 'backups.control_plane.cron is set: archives are made on it' }),
  last_success_at: nullableTime('when the newest archive uploaded to the target was made (null: none recorded)'),
  consecutive_failures: Type.Integer({ minimum: 0, description: 'backups (scheduled or requested) that failed since the last success' }),
  last_failure_at: nullableTime('when the newest of those failed'),
  last_error: Type.Union([Type.String(), Type.Null()], { description: 'why it failed: the S3 error or the setting at fault, never a key or the passphrase' }),
  next_retry_at: nullableTime('after failures, the earliest the schedule tries again (it backs off)'),
});

/** backups.control_plane.cron, or a configuration error naming it (hangar serve exits 2 with the message). */
function parsedCron(expression: string): CronSchedule {
  try {
    return parseCron(expression, 'backups.control_plane.cron');
  } catch (err) {
    throw new ConfigError((err as Error).message);
  }
}

interface Deps {
  services: Services;
  settings: ControlPlaneBackupConfig;
  /** backups.schedule_check_seconds: how often the schedule is checked (a failing one's first back-off). */
  checkSeconds: number;
  /** The target by id (never by name: a name can be freed and taken again by a project's maintainer). */
  findTarget(id: string): Promise<TargetRecord | null>;
  box: SecretBox;
}

/**
 * The control plane's own backup, made by the server: on `backups.control_plane.cron` (one control
 * plane at a time) and on `POST /v1/backups/control-plane`. What is due is read from the bucket
 * itself (the newest archive's time), so a restarted or another control plane carries on the same
 * schedule, and one missed while every control plane was down runs once at the next check.
 */
export function controlPlaneBackups({ services, settings, checkSeconds, findTarget, box }: Deps): { routes: RouteDef[]; checkDue(): Promise<void> } {
  const log = services.log.child({ plugin: 'backups', part: 'control-plane' });
  const { knex } = services.db;
  const cron = settings.cron ? parsedCron(settings.cron) : null;
  const startedAt = services.clock.now();
  const health = () => controlPlaneBackupHealth(knex, settings.target);
  services.metrics.gauge(
    'hangar_control_plane_backup_last_success_timestamp_seconds',
    'When the newest control-plane archive this installation uploaded to backups.control_plane.target was made (Unix seconds); alert when it is too long ago',
    [],
    async (set) => {
      const at = (await health()).last_success_at;
      if (at) set({}, Math.floor(at.getTime() / 1000));
    },
    'store',
  );
  services.metrics.gauge(
    'hangar_control_plane_backup_consecutive_failures',
    'The control plane’s own backups (scheduled or requested) that failed since its last successful one',
    [],
    async (set) => set({}, (await health()).failures.length),
    'store',
  );
  let running: Promise<unknown> | null = null;
  const uploads = new ArchiveStore(services.db);

  /**
   * Records a failed backup of the control plane with its `control_plane.backup.failed` event (the
   * notifications' outbox rows in the same transaction), and logs it. The reason is an error's
   * message: the S3 error or the setting at fault, never a key or the passphrase.
   */
  async function recordFailure(trigger: ControlPlaneBackupAnnouncement['trigger'], err: unknown): Promise<void> {
    const error = (err as Error).message;
    const at = services.clock.now().toISOString();
    const failed: ControlPlaneBackupAnnouncement = { target_id: settings.target, trigger, key: null, bytes: null, error, failures_in_row: (await health()).failures.length + 1, at };
    log.warn({ trigger, target_id: settings.target, error }, 'control-plane backup failed');
    try {
      await services.events.keepWith(knex, [notice(ControlPlaneBackupFailed, failed)], (trx) => (trx ?? knex)(CONTROL_PLANE_FAILURES).insert({ id: newId('cpf'), target_id: settings.target, trigger, error, failed_at: at }), { log });
    } catch (recordErr) {
      log.error({ err: { message: (recordErr as Error).message } }, 'a failed control-plane backup was not recorded');
      return;
    }
    services.events.publish(ControlPlaneBackupFailed, failed);
  }

  async function configured(): Promise<{ target: TargetRecord; location: S3Location; passphrase: string }> {
    if (!settings.target || !settings.passphrase_file) {
      throw conflict('Control-plane backups are not configured: set backups.control_plane.target and backups.control_plane.passphrase_file (docs/backups.md#the-control-plane)');
    }
    const target = await findTarget(settings.target);
    if (!target) throw conflict(`backups.control_plane.target names no backup target: ${settings.target} (hangar backup target list shows their ids)`);
    if (target.kind === 'local') throw conflict(`backups.control_plane.target names ${target.name}, a local target (a folder of node ${target.node_id}): the control plane writes its archives to S3 targets only`);
    let passphrase: string;
    try {
      passphrase = readFileSync(settings.passphrase_file, 'utf8').replace(/\r?\n$/, '');
    } catch (err) {
      throw conflict(`backups.control_plane.passphrase_file ${settings.passphrase_file}: cannot read it (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`);
    }
    return { target, location: archiveLocation(target, box), passphrase };
  }

  const s3Conflict = (err: unknown, doing: string) => (err instanceof ProbeFailure ? conflict(`${doing} failed: ${err.message}`) : err);

  /**
   * One archive, uploaded and recorded (the failures before it cleared, `control_plane.backup.succeeded`
   * in the same transaction), then the oldest beyond keep_last deleted. One at a time in this process;
   * with a target configured, a failure is recorded and announced ({@link recordFailure}).
   */
  async function backUpNow(trigger: ControlPlaneBackupAnnouncement['trigger']): Promise<{ key: string; bytes: number; created_at: string }> {
    if (running) throw conflict('A control-plane backup is running: wait for it');
    const work = (async () => {
      const { target, location, passphrase } = await configured();
      const [{ createControlPlaneBackup, makeStaging, operatorConfiguration }, { checkPassphrase }] = await Promise.all([import('../../core/backup/control-plane.js'), import('../../core/backup/archive.js')]);
      checkPassphrase(passphrase);
      const at = services.clock.now();
      const name = archiveName(at);
      const staging = makeStaging(services.config.data_dir);
      try {
        const file = path.join(staging, name);
        const made = await createControlPlaneBackup({ config: services.config, operatorConfig: operatorConfiguration(undefined, process.env), passphrase, file, overwrite: true, stagingParent: staging });
        let uploaded: { key: string; etag: string | null };
        try {
          uploaded = await putObjectTagged(location, name, readFileSync(file));
        } catch (err) {
          throw s3Conflict(err, `uploading to backup target ${target.name}`);
        }
        const key = uploaded.key;
        const succeeded: ControlPlaneBackupAnnouncement = { target_id: target.id, trigger, key, bytes: made.bytes, error: null, failures_in_row: 0, at: services.clock.now().toISOString() };
        await services.events.keepWith(
          knex,
          [notice(ControlPlaneBackupSucceeded, succeeded)],
          async (trx) => {
            await uploads.insert({ id: newId('cpa'), target_id: target.id, key, bytes: made.bytes, etag: uploaded.etag, made_at: at.toISOString(), created_at: succeeded.at }, trx);
            await (trx ?? knex)(CONTROL_PLANE_FAILURES).where('failed_at', '<=', succeeded.at).delete();
          },
          { log },
        );
        services.events.publish(ControlPlaneBackupSucceeded, succeeded);
        // keep_last counts the archives it recorded uploading; another name there (anyone with the bucket's keys may write one) is left alone.
        const recorded = await uploads.ofTarget(target.id);
        for (const old of recorded.slice(0, Math.max(0, recorded.length - settings.keep_last))) {
          try {
            await deleteObject({ ...location, prefix: '' }, old.key);
            await uploads.remove(old.id);
          } catch (err) {
            log.warn({ key: old.key, error: (err as Error).message }, 'an old control-plane archive was not deleted');
          }
        }
        log.info({ target_id: target.id, key, bytes: made.bytes }, 'control-plane backup uploaded');
        return { key, bytes: made.bytes, created_at: at.toISOString() };
      } finally {
        rmSync(staging, { recursive: true, force: true });
      }
    })();
    running = work;
    try {
      return await work;
    } catch (err) {
      // Without a target there is no backup to fail: the request is refused (409 naming what to set).
      if (settings.target) await recordFailure(trigger, err);
      throw err;
    } finally {
      running = null;
    }
  }

  async function checkDue(): Promise<void> {
    if (!cron || !settings.target) return;
    const now = services.clock.now().getTime();
    const standing = await health();
    const retryAt = retryAfterFailures(standing, checkSeconds);
    if (retryAt && retryAt.getTime() > now) return;
    const isDue = (newest: Date | null) => (nextArchiveDue(cron, newest, startedAt)?.getTime() ?? Infinity) <= now;
    let newest: Date | null;
    try {
      const { target, location } = await configured();
      // The newest archive it recorded uploading that is still there as uploaded: a name written by anyone else does not hold the schedule back.
      const listed = await listArchives(location).catch((err: unknown) => {
        throw s3Conflict(err, `listing backup target ${target.name}`);
      });
      newest = newestArchiveTime(recordedArchives(listed, await uploads.ofTarget(target.id)), services.clock.now());
    } catch (err) {
      // The target cannot be read (or is not there): judged by the store's record of the last upload, a backup due now has failed.
      if (isDue(standing.last_success_at)) await recordFailure('schedule', err);
      else log.warn({ error: (err as Error).message }, 'the control-plane backups’ target could not be listed; no backup is due');
      return;
    }
    // A failure is recorded, announced and logged by backUpNow; the loop has nothing to add.
    if (isDue(newest)) await backUpNow('schedule').catch(() => undefined);
  }

  const routes: RouteDef[] = [
    defineRoute({
      method: 'POST',
      path: '/v1/backups/control-plane',
      auth: { role: 'admin' },
      // The installation's own kind: no project role grants it, and backups:read (which users hold for volumes' backups) does not open it.
      permission: 'control-plane:backup',
      summary: 'Back the control plane up now into an encrypted archive, uploaded to backups.control_plane.target (409 when that is not configured or a backup runs); answers when it is uploaded',
      status: 201,
      schemas: { response: Archive },
      handler: () => backUpNow('request'),
    }),
    defineRoute({
      method: 'GET',
      path: '/v1/backups/control-plane',
      auth: { role: 'admin' },
      permission: 'control-plane:read',
      summary: 'List the control-plane archives in backups.control_plane.target, oldest first, each saying whether this installation recorded uploading it (409 when it is not configured)',
      schemas: { response: Type.Array(ListedArchive) },
      errors: [409],
      async handler() {
        const { target, location } = await configured();
        try {
          const listed = await listArchives(location);
          const ours = new Set(recordedArchives(listed, await uploads.ofTarget(target.id)).map((a) => a.key));
          return listed.map((a) => ({ key: a.key, bytes: a.size, created_at: archiveTime(a.key)?.toISOString() ?? a.last_modified, recorded: ours.has(a.key) }));
        } catch (err) {
          throw s3Conflict(err, `listing backup target ${target.name}`);
        }
      },
    }),
    defineRoute({
      method: 'GET',
      path: '/v1/backups/control-plane/state',
      auth: { role: 'admin' },
      permission: 'control-plane:read',
      summary: 'How the control plane’s own backups stand, as the store records them: the last success, the failures in a row since and the last error (no secret); read without reaching the target',
      schemas: { response: BackupState },
      async handler() {
        const standing = await health();
        const last = standing.failures.at(-1);
        const retryAt = cron ? retryAfterFailures(standing, checkSeconds) : null;
        return {
          target_id: settings.target,
          scheduled: cron !== null && settings.target !== null,
          last_success_at: standing.last_success_at?.toISOString() ?? null,
          consecutive_failures: standing.failures.length,
          last_failure_at: last?.failed_at.toISOString() ?? null,
          last_error: last?.error ?? null,
          next_retry_at: retryAt?.toISOString() ?? null,
        };
      },
    }),
  ];
  return { routes, checkDue };
}
