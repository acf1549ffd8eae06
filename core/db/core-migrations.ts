import { createTables, type MigrationSet } from './migrations.js';
import { CERTIFICATES_TABLE } from '../pki/pki.js';
import { agentCapabilitiesMigration, taskMigration, taskProgressMigration } from '../tasks/migrations.js';
import { rateLimitMigration } from '../ratelimit.js';
import { noticesMigration } from './notices.js';
import { keyringMigration } from '../pki/keyring.js';
import { leadershipMigration } from './leadership.js';
import { clusterMigrations, clusterProjectsMigration, memberReadinessMigration, specRevisionsMigration } from '../clusters/migrations.js';
import { storeProbeMigration } from './health.js';
import { reactionAttemptsMigration, reactionsMigration } from '../reactions.js';

/** Tables owned by core itself. */
export const coreMigrations: MigrationSet = {
  owner: 'core',
  migrations: [
    createTables('001_certificates', {
      [CERTIFICATES_TABLE]: (t) => {
        t.string('serial', 64).primary();
        t.string('node_id', 64).notNullable().index();
        t.string('issued_at', 40).notNullable();
        t.string('expires_at', 40).notNullable();
        t.string('revoked_at', 40).nullable();
      },
    }),
    taskMigration,
    rateLimitMigration,
    noticesMigration,
    keyringMigration,
    leadershipMigration,
    agentCapabilitiesMigration,
    ...clusterMigrations,
    storeProbeMigration,
    specRevisionsMigration,
    clusterProjectsMigration,
    memberReadinessMigration,
    taskProgressMigration,
    reactionsMigration,
    reactionAttemptsMigration,
  ],
};
