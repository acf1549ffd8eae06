import type { Clock } from '../../core/clock.js';
import { StampedRepository } from '../../core/db/repository.js';
import type { Store } from '../../core/db/store.js';
import { newId } from '../../core/ids.js';
import type { VolumeRecord } from './api.js';
import { VOLUME_DEFINITIONS, VOLUMES } from './migrations.js';

export interface NfsExport {
  file: string;
  served: boolean;
  reason: string | null;
}

export type StoredVolume = VolumeRecord & { nfs_export: NfsExport | null };

export class VolumeStore extends StampedRepository<StoredVolume> {
  constructor(store: Store, clock: Clock) {
    super(store, VOLUMES, { json: ['nfs_export'], dates: ['created_at', 'updated_at'] }, clock);
  }

  /** By id, or by name (names are unique). */
  find(idOrName: string): Promise<StoredVolume | null> {
    return this.findByIdOrName(idOrName);
  }
}

/** The nodes a volume is defined on. */
export class DefinitionStore {
  constructor(
    private readonly store: Store,
    private readonly clock: Clock,
  ) {}

  async nodesOf(volumeId: string): Promise<string[]> {
    const rows: Array<{ node_id: string }> = await this.store.knex(VOLUME_DEFINITIONS).where({ volume_id: volumeId }).orderBy('node_id').select('node_id');
    return rows.map((r) => r.node_id);
  }

  /** Volumes defined on any of these nodes. */
  async volumesOn(nodeIds: string[]): Promise<string[]> {
    if (!nodeIds.length) return [];
    const rows: Array<{ volume_id: string }> = await this.store.knex(VOLUME_DEFINITIONS).whereIn('node_id', nodeIds).distinct('volume_id');
    return rows.map((r) => r.volume_id);
  }

  async record(volumeId: string, nodeId: string): Promise<void> {
    await this.store
      .knex(VOLUME_DEFINITIONS)
      .insert({ id: newId('vdef'), volume_id: volumeId, node_id: nodeId, created_at: this.clock.now().toISOString() })
      .onConflict(['volume_id', 'node_id'])
      .ignore();
  }

  async forget(volumeId: string, nodeId: string): Promise<void> {
    await this.store.knex(VOLUME_DEFINITIONS).where({ volume_id: volumeId, node_id: nodeId }).delete();
  }
}
