import type { Knex } from 'knex';
import { defineTopic, type Topic } from '../../core/events.js';
import { CONTROL_PLANE_ARCHIVES, CONTROL_PLANE_FAILURES } from './migrations.js';

/** The backups plugin's contract: what other plugins import of it (importing this never loads the plugin). */

/** What a volume backup's or restore's topic carries: the run as `GET /v1/volumes/{id}/backups` (or `…/restores`) answers it. */
export type VolumeRunAnnouncement = { id: string; volume_id: string; status: string; error: string | null } & Record<string, unknown>;

/**
 * `volume.<operation>.<status>`: a backup or restore ended (succeeded, failed), or a retention
 * forgot a backup (`volume.backup.forgotten`).
 */
export function volumeRunTopic(operation: 'backup' | 'restore', status: 'succeeded' | 'failed' | 'forgotten'): Topic<VolumeRunAnnouncement> {
  return defineTopic<VolumeRunAnnouncement>(`volume.${operation}.${status}`);
}

/**
 * `volume.backup.verify_failed`: a backup's restore drill (`verify`) failed; the run says why in
 * `verify_error` (the backup itself succeeded: its snapshot is recorded, but not proven restorable).
 */
export const BackupVerifyFailed: Topic<VolumeRunAnnouncement> = defineTopic<VolumeRunAnnouncement>('volume.backup.verify_failed');

/** What the control plane's own backups' events (and the control_plane_backup_stale alert) are about: the installation's, of no project. */
export const CONTROL_PLANE_BACKUP = { type: 'control_plane', id: 'backup' } as const;

/** What the end of one of the control plane's own backups carries (`POST /v1/backups/control-plane` or its schedule). */
export interface ControlPlaneBackupAnnouncement {
  /** backups.control_plane.target (null: none configured). */
  target_id: string | null;
  trigger: 'schedule' | 'request';
  /** Succeeded: the archive's key in the bucket and its size. */
  key: string | null;
  bytes: number | null;
  /** Failed: why (no secret: the S3 error, the setting that is missing…), and how many have failed in a row since the last success. */
  error: string | null;
  failures_in_row: number;
  at: string;
}

/** `control_plane.backup.succeeded` / `control_plane.backup.failed`: one of the control plane's own backups ended. */
export const ControlPlaneBackupSucceeded: Topic<ControlPlaneBackupAnnouncement> = defineTopic<ControlPlaneBackupAnnouncement>('control_plane.backup.succeeded');
export const ControlPlaneBackupFailed: Topic<ControlPlaneBackupAnnouncement> = defineTopic<ControlPlaneBackupAnnouncement>('control_plane.backup.failed');

/** How the control plane's own backups stand, as the store records them (any control plane reads the same). */
export interface ControlPlaneBackupHealth {
  /** When the newest archive uploaded to the target was made (null: none recorded). */
  last_success_at: Date | null;
  /** The backups that failed since then, oldest first. */
  failures: Array<{ failed_at: Date; error: string }>;
}

/** The control plane's own backups to `targetId` (backups.control_plane.target): its last success and the failures since. */
export async function controlPlaneBackupHealth(knex: Knex, targetId: string | null): Promise<ControlPlaneBackupHealth> {
  const newest = targetId ? ((await knex(CONTROL_PLANE_ARCHIVES).where({ target_id: targetId }).max({ at: 'made_at' }).first()) as { at: unknown } | undefined) : undefined;
  const last_success_at = newest?.at ? new Date(newest.at as string) : null;
  const rows: Array<{ failed_at: unknown; error: string }> = await knex(CONTROL_PLANE_FAILURES).orderBy([{ column: 'failed_at' }, { column: 'id' }]).select('failed_at', 'error');
  const failures = rows.map((r) => ({ failed_at: new Date(r.failed_at as string), error: r.error })).filter((f) => !last_success_at || f.failed_at.getTime() > last_success_at.getTime());
  return { last_success_at, failures };
}
