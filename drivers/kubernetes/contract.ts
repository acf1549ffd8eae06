/** The shapes of the backend-neutral orchestrator contract (core/orchestrator.ts) this driver answers in. */
export type {
  BundleState,
  LoadBalancerSpec,
  LogOptions,
  NodeAvailability,
  ObjectRef,
  PortSpec,
  Route,
  UnmanagedResource,
  VolumeMount,
  VolumeSource,
  WorkloadRole,
  WorkloadSpec,
  WorkloadState,
  WorkloadTask,
} from '../../core/orchestrator.js';

/** What the control plane adds to calls about a cluster: members' runtime ids by hangar node id, and the backend's policies. */
export interface ClusterContext {
  cluster_nodes?: Record<string, string>;
  settings?: Record<string, string | number | boolean>;
}

export const NODE_AVAILABILITIES = ['schedulable', 'cordoned', 'drained'] as const;
