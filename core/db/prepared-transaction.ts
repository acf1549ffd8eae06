/**
 * A transaction that core/db/writes.ts opened on a connection of its own, without knex: prepared
 * statements given it run on that connection. What it changed is read at its COMMIT.
 */
export class PreparedTransaction {
  /** It wrote a table that is not bookkeeping (core/db/write-scope.ts). */
  changed = false;
  /** Its COMMIT or ROLLBACK was sent: no statement may run in it any more. */
  completed = false;

  constructor(readonly connection: unknown) {}
}
