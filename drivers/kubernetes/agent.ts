import { existsSync } from 'node:fs';
import { clusterKubeconfig, K3S_EXECUTORS } from './k3s-executors.js';
import { defineAgentDriver } from '../../core/clusters/backend.js';
import { K8S_BACKEND_KINDS } from './membership-calls.js';

/**
 * The k8s backend's agent half (the control-plane half is ./backend.ts), built into the agent
 * (agent/builtin-drivers.ts): on a cluster's server node, the driver against the kubeconfig k3s
 * writes (read again when k3s is installed anew) or HANGAR_KUBECONFIG's, made on its first call;
 * k3s's installs, joins and uninstalls, which need the agent's context (./k3s-executors.ts);
 * and whether this machine has k3s.
 */
export default defineAgentDriver({
  backend: 'k8s',
  kinds: K8S_BACKEND_KINDS,
  create: () => import('./index.js').then(({ createKubernetesDriver }) => createKubernetesDriver({ kubeconfig: clusterKubeconfig() })),
  executors: K3S_EXECUTORS,
  nodeFact: { name: 'k3s', probe: () => ({ present: existsSync('/usr/local/bin/k3s') || existsSync('/etc/rancher/k3s/k3s.yaml') }) },
});
