import type { Clock } from '../../core/clock.js';
import type { Knex } from 'knex';
import { StampedRepository } from '../../core/db/repository.js';
import type { Store } from '../../core/db/store.js';
import type { ObjectKind } from './api.js';
import { SECRET_VERSIONS, SECRETS } from './migrations.js';
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
  async advance(record: ObjectRecord, patch: Pick<ObjectRecord, 'version' | 'runtime_name' | 'data_sealed' | 'retired'>, trx?: Knex.Transaction): Promise<boolean> {
    const values = this.codec.encode({ ...patch, updated_at: this.time.now().toISOString() });
    const changed = await this.query(trx).where({ id: record.id, version: record.version }).update(values);
    return changed > 0;
  }
}

/** The sealed values of versioned objects' earlier versions (a rollback deploys them again). */
export class EarlierVersions {
  constructor(
    private readonly store: Store,
    private readonly time: Clock,
  ) {}

  private query(trx?: Knex.Transaction) {
    return (trx ?? this.store.knex)(SECRET_VERSIONS);
  }

  /**
   * Keeps a version that was just replaced (in the transaction that replaced it); only the newest
   * `keep` earlier versions of the object stay.
   */
  async keep(objectId: string, version: number, sealed: string, keep: number, trx?: Knex.Transaction): Promise<void> {
    // Kept already (a rotation retried after another control plane's): the same value.
    await this.query(trx).insert({ object_id: objectId, version, data_sealed: sealed, created_at: this.time.now().toISOString() }).onConflict(['object_id', 'version']).ignore();
    await this.query(trx).where({ object_id: objectId }).where('version', '<=', version - keep).delete();
  }

  /** The sealed value of an earlier version, or null when it is not kept. */
  async sealed(objectId: string, version: number): Promise<string | null> {
    const row = (await this.query().where({ object_id: objectId, version }).first('data_sealed')) as { data_sealed: string } | undefined;
    return row?.data_sealed ?? null;
  }

  /** The earlier versions kept of an object, oldest first. */
  async kept(objectId: string): Promise<number[]> {
    return (await this.query().where({ object_id: objectId }).orderBy('version').select('version')).map((r: { version: number | string }) => Number(r.version));
  }
}
