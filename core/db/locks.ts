import { createHash } from 'node:crypto';
import type { Knex } from 'knex';
import type { Dialect } from './store.js';

/** The 64-bit PostgreSQL advisory-lock key of a lock name (the first 8 bytes of its SHA-256, signed). */
export function advisoryLockKey(name: string): string {
  return createHash('sha256').update(`hangar:${name}`).digest().readBigInt64BE(0).toString();
}

/**
 * Makes the transactions that take the lock `name` run one after the other, also across control
 * planes sharing one PostgreSQL (held until the transaction ends). On SQLite transactions are serial
 * already: a process has a single connection, and the workers of one control plane (api.workers)
 * begin theirs IMMEDIATE, taking the file's write lock (core/db/sqlite-client.ts).
 */
export async function lockForTransaction(trx: Knex.Transaction, dialect: Dialect, name: string): Promise<void> {
  if (dialect === 'postgres') await trx.raw('select pg_advisory_xact_lock(?::bigint)', [advisoryLockKey(name)]);
}
