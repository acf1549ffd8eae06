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

/** What uses a volume: each workload plugin answers for its own records. */
export type VolumeUsers = (volumeId: string) => Promise<Array<{ type: string; id: string; name: string }>>;

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
   * Cleanup of a volume stuck in an error state: removes its definitions and export wherever they
   * can still be reached (failures ignored) and the record, whoever uses it. False when unknown.
   */
  forceRemove(id: string): Promise<boolean>;
}

export const VolumesRef = defineServiceRef<VolumesApi>('volumes', 'volumes (the volumes plugin)');

/** What uses volumes: every workload plugin answers for its own records (a volume in use cannot be deleted). */
export const VolumeUsersPoint = defineExtensionPoint<VolumeUsers>('volumes.users', 'volume users');

export function volumesOf(services: Services): VolumesApi {
  return services.provided.get(VolumesRef);
}
