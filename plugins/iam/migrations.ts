import type { Knex } from 'knex';
import { alterColumns, createTables, type Migration } from '../../core/db/migrations.js';
import { USERS } from './api.js';
import { recordId } from '../../core/db/columns.js';

export { USERS };
export const USER_PROPERTIES = 'user_properties';
export const API_KEYS = 'api_keys';
export const HMAC_NONCES = 'hmac_nonces';
/** One row once the first admin has been created: bootstrap never opens again, whatever happens to admins later. */
export const BOOTSTRAP_CLAIM = 'iam_bootstrap';
export const BOOTSTRAP_CLAIM_ID = 'claimed';
/** Emails are unique among live users without regard to case: one index on lower(email). */
export const EMAIL_INDEX = `${USERS}_email_lower_unique`;

/** Live users sharing an email without regard to case, folded by the database's lower() as the index folds them. */
export async function emailClashes(db: Knex | Knex.Transaction): Promise<Array<{ email: string; users: Array<{ userid: string; username: string }> }>> {
  const rows: Array<{ userid: string; username: string; folded: string }> = await db(USERS)
    .whereNull('deleted_at')
    .whereNotNull('email')
    .orderBy('created_at')
    .select('userid', 'username', db.raw('lower(email) as folded'));
  const byEmail = new Map<string, Array<{ userid: string; username: string }>>();
  for (const r of rows) byEmail.set(r.folded, [...(byEmail.get(r.folded) ?? []), { userid: r.userid, username: r.username }]);
  return [...byEmail].filter(([, users]) => users.length > 1).map(([email, users]) => ({ email, users }));
}

/**
 * Makes emails unique without case among live users (the index on lower(email), replacing the
 * case-sensitive one) unless live users already share one: those are kept as they are, never
 * guessed between, and answered (the iam plugin names them in a warning at every start and makes
 * the index once they are told apart). Safe to call again.
 */
export async function ensureEmailIndex(db: Knex | Knex.Transaction): Promise<Awaited<ReturnType<typeof emailClashes>>> {
  const clashes = await emailClashes(db);
  if (clashes.length) return clashes;
  await db.raw(`create unique index if not exists ${EMAIL_INDEX} on ${USERS} (lower(email)) where deleted_at is null`);
  await db.raw(`drop index if exists ${USERS}_email_unique`);
  return [];
}

export const iamMigrations: Migration[] = [
  createTables('001_users', {
    [USERS]: (t) => {
      t.uuid('userid').primary();
      t.string('name', 50).nullable();
      t.string('email', 120).nullable().unique();
      t.string('username', 20).notNullable().unique();
      t.string('password', 255).notNullable();
      t.string('role', 50).notNullable().defaultTo('user');
      t.timestamp('created_at', { useTz: true }).notNullable();
      t.timestamp('updated_at', { useTz: true }).nullable();
      t.timestamp('deleted_at', { useTz: true }).nullable();
      t.index(['role', 'deleted_at']);
      t.index(['created_at', 'userid']);
    },
    [USER_PROPERTIES]: (t) => {
      t.increments('id').primary();
      t.string('name', 50).notNullable();
      t.string('value', 250).nullable();
      t.uuid('userid').notNullable().references('userid').inTable(USERS).onDelete('CASCADE');
      t.index(['userid']);
    },
    [API_KEYS]: (t) => {
      recordId(t);
      t.string('access_key_id', 40).notNullable().unique();
      t.uuid('userid').notNullable().references('userid').inTable(USERS).onDelete('CASCADE');
      t.text('secret_sealed').notNullable();
      t.string('description', 200).nullable();
      t.timestamp('created_at', { useTz: true }).notNullable();
      t.timestamp('last_used_at', { useTz: true }).nullable();
      t.index(['userid']);
    },
    [HMAC_NONCES]: (t) => {
      t.string('signature', 64).primary();
      t.timestamp('expires_at', { useTz: true }).notNullable().index();
    },
  }),
  {
    id: '002_bootstrap_claim',
    async up(knex) {
      await knex.schema.createTable(BOOTSTRAP_CLAIM, (t) => {
        t.string('id', 20).primary();
        t.uuid('userid').nullable();
        t.timestamp('claimed_at', { useTz: true }).notNullable();
      });
      // An install that already had an admin (even one deleted since) was bootstrapped.
      const admin = await knex(USERS).where({ role: 'admin' }).orderBy('created_at').first('userid');
      if (admin) await knex(BOOTSTRAP_CLAIM).insert({ id: BOOTSTRAP_CLAIM_ID, userid: admin.userid, claimed_at: new Date().toISOString() });
    },
  },
  // Bumped by every password change: tokens carry the epoch they were issued in (claim `ep`).
  alterColumns('003_token_epoch', USERS, (t) => {
    t.integer('token_epoch').notNullable().defaultTo(0);
  }),
  {
    id: '004_live_unique_names',
    async up(knex) {
      // Usernames and emails are unique among live users only: deleting a user (a soft delete that
      // keeps the row for the audit trail) frees them. Same index names, so a conflict reads as before.
      await knex.schema.alterTable(USERS, (t) => {
        t.dropUnique(['email']);
        t.dropUnique(['username']);
      });
      for (const column of ['email', 'username']) {
        await knex.raw(`create unique index ${USERS}_${column}_unique on ${USERS} (${column}) where deleted_at is null`);
      }
    },
  },
  {
    id: '005_emails_unique_without_case',
    async up(knex) {
      // Login and reset find a user by email without case, so Alice@x and alice@x are one address.
      // Users that already share one are kept (see ensureEmailIndex): the start names them.
      await ensureEmailIndex(knex);
    },
  },
  // Scoped, expiring keys (keys.ts). Every existing key keeps working as before: the
  // installation's (no project), its owner's role (no role, no permission list), no expiry,
  // from anywhere (no source networks): all null.
  alterColumns('006_scoped_keys', API_KEYS, (t) => {
    /** The project the key is limited to (a project's id; no reference: projects are a plugin of their own). */
    t.string('project_id', 64).nullable();
    /** The role it was made with (a project's or the installation's), for the record: `permissions` holds what it granted. */
    t.string('role', 63).nullable();
    /** JSON array of the permissions it is limited to; null: its owner's. */
    t.text('permissions').nullable();
    t.timestamp('expires_at', { useTz: true }).nullable();
    /** JSON array of CIDRs it is accepted from; null: anywhere. */
    t.text('source_networks').nullable();
    t.index(['project_id']);
  }),
];
