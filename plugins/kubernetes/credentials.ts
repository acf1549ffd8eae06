import { Type } from '@sinclair/typebox';
import type { Knex } from 'knex';
import { roleGrants, unlimitedAdmin, userGrantsOf } from '../../core/auth/permissions.js';
import { ProjectGrantsRef, type RouteScope } from '../../core/auth/scope.js';
import { asHttpError } from '../../core/clusters/calls.js';
import type { ClusterRecord } from '../../core/clusters/store.js';
import { createTables, type Migration } from '../../core/db/migrations.js';
import { conflict, forbidden } from '../../core/errors.js';
import { Reply } from '../../core/http/reply.js';
import { IdParams } from '../../core/http/resources.js';
import { defineRoute, type BackgroundLoop, type RouteDef, type Services } from '../../core/plugin.js';
import { K3sKubeconfig, K3sRevokeUserCredential, K3sUserCredential, USER_VIEW_ROLE, USERS_NAMESPACE } from '../../drivers/kubernetes/api.js';
import { IdentityRef, USER_CHANGES, type UserRecord } from '../iam/api.js';
import type { NodeRecord } from '../nodes/api.js';
import { MEMBER_CHANGES } from '../projects/api.js';

/**
 * Kubeconfigs per hangar user (docs/kubernetes.md, "Kubeconfigs"): a ServiceAccount of the user in
 * the cluster's hangar-users namespace, bound to the ClusterRole of the user's hangar role, and a
 * short-lived token of it. The control plane keeps one row per cluster and user it handed one to,
 * and deletes the ServiceAccount (every token of it refused at once) when the user is deleted, gets
 * another role, asks for it (DELETE), or the last token ran out. k3s's admin certificate is handed
 * out only to an admin who asks for it (`admin_certificate=true`), audited as every download.
 */

const CREDENTIALS = 'k8s_user_credentials';

/** A route on one Kubernetes cluster (`{id}`) acts in the cluster's project (core/auth/scope.ts). */
export const ON_CLUSTER: RouteScope = { of: [{ kind: 'cluster', from: 'params.id', noun: 'Kubernetes cluster' }] };
/** How long a token is valid unless `ttl` says otherwise, and the bounds of `ttl` (the API server's minimum is 10 minutes). */
export const KUBECONFIG_TTL = { default: 8 * 3600, min: 600, max: 24 * 3600 };
/** How often credentials are checked against their users (a notice of a user's change checks at once). */
const RECONCILE_INTERVAL_MS = 60_000;

/**
 * The ClusterRole a hangar role is bound to: cluster-admin for admins, hangar's read-only
 * `hangar-user-view` for every other role (workloads' shapes; no logs, ConfigMaps or Secrets, which
 * Kubernetes' `view` would read). A credential bound to another ClusterRole (`view`, as a pre-release build
 * of kubeconfigs per user bound them) is revoked by the loop at start.
 */
export function clusterRoleFor(role: string): string {
  return role === 'admin' ? 'cluster-admin' : USER_VIEW_ROLE;
}

interface CredentialRow {
  cluster_id: string;
  user_id: string;
  service_account: string;
  cluster_role: string;
  issued_at: string;
  expires_at: string;
}

export const credentialsMigration: Migration = createTables('002_k8s_user_credentials', {
  [CREDENTIALS]: (t) => {
    t.string('cluster_id', 64).notNullable().references('id').inTable('clusters').onDelete('CASCADE');
    t.string('user_id', 64).notNullable();
    t.string('service_account', 100).notNullable();
    t.string('cluster_role', 100).notNullable();
    t.string('issued_at', 40).notNullable();
    t.string('expires_at', 40).notNullable();
    t.primary(['cluster_id', 'user_id']);
    t.index(['user_id']);
  },
});

export interface CredentialsContext {
  services: Services;
  requireActive(id: string): Promise<ClusterRecord & { manager_node_id: string }>;
  /** The server node's address of the cluster's kubeconfig endpoint (409 when it has none), as an https URL. */
  serverOf(cluster: ClusterRecord & { manager_node_id: string }): Promise<{ server: NodeRecord; url: string }>;
}

export function userCredentials({ services, requireActive, serverOf }: CredentialsContext): { routes: RouteDef[]; loops: BackgroundLoop[]; close(): void } {
  const { clusters: core, log } = services;
  const knex = (): Knex => services.db.knex;
  const identity = () => {
    const found = services.provided.find(IdentityRef);
    if (!found) throw conflict('Kubeconfigs per user need the iam plugin, which is not loaded');
    return found;
  };

  /**
   * Deletes a user's ServiceAccount on the row's cluster, then the row. The row is kept (and the loop
   * tries again) while the cluster has no manager to ask or its agent does not answer; it goes
   * without asking only with its cluster (the ServiceAccount went with it).
   */
  async function revoke(row: CredentialRow, why: string): Promise<boolean> {
    const cluster = await core.clusters.get(row.cluster_id);
    if (cluster) {
      if (!cluster.manager_node_id) throw conflict(`cluster ${cluster.name} has no manager node to delete the ServiceAccount on`);
      await core.callOn(cluster, K3sRevokeUserCredential, { user_id: row.user_id }, { timeoutMs: 30_000 });
    }
    await knex()(CREDENTIALS).where({ cluster_id: row.cluster_id, user_id: row.user_id }).delete();
    log.info({ cluster_id: row.cluster_id, user_id: row.user_id, service_account: `${USERS_NAMESPACE}/${row.service_account}` }, `kubeconfig credentials revoked: ${why}`);
    return true;
  }

  /** Whether a role may hold a kubeconfig at all (clusters:credentials: not an auditor). */
  let userGrants: ReturnType<typeof userGrantsOf> | undefined;
  // The route table is whole once set-up is over: what `user` holds is derived from it once, on first use.
  const mayHold = (role: string) => roleGrants(role, 'clusters:credentials', (userGrants ??= userGrantsOf(services.routeTable().map((r) => r.route))));

  /**
   * Why a row's credentials must go now, or null while the user still holds them. With projects in
   * force, a user who is not an admin holds a kubeconfig of a cluster while its role in the
   * cluster's project grants `clusters:credentials` (as the route decides): removed from the project,
   * or given a role there without it, its credentials go.
   */
  async function outdated(row: CredentialRow, user: UserRecord | null, now: number): Promise<string | null> {
    if (!user) return 'the user was deleted';
    if (!mayHold(user.role)) return `the user's role is now ${user.role}, which holds no kubeconfig`;
    const clusterRole = clusterRoleFor(user.role);
    if (clusterRole !== row.cluster_role) return `it is bound to ${row.cluster_role}, and the user's role ${user.role} now to ${clusterRole}`;
    if (Date.parse(row.expires_at) <= now) return 'its last token expired';
    const projects = services.provided.find(ProjectGrantsRef);
    if (projects && user.role !== 'admin') {
      const project = (await core.clusters.get(row.cluster_id))?.project_id;
      const held = project ? (await projects.grantsOf(user.userid)).get(project) : undefined;
      if (project && !held?.includes('clusters:credentials')) return `the user holds no kubeconfig in project ${project} any more (not a member, or its role there grants no clusters:credentials)`;
    }
    return null;
  }

  /** Revokes what the users of these rows no longer hold; a cluster that does not answer is tried again by the loop. */
  async function reconcile(rows: CredentialRow[]): Promise<void> {
    if (!rows.length) return;
    const users = identity().users;
    const now = services.clock.now().getTime();
    for (const row of rows) {
      const why = await outdated(row, await users.get(row.user_id), now);
      if (!why) continue;
      await revoke(row, why).catch((err: Error) =>
        log.warn({ cluster_id: row.cluster_id, user_id: row.user_id, error: err.message }, 'revoking kubeconfig credentials failed; trying again later'),
      );
    }
  }
  const reconcileUser = (userId: string | null) =>
    (userId ? knex()<CredentialRow>(CREDENTIALS).where({ user_id: userId }) : knex()<CredentialRow>(CREDENTIALS)).then(reconcile);

  // A user's change (deleted, another role) and a change of its project memberships are announced to every control plane: revoke at once.
  const check = (userId: string | null) => {
    reconcileUser(userId).catch((err: Error) => log.warn({ user_id: userId, error: err.message }, 'checking kubeconfig credentials failed'));
  };
  const unsubscribers = services.serving ? [services.db.notices.subscribe(USER_CHANGES, check), services.db.notices.subscribe(MEMBER_CHANGES, check)] : [];
  const unsubscribe = () => unsubscribers.forEach((stop) => stop());

  const KubeconfigQuery = Type.Object(
    {
      ttl: Type.Optional(
        Type.Integer({
          minimum: KUBECONFIG_TTL.min,
          maximum: KUBECONFIG_TTL.max,
          description: `how long the token is valid, in seconds (default ${KUBECONFIG_TTL.default}, ${KUBECONFIG_TTL.min}–${KUBECONFIG_TTL.max})`,
        }),
      ),
      admin_certificate: Type.Optional(Type.Boolean({ description: 'admins only: k3s’s admin kubeconfig (its client certificate, not revocable per user) instead of a token of your own' })),
    },
    { additionalProperties: false },
  );
  const RevokeQuery = Type.Object(
    { user_id: Type.Optional(Type.String({ minLength: 1, maxLength: 64, description: 'admins only: whose credentials (default: yours)' })) },
    { additionalProperties: false },
  );

  const routes: RouteDef[] = [
    defineRoute({
      method: 'GET',
      path: '/v1/kubernetes/clusters/{id}/kubeconfig',
      auth: 'authenticated',
      permission: 'clusters:credentials',
      scope: ON_CLUSTER,
      summary: 'A kubeconfig of your own (YAML in `kubeconfig`): a short-lived token of your ServiceAccount, bound to the ClusterRole of your role; never logged, each download audited',
      description:
        `The token is valid for \`ttl\` seconds (default ${KUBECONFIG_TTL.default}); an admin's account is bound to cluster-admin, any other role's to the read-only \`${USER_VIEW_ROLE}\` (workloads' shapes; no logs, ConfigMaps or Secrets). ` +
        'It is revoked when you are deleted or get another role, or with DELETE. `admin_certificate=true` (admins only) hands out k3s’s admin kubeconfig instead. ' +
        '409 while the cluster is not active, when its server node has no address of the kubeconfig endpoint’s kind, or when the cluster does not answer. Every download (and refusal) is recorded in the audit log.',
      schemas: { params: IdParams, query: KubeconfigQuery },
      errors: [403, 409],
      audited: true,
      handler: async (req) => {
        const principal = req.principal!;
        const cluster = await requireActive(req.params.id);
        const { server, url } = await serverOf(cluster);
        const noStore = { 'Cache-Control': 'no-store' };
        if (req.query.admin_certificate) {
          if (!unlimitedAdmin(principal)) throw forbidden('Only an admin, with a credential not limited to a project or to permissions, may download the cluster’s admin certificate');
          const { kubeconfig } = await core.runTask(server.id, K3sKubeconfig, { server_url: url }, { subject: cluster.id, timeoutMs: 30_000 }).catch((err: unknown) => {
            throw asHttpError(err, `Reading the kubeconfig of cluster ${cluster.name} on ${server.id}`);
          });
          log.warn({ cluster_id: cluster.id, user_id: principal.id }, 'the cluster’s admin certificate was handed out');
          return Reply.data({ cluster_id: cluster.id, server: url, kubeconfig, credential: 'admin-certificate', expires_at: null }, 200, noStore);
        }
        const user = await identity().users.get(principal.id);
        if (!user) throw forbidden('Kubeconfigs are for users: this credential names no user');
        // An auditor changes nothing: handing out a kubeconfig makes a ServiceAccount in the cluster (whatever its project role).
        if (!mayHold(user.role)) throw forbidden(`Insufficient permissions: role ${user.role} holds no kubeconfig`);
        // An admin's account is bound to cluster-admin: a key limited to a project or to permissions must not hand that out.
        if (user.role === 'admin' && !unlimitedAdmin(principal)) {
          throw forbidden('An admin’s kubeconfig is bound to cluster-admin: it is handed out to the admin’s own credentials, not to a key limited to a project or to permissions');
        }
        const clusterRole = clusterRoleFor(user.role);
        const ttl = req.query.ttl ?? KUBECONFIG_TTL.default;
        const issued = await core
          .callOn(cluster, K3sUserCredential, { user_id: user.userid, username: user.username, cluster_role: clusterRole, ttl_seconds: ttl, server_url: url }, { timeoutMs: 30_000 })
          .catch((err: unknown) => {
            throw asHttpError(err, `Issuing a kubeconfig of cluster ${cluster.name} for ${user.username}`);
          });
        const previous = await knex()<CredentialRow>(CREDENTIALS).where({ cluster_id: cluster.id, user_id: user.userid }).first();
        const expiresAt = previous && previous.expires_at > issued.expires_at ? previous.expires_at : issued.expires_at;
        const row: CredentialRow = { cluster_id: cluster.id, user_id: user.userid, service_account: issued.service_account, cluster_role: clusterRole, issued_at: services.clock.now().toISOString(), expires_at: expiresAt };
        await knex()(CREDENTIALS).insert(row).onConflict(['cluster_id', 'user_id']).merge();
        // The user may have changed (deleted, demoted) while the agent made the credential, before this
        // record existed for that change's check to find: read it again now that the record is there.
        const why = await outdated(row, await identity().users.get(user.userid), services.clock.now().getTime());
        if (why) {
          await revoke(row, why).catch((err: Error) =>
            log.warn({ cluster_id: row.cluster_id, user_id: row.user_id, error: err.message }, 'revoking kubeconfig credentials failed; trying again later'),
          );
          throw conflict(`Your access changed while the kubeconfig was being made (${why}): it was revoked; ask again`);
        }
        return Reply.data(
          {
            cluster_id: cluster.id,
            server: url,
            kubeconfig: issued.kubeconfig,
            credential: 'service-account-token',
            service_account: `${issued.namespace}/${issued.service_account}`,
            cluster_role: clusterRole,
            expires_at: issued.expires_at,
          },
          200,
          noStore,
        );
      },
    }),
    defineRoute({
      method: 'DELETE',
      path: '/v1/kubernetes/clusters/{id}/kubeconfig',
      auth: 'authenticated',
      permission: 'clusters:credentials',
      scope: ON_CLUSTER,
      summary: 'Revoke your kubeconfig credentials on the cluster (an admin: anyone’s, with `user_id`): the ServiceAccount is deleted and every token of it refused at once',
      description: '`revoked` is false when there was nothing to revoke. 409 while the cluster is not active or does not answer.',
      schemas: { params: IdParams, query: RevokeQuery },
      errors: [403, 409],
      handler: async (req) => {
        const principal = req.principal!;
        const userId = req.query.user_id ?? principal.id;
        if (userId !== principal.id && principal.role !== 'admin') throw forbidden('Only an admin revokes another user’s kubeconfig credentials');
        const cluster = await requireActive(req.params.id);
        const { revoked } = await core.callOn(cluster, K3sRevokeUserCredential, { user_id: userId }, { timeoutMs: 30_000 }).catch((err: unknown) => {
          throw asHttpError(err, `Revoking the kubeconfig credentials of ${userId} on cluster ${cluster.name}`);
        });
        await knex()(CREDENTIALS).where({ cluster_id: cluster.id, user_id: userId }).delete();
        return { cluster_id: cluster.id, user_id: userId, revoked };
      },
    }),
  ];

  const loops: BackgroundLoop[] = [
    {
      name: 'kubernetes-user-credentials',
      intervalMs: RECONCILE_INTERVAL_MS,
      once: true,
      immediately: true,
      run: () => reconcileUser(null),
    },
  ];
  return { routes, loops, close: unsubscribe };
}
