import { expect } from 'chai';
import { AppsV1Api, CoreV1Api, PatchStrategy, PolicyV1Api, RbacAuthorizationV1Api, setHeaderOptions } from '@kubernetes/client-node';
import { createKubernetesDriver, BUNDLE_LABEL, type KubernetesDriver } from '../../../drivers/kubernetes/index.js';
import { waitFor } from '../../support/agents.js';
import { failureOf } from '../../support/failures.js';
import { KUBE_START_TIMEOUT_MS, KubeControlPlane, kubeAvailability } from '../../support/kube.js';
import { requireService } from '../../support/requirements.js';

// drivers/kubernetes against the real upstream control plane with kwok-simulated nodes: the
// cluster's nodes as it reports them, cordon and drain through the Eviction API (a
// PodDisruptionBudget blocks it), and manifests applied server-side (applied objects, prune, a
// field-manager conflict reported, a broken manifest changing nothing).

const NODES = ['kwok-node-1', 'kwok-node-2', 'kwok-node-3'];
const CLUSTER_NODES = { 'node-a': 'kwok-node-1', 'node-b': 'kwok-node-2', 'node-c': 'kwok-node-3' };
const mergePatch = setHeaderOptions('Content-Type', PatchStrategy.MergePatch);

/** A manifest: a Deployment, a Service in front of it, and (optionally) a ConfigMap it reads. */
/** `replicas: null` leaves the field out (its manager is then whoever set it last). */
function manifest(options: { replicas?: number | null; withConfig?: boolean; color?: string } = {}): string {
  const docs = [
    `apiVersion: apps/v1
kind: Deployment
metadata:
  name: shop
  labels: {app: shop}
spec:
${options.replicas === null ? '' : `  replicas: ${options.replicas ?? 2}\n`}  selector: {matchLabels: {app: shop}}
  template:
    metadata: {labels: {app: shop}}
    spec:
      containers:
      - name: shop
        image: registry.invalid/shop:1
        env: [{name: COLOR, value: ${options.color ?? 'blue'}}]`,
    `apiVersion: v1
kind: Service
metadata: {name: shop}
spec:
  selector: {app: shop}
  ports: [{port: 80, targetPort: 8080}]`,
  ];
  if (options.withConfig ?? true) docs.push('apiVersion: v1\nkind: ConfigMap\nmetadata: {name: shop-settings}\ndata: {mode: fast}');
  return `${docs.join('\n---\n')}\n`;
}

describe('Kubernetes driver: nodes, cordon and drain with PodDisruptionBudgets, manifests by server-side apply (real control plane, kwok nodes)', function () {
  this.timeout(120_000);
  let kube: KubeControlPlane;
  let driver: KubernetesDriver;
  let core: CoreV1Api;
  let apps: AppsV1Api;

  before(async function () {
    this.timeout(KUBE_START_TIMEOUT_MS);
    const available = await kubeAvailability();
    requireService(this, available.ok, available.why);
    kube = await KubeControlPlane.start({ nodes: NODES.length });
    // A drain waits 8 s for a budget to make room (60 s by default): long enough to see it retried, short for a test.
    driver = createKubernetesDriver({ kubeconfig: kube.kubeconfigPath, drainTimeoutMs: 8_000 });
    core = kube.api(CoreV1Api);
    apps = kube.api(AppsV1Api);
  });
  after(() => kube?.stop());

  describe('nodes', () => {
    it('lists the nodes as the cluster reports them: Ready, roles, kubelet version, address, availability', async () => {
      await core.patchNode({ name: 'kwok-node-1', body: { metadata: { labels: { 'node-role.kubernetes.io/control-plane': 'true', 'node-role.kubernetes.io/master': 'true' } } } }, mergePatch);
      const { nodes } = await driver.nodes({});
      expect(nodes.map((n) => n.runtime_node_id)).to.deep.equal(NODES);
      expect(nodes.every((n) => n.ready && n.availability === 'schedulable')).to.equal(true);
      expect(nodes[0]!.roles).to.deep.equal(['control-plane', 'master']);
      expect(nodes[1]!.roles).to.deep.equal([]);
      const reported = await core.readNode({ name: 'kwok-node-2' });
      expect(nodes[1]!.kubelet_version).to.equal(reported.status?.nodeInfo?.kubeletVersion).and.not.equal('');
      expect(nodes[1]!.address).to.equal(reported.status?.addresses?.find((a) => a.type === 'InternalIP')?.address).and.match(/^\d+\.\d+\.\d+\.\d+$/);
    });

    it('cordons (no new pod lands there, running ones stay), drains by eviction (the pods move to the other nodes) and uncordons', async () => {
      await driver.deployWorkload({ spec: { name: 'spread', role: 'instance', resource_id: 'inst-spread', image: 'registry.invalid/x:1', replicas: 6 }, cluster_nodes: CLUSTER_NODES });
      const onNode = async (node: string) => (await core.listNamespacedPod({ namespace: 'default', fieldSelector: `spec.nodeName=${node}` })).items.filter((p) => !p.metadata?.deletionTimestamp);
      await waitFor(async () => (await driver.inspectWorkloads({ names: ['spread'] })).workloads[0]?.running === 6, { what: 'spread running 6', timeoutMs: 60_000 });
      // The scheduler spreads replicas of one workload over the nodes (a preference, not a rule):
      // the node cordoned and drained is one that got some.
      const target = (await Promise.all(NODES.map(async (node) => ((await onNode(node)).length ? node : null)))).filter((n) => n !== null).pop()!;
      const index = NODES.indexOf(target);
      const before = await onNode(target);
      expect(before.length).to.be.greaterThan(0);

      expect(await driver.setNodeAvailability({ runtime_node_id: target, availability: 'cordoned' })).to.deep.equal({ availability: 'cordoned' });
      expect((await core.readNode({ name: target })).spec?.unschedulable).to.equal(true);
      expect((await driver.nodes({})).nodes[index]!.availability).to.equal('cordoned');
      expect((await onNode(target)).map((p) => p.metadata?.name), 'cordon leaves running pods').to.deep.equal(before.map((p) => p.metadata?.name));

      expect(await driver.setNodeAvailability({ runtime_node_id: target, availability: 'drained' })).to.deep.equal({ availability: 'drained' });
      expect(await onNode(target)).to.deep.equal([]);
      expect((await driver.nodes({})).nodes[index]!.availability).to.equal('drained');
      const state = await waitFor(async () => {
        const s = (await driver.inspectWorkloads({ names: ['spread'] })).workloads[0];
        return s?.running === 6 ? s : undefined;
      }, { what: 'spread running 6 again on the other nodes', timeoutMs: 60_000 });
      expect(state.tasks.map((t) => t.runtime_node_id)).to.not.include(target);

      expect(await driver.setNodeAvailability({ runtime_node_id: target, availability: 'schedulable' })).to.deep.equal({ availability: 'schedulable' });
      const node = await core.readNode({ name: target });
      expect(node.spec?.unschedulable ?? false).to.equal(false);
      expect(node.metadata?.annotations?.['io.hangar.availability']).to.equal(undefined);
      expect((await failureOf(driver.setNodeAvailability({ runtime_node_id: target, availability: 'sleepy' as never }))).message).to.match(/unknown availability/);
      expect((await failureOf(driver.setNodeAvailability({ runtime_node_id: 'no-such-node', availability: 'cordoned' }))).statusCode).to.equal(404);
      expect(await driver.removeWorkload({ name: 'spread' })).to.deep.equal({ removed: true });
    });

    it('a drain a PodDisruptionBudget blocks fails naming the pods and the budget’s reason, and leaves the node cordoned with those pods', async () => {
      await driver.deployWorkload({
        spec: { name: 'guarded', role: 'instance', resource_id: 'inst-guarded', image: 'registry.invalid/x:1', replicas: 2, placement: { node_ids: ['node-b'] } },
        cluster_nodes: CLUSTER_NODES,
      });
      await kube.api(PolicyV1Api).createNamespacedPodDisruptionBudget({
        namespace: 'default',
        body: { metadata: { name: 'guarded' }, spec: { minAvailable: 2, selector: { matchLabels: { 'io.hangar.workload': 'guarded' } } } },
      });
      await waitFor(async () => (await kube.api(PolicyV1Api).readNamespacedPodDisruptionBudget({ name: 'guarded', namespace: 'default' })).status?.currentHealthy === 2, {
        what: 'the budget to see two healthy pods',
        timeoutMs: 60_000,
      });
      const refused = await failureOf(driver.setNodeAvailability({ runtime_node_id: 'kwok-node-2', availability: 'drained' }));
      expect(refused.statusCode).to.equal(409);
      expect(refused.message).to.match(/draining node kwok-node-2: after 8 s the eviction of default\/guarded-\S+ \(.*disruption budget.*\)/);
      expect(refused.message).to.contain('the node stays cordoned');
      const node = await core.readNode({ name: 'kwok-node-2' });
      expect(node.spec?.unschedulable).to.equal(true);
      expect((await driver.nodes({})).nodes[1]!.availability).to.equal('cordoned');
      expect((await driver.inspectWorkloads({ names: ['guarded'] })).workloads[0]!.running, 'both pods still there').to.equal(2);

      // With room in the budget the same drain goes through.
      await kube.api(PolicyV1Api).deleteNamespacedPodDisruptionBudget({ name: 'guarded', namespace: 'default' });
      await driver.removeWorkload({ name: 'guarded' });
      expect(await driver.setNodeAvailability({ runtime_node_id: 'kwok-node-2', availability: 'drained' })).to.deep.equal({ availability: 'drained' });
      await driver.setNodeAvailability({ runtime_node_id: 'kwok-node-2', availability: 'schedulable' });
    });
  });

  describe('manifests (bundles), server-side apply', () => {
    it('applies a Deployment, Service and ConfigMap, lists the applied objects, and the Deployment reaches its replicas Running', async () => {
      const state = await driver.deployBundle({ name: 'shop', spec: manifest(), prune: false });
      expect(state.applied_objects).to.deep.equal([
        { api_version: 'apps/v1', kind: 'Deployment', name: 'shop', namespace: 'default' },
        { api_version: 'v1', kind: 'Service', name: 'shop', namespace: 'default' },
        { api_version: 'v1', kind: 'ConfigMap', name: 'shop-settings', namespace: 'default' },
      ]);
      expect(state.services.map((s) => [s.name, s.component, s.stack])).to.deep.equal([['shop', 'shop', 'shop']]);
      const deployment = await apps.readNamespacedDeployment({ name: 'shop', namespace: 'default' });
      expect(deployment.metadata?.labels).to.include({ app: 'shop', [BUNDLE_LABEL]: 'shop' });
      expect(deployment.metadata?.managedFields?.map((f) => [f.manager, f.operation])).to.deep.include(['hangar', 'Apply']);
      await waitFor(async () => (await driver.inspectWorkloads({ stacks: ['shop'] })).workloads[0]?.running === 2, { what: 'shop running 2', timeoutMs: 60_000 });
      kube.appendPodLog([{ text: 'shop says hi' }]);
      const { lines } = await driver.bundleLogs({ name: 'shop', lines: 1 });
      expect(lines).to.have.length(1);
      expect(lines[0]).to.match(/^shop \| \S+Z shop says hi$/);
    });

    it('reports a field another manager owns as a 409 naming the field and the manager, and changes nothing', async () => {
      // An operator scales by hand with their own server-side apply (kubectl's field manager).
      await apps.patchNamespacedDeployment(
          { name: 'shop', namespace: 'default', fieldManager: 'ops', force: true, body: { apiVersion: 'apps/v1', kind: 'Deployment', metadata: { name: 'shop' }, spec: { replicas: 3 } } },
          setHeaderOptions('Content-Type', PatchStrategy.ServerSideApply),
        );
      const conflict = await failureOf(driver.deployBundle({ name: 'shop', spec: manifest({ replicas: 2, color: 'green' }), prune: true }));
      expect(conflict.statusCode).to.equal(409);
      expect(conflict.message).to.equal('bundle shop: applying deployment/shop: conflict with another field manager: .spec.replicas is managed by ops');
      const deployment = await apps.readNamespacedDeployment({ name: 'shop', namespace: 'default' });
      expect(deployment.spec?.replicas).to.equal(3);
      expect(deployment.spec?.template.spec?.containers[0]?.env, 'the dry run stopped it before anything changed').to.deep.equal([{ name: 'COLOR', value: 'blue' }]);
      // Without the field hangar no longer claims it: the apply goes through and the operator's replicas stay.
      const state = await driver.deployBundle({ name: 'shop', spec: manifest({ color: 'green', replicas: null }), prune: true });
      expect(state.services[0]!.replicas).to.equal(3);
    });

    it('re-applying without the ConfigMap and with prune deletes it; a manifest the API server refuses changes nothing', async () => {
      const state = await driver.deployBundle({ name: 'shop', spec: manifest({ withConfig: false, replicas: null }), prune: true });
      expect(state.applied_objects.map((o) => o.kind)).to.deep.equal(['Deployment', 'Service']);
      expect((await core.listNamespacedConfigMap({ namespace: 'default' })).items.map((c) => c.metadata?.name)).to.not.include('shop-settings');
      expect((await driver.bundleObjects({ name: 'shop' })).objects?.map((o) => o.name)).to.deep.equal(['shop', 'shop']);

      // The Deployment (a new color) is fine, the Service after it is not: nothing is applied, not even the Deployment.
      const broken = manifest({ withConfig: true, replicas: null, color: 'red' }).replace('port: 80,', 'port: -5,');
      const refused = await failureOf(driver.deployBundle({ name: 'shop', spec: broken, prune: true }));
      expect(refused.message).to.match(/^bundle shop: applying service\/shop: .*spec\.ports\[0\]\.port: Invalid value: -5/);
      expect((await apps.readNamespacedDeployment({ name: 'shop', namespace: 'default' })).spec?.template.spec?.containers[0]?.env).to.deep.equal([{ name: 'COLOR', value: 'blue' }]);
      expect((await core.listNamespacedConfigMap({ namespace: 'default' })).items.map((c) => c.metadata?.name), 'not applied').to.not.include('shop-settings');
      expect((await failureOf(driver.deployBundle({ name: 'shop', spec: 'kind: [', prune: true }))).message).to.match(/^bundle shop: document 1 of the manifest is not valid YAML/);
      expect((await failureOf(driver.deployBundle({ name: 'shop', spec: 'apiVersion: v1\nkind: Gadget\nmetadata: {name: g}\n', prune: true }))).message).to.equal('bundle shop: the cluster has no kind Gadget in v1');
      expect((await failureOf(driver.deployBundle({ name: 'shop', spec: 'just: text\n', prune: true }))).message).to.contain('is not a Kubernetes object');
      expect((await driver.bundleObjects({ name: 'shop' })).objects?.length, 'inventory untouched').to.equal(2);
    });

    it('applies cluster-scoped objects and a namespace the manifest creates; removing the bundle deletes every object it applied, once', async () => {
      const spec = `apiVersion: v1
kind: Namespace
metadata: {name: tools}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: tool-settings, namespace: tools}
data: {a: b}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: tool, namespace: tools}
spec:
  replicas: 1
  selector: {matchLabels: {app: tool}}
  template:
    metadata: {labels: {app: tool}}
    spec: {containers: [{name: tool, image: registry.invalid/tool:1}]}
`;
      const state = await driver.deployBundle({ name: 'tools', spec, prune: true });
      expect(state.applied_objects).to.deep.equal([
        { api_version: 'v1', kind: 'Namespace', name: 'tools', namespace: null },
        { api_version: 'v1', kind: 'ConfigMap', name: 'tool-settings', namespace: 'tools' },
        { api_version: 'apps/v1', kind: 'Deployment', name: 'tool', namespace: 'tools' },
      ]);
      expect(state.services.map((s) => s.name)).to.deep.equal(['tools/tool']);
      await waitFor(async () => (await driver.inspectWorkloads({ names: ['tools/tool'] })).workloads[0]?.running === 1, { what: 'tools/tool running', timeoutMs: 60_000 });

      expect(await driver.removeBundle({ name: 'shop' })).to.deep.equal({ removed: true });
      expect(await driver.removeBundle({ name: 'shop' })).to.deep.equal({ removed: false });
      expect((await driver.inspectWorkloads({ stacks: ['shop'] })).workloads).to.deep.equal([]);
      expect((await core.listNamespacedService({ namespace: 'default' })).items.map((s) => s.metadata?.name)).to.not.include('shop');
      expect(await driver.removeBundle({ name: 'tools' })).to.deep.equal({ removed: true });
      await waitFor(async () => !(await core.listNamespace()).items.some((n) => n.metadata?.name === 'tools'), { what: 'namespace tools gone', timeoutMs: 60_000 });
    });
  });

  describe('a project namespace: a non-admin manifest applied as the project user (RBAC, Pod Security restricted)', () => {
    const namespace = 'hangar-project-team-a';
    const project = { id: 'prj-teama0000000000', name: 'team-a' };
    const confined = { namespace, confined: true } as const;
    /** A Deployment whose pods meet Pod Security `restricted`, naming no namespace. */
    const restricted = (name: string, extra = '') => `apiVersion: apps/v1
kind: Deployment
metadata: {name: ${name}}
spec:
  replicas: 1
  selector: {matchLabels: {app: ${name}}}
  template:
    metadata: {labels: {app: ${name}}}
    spec:
      securityContext: {runAsNonRoot: true, runAsUser: 1000, seccompProfile: {type: RuntimeDefault}}
${extra}      containers:
      - name: ${name}
        image: registry.invalid/${name}:1
        securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
`;

    it('makes the namespace (hangar\'s and the project\'s, Pod Security restricted) with its Role and a RoleBinding to the project user (no ServiceAccount: no token to mount), and applies into it as that user', async () => {
      // A namespace made before had the ServiceAccount hangar-project, whose token a pod could mount: it goes.
      await core.createNamespace({ body: { metadata: { name: namespace } } });
      await core.createNamespacedServiceAccount({ namespace, body: { metadata: { name: 'hangar-project' } } });
      const state = await driver.deployBundle({ name: 'team-a-web', spec: restricted('web'), prune: true, project, ...confined });
      expect(state.applied_objects).to.deep.equal([{ api_version: 'apps/v1', kind: 'Deployment', name: 'web', namespace }]);
      const ns = await core.readNamespace({ name: namespace });
      expect(ns.metadata?.labels).to.include({ 'app.kubernetes.io/managed-by': 'hangar', 'io.hangar.project': project.id, 'pod-security.kubernetes.io/enforce': 'restricted' });
      expect((await failureOf(core.readNamespacedServiceAccount({ name: 'hangar-project', namespace })) as { code?: number }).code, 'the ServiceAccount of before is deleted').to.equal(404);
      const rbac = kube.api(RbacAuthorizationV1Api);
      const binding = await rbac.readNamespacedRoleBinding({ name: 'hangar-project', namespace });
      expect(binding.subjects).to.deep.equal([{ apiGroup: 'rbac.authorization.k8s.io', kind: 'User', name: `hangar:project:${namespace}` }]);
      expect(binding.roleRef).to.deep.include({ kind: 'Role', name: 'hangar-project' });
      await waitFor(async () => (await driver.inspectWorkloads({ stacks: ['team-a-web'] })).workloads[0]?.running === 1, { what: 'web running in the project namespace', timeoutMs: 60_000 });
      kube.appendPodLog([{ text: 'web says hi' }]);
      const { lines } = await driver.bundleLogs({ name: 'team-a-web', lines: 1, ...confined });
      expect(lines[0]).to.match(/^web \| \S+Z web says hi$/);
    });

    it('the API server refuses, to the project user, a ClusterRoleBinding and another namespace (RBAC 403) and a privileged or hostPath pod (Pod Security restricted), and nothing is applied', async () => {
      const binding = 'apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {name: team-a-admin}\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}\nsubjects: [{kind: ServiceAccount, name: hangar-project, namespace: hangar-project-team-a}]\n';
      const crb = await failureOf(driver.deployBundle({ name: 'team-a-web', spec: binding, prune: true, ...confined }));
      expect(crb.statusCode, crb.message).to.equal(403);
      expect(crb.message).to.contain('clusterrolebindings.rbac.authorization.k8s.io "team-a-admin" is forbidden: User "hangar:project:hangar-project-team-a" cannot patch resource "clusterrolebindings"');

      const elsewhere = restricted('web').replace('metadata: {name: web}', 'metadata: {name: web, namespace: kube-system}');
      const other = await failureOf(driver.deployBundle({ name: 'team-a-web', spec: elsewhere, prune: true, ...confined }));
      expect(other.statusCode, other.message).to.equal(403);
      expect(other.message).to.contain('cannot patch resource "deployments" in API group "apps" in the namespace "kube-system"');

      const role = 'apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {name: grab}\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: admin}\nsubjects: [{kind: ServiceAccount, name: hangar-project, namespace: hangar-project-team-a}]\n';
      expect((await failureOf(driver.deployBundle({ name: 'team-a-web', spec: role, prune: true, ...confined }))).statusCode, 'a RoleBinding').to.equal(403);

      const pod = (spec: string) => `apiVersion: v1\nkind: Pod\nmetadata: {name: root}\nspec:\n${spec}`;
      const privileged = await failureOf(driver.deployBundle({ name: 'team-a-web', spec: pod('  containers: [{name: c, image: registry.invalid/c:1, securityContext: {privileged: true}}]\n'), prune: true, ...confined }));
      expect(privileged.statusCode, privileged.message).to.equal(403);
      expect(privileged.message).to.match(/violates PodSecurity "restricted:latest": privileged/);
      const hostPath = pod('  securityContext: {runAsNonRoot: true, runAsUser: 1000, seccompProfile: {type: RuntimeDefault}}\n  volumes: [{name: root, hostPath: {path: /}}]\n  containers: [{name: c, image: registry.invalid/c:1, securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}}]\n');
      const host = await failureOf(driver.deployBundle({ name: 'team-a-web', spec: hostPath, prune: true, ...confined }));
      expect(host.statusCode, host.message).to.equal(403);
      expect(host.message).to.contain('violates PodSecurity "restricted:latest": restricted volume types (volume "root" uses restricted volume type "hostPath")');

      expect((await driver.bundleObjects({ name: 'team-a-web', ...confined })).objects?.map((o) => o.name), 'the inventory as before').to.deep.equal(['web']);
      expect((await kube.api(RbacAuthorizationV1Api).listClusterRoleBinding()).items.map((b) => b.metadata?.name)).to.not.include('team-a-admin');
    });

    it('an admin\'s manifest (not confined) still goes anywhere: objects that name no namespace go in the project\'s; its removal deletes only what carries its label, not what a member added to its inventory; removal as the project user deletes its own', async () => {
      const admin = await driver.deployBundle({ name: 'team-a-ops', spec: `${restricted('ops')}---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: ops-note, namespace: default}\ndata: {a: b}\n`, prune: true, project, namespace });
      expect(admin.applied_objects.map((o) => `${o.kind} ${o.namespace}/${o.name}`)).to.deep.equal([`Deployment ${namespace}/ops`, 'ConfigMap default/ops-note']);
      // The inventory lives in the project's namespace, where its members may edit ConfigMaps: one lists a Namespace and a ClusterRoleBinding in it.
      await core.createNamespace({ body: { metadata: { name: 'victim' } } });
      const inventory = await core.readNamespacedConfigMap({ name: 'hangar-bundle-team-a-ops', namespace });
      const poisoned = [...JSON.parse(inventory.data!.objects!), { api_version: 'v1', kind: 'Namespace', name: 'victim', namespace: null }, { api_version: 'rbac.authorization.k8s.io/v1', kind: 'ClusterRoleBinding', name: 'system:basic-user', namespace: null }];
      await core.patchNamespacedConfigMap({ name: 'hangar-bundle-team-a-ops', namespace, body: { data: { objects: JSON.stringify(poisoned) } } }, mergePatch);
      expect(await driver.removeBundle({ name: 'team-a-ops', namespace })).to.deep.equal({ removed: true });
      expect((await core.readNamespace({ name: 'victim' })).metadata?.deletionTimestamp, 'the Namespace listed is not deleted').to.equal(undefined);
      expect((await kube.api(RbacAuthorizationV1Api).readClusterRoleBinding({ name: 'system:basic-user' })).metadata?.deletionTimestamp, 'nor the ClusterRoleBinding').to.equal(undefined);
      expect((await core.listNamespacedConfigMap({ namespace: 'default' })).items.map((c) => c.metadata?.name), 'its own objects are').to.not.include('ops-note');
      expect(await driver.removeBundle({ name: 'team-a-web', ...confined })).to.deep.equal({ removed: true });
      expect((await apps.listNamespacedDeployment({ namespace })).items.filter((d) => !d.metadata?.deletionTimestamp)).to.deep.equal([]);
    });
  });
});
