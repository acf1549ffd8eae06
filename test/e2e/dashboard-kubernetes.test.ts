import { expect } from 'chai';
import { readFileSync } from 'node:fs';
import type { Page } from 'playwright-core';
import { CoreV1Api } from '@kubernetes/client-node';
import { waitFor } from '../support/agents.js';
import { logIn, navigate, openBrowser, requireBrowser, tableRow } from '../support/browser.js';
import { TestDialect } from '../support/dialects.js';
import type { TestHangar } from '../support/hangar.js';
import { bearer, type Credentials } from '../support/identity.js';
import type { KubeControlPlane } from '../support/kube.js';
import { startKubeForSuite, startOnAdoptedCluster, stopOnAdoptedCluster, type KubeCluster } from '../support/kube-cluster.js';
import { loadConfig } from '../../core/config.js';

/**
 * Kubernetes through the dashboard in chromium: the Kubernetes page lists a cluster (the real
 * upstream control plane with kwok's simulated nodes, reached by a real agent: see
 * test/support/kube-cluster.ts), its page shows the nodes as the cluster reports them and hands an
 * admin the kubeconfig as a file; a manifest service is created from the Services page, its applied
 * objects listed, its manifests edited with a diff (the object left out is pruned on the cluster).
 * SQLite.
 */
describe('the dashboard in chromium: Kubernetes clusters and manifest services [sqlite, real control plane, kwok nodes]', function () {
  this.timeout(60_000);
  const dialect = new TestDialect('sqlite');
  let kube: KubeControlPlane;
  let t: TestHangar;
  let admin: Credentials;
  let cluster: KubeCluster;
  let page: Page;
  let shot: (name: string) => Promise<unknown>;
  let closeBrowser: (() => Promise<void>) | undefined;
  const row = (table: string, text: string) => tableRow(page, table, text);
  const api = (method: string, p: string) => t.request(method, p, { headers: bearer(admin.token) });

  before(async function () {
    requireBrowser(this);
    kube = await startKubeForSuite(this);
    ({ t, admin, cluster } = await startOnAdoptedCluster(dialect, kube, { plugins: loadConfig({ env: {} }).plugins, overrides: { login: { port: 0 } }, name: 'kube-ui', reportedAs: 'kwok-node-1' }));
    const opened = await openBrowser();
    ({ page, shot } = opened);
    closeBrowser = opened.close;
    await logIn(page, t.url, admin.username, admin.password);
  });
  after(async function () {
    this.timeout(60_000);
    await closeBrowser?.();
    await stopOnAdoptedCluster(t);
    await dialect.cleanup();
    await kube?.stop();
  });

  it('lists the cluster, shows its nodes as the cluster reports them, and hands an admin its kubeconfig as a file', async () => {
    await navigate(page, 'Kubernetes');
    await page.getByRole('heading', { name: 'Kubernetes clusters' }).waitFor();
    await row('Kubernetes clusters', 'kube-ui').getByText('active').waitFor();
    await row('Kubernetes clusters', 'kube-ui').getByRole('link', { name: 'kube-ui' }).click();
    await page.getByRole('heading', { name: 'Kubernetes cluster kube-ui' }).waitFor();

    const reported = (await api('GET', `/v1/kubernetes/clusters/${cluster.clusterId}/nodes`)).json.data[0];
    expect(reported).to.include({ node_id: cluster.nodeId, ready: true });
    const node = row('Nodes', cluster.nodeId);
    await node.getByText('Ready', { exact: true }).waitFor();
    expect(await node.textContent()).to.contain('server').and.to.contain(reported.kubelet_version);
    await shot('k8s-01-cluster');

    const [download] = await Promise.all([page.waitForEvent('download'), page.getByRole('button', { name: 'Download kubeconfig' }).click()]);
    expect(download.suggestedFilename()).to.equal('kube-ui.kubeconfig');
    const saved = readFileSync((await download.path())!, 'utf8');
    const fromApi = (await api('GET', `/v1/kubernetes/clusters/${cluster.clusterId}/kubeconfig`)).json.data.kubeconfig;
    // Each download is a token of its own: the same kubeconfig but for the token.
    const withoutToken = (kubeconfig: string) => kubeconfig.replace(/token: .*/, 'token: …');
    expect(withoutToken(saved)).to.equal(withoutToken(fromApi));
    expect(saved).to.not.equal(fromApi);
    expect(saved).to.contain('kind: Config');
  });

  it('creates a manifest service from the Services page, lists its applied objects, edits its manifests with a diff (pruning what was left out)', async function () {
    this.timeout(180_000);
    const deployment = 'apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  replicas: 1\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    spec: {containers: [{name: web, image: registry.invalid/web:1}]}\n';
    const config = 'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web-settings}\ndata: {mode: fast}\n';
    await navigate(page, 'Services');
    await page.getByRole('button', { name: 'Create manifest service' }).click();
    const create = page.getByRole('dialog');
    await create.getByLabel('Name').fill('web');
    await create.getByLabel('Kubernetes cluster').selectOption(cluster.clusterId);
    await create.getByLabel('Manifests (YAML, documents separated by ---)').fill(`${deployment}---\n${config}`);
    await create.getByRole('button', { name: 'Apply' }).click();
    await row('Services', 'web').getByText('running').waitFor({ timeout: 90_000 });
    // Its cluster by name, linked to the cluster's page (the id in its title).
    const clusterLink = row('Services', 'web').getByRole('link', { name: 'kube-ui' });
    expect(await clusterLink.getAttribute('title')).to.equal(cluster.clusterId);
    expect(await clusterLink.getAttribute('href')).to.contain(cluster.clusterId);

    await row('Services', 'web').getByRole('link', { name: 'web' }).click();
    await page.getByRole('heading', { name: 'Service web' }).waitFor();
    const objects = page.getByRole('table', { name: 'Applied objects' });
    await objects.getByRole('row').filter({ hasText: 'web-settings' }).waitFor();
    expect((await objects.getByRole('row').allTextContents()).slice(1)).to.deep.equal(['Deploymentwebdefaultapps/v1', 'ConfigMapweb-settingsdefaultv1']);

    await page.getByRole('button', { name: 'Edit' }).click();
    await page.getByLabel('Manifests (YAML)').fill(deployment);
    await page.getByRole('button', { name: 'Review changes' }).click();
    const diff = page.getByLabel('Difference between the deployed and the edited manifests');
    expect(await diff.locator('.del').count()).to.equal(config.trim().split('\n').length + 1); // the ConfigMap and its --- line
    expect(await diff.locator('.add').count()).to.equal(0);
    await shot('k8s-02-manifest-diff');
    await page.getByRole('button', { name: 'Apply changes' }).click();
    await objects.getByRole('row').filter({ hasText: 'web-settings' }).waitFor({ state: 'detached', timeout: 60_000 });
    await waitFor(
      () => kube.api(CoreV1Api).readNamespacedConfigMap({ name: 'web-settings', namespace: 'default' }).then(() => false, () => true),
      { timeoutMs: 60_000, intervalMs: 500, what: 'the ConfigMap pruned from the cluster' },
    );

    await page.getByRole('button', { name: 'Delete' }).click();
    await page.getByRole('dialog').getByRole('button', { name: 'Delete' }).click();
    await page.getByRole('heading', { name: 'Services' }).waitFor();
    await waitFor(async () => ((await api('GET', '/v1/services')).json.data as unknown[]).length === 0, { timeoutMs: 60_000, intervalMs: 500, what: 'the service gone' });
  });
});
