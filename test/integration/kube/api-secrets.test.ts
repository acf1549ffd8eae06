import { expect } from 'chai';
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { AppsV1Api, CoreV1Api, type V1Deployment } from '@kubernetes/client-node';
import { randomToken } from '../../../core/ids.js';
import { waitFor } from '../../support/agents.js';
import { describeEachDialect } from '../../support/dialects.js';
import type { TestHangar } from '../../support/hangar.js';
import { bearer, createUser, type Credentials } from '../../support/identity.js';
import type { KubeControlPlane } from '../../support/kube.js';
import { releaseSharedKube, sharedKubeForSuite, startOnAdoptedCluster, stopOnAdoptedCluster, type KubeCluster } from '../../support/kube-cluster.js';
import { hangarCli, TempDirs } from '../runner/support.js';

// Secrets and configs with cluster_id through the HTTP API and the CLI, on a Kubernetes cluster
// that is the real upstream control plane (API server, controllers, scheduler; kwok's simulated
// nodes and pods — no container runs) reached by a real agent running the Kubernetes driver
// (test/support/kube-cluster.ts). What the cluster holds is read with the harness's admin client.

const b64 = (text: string) => Buffer.from(text, 'utf8').toString('base64');
const RESTARTED_AT = 'kubectl.kubernetes.io/restartedAt';

describe('secrets and configs through the API on a Kubernetes cluster (real control plane, kwok nodes)', function () {
  let kube: KubeControlPlane;

  before(async function () {
    kube = await sharedKubeForSuite(this);
  });
  after(() => {
    if (kube) releaseSharedKube();
  });

  describeEachDialect('a Secret/ConfigMap in a namespace, rolled out to its users on PUT', (dialect) => {
    const temp = new TempDirs();
    let t: TestHangar;
    let admin: Credentials;
    let reader: Credentials;
    let cluster: KubeCluster;
    let cliEnv: Record<string, string | undefined>;
    // Each dialect in its own namespaces of the shared cluster.
    const namespace = `sec-${dialect.name}`;
    const PLAIN = `s3cr3t-${randomToken(8)}`;
    const api = (method: string, p: string, body?: unknown, creds: Credentials = admin) => t.request(method, p, { body, headers: bearer(creds.token) });
    const core = () => kube.api(CoreV1Api);
    const apps = () => kube.api(AppsV1Api);

    before(async function () {
      this.timeout(60_000);
      ({ t, admin, cluster } = await startOnAdoptedCluster(dialect, kube, { plugins: ['secrets'] }));
      reader = await createUser(t, admin, { username: 'reader', role: 'user' });
      await core().createNamespace({ body: { metadata: { name: namespace } } });
      const dir = temp.make('hangar-kube-secrets-');
      const ca = path.join(dir, 'ca.pem');
      writeFileSync(ca, t.caPem);
      cliEnv = { XDG_CONFIG_HOME: dir, HANGAR_API_URL: t.url, HANGAR_ACCESS_KEY: admin.accessKeyId, HANGAR_SECRET_KEY: admin.secretAccessKey, HANGAR_CA_FILE: ca };
    });
    after(async function () {
      this.timeout(30_000);
      await stopOnAdoptedCluster(t);
      temp.cleanup();
    });

    it('creates a secret (HTTP) and a config (CLI) in a namespace: a Secret and a ConfigMap of that name on the cluster; the secret’s value is never returned', async function () {
      this.timeout(60_000);
      const created = await api('POST', '/v1/secrets', { name: 'db-password', cluster_id: cluster.clusterName, namespace, data: b64(PLAIN) });
      expect(created.status, created.text).to.equal(201);
      const s = created.json.data;
      expect(s).to.deep.include({ name: 'db-password', cluster_id: cluster.clusterId, swarm_id: null, namespace, version: 1, runtime_name: 'db-password', services: [] });
      expect(created.text).not.to.contain(PLAIN).and.not.to.contain(b64(PLAIN));
      const secret = await core().readNamespacedSecret({ name: 'db-password', namespace });
      expect(Buffer.from(secret.data!.value!, 'base64').toString()).to.equal(PLAIN);
      expect(secret.metadata!.labels).to.include({ 'io.hangar.object': s.id, 'io.hangar.version': '1' });

      const cli = await hangarCli(['config', 'create', 'site', '--cluster', cluster.clusterId, '--namespace', namespace, '--from-literal', 'mode=fast'], { env: cliEnv, timeoutMs: 60_000 });
      expect(cli.code, cli.stderr + cli.stdout).to.equal(0);
      const map = await core().readNamespacedConfigMap({ name: 'site', namespace });
      expect(map.data).to.deep.equal({ value: 'mode=fast' });
      // The default namespace when none is given; the same name in another namespace is another object.
      const elsewhere = await api('POST', '/v1/configs', { name: 'site', cluster_id: cluster.clusterId, data: b64('x') });
      expect(elsewhere.status, elsewhere.text).to.equal(201);
      expect(elsewhere.json.data.namespace).to.equal('default');
      expect((await core().readNamespacedConfigMap({ name: 'site', namespace: 'default' })).data).to.deep.equal({ value: 'x' });
      expect((await api('DELETE', `/v1/configs/${elsewhere.json.data.id}`)).status).to.equal(200);

      const listed = await api('GET', `/v1/secrets?cluster_id=${cluster.clusterName}`, undefined, reader);
      expect(listed.status).to.equal(200);
      expect(listed.json.data.map((o: { id: string }) => o.id)).to.deep.equal([s.id]);
      expect(listed.text).not.to.contain(PLAIN);
      const table = await hangarCli(['config', 'list', '--cluster', cluster.clusterName], { env: cliEnv, timeoutMs: 60_000 });
      expect(table.code, table.stderr).to.equal(0);
      expect(table.stdout).to.contain('site').and.to.contain(namespace);
      expect((await api('GET', '/v1/secrets/db-password')).json.data).not.to.have.property('data');
      expect(t.logs.join('\n')).not.to.contain(PLAIN).and.not.to.contain(b64(PLAIN));
      expect(cluster.agent.output()).not.to.contain(PLAIN).and.not.to.contain(b64(PLAIN));
    });

    it('refuses bad input: an unknown cluster (404), both swarm_id and cluster_id, a bad namespace or name (400), a missing namespace or a Secret hangar does not own (409); non-admins only read', async function () {
      this.timeout(60_000);
      const base = { name: 'other', cluster_id: cluster.clusterId, namespace, data: b64('x') };
      expect((await api('POST', '/v1/secrets', { ...base, cluster_id: 'cluster-0000000000000000' })).status).to.equal(404);
      const cases: Array<[Record<string, unknown>, string]> = [
        [{ ...base, swarm_id: 'swarm-0000000000000000' }, 'exactly one of swarm_id and cluster_id'],
        [{ ...base, namespace: 'Bad_Namespace' }, 'Validation failed: body.namespace'],
        [{ ...base, name: 'Upper_Case' }, 'on a Kubernetes cluster'],
      ];
      for (const [body, message] of cases) {
        for (const kind of ['secrets', 'configs']) {
          const res = await api('POST', `/v1/${kind}`, body);
          expect(res.status, `${kind} ${JSON.stringify(body)}: ${res.text}`).to.equal(400);
          expect(res.json.message).to.contain(message);
        }
      }
      const missing = await api('POST', '/v1/secrets', { ...base, namespace: 'no-such-namespace' });
      expect(missing.status, missing.text).to.equal(409);
      expect(missing.json.message).to.contain('Creating secret other on cluster').and.to.contain('no-such-namespace');
      await core().createNamespacedSecret({ namespace, body: { metadata: { name: 'theirs' }, stringData: { value: 'keep me' } } });
      const taken = await api('POST', '/v1/secrets', { ...base, name: 'theirs' });
      expect(taken.status, taken.text).to.equal(409);
      expect(taken.json.message).to.contain('is not this hangar secret');
      expect((await core().readNamespacedSecret({ name: 'theirs', namespace })).data!.value).to.equal(b64('keep me'));
      const names = (await api('GET', '/v1/secrets')).json.data.map((o: { name: string }) => o.name);
      expect(names).to.deep.equal(['db-password']);
      const again = await api('POST', '/v1/secrets', { ...base, name: 'db-password' });
      expect(again.status).to.equal(409);
      expect(again.json.message).to.equal(`A secret named db-password exists on cluster ${cluster.clusterName} (namespace ${namespace})`);

      expect((await api('POST', '/v1/secrets', base, reader)).status).to.equal(403);
      expect((await api('PUT', '/v1/secrets/db-password', { data: b64('y') }, reader)).status).to.equal(403);
      expect((await api('DELETE', '/v1/secrets/db-password', undefined, reader)).status).to.equal(403);
      expect((await api('GET', '/v1/secrets/db-password', undefined, reader)).status).to.equal(200);
      expect((await api('GET', '/v1/secrets?cluster_id=nope')).status).to.equal(400);
    });

    it('PUT replaces the value in place and rolls out the Deployment that uses it (a new ReplicaSet); DELETE is refused naming it, then deletes once it is gone', async function () {
      this.timeout(150_000);
      // A Deployment applied with the harness's kubeconfig (not through hangar): the secret by
      // env valueFrom, the config as a volume.
      const web: V1Deployment = {
        metadata: { name: 'web', namespace },
        spec: {
          replicas: 1,
          selector: { matchLabels: { app: 'web' } },
          template: {
            metadata: { labels: { app: 'web' } },
            spec: {
              containers: [
                {
                  name: 'web',
                  image: 'registry.invalid/web:1',
                  env: [{ name: 'DB_PASSWORD', valueFrom: { secretKeyRef: { name: 'db-password', key: 'value' } } }],
                  volumeMounts: [{ name: 'site', mountPath: '/etc/site' }],
                },
              ],
              volumes: [{ name: 'site', configMap: { name: 'site' } }],
            },
          },
        },
      };
      await apps().createNamespacedDeployment({ namespace, body: web });
      const replicaSets = async () => (await apps().listNamespacedReplicaSet({ namespace, labelSelector: 'app=web' })).items;
      const first = await waitFor(async () => (await replicaSets()).find((rs) => rs.status?.readyReplicas === 1), { timeoutMs: 60_000, what: 'the first ReplicaSet of web ready' });
      const firstHash = first.metadata!.labels!['pod-template-hash'];

      const secret = (await api('GET', '/v1/secrets/db-password')).json.data;
      expect(secret.services).to.deep.equal(['deployment/web']);
      const rotated = await api('PUT', `/v1/secrets/${secret.id}`, { data: b64(`${PLAIN}-2`) });
      expect(rotated.status, rotated.text).to.equal(200);
      expect(rotated.json.data).to.deep.include({ version: 2, runtime_name: 'db-password', redeployed: ['deployment/web'], services: ['deployment/web'] });
      expect(rotated.text).not.to.contain(PLAIN);
      const stored = await core().readNamespacedSecret({ name: 'db-password', namespace });
      expect(Buffer.from(stored.data!.value!, 'base64').toString()).to.equal(`${PLAIN}-2`);
      expect(stored.metadata!.labels).to.include({ 'io.hangar.version': '2' });
      const restarted = (await apps().readNamespacedDeployment({ name: 'web', namespace })).spec!.template.metadata!.annotations![RESTARTED_AT];
      expect(Date.parse(restarted!)).to.be.closeTo(Date.now(), 60_000);
      const second = await waitFor(
        async () => (await replicaSets()).find((rs) => rs.metadata!.labels!['pod-template-hash'] !== firstHash && rs.status?.readyReplicas === 1),
        { timeoutMs: 60_000, what: 'a new ReplicaSet of web (new pod template hash) ready' },
      );
      expect(second.metadata!.labels!['pod-template-hash']).not.to.equal(firstHash);

      // A config's rotation rolls the same Deployment again (it mounts the ConfigMap).
      const config = await api('PUT', '/v1/configs/site', { data: b64('mode=slow') });
      expect(config.status, config.text).to.equal(200);
      expect(config.json.data).to.deep.include({ version: 2, redeployed: ['deployment/web'], data: b64('mode=slow') });
      expect((await core().readNamespacedConfigMap({ name: 'site', namespace })).data).to.deep.equal({ value: 'mode=slow' });

      const busy = await api('DELETE', `/v1/secrets/${secret.id}`);
      expect(busy.status).to.equal(409);
      expect(busy.json.message).to.equal('Secret db-password is used by deployment/web');
      expect(busy.json.details).to.deep.equal([{ type: 'workload', id: `${cluster.clusterId}/${namespace}/deployment/web`, name: 'deployment/web' }]);
      expect((await core().readNamespacedSecret({ name: 'db-password', namespace })).metadata!.name).to.equal('db-password');

      await apps().deleteNamespacedDeployment({ name: 'web', namespace });
      await waitFor(async () => !(await apps().listNamespacedDeployment({ namespace })).items.length, { timeoutMs: 30_000, what: 'web deleted' });
      const deleted = await api('DELETE', '/v1/secrets/db-password');
      expect(deleted.status, deleted.text).to.equal(200);
      expect(deleted.json.data).to.deep.equal({ id: secret.id, deleted: true });
      expect((await core().listNamespacedSecret({ namespace })).items.map((s) => s.metadata!.name)).not.to.include('db-password');
      expect((await api('GET', `/v1/secrets/${secret.id}`)).status).to.equal(404);
      const cli = await hangarCli(['config', 'delete', 'site'], { env: cliEnv, timeoutMs: 60_000 });
      expect(cli.code, cli.stderr + cli.stdout).to.equal(0);
      expect((await core().listNamespacedConfigMap({ namespace })).items.map((m) => m.metadata!.name)).not.to.include('site');
    });
  });
});
