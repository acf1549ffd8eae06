import { expect } from 'chai';
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { CoreV1Api } from '@kubernetes/client-node';
import { waitFor } from '../../support/agents.js';
import { describeEachDialect } from '../../support/dialects.js';
import type { TestHangar } from '../../support/hangar.js';
import type { Credentials } from '../../support/identity.js';
import type { KubeControlPlane } from '../../support/kube.js';
import { releaseSharedKube, sharedKubeForSuite, startOnAdoptedCluster, stopOnAdoptedCluster, type KubeCluster } from '../../support/kube-cluster.js';
import { hangarCli, TempDirs, type CliResult } from '../runner/support.js';

// `hangar service create --cluster C --manifest FILE` as an operator runs it: the real
// bin/hangar.mjs against a control plane holding a Kubernetes cluster that is the real upstream
// control plane (kwok's simulated nodes and pods; no container runs), reached by a real agent
// (test/support/kube-cluster.ts).

describe('hangar service with --cluster and --manifest on a Kubernetes cluster (real control plane, kwok nodes)', function () {
  let kube: KubeControlPlane;

  before(async function () {
    kube = await sharedKubeForSuite(this);
  });
  after(() => {
    if (kube) releaseSharedKube();
  });

  describeEachDialect('create, get, update, delete', (dialect) => {
    const temp = new TempDirs();
    let t: TestHangar;
    let admin: Credentials;
    let cluster: KubeCluster;
    let env: Record<string, string | undefined>;
    let dir: string;
    const namespace = `cli-${dialect.name}`;

    const cli = (args: string[], input?: string): Promise<CliResult> => hangarCli(args, { env, input, timeoutMs: 120_000 });
    const ok = async (args: string[], input?: string): Promise<string> => {
      const res = await cli(args, input);
      expect(res.code, `hangar ${args.join(' ')}\n${res.stderr}${res.stdout}\n${cluster.agent.output()}`).to.equal(0);
      return res.stdout;
    };

    before(async function () {
      this.timeout(60_000);
      ({ t, admin, cluster } = await startOnAdoptedCluster(dialect, kube, { plugins: ['services'], overrides: { clusters: { observe_interval_seconds: 1 } } }));
      await kube.api(CoreV1Api).createNamespace({ body: { metadata: { name: namespace } } });
      dir = temp.make('hangar-cli-manifest-');
      const ca = path.join(dir, 'ca.pem');
      writeFileSync(ca, t.caPem);
      env = { XDG_CONFIG_HOME: dir, HANGAR_API_URL: t.url, HANGAR_ACCESS_KEY: admin.accessKeyId, HANGAR_SECRET_KEY: admin.secretAccessKey, HANGAR_CA_FILE: ca, HANGAR_CLI_POLL_MS: '200' };
    });
    after(async function () {
      this.timeout(30_000);
      await stopOnAdoptedCluster(t);
      temp.cleanup();
    });

    it('create --wait applies the manifest (Running on kwok nodes); get shows it as YAML with the applied objects; update --manifest prunes; delete --wait removes the objects', async function () {
      this.timeout(180_000);
      const deployment = `apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: shop, namespace: ${namespace}}\nspec:\n  replicas: 1\n  selector: {matchLabels: {app: shop}}\n  template:\n    metadata: {labels: {app: shop}}\n    spec: {containers: [{name: shop, image: registry.invalid/shop:1}]}\n`;
      const config = `apiVersion: v1\nkind: ConfigMap\nmetadata: {name: shop-settings, namespace: ${namespace}}\ndata: {mode: fast}\n`;
      const manifest = path.join(dir, 'shop.yaml');
      writeFileSync(manifest, `${deployment}---\n${config}`);

      const created = await ok(['service', 'create', 'shop', '--cluster', cluster.clusterName, '--manifest', manifest, '--wait']);
      expect(created).to.match(/service shop \(svc-[0-9a-z]+\)/);
      const id = created.match(/\((svc-[0-9a-z]+)\)/)![1]!;
      const data = JSON.parse(await ok(['service', 'get', id, '--json']));
      expect(data).to.deep.include({ backend: 'manifest', cluster_id: cluster.clusterId, status: 'running' });
      // The status comes from the rollout's conditions, the counts from the pods, observed apart: the count may follow a moment later.
      const counted = await waitFor(async () => {
        const replicas = JSON.parse(await ok(['service', 'get', id, '--json'])).replicas.shop;
        return replicas?.running === 1 ? replicas : null;
      }, { timeoutMs: 30_000, intervalMs: 500, what: 'the service to count its running replica' });
      expect(counted).to.deep.equal({ desired: 1, running: 1 });

      // Readable: the manifest as the YAML that was given, the applied objects as a table.
      const shown = await ok(['service', 'get', id]);
      expect(shown).to.contain(`kind: Deployment\nmetadata: {name: shop, namespace: ${namespace}}`);
      expect(shown).to.contain('kind: ConfigMap');
      expect(shown).to.match(/ConfigMap\s+\| shop-settings/);
      const listed = await ok(['service', 'list']);
      expect(listed.split('\n')[0]).to.match(/^id\s+\| name\s+\| swarm \| cluster\s+\| status/);
      expect(listed).to.contain(cluster.clusterId);

      // The manifest from stdin without the ConfigMap: it is pruned.
      await ok(['service', 'update', id, '--manifest', '-', '--wait'], deployment);
      const updated = JSON.parse(await ok(['service', 'get', id, '--json']));
      expect(updated.applied_objects.map((o: { kind: string }) => o.kind)).to.deep.equal(['Deployment']);
      const pruned = await kube
        .api(CoreV1Api)
        .readNamespacedConfigMap({ name: 'shop-settings', namespace })
        .then(() => false, () => true);
      expect(pruned, 'the ConfigMap deleted from the cluster').to.equal(true);

      await ok(['service', 'delete', id, '--wait']);
      const pods = await kube.api(CoreV1Api).listNamespacedPod({ namespace, labelSelector: 'app=shop' });
      expect(pods.items.filter((p) => !p.metadata?.deletionTimestamp)).to.deep.equal([]);
    });
  });
});
