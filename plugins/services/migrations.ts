import { alterColumns, createTables, type Migration } from '../../core/db/migrations.js';
import { leaseColumns, markForTakeOver } from '../../core/clusters/migrations.js';
import { seedRevisions } from '../../core/clusters/revisions.js';
import { namedRecord, recordTimes } from '../../core/db/columns.js';

export const SERVICES = 'services';

export const serviceMigrations: Migration[] = [
  createTables('001_services', {
    [SERVICES]: (t) => {
      namedRecord(t);
      /** compose (a stack on a swarm); k8s comes later with cluster_id. */
      t.string('backend', 20).notNullable();
      t.string('swarm_id', 64).nullable();
      /** The spec exactly as the operator gave it (compose YAML text). */
      t.text('spec').notNullable();
      /** deploying | running | stopped | failed | removing */
      t.string('status', 20).notNullable();
      t.text('error').nullable();
      /** hangar secret and config ids the spec uses. */
      t.json('secret_refs').notNullable();
      t.json('config_refs').notNullable();
      /** {service: {desired, running}}, as last observed. */
      t.json('replicas').notNullable();
      /** [{service, domain, port}] from the x-hangar extension. */
      t.json('routes').notNullable();
      t.timestamp('observed_at', { useTz: true }).nullable();
      recordTimes(t, { paged: true });
      t.index(['swarm_id']);
    },
  }),
  {
    id: '002_cluster_id',
    async up(knex) {
      // Swarm groups became clusters (core/004_clusters): a service names the cluster it runs on.
      await knex.schema.alterTable(SERVICES, (t) => {
        t.renameColumn('swarm_id', 'cluster_id');
      });
      await knex.schema.alterTable(SERVICES, (t) => {
        leaseColumns(t);
      });
      await markForTakeOver(knex, SERVICES, { deploying: 'deploy', removing: 'remove' });
    },
  },
  // Manifest services (Kubernetes): the objects the last apply made.
  alterColumns('003_applied_objects', SERVICES, (t) => {
    t.json('applied_objects').nullable();
  }),
  {
    id: '004_revisions',
    async up(knex) {
      // Spec revisions (issue 29): every service's spec so far becomes its revision 1.
      await seedRevisions(knex, 'service', SERVICES, (row) => ({ spec: row.spec }));
    },
  },
  // Health checks declared for a service's parts (issue 29).
  alterColumns('005_health', SERVICES, (t) => {
    t.json('health').nullable();
  }),
  // Manifests inside their project (issue 30): the namespace a service's objects go in (its
  // project's, kept from its creation; null for the services made before: `default`, where they
  // stay), and whether its spec is a non-admin's, applied as the project's user there.
  alterColumns('006_namespace', SERVICES, (t) => {
    t.string('namespace', 63).nullable();
    t.boolean('confined').notNullable().defaultTo(false);
  }),
  // A rollback deploys the secret and config versions its revision used (issue 29): those that are
  // not the current ones stay with the service until a rotation of the object or a new spec.
  alterColumns('007_pinned_objects', SERVICES, (t) => {
    t.json('pinned_objects').nullable();
  }),
  // The parts whose last rollout their cluster rolled back or paused on a failure, as observed (issue 29: the rollout_halted alert).
  alterColumns('008_halted_rollouts', SERVICES, (t) => {
    t.json('halted_rollouts').nullable();
  }),
];
