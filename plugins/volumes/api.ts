import type { VolumeMount } from '../../core/orchestrator.js';
import { defineExtensionPoint, defineServiceRef, type Services } from '../../core/plugin.js';
import type { ClusterRecord } from '../../core/clusters/store.js';

export interface VolumeRecord {
  id: string;
  name: string;
  node_id: string;
  folder: string;
  type: 'nfs' | 'local';
  server_ip: string | null;
  /** preparing | ready | failed | deleting */
  status: string;
  error: string | null;
  created_at: string;
  updated_at: string;
  [key: string]: unknown;
}

/** A volume staged on a cluster (a PersistentVolume and claim on Kubernetes, named volumes on a swarm's engines). */
export interface VolumeAttachment {
  volume_id: string;
  name: string;
  type: VolumeRecord['type'];
  /** Its name on the cluster (the claim's on Kubernetes). */
  runtime_name: string;
  server_ip: string | null;
  folder: string;
  node_id: string;
}

export { VolumeUsersPoint, VolumeUserStoppers, type VolumeUser, type VolumeUsers, type VolumeUserStopper } from '../../core/resources.js';

export interface VolumesApi {
  /** By id, or by name when exactly one volume has it (409 when ambiguous). */
  require(idOrName: string): Promise<VolumeRecord>;
  /**
   * How a workload on `cluster` mounts the volume at `target`: an NFS volume by its share (staged on
   * every member of the cluster first), a local one as its folder on its node (which pins the
   * workload there). 409 when the volume is not ready, or is a local folder outside the cluster.
   */
  mountFor(volume: VolumeRecord, target: string, cluster: ClusterRecord): Promise<VolumeMount>;
  /**
   * Stages an NFS volume on a cluster so that its workloads can mount it (idempotent): on
   * Kubernetes a PersistentVolume and a claim, answered once the claim is Bound. 409 when the volume
   * is not ready, is a local folder (mounted in place by a workload, nothing to stage), or staging
   * fails (the reason named). True when it was not staged there before.
   */
  attach(volume: VolumeRecord, cluster: ClusterRecord): Promise<{ attachment: VolumeAttachment; created: boolean }>;
  /** The volumes staged on a cluster's members (or on the cluster), by name. */
  attachedTo(cluster: ClusterRecord): Promise<VolumeAttachment[]>;
  /**
   * Removes a volume's staging from a cluster (the data stays): 404 when it is not staged there,
   * 409 naming what mounts it (hangar's records on that cluster, or — said by the cluster — workloads
   * hangar did not create).
   */
  detach(volume: VolumeRecord, cluster: ClusterRecord): Promise<void>;
  /**
   * Cleanup of a volume stuck in an error state: removes its definitions and export wherever they
   * can still be reached (failures ignored) and the record, whoever uses it. False when unknown.
   */
  forceRemove(id: string): Promise<boolean>;
  /** The volumes whose folder is on a node. */
  onNode(nodeId: string): Promise<VolumeRecord[]>;
}

/** A volume's name in the runtime: its named volume definitions on a swarm's engines, its claim on Kubernetes. */
export const runtimeVolumeName = (volume: Pick<VolumeRecord, 'name'>) => `hangar-vol-${volume.name}`;

export const VolumesRef = defineServiceRef<VolumesApi>('volumes', 'volumes (the volumes plugin)');

/** What uses volumes: every workload plugin answers for its own records (a volume in use cannot be deleted). */

export function volumesOf(services: Services): VolumesApi {
  return services.provided.get(VolumesRef);
}

/** Where a new volume's contents come from: a finished backup (`POST /v1/volumes {restore_from}`), as the backups plugin resolved it. */
export interface RestoreSource {
  /** hangar's backup (bak-…). */
  source_id: string;
  target_id: string;
  /** restic's snapshot id. */
  snapshot_id: string;
}

/**
 * Fills new volumes from backups (the backups plugin contributes it; volumes reads it when a create
 * names `restore_from`). The volume is `restoring` meanwhile: not mountable, not exported, not staged.
 */
export interface VolumeRestorer {
  /**
   * Resolves `restore_from` for a new volume on `nodeId` in project `projectId` (null: no projects):
   * 400 naming `body.restore_from.snapshot_id` (or `.target_id`) for an unknown or forgotten backup
   * or target, or one of another project; 409 when the node cannot run restic (saying how to add it).
   */
  resolve(from: { snapshot_id: string; target_id?: string }, nodeId: string, projectId: string | null): Promise<RestoreSource>;
  /** Starts restoring `source` into the new volume's (missing or empty) folder; answers the restore run as `GET /v1/volumes/{id}/restores` lists it. */
  start(volume: VolumeRecord, source: RestoreSource): Promise<Record<string, unknown>>;
  /**
   * Waits for the volume's restore (starting it when none was: an operation taken over before its
   * start); throws its reason when it failed.
   */
  finish(volume: VolumeRecord, source: RestoreSource, signal: AbortSignal): Promise<void>;
}

export const VolumeRestorers = defineExtensionPoint<VolumeRestorer>('volume-restorers', 'what fills a new volume from a backup (the backups plugin)');

/** Whether two normalised absolute folders overlap: the same folder, or one inside the other. */
export const foldersOverlap = (a: string, b: string) => a === b || a.startsWith(`${b}/`) || b.startsWith(`${a}/`);

/**
 * A 409's opening for `folder` on a node overlapping `held`, the folder of `holder` ("volume data"):
 * "Folder … on node … is inside the folder of …". A holder the caller may not read (null: another
 * project's, on a node shared between projects) is neither named nor its folder shown.
 */
export const folderClash = (nodeId: string, folder: string, holder: string | null, held: string) =>
  holder === null
    ? `Folder ${folder} on node ${nodeId} is taken by a resource of another project`
    : `Folder ${folder} on node ${nodeId} ${folder === held ? 'is' : folder.startsWith(`${held}/`) ? 'is inside' : 'contains'} the folder of ${holder} (${held})`;

/** Whether the caller reads a resource (its kind as its scope resolver names it, its id) with a permission: a refusal names it only then. */
export type Reads = (kind: string, id: string, permission: string) => Promise<boolean>;

/**
 * What else keeps a folder of a node, that a volume's folder may neither be, be inside nor contain
 * (a restore replaces the volume's folder whole, a backup reads it whole): the backups plugin's
 * local targets. Each answers a 409's message for the first of its folders on the node that
 * overlaps `folder`, or null; it names the holder only when the caller `reads` it.
 */
export interface NodeFolderHolder {
  refusal(nodeId: string, folder: string, reads: Reads): Promise<string | null>;
}

export const NodeFolderHolders = defineExtensionPoint<NodeFolderHolder>('volumes.node-folder-holders', 'what else keeps folders of nodes that volumes must keep clear of (backups’ local targets)');
