import { defineTopic, type Topic } from '../../core/events.js';

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
