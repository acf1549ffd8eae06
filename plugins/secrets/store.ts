import type { Clock } from '../../core/clock.js';
import { StampedRepository } from '../../core/db/repository.js';
import type { Store } from '../../core/db/store.js';
import type { ObjectKind } from './api.js';
import { SECRETS } from './migrations.js';
import { LEASE_DATES, type LeaseFields } from '../../core/lifecycle.js';

export interface ObjectRecord extends LeaseFields {
  id: string;
  kind: ObjectKind;
  name: string;
  /** The cluster the object lives on. */
  cluster_id: string;
  /** The Kubernetes namespace; '' on backends without namespaces (swarm). */
  namespace: string;
  version: number;
  runtime_name: string;
  data_sealed: string;
  retired: string[];
  created_at: string;
  updated_at: string;
  [key: string]: unknown;
}

export class ObjectStore extends StampedRepository<ObjectRecord> {
  constructor(
    store: Store,
    private readonly time: Clock,
  ) {
    super(store, SECRETS, { json: ['retired'], dates: ['created_at', 'updated_at', ...LEASE_DATES] }, time);
  }

  /** Moves to a new version only if nobody else did first; false when the version changed meanwhile. */
  async advance(record: ObjectRecord, patch: Pick<ObjectRecord, 'version' | 'runtime_name' | 'data_sealed' | 'retired'>): Promise<boolean> {
    const values = this.codec.encode({ ...patch, updated_at: this.time.now().toISOString() });
    const changed = await this.query().where({ id: record.id, version: record.version }).update(values);
    return changed > 0;
  }
}
