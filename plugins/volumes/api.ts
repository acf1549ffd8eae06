import type { MountSpec } from '../../core/orchestrator.js';
import type { Services } from '../../core/plugin.js';
import type { SwarmRecord } from '../swarms/store.js';

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
   * How a workload on `swarm` mounts the volume at `target`: an NFS volume by its named definition
   * (made sure to exist on every member of the swarm), a local one as a bind on its node, with the
   * constraint that pins the workload there.
   */
  mountFor(volume: VolumeRecord, target: string, swarm: SwarmRecord): Promise<{ mount: MountSpec; constraints: string[] }>;
  registerUsers(users: VolumeUsers): void;
  /**
   * Cleanup of a volume stuck in an error state: removes its definitions and export wherever they
   * can still be reached (failures ignored) and the record, whoever uses it. False when unknown.
   */
  forceRemove(id: string): Promise<boolean>;
}

export function volumesOf(services: Services): VolumesApi {
  const api = services.provided.get('volumes') as VolumesApi | undefined;
  if (!api) throw new Error('the volumes plugin must be loaded (and listed before this plugin)');
  return api;
}
