import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { AppsV1Api, CoreV1Api } from '@kubernetes/client-node';
import { readOrNull, selectorString } from '../../../drivers/kubernetes/client.js';
import { createKubernetesDriver, type KubernetesDriver } from '../../../drivers/kubernetes/index.js';
import { HANGAR_NAMESPACE } from '../../../drivers/kubernetes/names.js';
import { AVAILABILITY_ANNOTATION } from '../../../drivers/kubernetes/nodes.js';
import { KubeControlPlane, kubeAvailability } from '../../support/kube.js';
import type { DriverTarget, TargetSession } from '../target.js';

const NODES = ['kwok-node-1', 'kwok-node-2', 'kwok-node-3'];

/**
 * The Kubernetes driver against the real upstream control plane (kube-apiserver, controllers and
 * scheduler on etcd) with three kwok-simulated nodes: pods are placed, go Running and are evicted
 * for real, but no container runs (`noProcesses`: the cases that read a process's output are
 * declared as exclusions; logs are covered by test/integration/kube with the lines kwok serves).
 * The probes' reads answer "absent" for a 404 only: any other error of the API server fails the case.
 */
export function kubernetesOnControlPlane(): DriverTarget {
  const prefix = `ct${randomBytes(3).toString('hex')}`;
  let kube: KubeControlPlane | undefined;
  return {
    title: 'k8s (the real upstream control plane, kwok nodes)',
    backend: 'k8s',
    noProcesses: 'kwok simulates the pods: no container runs, so there is no output to read',
    async available() {
      const available = await kubeAvailability();
      return available.ok ? null : available.why;
    },
    async setUp(): Promise<TargetSession> {
      kube = await KubeControlPlane.start({ nodes: NODES.length });
      const driver: KubernetesDriver = createKubernetesDriver({ kubeconfig: kube.kubeconfigPath, drainTimeoutMs: 20_000 });
      const core = kube.api(CoreV1Api);
      const apps = kube.api(AppsV1Api);
      const deployment = (name: string, replicas: number, command: string[]) =>
        [
          'apiVersion: apps/v1',
          'kind: Deployment',
          `metadata: {name: ${name}}`,
          'spec:',
          `  replicas: ${replicas}`,
          `  selector: {matchLabels: {app: ${name}}}`,
          '  template:',
          `    metadata: {labels: {app: ${name}}}`,
          `    spec: {containers: [{name: main, image: registry.invalid/contract:1, command: ${JSON.stringify(command)}}]}`,
        ].join('\n');
      const k8s = kube;
      const locate = (qualified: string) => {
        const [namespace, name] = qualified.includes('/') ? qualified.split('/') : ['default', qualified];
        return { namespace: namespace!, name: name! };
      };
      const readDeployment = (qualified: string) => readOrNull(`reading deployment ${qualified}`, () => apps.readNamespacedDeployment(locate(qualified)));
      const requireDeployment = async (qualified: string) => {
        const found = await readDeployment(qualified);
        if (!found) throw new Error(`no deployment ${qualified}`);
        return found;
      };
      return {
        driver,
        context: { cluster_nodes: { 'node-a': NODES[0]!, 'node-b': NODES[1]!, 'node-c': NODES[2]! }, settings: {} },
        node: { id: 'node-a', runtimeId: NODES[0]! },
        image: 'registry.invalid/contract:1',
        loadBalancerName: (name) => `${HANGAR_NAMESPACE}/${name}`,
        loadBalancerOnEveryNode: true,
        prefix,
        command: (script) => ['sh', '-c', script],
        bundle: (parts, script) => `${parts.map((p) => deployment(p.name, p.replicas ?? 1, ['sh', '-c', script.replaceAll('$PART', p.name)])).join('\n---\n')}\n`,
        brokenBundle: () => 'apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: api}\nspec: {replicas: many}\n',
        probe: {
          workloadId: async (qualified) => (await readDeployment(qualified))?.metadata?.uid ?? null,
          objectExists: async (kind, name) =>
            !!(await readOrNull(`reading ${kind} ${name}`, () =>
              kind === 'secret' ? core.readNamespacedSecret({ name, namespace: 'default' }) : core.readNamespacedConfigMap({ name, namespace: 'default' }),
            )),
          async foreign(name, bundle) {
            const made = k8s.kubectl(['create', 'deployment', name, '--image=registry.invalid/foreign:1', '--replicas=0']);
            if (made.code !== 0) throw new Error(made.stderr);
            await driver.deployBundle({ name: bundle, spec: `${deployment('s', 0, ['sleep', '3600'])}\n`, prune: false });
            return async () => {
              k8s.kubectl(['delete', 'deployment', name]);
              await driver.removeBundle({ name: bundle });
            };
          },
          async availability(runtimeNodeId) {
            const node = await core.readNode({ name: runtimeNodeId });
            if (!node.spec?.unschedulable) return 'schedulable';
            return node.metadata?.annotations?.[AVAILABILITY_ANNOTATION] === 'drained' ? 'drained' : 'cordoned';
          },
          // kwok's nodes are this machine (no kubelet mounts anything): a folder here is one on the node.
          async folderOnNode() {
            const folder = mkdtempSync(path.join(os.tmpdir(), 'hangar-contract-'));
            return { path: folder, remove: async () => rmSync(folder, { recursive: true, force: true }) };
          },
          volumeStaged: async (name) => !!(await readOrNull(`reading claim ${name}`, () => core.readNamespacedPersistentVolumeClaim({ name, namespace: 'default' }))),
          async runningReplicaIds(qualified) {
            const deployment = await requireDeployment(qualified);
            const pods = await core.listNamespacedPod({ namespace: locate(qualified).namespace, labelSelector: selectorString(deployment.spec?.selector) });
            return pods.items.filter((p) => p.status?.phase === 'Running' && !p.metadata?.deletionTimestamp).map((p) => p.metadata!.name!);
          },
          async workloadEnv(qualified) {
            const container = (await requireDeployment(qualified)).spec?.template.spec?.containers[0];
            return Object.fromEntries((container?.env ?? []).map((e) => [e.name, e.value ?? '']));
          },
          async workloadMounts(qualified) {
            const pod = (await requireDeployment(qualified)).spec?.template.spec;
            const mounts: Array<{ kind: 'secret' | 'config'; name: string; path: string }> = [];
            for (const mount of pod?.containers[0]?.volumeMounts ?? []) {
              const volume = pod?.volumes?.find((v) => v.name === mount.name);
              if (volume?.secret) mounts.push({ kind: 'secret', name: volume.secret.secretName!, path: mount.mountPath });
              if (volume?.configMap) mounts.push({ kind: 'config', name: volume.configMap.name!, path: mount.mountPath });
            }
            return mounts;
          },
        },
      };
    },
    async tearDown() {
      await kube?.stop();
    },
  };
}
