/**
 * The shapes of the backend-neutral orchestrator contract this driver answers in, as the clusters
 * layer (issue 11: core/orchestrator.ts with TypeBox schemas, core/tasks/kinds.ts) defines them.
 * Until that layer is on main, the parts main's core/orchestrator.ts does not have yet are
 * declared here, field for field the same; when it lands this file becomes re-exports of it.
 */
import type { LogOptions, ObjectRef, PortSpec, UnmanagedResource, WorkloadRole, WorkloadTask } from '../../core/orchestrator.js';

export type { LogOptions, ObjectRef, PortSpec, UnmanagedResource, WorkloadRole, WorkloadTask };

/** A node's availability for new work, in hangar's terms (Kubernetes: uncordon / cordon / drain). */
export type NodeAvailability = 'schedulable' | 'cordoned' | 'drained';
export const NODE_AVAILABILITIES: readonly NodeAvailability[] = ['schedulable', 'cordoned', 'drained'];

/** Where a volume's data lives: a folder shared over NFS, or a folder on one node. */
export type VolumeSource = { nfs: { name: string; server: string; path: string } } | { host_path: { node_id: string; path: string } };

export interface VolumeMount {
  source: VolumeSource;
  target: string;
  read_only?: boolean;
}

/** One long-running workload hangar creates directly, said as what the user wants. */
export interface WorkloadSpec {
  name: string;
  role: WorkloadRole;
  resource_id: string;
  image: string;
  /** 0 keeps the workload defined but stopped. */
  replicas: number;
  env?: Record<string, string>;
  command?: string[];
  args?: string[];
  resources?: { cpus?: number; memory_mb?: number; gpus?: number };
  platform?: { os?: string; architecture?: string };
  /** Where replicas may run, by hangar node id. */
  placement?: { node_ids: string[] };
  volumes?: VolumeMount[];
  exposure?: { ports?: PortSpec[]; routed?: boolean; domain?: string };
  secrets?: ObjectRef[];
  configs?: ObjectRef[];
  replica_hostnames?: boolean;
  labels?: Record<string, string>;
}

/** What the runtime says about one workload. */
export interface WorkloadState {
  name: string;
  labels: Record<string, string>;
  image: string;
  replicas: number | null;
  running: number;
  tasks: WorkloadTask[];
  ports: PortSpec[];
  limits: { cpus: number | null; memoryMb: number | null };
  /** The bundle the workload belongs to, if any, and its key in the bundle. */
  stack: string | null;
  component?: string | null;
}

/** A route the load balancer serves: requests for `domain` go to `service:port` inside the cluster. */
export interface Route {
  domain: string;
  service: string;
  port: number;
  source: string;
  source_id: string;
}

export interface LoadBalancerSpec {
  name: string;
  resource_id: string;
  image: string;
  http_port: number;
  /** The hangar node it runs on. */
  node_id: string;
  routes: Route[];
  command?: string[];
  settings?: Record<string, string>;
}

export interface BundleState {
  name: string;
  services: WorkloadState[];
}

/** What the control plane adds to calls about a cluster: members' runtime ids by hangar node id, and the backend's policies. */
export interface ClusterContext {
  cluster_nodes?: Record<string, string>;
  settings?: Record<string, string | number | boolean>;
}
