import { Type } from '@sinclair/typebox';
import { defineTaskKind, sensitive } from './kinds.js';
import { Nullable } from '../validation.js';

/** The first agent version that backs volumes up with restic. */
export const BACKUP_AGENT_VERSION = '0.2.0';

/**
 * Where a restic repository is and how to open it. The secret values travel in the (sealed)
 * payload and reach restic through its environment, never its command line.
 */
export const ResticRepository = Type.Object({
  repository: Type.String({ minLength: 4, maxLength: 2048, description: 'restic repository: s3:https://host/bucket/prefix, or local:/folder on the node (a local target)' }),
  region: Type.Optional(Type.String({ minLength: 1, maxLength: 64, description: 'an S3 repository’s' })),
  access_key_id: Type.Optional(Type.String({ minLength: 1, maxLength: 256, description: 'an S3 repository’s' })),
  secret_access_key: Type.Optional(sensitive(Type.String({ minLength: 1, maxLength: 1024, description: 'an S3 repository’s' }))),
  password: sensitive(Type.String({ minLength: 16, maxLength: 1024 })),
});

/**
 * Which of a volume's snapshots to keep after a backup (restic forget --keep-* --prune, over the
 * snapshots tagged with the volume); at least one rule.
 */
export const Retention = Type.Object(
  {
    keep_last: Type.Optional(Type.Integer({ minimum: 1, maximum: 10_000 })),
    keep_daily: Type.Optional(Type.Integer({ minimum: 1, maximum: 10_000 })),
    keep_weekly: Type.Optional(Type.Integer({ minimum: 1, maximum: 10_000 })),
    keep_monthly: Type.Optional(Type.Integer({ minimum: 1, maximum: 10_000 })),
  },
  { additionalProperties: false },
);

const VolumeFolder = {
  volume_id: Type.String({ minLength: 1, maxLength: 64 }),
  folder: Type.String({ pattern: '^/', maxLength: 1024 }),
};

/**
 * Backs a volume's folder up with restic (the repository is initialised when it does not exist
 * yet); answers restic's summary. In the maintenance lane: a backup may take hours and must not
 * hold up the host lane's overlay and volume shares.
 */
export const VolumeBackup = defineTaskKind({
  name: 'volume.backup',
  description: 'back a volume’s folder up with restic to a repository (initialised when missing)',
  lane: 'maintenance',
  minAgentVersion: BACKUP_AGENT_VERSION,
  payload: Type.Object({
    ...VolumeFolder,
    backup_id: Type.String({ minLength: 1, maxLength: 64 }),
    ...ResticRepository.properties,
    retention: Type.Optional(Retention),
    verify: Type.Optional(
      Type.Boolean({
        description:
          'a restore drill after the backup (and its retention): restic check with a data subset, the snapshot restored into a scratch folder with --verify, and the restored tree compared with restic’s listing of the snapshot',
      }),
    ),
  }),
  result: Type.Object({
    snapshot_id: Type.String({ minLength: 1 }),
    forgotten: Type.Optional(Type.Array(Type.String(), { description: 'the snapshots of the volume that the retention removed (restic forget --prune), short ids' })),
    retention_error: Type.Optional(Type.String({ description: 'why the retention failed (the snapshot was made)' })),
    files: Type.Integer({ minimum: 0 }),
    bytes: Type.Number({ minimum: 0 }),
    bytes_added: Type.Number({ minimum: 0 }),
    duration_seconds: Type.Number({ minimum: 0 }),
    restic_version: Nullable(Type.String()),
    verified: Type.Optional(Type.Boolean({ description: 'the restore drill’s outcome (only when verify was asked)' })),
    verified_at: Type.Optional(Type.String({ description: 'when the drill ended' })),
    verify_error: Type.Optional(Type.String({ description: 'why the drill failed' })),
  }),
});

/**
 * Replaces a volume's folder contents with a snapshot: restored beside the folder first, then
 * swapped in, so that a failed restore leaves the folder as it was and a finished one holds
 * exactly the snapshot (files added since are gone). A new volume's folder (`new_volume`) is
 * filled the same way with the snapshot's own folder.
 */
export const VolumeRestore = defineTaskKind({
  name: 'volume.restore',
  description: 'restore a restic snapshot into a volume’s folder (restored beside it, then swapped in)',
  lane: 'maintenance',
  minAgentVersion: BACKUP_AGENT_VERSION,
  payload: Type.Object({
    ...VolumeFolder,
    snapshot_id: Type.String({ pattern: '^[0-9a-f]{8,64}$' }),
    new_volume: Type.Optional(
      Type.Boolean({ description: 'a new volume (POST /v1/volumes {restore_from}): its folder must be missing or empty, and the snapshot’s own folder (another volume’s) is what fills it' }),
    ),
    ...ResticRepository.properties,
  }),
  result: Type.Object({ snapshot_id: Type.String(), entries: Type.Integer({ minimum: 0 }), duration_seconds: Type.Number({ minimum: 0 }) }),
});

/** The first agent version that checks a local target's folder. */
export const LOCAL_TARGET_AGENT_VERSION = '0.3.0';

/**
 * Checks the folder of a local backup target on its node: made when missing (0700), then a probe
 * file written, read back (the same bytes) and deleted; fails naming the step that did.
 */
export const BackupFolderCheck = defineTaskKind({
  name: 'backup.folder-check',
  description: 'check a local backup target’s folder: make it when missing, write, read back and delete a probe file',
  lane: 'host',
  minAgentVersion: LOCAL_TARGET_AGENT_VERSION,
  payload: Type.Object({ path: Type.String({ pattern: '^/', maxLength: 1024 }) }),
  result: Type.Object({ path: Type.String() }),
});

export const BACKUP_KINDS = [VolumeBackup, VolumeRestore, BackupFolderCheck] as const;
