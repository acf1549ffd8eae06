import { expect } from 'chai';
import { randomUUID } from 'node:crypto';
import { answerTasks, FakeAgent } from '../support/agents.js';
import { describeEachDialect } from '../support/dialects.js';
import { startHangar, type TestHangar } from '../support/hangar.js';
import { bearer, bootstrapAdmin, createUser, GOOD_PASSWORD, type Credentials } from '../support/identity.js';
import { KUBE_CLUSTER_PLUGINS } from '../support/kube-cluster.js';

const KUBECONFIG = 'apiVersion: v1\nkind: Config\nusers:\n- name: admin\n  user:\n    client-key-data: U0VDUkVULUtFWS1CWVRFUw==\n';

/**
 * Issue 26, finding 13 (audit completeness): a successful login — POST /v1/iam/login, the login
 * API's /login, the dashboard's POST /v1/iam/session — was recorded with no principal, so the log
 * could not say who logged in; and downloading a cluster's admin kubeconfig (a read that hands out
 * the cluster's credentials) was not recorded at all. Now a login records the account it logged in
 * (auth_method `password`), a failed one stays anonymous, and every kubeconfig download is an entry.
 */
describeEachDialect('audit completeness: who logged in, and who took a kubeconfig', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  let ops: Credentials;
  before(async () => {
    t = await startHangar(dialect, { plugins: [...KUBE_CLUSTER_PLUGINS, 'login', 'audit'], overrides: { login: { port: 0 } } });
    admin = await bootstrapAdmin(t);
    ops = await createUser(t, admin, { username: 'ops', email: 'ops@example.test', name: 'Ops Person' });
  });
  after(() => t?.stop());

  const entries = async (route: string) => {
    const res = await t.request('GET', `/v1/audit?route=${encodeURIComponent(route)}`, { headers: bearer(admin.token) });
    expect(res.status, res.text).to.equal(200);
    return res.json.data as Array<Record<string, unknown>>;
  };

  it('records which account logged in, on all three login routes; a failed login stays anonymous', async () => {
    const ok = [
      await t.request('POST', '/v1/iam/login', { body: { username: 'ops', password: GOOD_PASSWORD } }),
      await t.request('POST', '/login', { listener: 'login', body: { username: 'ops@example.test', password: GOOD_PASSWORD } }),
      await t.request('POST', '/v1/iam/session', { body: { username: 'ops', password: GOOD_PASSWORD } }),
    ];
    expect(ok.map((r) => r.status)).to.deep.equal([200, 200, 201]);
    const failed = await t.request('POST', '/v1/iam/login', { body: { username: 'ops', password: 'Wrong-Password-1!' } });
    expect(failed.status).to.equal(401);

    const recorded: string[] = [];
    for (const [route, requestId] of [['/v1/iam/login', ok[0]!], ['/login', ok[1]!], ['/v1/iam/session', ok[2]!]] as const) {
      const entry = (await entries(route)).find((e) => e.request_id === requestId.headers['x-request-id']);
      expect(entry, route).to.exist;
      expect(entry, route).to.include({ principal_id: ops.userId, principal_name: 'Ops Person', auth_method: 'password', status: requestId.status });
      recorded.push(`${route} → ${entry!.principal_name} (${entry!.auth_method})`);
    }
    const refused = (await entries('/v1/iam/login')).find((e) => e.request_id === failed.headers['x-request-id']);
    expect(refused).to.include({ principal_id: null, auth_method: null, status: 401 });
    // The access log names the principal too, and no password anywhere.
    const line = t.logs.map((l) => JSON.parse(l)).find((l) => l.msg === 'request' && l.request_id === ok[0]!.headers['x-request-id']);
    expect(line.principal).to.equal(ops.userId);
    expect(t.logs.join('\n')).not.to.contain(GOOD_PASSWORD);
    console.log(`      audit: ${recorded.join('; ')}; a failed login → anonymous`);
  });

  it('records every download of a cluster’s admin kubeconfig (admin_certificate=true), and refusals of it, never its content', async () => {
    const node = await t.request('POST', '/v1/nodes', { body: { name: 'k3s-server' }, headers: bearer(admin.token) });
    expect(node.status, node.text).to.equal(201);
    const agent = await FakeAgent.forNode(t, node.json.data.id);
    expect((await agent.heartbeat()).status).to.equal(200);
    const clusterId = `cluster-${randomUUID()}`;
    const now = new Date().toISOString();
    await t.hangar.store.knex('clusters').insert({ id: clusterId, name: 'audited', backend: 'k8s', status: 'active', manager_node_id: node.json.data.id, runtime_id: null, error: null, created_at: now, updated_at: now });
    await t.hangar.store.knex('k8s_clusters').insert({ cluster_id: clusterId, kubeconfig_endpoint: '192.0.2.10', version: null });
    const tasks = answerTasks(agent, { answers: { 'k3s.kubeconfig': () => ({ kubeconfig: KUBECONFIG }) } });
    try {
      const download = await t.request('GET', `/v1/kubernetes/clusters/${clusterId}/kubeconfig?admin_certificate=true`, { headers: bearer(admin.token) });
      expect(download.status, download.text).to.equal(200);
      expect(download.json.data.kubeconfig).to.equal(KUBECONFIG);
      const denied = await t.request('GET', `/v1/kubernetes/clusters/${clusterId}/kubeconfig?admin_certificate=true`, { headers: bearer(ops.token) });
      expect(denied.status).to.equal(403);
    } finally {
      await tasks.stop();
    }
    const list = await entries('/v1/kubernetes/clusters/{id}/kubeconfig');
    expect(list.map((e) => ({ method: e.method, status: e.status, principal: e.principal_id, resource: e.resource_id }))).to.deep.equal([
      { method: 'GET', status: 403, principal: ops.userId, resource: clusterId },
      { method: 'GET', status: 200, principal: admin.userId, resource: clusterId },
    ]);
    const stored = JSON.stringify(await t.hangar.store.knex('audit_log').select());
    expect(stored).not.to.contain('U0VDUkVULUtFWS1CWVRFUw==');
    expect(t.logs.join('\n')).not.to.contain('U0VDUkVULUtFWS1CWVRFUw==');
    // Other reads are still not audited.
    expect(await entries('/v1/kubernetes/clusters/{id}')).to.deep.equal([]);
    console.log(`      audit: kubeconfig downloads recorded: ${list.length} (one 200 by admin, one 403 by a user), content stored nowhere`);
  });
});
