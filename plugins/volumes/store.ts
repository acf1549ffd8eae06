import type { Clock } from '../../core/clock.js';
import { StampedRepository } from '../../core/db/repository.js';
import type { Store } from '../../core/db/store.js';
import { newId } from '../../core/ids.js';
import type { RestoreSource, VolumeRecord } from './api.js';
import { LEASE_DATES, type LeaseFields } from '../../core/lifecycle.js';
import { VOLUME_DEFINITIONS, VOLUMES } from './migrations.js';

export interface NfsExport {
  file: string;
  served: boolean;
  reason: string | null;
  /** The clients the export names (what the control plane sent; absent in records from before exports were restricted). */
  clients?: string[];
}

export type StoredVolume = VolumeRecord & LeaseFields & { nfs_export: NfsExport | null; restore_from?: RestoreSource | null };

export class VolumeStore extends StampedRepository<StoredVolume> {
  constructor(store: Store, clock: Clock) {
    super(store, VOLUMES, { json: ['nfs_export', 'restore_from'], dates: ['created_at', 'updated_at', ...LEASE_DATES] }, clock);
  }

  /** By id, or by name (names are unique). */
  find(idOrName: string): Promise<StoredVolume | null> {
    return this.findByIdOrName(idOrName);
  }
}

/** The nodes a volume is staged on, and the backend of the cluster it was staged for. */
export class DefinitionStore {
  constructor(
    private readonly store: Store,
    private readonly clock: Clock,
  ) {}

  of(volumeId: string): Promise<Array<{ node_id: string; backend: string }>> {
    return this.store.knex(VOLUME_DEFINITIONS).where({ volume_id: volumeId }).orderBy('node_id').select('node_id', 'backend');
  }

  /** Volumes defined on any of these nodes. */
  async volumesOn(nodeIds: string[]): Promise<string[]> {
    if (!nodeIds.length) return [];
    const rows: Array<{ volume_id: string }> = await this.store.knex(VOLUME_DEFINITIONS).whereIn('node_id', nodeIds).distinct('volume_id');
    return rows.map((r) => r.volume_id);
  }

  async record(volumeId: string, nodeId: string, backend: string): Promise<void> {
    await this.store
      .knex(VOLUME_DEFINITIONS)
      .insert({ id: newId('vdef'), volume_id: volumeId, node_id: nodeId, backend, created_at: this.clock.now().toISOString() })
      .onConflict(['volume_id', 'node_id'])
      .ignore();
  }

  async forget(volumeId: string, nodeId: string): Promise<void> {
    await this.store.knex(VOLUME_DEFINITIONS).where({ volume_id: volumeId, node_id: nodeId }).delete();
  }
}
