import type { Knex } from 'knex';
import type { DialectName } from '../../support/dialects.js';

/** The error the trigger below raises. */
export const FORCED = 'forced failure after the outbox insert';

/**
 * Makes inserts into the outbox (notification_deliveries) fail after they are written, as a full
 * disk or a lost connection at that point would: a trigger that raises FORCED for every inserted
 * row, or only for those `when` (SQL on `new`, e.g. `new.event like '%node-…%'`) holds. `on: false` drops it.
 */
export async function failOutboxInserts(knex: Knex, dialect: DialectName, on: boolean, when?: string): Promise<void> {
  if (dialect === 'postgres') {
    if (on) {
      await knex.raw(`create function fail_outbox() returns trigger language plpgsql as $$ begin raise exception '${FORCED}'; end $$`);
      await knex.raw(`create trigger fail_outbox after insert on notification_deliveries for each row${when ? ` when (${when})` : ''} execute function fail_outbox()`);
    } else {
      await knex.raw('drop trigger fail_outbox on notification_deliveries');
      await knex.raw('drop function fail_outbox()');
    }
  } else if (on) {
    await knex.raw(`create trigger fail_outbox after insert on notification_deliveries${when ? ` when ${when}` : ''} begin select raise(abort, '${FORCED}'); end`);
  } else {
    await knex.raw('drop trigger fail_outbox');
  }
}
