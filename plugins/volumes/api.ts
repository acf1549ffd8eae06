import type { VolumeMount } from '../../core/orchestrator.js';
import { defineServiceRef, type Services } from '../../core/plugin.js';
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

export { VolumeUsersPoint, type VolumeUser, type VolumeUsers } from '../../core/resources.js';

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
}

export const VolumesRef = defineServiceRef<VolumesApi>('volumes', 'volumes (the volumes plugin)');

/** What uses volumes: every workload plugin answers for its own records (a volume in use cannot be deleted). */

export function volumesOf(services: Services): VolumesApi {
  return services.provided.get(VolumesRef);
}
