import type { OrchestratorDriver } from '../../core/orchestrator.js';

/**
 * One orchestrator driver under the contract suite: how to reach it and a few looks at its
 * runtime that the driver interface itself does not give (they check the driver from outside).
 * A new backend adds one of these to test/contract/targets.ts and runs the same cases.
 */
export interface DriverTarget {
  /** In test titles: `swarm (this machine's dockerd)`. */
  title: string;
  backend: string;
  /**
   * Null when workloads' processes really run; otherwise why not (a simulated runtime). The cases
   * that read a process's output are then declared as exclusions with this reason (listed as
   * `excluded: … because …` at the end of the run), not run and not pending.
   */
  noProcesses: string | null;
  /** Null when everything it needs is there, or what is missing (the suite is skipped loudly, or fails under HANGAR_REQUIRE_ALL). */
  available(): Promise<string | null>;
  /** Starts what the driver runs against and answers the driver and one member node to place work on. */
  setUp(): Promise<TargetSession>;
  tearDown(): Promise<void>;
}

export interface TargetSession {
  driver: OrchestratorDriver;
  /** What the control plane adds to calls about the cluster (members by hangar node id, the backend's policies). */
  context: { cluster_nodes: Record<string, string>; settings: Record<string, string | number | boolean> };
  /** A member: hangar's id and the runtime's. */
  node: { id: string; runtimeId: string };
  /** An image the runtime has. */
  image: string;
  /** How the control plane names a load balancer on this backend (Kubernetes: in hangar's namespace); default as given. */
  loadBalancerName?(name: string): string;
  /** The balancer answers on every node (Kubernetes: ServiceLB publishes its port everywhere), so the backend does not place it on the node named. */
  loadBalancerOnEveryNode?: boolean;
  /** Prefix of every name the session creates (the session removes what is left of them at tear-down). */
  prefix: string;
  /** A command that runs `script` (a shell), then keeps running and stops at once when told to. */
  command(script: string): string[];
  /** A bundle in the backend's own format: each part runs `script` (`$PART` is its name). */
  bundle(parts: Array<{ name: string; replicas?: number }>, script: string): string;
  /** A bundle the backend cannot read. */
  brokenBundle(): string;
  probe: TargetProbe;
}

/** Looks at the runtime from outside the driver. */
export interface TargetProbe {
  /** The runtime's id of a workload (changes when it is created anew), or null when there is none. */
  workloadId(name: string): Promise<string | null>;
  /** Whether a secret or config object with this name exists. */
  objectExists(kind: 'secret' | 'config', name: string): Promise<boolean>;
  /** Makes a workload and a bundle outside hangar (for the unmanaged scan); answers how to remove them. */
  foreign(name: string, bundle: string): Promise<() => Promise<void>>;
  /** A node's availability as the runtime has it, in hangar's terms. */
  availability(runtimeNodeId: string): Promise<'schedulable' | 'cordoned' | 'drained'>;
  /** A fresh, empty folder on the member node (for volumes from a folder on a node); `remove` deletes it. */
  folderOnNode(): Promise<{ path: string; remove(): Promise<void> }>;
  /** Whether a staged volume exists on the node (for backends that stage volumes per node). */
  volumeStaged(name: string): Promise<boolean>;
  /** The runtime's ids of the workload's running replicas (swarm tasks, Kubernetes pods not being deleted). */
  runningReplicaIds(name: string): Promise<string[]>;
  /** The environment the runtime holds for the workload's containers (its spec, not a process's). */
  workloadEnv(name: string): Promise<Record<string, string>>;
  /** The secrets and configs the runtime mounts into the workload's containers: which object, at which file path. */
  workloadMounts(name: string): Promise<Array<{ kind: 'secret' | 'config'; name: string; path: string }>>;
}
