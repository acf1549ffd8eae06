import type { Clock } from '../../core/clock.js';
import { StampedRepository } from '../../core/db/repository.js';
import type { Store } from '../../core/db/store.js';
import { S3_INSTANCES } from './migrations.js';
import { LEASE_DATES, type LeaseFields } from '../../core/lifecycle.js';

export type S3Status = 'deploying' | 'running' | 'stopped' | 'failed' | 'removing';

export interface S3Record extends LeaseFields {
  id: string;
  name: string;
  cluster_id: string;
  volume_id: string;
  runtime_name: string;
  image: string;
  root_user: string;
  password_sealed: string;
  cert_id: string | null;
  sso: boolean;
  domain: string;
  console_domain: string;
  status: S3Status;
  /** 1, or 0 while a restore of its volume (or a backup with consistency stop) has it stopped. */
  replicas: number;
  error: string | null;
  running: number | null;
  observed_at: string | null;
  created_at: string;
  updated_at: string;
  [key: string]: unknown;
}

export class S3Store extends StampedRepository<S3Record> {
  constructor(
    store: Store,
    clock: Clock,
  ) {
    super(store, S3_INSTANCES, { bool: ['sso'], dates: ['observed_at', 'created_at', 'updated_at', ...LEASE_DATES] }, clock);
  }

  /** By id, or by name (names are unique). */
  require(idOrName: string): Promise<S3Record> {
    return this.requireByIdOrName(idOrName, 'object store');
  }
}
