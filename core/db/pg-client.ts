import type { Knex } from 'knex';
// @ts-expect-error knex ships no types for its dialect modules
import PgClientModule from 'knex/lib/dialects/postgres/index.js';
// @ts-expect-error knex ships no types for its dialect modules
import PgTransactionModule from 'knex/lib/dialects/postgres/execution/pg-transaction.js';
import { scopedClient, scopedTransaction, type MixinBase, type RunnerClient } from './write-scope.js';

// knex's PostgreSQL client, whose statements see the request's write scope (core/db/write-scope.ts):
// a request's audit entry goes in with its first committed write, and a read whose connection was
// terminated is made again on another one.
const ScopedPgTransaction = scopedTransaction(PgTransactionModule);

class PgClient extends (PgClientModule as MixinBase<RunnerClient>) {
  transaction(...args: unknown[]): PromiseLike<unknown> {
    return new ScopedPgTransaction(this, ...args);
  }
}

export const ScopedPgClient = scopedClient(PgClient) as unknown as typeof Knex.Client;
