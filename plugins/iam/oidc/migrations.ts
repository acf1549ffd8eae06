import { createTables, type Migration } from '../../../core/db/migrations.js';
import { USERS } from '../api.js';
import { recordId } from '../../../core/db/columns.js';

/** Which provider account (issuer, subject) is which hangar user: the one link an SSO login follows. */
export const SSO_IDENTITIES = 'iam_sso_identities';
/** Logins under way at the provider (the dashboard's code flow, the CLI's device flow): one row each, used once. */
export const SSO_FLOWS = 'iam_sso_flows';

export const ssoMigrations: Migration[] = [
  createTables('007_sso', {
    [SSO_IDENTITIES]: (t) => {
      t.string('issuer', 2000).notNullable();
      t.string('subject', 255).notNullable();
      t.uuid('userid').notNullable().unique().references('userid').inTable(USERS).onDelete('CASCADE');
      t.timestamp('created_at', { useTz: true }).notNullable();
      t.timestamp('last_login_at', { useTz: true }).notNullable();
      t.primary(['issuer', 'subject']);
    },
    [SSO_FLOWS]: (t) => {
      /** sha256 of the handle the browser (state) or the CLI (device request) holds: the handle itself is never stored. */
      recordId(t);
      /** `browser` (authorization code + PKCE) or `device` (RFC 8628). */
      t.string('kind', 16).notNullable();
      /** sha256 of the browser's binding cookie: the callback must come from the browser that began. */
      t.string('binding', 64).nullable();
      /** Sealed JSON: the nonce, PKCE verifier and redirect URI, or the device code. */
      t.text('sealed').notNullable();
      /** Device flow: seconds to wait between polls, and the earliest next poll. */
      t.integer('interval').nullable();
      t.timestamp('next_poll_at', { useTz: true }).nullable();
      t.timestamp('created_at', { useTz: true }).notNullable();
      t.timestamp('expires_at', { useTz: true }).notNullable().index();
    },
  }),
];
