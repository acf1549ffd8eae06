import { Type } from '@sinclair/typebox';
import { defineBackend } from '../../core/clusters/backend.js';
import { defineDriver } from '../../core/plugin.js';
import { manifestFormat } from './manifest-format.js';
import { K8S_BACKEND_KINDS } from './membership-calls.js';
import { HANGAR_NAMESPACE } from './names.js';

/** A Kubernetes object name (a DNS subdomain, within the 63 characters hangar allows). */
const OBJECT_NAME = /^[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?$/;

/**
 * The k8s backend's control-plane half: how the API names its clusters, its membership task kinds,
 * how bundle parts are addressed (a manifest's Service is reached by its own name in the cluster),
 * manifests as its services, secrets and configs kept in place in a namespace, a volume staged once
 * per cluster (a PersistentVolume and its claim, through the server node), an ingress controller as
 * its load balancer, and k3s as what a node needs.
 */
export const k8sBackend = defineBackend({
  name: 'k8s',
  noun: 'cluster',
  api: {
    field: 'cluster_id',
    resourceType: 'cluster',
    title: 'Kubernetes cluster',
    path: '/v1/kubernetes/clusters',
    join: (id) => `POST /v1/kubernetes/clusters/${id}/nodes`,
    leave: (id, nodeId) => `DELETE /v1/kubernetes/clusters/${id}/nodes/${nodeId}`,
  },
  taskKinds: K8S_BACKEND_KINDS,
  componentAddress: (_bundle, component) => component,
  settings: () => ({}),
  volumeStaging: 'cluster',
  bundles: manifestFormat,
  objects: {
    semantics: 'in-place',
    refuseName: (name) => (OBJECT_NAME.test(name) ? null : 'must be lower-case letters, digits, "-" and "." on a Kubernetes cluster (a DNS subdomain name)'),
  },
  loadBalancer: {
    image: (config) => (config.gateway as { kubernetes_image: string }).kubernetes_image,
    runtimeName: (cluster) => `${HANGAR_NAMESPACE}/hangar-lb-${cluster}`,
    runs: `an ingress controller (Traefik) Deployment and LoadBalancer Service in namespace ${HANGAR_NAMESPACE}; the routes as an Ingress of class hangar`,
  },
  nodeFact: { name: 'k3s', schema: Type.Object({ present: Type.Boolean() }) },
  deleteChecksUnmanaged: true,
});

/** Loaded by `drivers: [k8s]` (the catalogue's built-in entry), as any orchestrator driver is. */
export default defineDriver({ name: 'k8s', kind: 'orchestrator', create: () => k8sBackend });
