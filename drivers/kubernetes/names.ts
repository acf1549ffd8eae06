// What the control plane's plugins need from the Kubernetes driver without running it. Nothing here
// imports @kubernetes/client-node: a plugin importing client.ts, k3s.ts or scan.ts loads the SDK
// (6 MB of code) into every control plane at start.

/** The port k3s's API server listens on. */
export const K3S_API_PORT = 6443;

/** Namespaces the cluster's own parts live in, never scanned. */
export const SYSTEM_NAMESPACES = ['kube-system', 'kube-public', 'kube-node-lease'];
/** The namespace of hangar's own cluster parts (its ingress controller), never scanned. */
export const HANGAR_NAMESPACE = 'hangar-system';
