import { expect } from 'chai';
import { readFileSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { ApiException, AuthorizationV1Api, CoreV1Api, KubeConfig, RbacAuthorizationV1Api } from '@kubernetes/client-node';
import { parse } from 'yaml';
import { waitFor } from '../../support/agents.js';
import { describeEachDialect } from '../../support/dialects.js';
import type { TestHangar } from '../../support/hangar.js';
import { bearer, createUser, signed, type Credentials } from '../../support/identity.js';
import type { KubeControlPlane } from '../../support/kube.js';
import { releaseSharedKube, sharedKubeForSuite, startOnAdoptedCluster, stopOnAdoptedCluster, type KubeCluster } from '../../support/kube-cluster.js';
import { hangarCli, TempDirs } from '../runner/support.js';

// Kubeconfigs per user against the real upstream API server (test/support/kube.ts): each is a
// token of the user's own ServiceAccount (TokenRequest API), cluster-admin for an admin and hangar's
// read-only `hangar-user-view` for any other role (no logs, ConfigMaps or Secrets: Kubernetes' `view`
// reads the first two), and the API server refuses the same token once hangar revoked it — the user
// deleted, demoted, or asking for it with DELETE — or once it is bound to another ClusterRole than
// its user's role's (an older release's `view`).

describe('kubeconfigs per user: a short-lived token of the user’s ServiceAccount, revoked when the user loses access (real API server)', function () {
  let kube: KubeControlPlane;

  before(async function () {
    kube = await sharedKubeForSuite(this);
  });
  after(() => {
    if (kube) releaseSharedKube();
  });

  describeEachDialect('issue, limit, revoke', (dialect) => {
    let t: TestHangar;
    let admin: Credentials;
    let cluster: KubeCluster;
    const as = (who: Credentials, method: string, p: string) => t.request(method, p, { headers: bearer(who.token) });
    const kubeconfigPath = () => `/v1/kubernetes/clusters/${cluster.clusterId}/kubeconfig`;

    /** The API of the cluster as the kubeconfig's credentials (its server replaced by the harness's loopback port: the adopted cluster's node has no address on 6443). */
    function configOf(kubeconfig: string): KubeConfig {
      const doc = parse(kubeconfig);
      const user = doc.users[0];
      expect(Object.keys(user.user), 'a token, no client certificate').to.deep.equal(['token']);
      const kc = new KubeConfig();
      kc.loadFromOptions({
        clusters: [{ name: 'c', server: kube.server, caData: doc.clusters[0].cluster['certificate-authority-data'], skipTLSVerify: false }],
        users: [{ name: 'u', token: user.user.token }],
        contexts: [{ name: 'x', cluster: 'c', user: 'u' }],
        currentContext: 'x',
      });
      return kc;
    }
    const clientOf = (kubeconfig: string) => configOf(kubeconfig).makeApiClient(CoreV1Api);
    /** Whether the kubeconfig's credentials may do this (SelfSubjectAccessReview: every authenticated account may ask it). */
    async function may(kubeconfig: string, attributes: { verb: string; resource: string; subresource?: string; group?: string; namespace?: string }): Promise<boolean> {
      const review = await configOf(kubeconfig)
        .makeApiClient(AuthorizationV1Api)
        .createSelfSubjectAccessReview({ body: { spec: { resourceAttributes: { namespace: 'default', ...attributes } } } });
      return review.status?.allowed === true;
    }
    /** The API server's status for a call (200 when it succeeds). */
    const statusOf = (call: Promise<unknown>) => call.then(() => 200, (err: unknown) => (err instanceof ApiException ? err.code : Promise.reject(err)));

    async function kubeconfigOf(who: Credentials) {
      const res = await as(who, 'GET', kubeconfigPath());
      expect(res.status, res.text).to.equal(200);
      expect(res.headers['cache-control']).to.equal('no-store');
      return res.json.data as { kubeconfig: string; credential: string; cluster_role: string; service_account: string; expires_at: string };
    }

    /** A user who is a viewer of the cluster's project (`default`): a viewer holds its own kubeconfig (clusters:credentials). */
    async function member(options: Parameters<typeof createUser>[2]) {
      const user = await createUser(t, admin, options);
      const added = await t.request('PUT', `/v1/projects/default/members/${user.userId}`, { body: { role: 'viewer' }, headers: bearer(admin.token) });
      expect(added.status, added.text).to.equal(201);
      return user;
    }

    before(async function () {
      this.timeout(90_000);
      ({ t, admin, cluster } = await startOnAdoptedCluster(dialect, kube, { name: `kc-${dialect.name}`, plugins: ['projects'] }));
      // The adopted cluster (inserted as a cluster made before projects would be) goes in the `default` project.
      const knex = t.hangar.services.db.knex;
      const project = await knex('projects').where({ name: 'default' }).first();
      await knex('clusters').where({ id: cluster.clusterId }).update({ project_id: project.id });
    });
    const temp = new TempDirs();
    after(async function () {
      this.timeout(30_000);
      await stopOnAdoptedCluster(t);
      temp.cleanup();
    });

    it('an admin gets a cluster-admin token that expires (8 h by default, ?ttl= bounded), never its certificate unless asked', async function () {
      this.timeout(60_000);
      const got = await kubeconfigOf(admin);
      expect(got).to.include({ credential: 'service-account-token', cluster_role: 'cluster-admin', service_account: `hangar-users/hangar-${admin.userId}` });
      const hours = (Date.parse(got.expires_at) - Date.now()) / 3_600_000;
      expect(hours).to.be.within(7.9, 8.01);
      const api = clientOf(got.kubeconfig);
      expect((await api.listNamespace()).items.map((n) => n.metadata?.name)).to.include('hangar-users');
      expect(await statusOf(api.listNamespacedSecret({ namespace: 'kube-system' }))).to.equal(200);
      expect(t.logs.join('\n')).not.to.contain(parse(got.kubeconfig).users[0].user.token);

      const short = await as(admin, 'GET', `${kubeconfigPath()}?ttl=600`);
      expect(short.status, short.text).to.equal(200);
      expect((Date.parse(short.json.data.expires_at) - Date.now()) / 1000).to.be.within(590, 601);
      for (const ttl of [60, 86_401]) {
        const refused = await as(admin, 'GET', `${kubeconfigPath()}?ttl=${ttl}`);
        expect(refused.status, refused.text).to.equal(400);
        expect(refused.json.message).to.contain('ttl');
      }

      // An admin's key limited to permissions (or to a project) gets neither cluster-admin nor the admin certificate.
      const key = await t.request('POST', `/v1/iam/users/${admin.userId}/keys`, { body: { description: 'kubeconfigs only', permissions: ['clusters:credentials'] }, headers: bearer(admin.token) });
      expect(key.status, key.text).to.equal(201);
      const limited = { accessKeyId: key.json.data.access_key_id, secretAccessKey: key.json.data.secret_access_key };
      for (const query of ['', '?admin_certificate=true']) {
        const res = await signed(t, limited, 'GET', `${kubeconfigPath()}${query}`);
        expect(res.status, res.text).to.equal(403);
        expect(res.text).not.to.contain('kubeconfig":');
      }
    });

    it('any other role gets hangar-user-view: reads workloads’ shapes, not logs, exec, ConfigMaps or Secrets, creates nothing; the admin certificate is refused to it', async function () {
      this.timeout(60_000);
      const ops = await member({ username: `ops-${dialect.name}`, role: 'user' });
      const got = await kubeconfigOf(ops);
      expect(got).to.include({ cluster_role: 'hangar-user-view', service_account: `hangar-users/hangar-${ops.userId}` });
      const api = clientOf(got.kubeconfig);
      expect(await statusOf(api.listNamespacedPod({ namespace: 'default' }))).to.equal(200);
      expect(await statusOf(api.listNamespacedSecret({ namespace: 'default' }))).to.equal(403);
      // hangar's API keeps logs and configs' values from non-admins: so does the kubeconfig (Kubernetes' `view` reads both).
      expect(await statusOf(api.listNamespacedConfigMap({ namespace: 'default' })), 'ConfigMaps').to.equal(403);
      expect(await statusOf(api.listConfigMapForAllNamespaces()), 'ConfigMaps of every namespace').to.equal(403);
      // Authorization comes before the lookup: `view` would answer 404 for a pod that does not exist, this role 403.
      expect(await statusOf(api.readNamespacedPodLog({ name: 'no-such-pod', namespace: 'default' })), 'pods/log').to.equal(403);
      const allowed = [
        { verb: 'get', resource: 'pods' },
        { verb: 'watch', resource: 'events', namespace: 'kube-system' },
        { verb: 'list', resource: 'deployments', group: 'apps', namespace: '' },
        { verb: 'list', resource: 'cronjobs', group: 'batch' },
        { verb: 'get', resource: 'ingresses', group: 'networking.k8s.io' },
        { verb: 'list', resource: 'poddisruptionbudgets', group: 'policy' },
      ];
      const denied = [
        { verb: 'get', resource: 'pods', subresource: 'log' },
        { verb: 'create', resource: 'pods', subresource: 'exec' },
        { verb: 'create', resource: 'pods', subresource: 'attach' },
        { verb: 'create', resource: 'pods', subresource: 'portforward' },
        { verb: 'create', resource: 'serviceaccounts', subresource: 'token' },
        { verb: 'get', resource: 'configmaps', namespace: 'kube-system' },
        { verb: 'get', resource: 'secrets' },
        { verb: 'delete', resource: 'pods' },
      ];
      for (const a of allowed) expect(await may(got.kubeconfig, a), `allowed: ${JSON.stringify(a)}`).to.equal(true);
      for (const a of denied) expect(await may(got.kubeconfig, a), `denied: ${JSON.stringify(a)}`).to.equal(false);

      // hangar owns the role's rules: widened by hand, the next kubeconfig sets them back.
      const rbac = kube.api(RbacAuthorizationV1Api);
      const role = await rbac.readClusterRole({ name: 'hangar-user-view' });
      await rbac.replaceClusterRole({ name: 'hangar-user-view', body: { ...role, rules: [...(role.rules ?? []), { apiGroups: [''], resources: ['configmaps'], verbs: ['get', 'list'] }] } });
      expect(await may(got.kubeconfig, { verb: 'list', resource: 'configmaps' }), 'widened by hand').to.equal(true);
      await kubeconfigOf(ops);
      expect(await may(got.kubeconfig, { verb: 'list', resource: 'configmaps' }), 'set back').to.equal(false);
      expect(await statusOf(api.createNamespace({ body: { metadata: { name: `nope-${dialect.name}` } } }))).to.equal(403);
      const certificate = await as(ops, 'GET', `${kubeconfigPath()}?admin_certificate=true`);
      expect(certificate.status, certificate.text).to.equal(403);
      expect(certificate.json.message).to.contain('admin certificate');
    });

    it('hangar cluster kubeconfig writes the user’s own (0600, --ttl); hangar cluster kubeconfig-revoke ends it', async function () {
      this.timeout(60_000);
      const dev = await member({ username: `dev-${dialect.name}`, role: 'user' });
      const dir = temp.make('hangar-cli-kubeconfig-');
      writeFileSync(path.join(dir, 'ca.pem'), t.caPem);
      const env = { XDG_CONFIG_HOME: dir, HANGAR_API_URL: t.url, HANGAR_ACCESS_KEY: dev.accessKeyId, HANGAR_SECRET_KEY: dev.secretAccessKey, HANGAR_CA_FILE: path.join(dir, 'ca.pem') };
      const file = path.join(dir, 'kubeconfig');
      const wrote = await hangarCli(['cluster', 'kubeconfig', cluster.clusterId, '--output', file, '--ttl', '900'], { env, timeoutMs: 60_000 });
      expect(wrote.code, wrote.stderr).to.equal(0);
      expect(wrote.stdout).to.match(new RegExp(`wrote the kubeconfig of cluster ${cluster.clusterId} \\(server https://\\S+; hangar-user-view, expires \\S+\\) to ${file} \\(mode 0600\\)`));
      expect(statSync(file).mode & 0o777).to.equal(0o600);
      const client = clientOf(readFileSync(file, 'utf8'));
      expect(await statusOf(client.listNamespacedPod({ namespace: 'default' }))).to.equal(200);

      const revoked = await hangarCli(['cluster', 'kubeconfig-revoke', cluster.clusterId], { env, timeoutMs: 60_000 });
      expect(revoked.code, revoked.stderr).to.equal(0);
      expect(revoked.stdout).to.contain(`revoked the kubeconfig credentials of ${dev.userId} on cluster ${cluster.clusterId}`);
      // At once: 403 (the binding is gone) while the API server still caches the token's authentication, then 401.
      expect(await statusOf(client.listNamespacedPod({ namespace: 'default' }))).to.be.oneOf([401, 403]);
    });

    it('the same token is refused by the API server once the user is deleted, demoted, made an auditor, or revokes it (DELETE)', async function () {
      this.timeout(90_000);
      const gone = await member({ username: `gone-${dialect.name}`, role: 'user' });
      const auditor = await member({ username: `auditor-${dialect.name}`, role: 'user' });
      const demoted = await member({ username: `boss-${dialect.name}`, role: 'admin' });
      const leaving = await member({ username: `leaving-${dialect.name}`, role: 'user' });
      const clients = {
        gone: clientOf((await kubeconfigOf(gone)).kubeconfig),
        demoted: clientOf((await kubeconfigOf(demoted)).kubeconfig),
        leaving: clientOf((await kubeconfigOf(leaving)).kubeconfig),
        auditor: clientOf((await kubeconfigOf(auditor)).kubeconfig),
      };
      for (const client of Object.values(clients)) expect(await statusOf(client.listNamespacedPod({ namespace: 'default' }))).to.equal(200);

      expect((await as(admin, 'DELETE', `/v1/iam/users/${gone.userId}`)).status).to.be.oneOf([200, 204]);
      const demote = await t.request('PATCH', `/v1/iam/users/${demoted.userId}`, { body: { role: 'user' }, headers: bearer(admin.token) });
      expect(demote.status, demote.text).to.equal(200);
      // An auditor reads everything in hangar but holds no kubeconfig (clusters:credentials): the user's one goes.
      const audit = await t.request('PATCH', `/v1/iam/users/${auditor.userId}`, { body: { role: 'auditor' }, headers: bearer(admin.token) });
      expect(audit.status, audit.text).to.equal(200);
      const revoked = await as(leaving, 'DELETE', kubeconfigPath());
      expect(revoked.status, revoked.text).to.equal(200);
      expect(revoked.json.data).to.deep.equal({ cluster_id: cluster.clusterId, user_id: leaving.userId, revoked: true });
      expect((await as(leaving, 'DELETE', kubeconfigPath())).json.data.revoked, 'nothing left').to.equal(false);

      for (const [who, client] of Object.entries(clients)) {
        await waitFor(async () => (await statusOf(client.listNamespacedPod({ namespace: 'default' }))) === 401, { timeoutMs: 30_000, what: `the ${who} user's token refused` });
      }
      // Another user's credentials are revoked by admins only.
      const other = await as(leaving, 'DELETE', `${kubeconfigPath()}?user_id=${admin.userId}`);
      expect(other.status, other.text).to.equal(403);
      // Logged in again, the demoted user's kubeconfig is a `hangar-user-view` one.
      const login = await t.request('POST', '/v1/iam/login', { body: { username: demoted.username, password: demoted.password } });
      expect(login.status, login.text).to.equal(200);
      expect((await kubeconfigOf({ ...demoted, token: login.json.data.token })).cluster_role).to.equal('hangar-user-view');
      const asAuditor = await t.request('POST', '/v1/iam/login', { body: { username: auditor.username, password: auditor.password } });
      const refused = await as({ ...auditor, token: asAuditor.json.data.token }, 'GET', kubeconfigPath());
      expect(refused.status, refused.text).to.equal(403);
    });

    it('a revocation while the cluster has no manager to ask keeps the credential and is tried again (it is not forgotten)', async function () {
      this.timeout(60_000);
      const boss = await member({ username: `stranded-${dialect.name}`, role: 'admin' });
      const client = clientOf((await kubeconfigOf(boss)).kubeconfig);
      const knex = t.hangar.services.db.knex;
      const row = () => knex('k8s_user_credentials').where({ cluster_id: cluster.clusterId, user_id: boss.userId }).first();
      const { manager_node_id: manager } = await knex('clusters').where({ id: cluster.clusterId }).first();
      await knex('clusters').where({ id: cluster.clusterId }).update({ manager_node_id: null });
      try {
        const demote = await t.request('PATCH', `/v1/iam/users/${boss.userId}`, { body: { role: 'user' }, headers: bearer(admin.token) });
        expect(demote.status, demote.text).to.equal(200);
        await waitFor(async () => t.logs.join('\n').includes('revoking kubeconfig credentials failed; trying again later') || null, { timeoutMs: 15_000, what: 'the failed revocation logged' });
        expect((await row())?.cluster_role, 'kept, to be tried again').to.equal('cluster-admin');
      } finally {
        await knex('clusters').where({ id: cluster.clusterId }).update({ manager_node_id: manager });
      }
      // The next check (the user's next change, or the loop every minute) revokes it.
      expect((await t.request('PATCH', `/v1/iam/users/${boss.userId}`, { body: { name: 'Former Boss' }, headers: bearer(admin.token) })).status).to.equal(200);
      await waitFor(async () => ((await row()) === undefined ? true : null), { timeoutMs: 30_000, what: 'the credential revoked once the cluster has a manager again' });
      await waitFor(async () => (await statusOf(client.listNamespacedPod({ namespace: 'default' }))) === 401 || null, { timeoutMs: 30_000, what: 'the cluster-admin token refused' });
    });

    it('a user demoted while its kubeconfig is being made gets a 409, not a credential of the role it lost', async function () {
      this.timeout(60_000);
      const boss = await member({ username: `racing-${dialect.name}`, role: 'admin' });
      const knex = t.hangar.services.db.knex;
      const { pid } = cluster.agent.child;
      // The cluster's agent holds still while the credential is asked for and the user is demoted meanwhile.
      process.kill(pid!, 'SIGSTOP');
      let download: Promise<Awaited<ReturnType<typeof as>>>;
      try {
        download = as(boss, 'GET', kubeconfigPath());
        await waitFor(async () => (await knex('tasks').where({ kind: 'k3s.user-credential', status: 'pending' }).first()) ?? null, { timeoutMs: 10_000, what: 'the credential task queued' });
        const demote = await t.request('PATCH', `/v1/iam/users/${boss.userId}`, { body: { role: 'user' }, headers: bearer(admin.token) });
        expect(demote.status, demote.text).to.equal(200);
      } finally {
        process.kill(pid!, 'SIGCONT');
      }
      const res = await download;
      expect(res.status, res.text).to.equal(409);
      expect(res.json.message).to.match(/^Your access changed while the kubeconfig was being made \(it is bound to cluster-admin, and the user's role user now to hangar-user-view\): it was revoked; ask again$/);
      expect(res.text, 'no token in the refusal').not.to.match(/kubeconfig":|token/);
      await waitFor(async () => ((await knex('k8s_user_credentials').where({ user_id: boss.userId }).first()) === undefined ? true : null), { timeoutMs: 30_000, what: 'the record gone with the account' });
    });

    it('a user removed from the cluster’s project loses its kubeconfig at once (its token is refused)', async function () {
      this.timeout(60_000);
      const leaver = await member({ username: `ex-member-${dialect.name}`, role: 'user' });
      const client = clientOf((await kubeconfigOf(leaver)).kubeconfig);
      expect(await statusOf(client.listNamespacedPod({ namespace: 'default' }))).to.equal(200);
      const removed = await t.request('DELETE', `/v1/projects/default/members/${leaver.userId}`, { headers: bearer(admin.token) });
      expect(removed.status, removed.text).to.be.oneOf([200, 204]);
      await waitFor(async () => (await statusOf(client.listNamespacedPod({ namespace: 'default' }))) === 401 || null, { timeoutMs: 30_000, what: 'the ex-member’s token refused' });
      expect(t.logs.join('\n')).to.contain('kubeconfig credentials revoked: the user holds no kubeconfig in project');
      expect((await as(leaver, 'GET', kubeconfigPath())).status, 'a member of no project holds clusters:credentials nowhere').to.equal(403);
    });

    it('a member given a role in the cluster’s project without clusters:credentials loses its kubeconfig at once, and gets no new one', async function () {
      this.timeout(60_000);
      const role = `reader-${dialect.name}`;
      const made = await t.request('POST', '/v1/projects/default/roles', { body: { name: role, permissions: ['clusters:read', 'services:read'] }, headers: bearer(admin.token) });
      expect(made.status, made.text).to.equal(201);
      const narrowed = await member({ username: `narrowed-${dialect.name}`, role: 'user' });
      const client = clientOf((await kubeconfigOf(narrowed)).kubeconfig);
      expect(await statusOf(client.listNamespacedPod({ namespace: 'default' }))).to.equal(200);
      const changed = await t.request('PUT', `/v1/projects/default/members/${narrowed.userId}`, { body: { role }, headers: bearer(admin.token) });
      expect(changed.status, changed.text).to.equal(200);
      await waitFor(async () => (await statusOf(client.listNamespacedPod({ namespace: 'default' }))) === 401 || null, { timeoutMs: 30_000, what: 'the narrowed member’s token refused' });
      const knex = t.hangar.services.db.knex;
      expect(await knex('k8s_user_credentials').where({ user_id: narrowed.userId }).first(), 'its record gone').to.equal(undefined);
      const again = await as(narrowed, 'GET', kubeconfigPath());
      expect(again.status, again.text).to.equal(403);
      expect(again.json.message).to.contain('clusters:credentials');
    });

    it('a credential an older release bound to Kubernetes’ `view` is revoked on the user’s next change (the check the loop makes at start); asked again, it is hangar-user-view', async function () {
      this.timeout(60_000);
      const old = await member({ username: `old-${dialect.name}`, role: 'user' });
      const got = await kubeconfigOf(old);
      // What the release that brought kubeconfigs per user left: the account bound to `view`, recorded so.
      const name = got.service_account.split('/')[1];
      const rbac = kube.api(RbacAuthorizationV1Api);
      await rbac.deleteClusterRoleBinding({ name });
      await rbac.createClusterRoleBinding({
        body: { metadata: { name }, roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'view' }, subjects: [{ kind: 'ServiceAccount', name, namespace: 'hangar-users' }] },
      });
      const knex = t.hangar.services.db.knex;
      const row = () => knex('k8s_user_credentials').where({ cluster_id: cluster.clusterId, user_id: old.userId }).first();
      await knex('k8s_user_credentials').where({ cluster_id: cluster.clusterId, user_id: old.userId }).update({ cluster_role: 'view' });
      const client = clientOf(got.kubeconfig);
      await waitFor(async () => (await statusOf(client.listNamespacedConfigMap({ namespace: 'default' }))) === 200, { timeoutMs: 15_000, what: 'the `view` binding in force' });

      // Any change of the user (here its name) checks its credentials: the `view` one goes.
      const renamed = await t.request('PATCH', `/v1/iam/users/${old.userId}`, { body: { name: 'Old Timer' }, headers: bearer(admin.token) });
      expect(renamed.status, renamed.text).to.equal(200);
      // Revoked: no binding at all (403 even for pods) while the API server caches the token's authentication, then 401.
      // (The account goes first, then hangar's row.)
      await waitFor(async () => (await row()) === undefined, { timeoutMs: 30_000, what: 'the `view` credential revoked' });
      expect(await statusOf(client.listNamespacedPod({ namespace: 'default' })), 'the `view` token refused').to.be.oneOf([401, 403]);
      await waitFor(async () => t.logs.join('\n').includes('kubeconfig credentials revoked: it is bound to view, and the user'), { timeoutMs: 5_000, what: 'the revocation logged with its reason' });

      const again = await kubeconfigOf(old);
      expect(again.cluster_role).to.equal('hangar-user-view');
      expect(await statusOf(clientOf(again.kubeconfig).listNamespacedConfigMap({ namespace: 'default' }))).to.equal(403);
      expect((await row())?.cluster_role).to.equal('hangar-user-view');
    });
  });
});
