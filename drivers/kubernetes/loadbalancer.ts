import type { V1Ingress } from '@kubernetes/client-node';
import { HANGAR_LABELS } from '../../core/orchestrator.js';
import type { ClusterContext, LoadBalancerSpec, WorkloadState } from './contract.js';
import { apply, attempt, failure, isNotFound, type KubeContext } from './client.js';
import { deployWorkload, removeWorkload } from './workloads.js';

/** The Ingress holding a balancer's routing table. */
const routesName = (balancer: string) => `${balancer}-routes`;

/**
 * The cluster's load balancer: its controller as a workload on the node the spec names,
 * answering on `http_port` there (a LoadBalancer Service: k3s's service load balancer publishes
 * it on the node), and its routes as one Ingress of host rules, which the controller serves. A
 * change of routes rewrites only the Ingress: the controller's Deployment stays as it is.
 */
export async function applyLoadBalancer(ctx: KubeContext, spec: LoadBalancerSpec, context: ClusterContext): Promise<WorkloadState> {
  const state = await deployWorkload(
    ctx,
    {
      name: spec.name,
      role: 'loadbalancer',
      resource_id: spec.resource_id,
      image: spec.image,
      replicas: 1,
      ...(spec.command?.length ? { command: spec.command } : {}),
      placement: { node_ids: [spec.node_id] },
      exposure: { ports: [{ published: spec.http_port, target: spec.http_port, protocol: 'tcp' }] },
    },
    context,
  );
  const routes: V1Ingress = {
    apiVersion: 'networking.k8s.io/v1',
    kind: 'Ingress',
    metadata: { name: routesName(spec.name), namespace: ctx.namespace, labels: { [HANGAR_LABELS.role]: 'loadbalancer', [HANGAR_LABELS.id]: spec.resource_id } },
    spec: {
      rules: spec.routes.map((route) => ({
        host: route.domain,
        http: { paths: [{ path: '/', pathType: 'Prefix', backend: { service: { name: route.service, port: { number: route.port } } } }] },
      })),
    },
  };
  if (spec.routes.length) await attempt(`writing the routes of ${spec.name}`, () => apply(ctx, routes, { force: true }));
  else await removeRoutes(ctx, spec.name);
  return state;
}

async function removeRoutes(ctx: KubeContext, balancer: string): Promise<void> {
  try {
    await ctx.networking.deleteNamespacedIngress({ name: routesName(balancer), namespace: ctx.namespace });
  } catch (err) {
    if (!isNotFound(err)) throw failure(`removing the routes of ${balancer}`, err);
  }
}

export async function removeLoadBalancer(ctx: KubeContext, name: string): Promise<{ removed: boolean }> {
  await removeRoutes(ctx, name);
  return removeWorkload(ctx, name);
}
