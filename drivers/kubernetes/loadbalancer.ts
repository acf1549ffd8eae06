import type { KubernetesObject, V1Deployment, V1Ingress, V1Service } from '@kubernetes/client-node';
import { HANGAR_LABELS } from '../../core/orchestrator.js';
import type { ClusterContext, LoadBalancerSpec, WorkloadSpec, WorkloadState } from './contract.js';
import { apply, attempt, checkName, failure, isNotFound, KubeDriverError, WORKLOAD_LABEL, type KubeContext } from './client.js';
import { HANGAR_NAMESPACE } from './names.js';
import { locate } from './state.js';
import { deploymentOf, removeWorkload, stateOf } from './workloads.js';

/**
 * The IngressClass of hangar's ingress controller: the routes Ingress names it, and the controller
 * serves only Ingresses of this class (k3s's bundled Traefik, if an adopted cluster still runs it,
 * keeps its own class `traefik`).
 */
export const INGRESS_CLASS = 'hangar';
/** The controller's ServiceAccount, ClusterRole and ClusterRoleBinding. */
const CONTROLLER_ACCOUNT = 'hangar-ingress';
/** The port Traefik's `web` entry point listens on in its pod (unprivileged); the Service maps `http_port` to it. */
const WEB_PORT = 8000;

/** The Ingress holding a balancer's routing table (in the driver's namespace, beside the Services it routes to). */
const routesName = (balancer: string) => `${balancer}-routes`;

const labelsOf = (spec: Pick<LoadBalancerSpec, 'resource_id'>) => ({ [HANGAR_LABELS.role]: 'loadbalancer', [HANGAR_LABELS.id]: spec.resource_id });

/**
 * What the controller needs besides its Deployment: hangar's namespace, an account allowed to read
 * Ingresses, Services and their endpoints (and to write an Ingress's status), and the IngressClass
 * it serves. Cluster-wide objects, so named once per cluster.
 */
function controllerObjects(spec: LoadBalancerSpec): KubernetesObject[] {
  const labels = labelsOf(spec);
  const namespace = HANGAR_NAMESPACE;
  return [
    { apiVersion: 'v1', kind: 'Namespace', metadata: { name: namespace } },
    { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: CONTROLLER_ACCOUNT, namespace, labels } },
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRole',
      metadata: { name: CONTROLLER_ACCOUNT, labels },
      rules: [
        { apiGroups: [''], resources: ['services', 'endpoints', 'secrets', 'nodes'], verbs: ['get', 'list', 'watch'] },
        { apiGroups: ['discovery.k8s.io'], resources: ['endpointslices'], verbs: ['get', 'list', 'watch'] },
        { apiGroups: ['networking.k8s.io'], resources: ['ingresses', 'ingressclasses'], verbs: ['get', 'list', 'watch'] },
        { apiGroups: ['networking.k8s.io'], resources: ['ingresses/status'], verbs: ['update'] },
      ],
    } as KubernetesObject,
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRoleBinding',
      metadata: { name: CONTROLLER_ACCOUNT, labels },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: CONTROLLER_ACCOUNT },
      subjects: [{ kind: 'ServiceAccount', name: CONTROLLER_ACCOUNT, namespace }],
    } as KubernetesObject,
    {
      apiVersion: 'networking.k8s.io/v1',
      kind: 'IngressClass',
      metadata: { name: INGRESS_CLASS, labels },
      spec: { controller: 'traefik.io/ingress-controller' },
    } as KubernetesObject,
  ];
}

/** The controller's Deployment: Traefik serving the Ingresses of class `hangar`, as hangar's account. */
function controllerDeployment(ctx: KubeContext, spec: LoadBalancerSpec, name: string): V1Deployment {
  const workload: WorkloadSpec = {
    name,
    role: 'loadbalancer',
    resource_id: spec.resource_id,
    image: spec.image,
    replicas: 1,
    ...(spec.command?.length ? { command: spec.command } : {}),
    args: [
      `--entryPoints.web.address=:${WEB_PORT}`,
      '--providers.kubernetesingress=true',
      `--providers.kubernetesingress.ingressclass=${INGRESS_CLASS}`,
      '--ping=true',
      '--ping.entrypoint=web',
    ],
    exposure: { ports: [{ published: 0, target: WEB_PORT, protocol: 'tcp' }] },
  };
  const deployment = deploymentOf(ctx, workload, {});
  deployment.spec!.template.spec!.serviceAccountName = CONTROLLER_ACCOUNT;
  return deployment;
}

/** The controller's Service: a LoadBalancer on `http_port` (k3s's service load balancer, ServiceLB, publishes it on the nodes). */
function controllerService(ctx: KubeContext, spec: LoadBalancerSpec, name: string): V1Service {
  return {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: { name, namespace: ctx.namespace, labels: labelsOf(spec) },
    spec: {
      type: 'LoadBalancer',
      selector: { [WORKLOAD_LABEL]: name },
      ports: [{ name: 'web', port: spec.http_port, targetPort: WEB_PORT, protocol: 'TCP' }],
    },
  };
}

/**
 * The cluster's load balancer: an ingress controller (Traefik; `spec.image`) as a Deployment in
 * hangar's namespace (`spec.name` is `hangar-system/<name>`), a LoadBalancer Service answering on
 * `http_port`, and the routing table as one Ingress of host rules of class `hangar` in the
 * driver's namespace (beside the Services it sends to). The controller runs on any node: ServiceLB
 * publishes its port on every node, so `spec.node_id` is not a placement here. A change of routes
 * rewrites only the Ingress: the controller's Deployment stays as it is.
 */
export async function applyLoadBalancer(ctx: KubeContext, spec: LoadBalancerSpec, _context: ClusterContext): Promise<WorkloadState> {
  const where = locate(ctx, spec.name);
  checkName('load balancer', where.name);
  if (where.namespace !== HANGAR_NAMESPACE) throw new KubeDriverError(`deploying load balancer ${spec.name}: it belongs in namespace ${HANGAR_NAMESPACE} (name it ${HANGAR_NAMESPACE}/${where.name})`, 400);
  const own: KubeContext = { ...ctx, namespace: HANGAR_NAMESPACE };
  for (const object of controllerObjects(spec)) await attempt(`deploying the ingress controller's ${object.kind} ${object.metadata!.name}`, () => apply(ctx, object, { force: true }));
  const deployment = await attempt(`deploying load balancer ${spec.name}`, () => apply(own, controllerDeployment(own, spec, where.name), { force: true }));
  await attempt(`deploying the service of ${spec.name}`, () => apply(own, controllerService(own, spec, where.name), { force: true }));
  const routes: V1Ingress = {
    apiVersion: 'networking.k8s.io/v1',
    kind: 'Ingress',
    metadata: { name: routesName(where.name), namespace: ctx.namespace, labels: labelsOf(spec) },
    spec: {
      ingressClassName: INGRESS_CLASS,
      rules: spec.routes.map((route) => ({
        host: route.domain,
        http: { paths: [{ path: '/', pathType: 'Prefix', backend: { service: { name: route.service, port: { number: route.port } } } }] },
      })),
    },
  };
  if (spec.routes.length) await attempt(`writing the routes of ${spec.name}`, () => apply(ctx, routes, { force: true }));
  else await removeIfPresent(`the routes of ${spec.name}`, () => ctx.networking.deleteNamespacedIngress({ name: routesName(where.name), namespace: ctx.namespace }));
  // Named as the spec names it (hangar-system/<name>): what inspecting the cluster's workloads answers too.
  return stateOf(ctx, deployment);
}

async function removeIfPresent(what: string, remove: () => Promise<unknown>): Promise<void> {
  try {
    await remove();
  } catch (err) {
    if (!isNotFound(err)) throw failure(`removing ${what}`, err);
  }
}

/** Removes the routes, the controller (Deployment, Service, pods) and its account and IngressClass; hangar's namespace stays. */
export async function removeLoadBalancer(ctx: KubeContext, name: string): Promise<{ removed: boolean }> {
  const where = locate(ctx, name);
  await removeIfPresent(`the routes of ${name}`, () => ctx.networking.deleteNamespacedIngress({ name: routesName(where.name), namespace: ctx.namespace }));
  const removed = await removeWorkload(ctx, name);
  for (const object of controllerObjects({ resource_id: '' } as LoadBalancerSpec).slice(1).reverse()) {
    await removeIfPresent(`the ingress controller's ${object.kind} ${object.metadata!.name}`, () => ctx.objects.delete(object));
  }
  return removed;
}
