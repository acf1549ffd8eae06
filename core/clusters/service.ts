import type { HangarConfig } from '../../config/schema.js';
import type { Clock } from '../clock.js';
import type { Store } from '../db/store.js';
import type { Knex } from 'knex';
import { notice, type EventBus, type Notice } from '../events.js';
import { BackgroundJobs } from '../jobs.js';
import type { Logger } from '../log.js';
import type { ServiceRegistry } from '../provided.js';
import type { TaskQueue } from '../tasks/queue.js';
import type { Peers } from '../workers.js';
import { BackendRegistry } from './backend-registry.js';
import { ClusterCalls } from './calls.js';
import { ClusterDirectory } from './directory.js';
import { ClusterLifecycles } from './lifecycles.js';
import { ClusterObservation } from './observation.js';
import { MemberReach } from './reach.js';
import { RevisionStore } from './revisions.js';
import { ClusterStore, MemberStore, type MemberRecord } from './store.js';
import { ClusterMemberJoined, ClusterMemberLeft } from './topics.js';
import { ClusterWorkloadKinds } from './workloads.js';

export interface ClusterSettings {
  /** How long to wait for an agent to run one orchestrator call. */
  callTimeoutMs: number;
  /** How often every active cluster is asked for the state of hangar's workloads. */
  observeIntervalMs: number;
  /** How long a task on a cluster's manager may wait to be taken before the next manager is asked. */
  pickupTimeoutMs: number;
  /** How long an operation's lease holds unless renewed (its process renews it while it works). */
  opLeaseMs: number;
  /** Default domains are `<name>.<cluster>.<localDomain>`. */
  localDomain: string;
  /** What members reach each other at: a node's WireGuard overlay address while its overlay works, or its own address. */
  advertise: 'overlay' | 'address';
  /** How long a joining node tries to reach a manager (WireGuard handshake, then TCP) before its join fails. */
  joinPathWaitMs: number;
  /** How long a cordon, drain or uncordon through the nodes API waits for the cluster before answering 202 (default 10 s). */
  availabilityWaitMs?: number;
  /** How long a drain may wait for evictions and evicted pods (sent with the call; default: the driver's). */
  drainTimeoutSeconds?: number;
  /** Spec revisions kept per instance and service (default 10). */
  revisionsKept?: number;
}

interface ClustersDeps {
  config: HangarConfig;
  db: Store;
  clock: Clock;
  tasks: TaskQueue;
  events: EventBus;
  log: Logger;
  shutdown: AbortSignal;
  provided: ServiceRegistry;
  /** The other workers of this control plane (api.workers), which share its store. */
  peers: Peers;
}

/**
 * The backend-neutral orchestration layer, as plugins reach it (`services.clusters`). Each concern
 * is a part of its own: the loaded backends and their naming (./backend-registry.ts), the clusters'
 * records as requests name them (./directory.ts), typed calls routed to a node or a cluster's
 * managers (./calls.ts), how members reach each other (./reach.ts), the workloads of every kind on
 * a cluster (./workloads.ts), the lifecycles core takes over and resumes (./lifecycles.ts) and the
 * observation of every active cluster (./observation.ts). Each part is a member (`registry`, `directory`,
 * `calls`, `reach`, `workloads`, `lifecycles`, `observation`); the methods below are the surface
 * plugins have called since before the split, each one the owning part's own (bound to it). What is specific to a backend (how a swarm forms, what a k3s
 * server installs) lives in the backend's driver package and the plugin for its API.
 */
export class Clusters {
  readonly clusters: ClusterStore;
  readonly members: MemberStore;
  readonly jobs: BackgroundJobs;
  readonly settings: ClusterSettings;
  /** The spec revisions of instances and services (./revisions.ts). */
  readonly revisions: RevisionStore;

  readonly registry: BackendRegistry;
  readonly directory: ClusterDirectory;
  readonly calls: ClusterCalls;
  readonly reach: MemberReach;
  readonly workloads: ClusterWorkloadKinds;
  readonly lifecycles: ClusterLifecycles;
  readonly observation: ClusterObservation;

  // backends (./backend-registry.ts)
  readonly registerBackend: BackendRegistry['registerBackend'];
  readonly backend: BackendRegistry['get'];
  readonly findBackend: BackendRegistry['find'];
  readonly backendNames: BackendRegistry['names'];
  readonly backends: BackendRegistry['all'];
  readonly naming: BackendRegistry['naming'];
  readonly nounOf: BackendRegistry['nounOf'];
  readonly componentAddress: BackendRegistry['componentAddress'];
  // records (./directory.ts)
  readonly require: ClusterDirectory['require'];
  readonly requireUsable: ClusterDirectory['requireUsable'];
  readonly requireActive: ClusterDirectory['requireActive'];
  readonly requireTarget: ClusterDirectory['requireTarget'];
  readonly filterId: ClusterDirectory['filterId'];
  readonly placement: ClusterDirectory['placement'];
  readonly nodeIdsByRuntime: ClusterDirectory['nodeIdsByRuntime'];
  readonly membershipsOf: ClusterDirectory['membershipsOf'];
  readonly detachNode: ClusterDirectory['detachNode'];
  readonly viewFields: ClusterDirectory['viewFields'];
  readonly forget: ClusterDirectory['forget'];
  // calls (./calls.ts)
  readonly runTask: ClusterCalls['runTask'];
  readonly call: ClusterCalls['call'];
  readonly callOn: ClusterCalls['callOn'];
  readonly queueLogs: ClusterCalls['queueLogs'];
  readonly readLogs: ClusterCalls['readLogs'];
  // members' reach (./reach.ts)
  readonly reachOf: MemberReach['reachOf'];
  readonly addressOf: MemberReach['addressOf'];
  readonly requireAddressOf: MemberReach['requireAddressOf'];
  readonly pathTarget: MemberReach['pathTarget'];
  readonly confirmPath: MemberReach['confirmPath'];
  // workloads (./workloads.ts)
  readonly workloadKind: ClusterWorkloadKinds['workloadKind'];
  readonly workloadsIn: ClusterWorkloadKinds['workloadsIn'];
  readonly removeWorkloads: ClusterWorkloadKinds['removeWorkloads'];
  // lifecycles (./lifecycles.ts)
  readonly lifecycle: ClusterLifecycles['lifecycle'];
  readonly setUpBy: ClusterLifecycles['setUpBy'];
  readonly takeOverExpired: ClusterLifecycles['takeOverExpired'];
  readonly resume: ClusterLifecycles['resume'];
  readonly hasLifecycles: ClusterLifecycles['hasLifecycles'];
  // observation (./observation.ts)
  readonly observe: ClusterObservation['observe'];

  constructor(
    private readonly deps: ClustersDeps,
    settings: ClusterSettings,
  ) {
    const { config, db, clock, tasks, events, log, shutdown, provided, peers } = deps;
    this.settings = { ...settings };
    const tuned = this.settings;
    const clusters = (this.clusters = new ClusterStore(db, clock));
    const members = (this.members = new MemberStore(db, clock));
    const jobs = (this.jobs = new BackgroundJobs(log, shutdown));
    this.revisions = new RevisionStore(db, clock, () => tuned.revisionsKept ?? 10);

    const registry = (this.registry = new BackendRegistry(tasks.kinds));
    const directory = (this.directory = new ClusterDirectory({ clusters, members, registry, events, provided, keepMemberChange: (said, change) => this.keepMemberChange(said, change) }));
    const calls = (this.calls = new ClusterCalls({ config, db, tasks, log, shutdown, clusters, members, registry, settings: () => tuned }));
    this.reach = new MemberReach({ calls, settings: () => tuned });
    this.workloads = new ClusterWorkloadKinds(provided);
    this.lifecycles = new ClusterLifecycles({ db, clock, log, shutdown, events, jobs, peers, leaseMs: () => tuned.opLeaseMs });
    this.observation = new ClusterObservation({ clusters, directory, calls, provided, log, intervalMs: () => tuned.observeIntervalMs });

    this.registerBackend = this.registry.registerBackend.bind(this.registry);
    this.backend = this.registry.get.bind(this.registry);
    this.findBackend = this.registry.find.bind(this.registry);
    this.backendNames = this.registry.names.bind(this.registry);
    this.backends = this.registry.all.bind(this.registry);
    this.naming = this.registry.naming.bind(this.registry);
    this.nounOf = this.registry.nounOf.bind(this.registry);
    this.componentAddress = this.registry.componentAddress.bind(this.registry);
    this.require = this.directory.require.bind(this.directory);
    this.requireUsable = this.directory.requireUsable.bind(this.directory);
    this.requireActive = this.directory.requireActive.bind(this.directory);
    this.requireTarget = this.directory.requireTarget.bind(this.directory);
    this.filterId = this.directory.filterId.bind(this.directory);
    this.placement = this.directory.placement.bind(this.directory);
    this.nodeIdsByRuntime = this.directory.nodeIdsByRuntime.bind(this.directory);
    this.membershipsOf = this.directory.membershipsOf.bind(this.directory);
    this.detachNode = this.directory.detachNode.bind(this.directory);
    this.viewFields = this.directory.viewFields.bind(this.directory);
    this.forget = this.directory.forget.bind(this.directory);
    this.runTask = this.calls.runTask.bind(this.calls);
    this.call = this.calls.call.bind(this.calls);
    this.callOn = this.calls.callOn.bind(this.calls);
    this.queueLogs = this.calls.queueLogs.bind(this.calls);
    this.readLogs = this.calls.readLogs.bind(this.calls);
    this.reachOf = this.reach.reachOf.bind(this.reach);
    this.addressOf = this.reach.addressOf.bind(this.reach);
    this.requireAddressOf = this.reach.requireAddressOf.bind(this.reach);
    this.pathTarget = this.reach.pathTarget.bind(this.reach);
    this.confirmPath = this.reach.confirmPath.bind(this.reach);
    this.workloadKind = this.workloads.workloadKind.bind(this.workloads);
    this.workloadsIn = this.workloads.workloadsIn.bind(this.workloads);
    this.removeWorkloads = this.workloads.removeWorkloads.bind(this.workloads);
    this.lifecycle = this.lifecycles.lifecycle.bind(this.lifecycles);
    this.setUpBy = this.lifecycles.setUpBy.bind(this.lifecycles);
    this.takeOverExpired = this.lifecycles.takeOverExpired.bind(this.lifecycles);
    this.resume = this.lifecycles.resume.bind(this.lifecycles);
    this.hasLifecycles = this.lifecycles.hasLifecycles.bind(this.lifecycles);
    this.observe = this.observation.observe.bind(this.observation);
  }

  /**
   * Makes a member active in its cluster (`patch`: what the join found), in one transaction with what
   * the durable listeners of {@link ClusterMemberJoined} keep of it (its notification; a loss is
   * logged, the member changed alone). The backend's plugin publishes the topic once its join is done.
   */
  memberJoined(member: MemberRecord, patch: Partial<MemberRecord>): Promise<MemberRecord> {
    return this.keepMemberChange(notice(ClusterMemberJoined, { clusterId: member.cluster_id, nodeId: member.node_id }), (trx) => this.members.change(member.id, { ...patch, status: 'active' }, trx));
  }

  /** Removes a member that left its cluster, as {@link memberJoined} writes a join: with {@link ClusterMemberLeft}'s durable listeners. */
  memberLeft(member: MemberRecord): Promise<boolean> {
    return this.keepMemberChange(notice(ClusterMemberLeft, { clusterId: member.cluster_id, nodeId: member.node_id }), (trx) => this.members.remove(member.id, trx), (removed) => removed);
  }

  private keepMemberChange<R>(said: Notice, change: (trx?: Knex.Transaction) => Promise<R>, wanted?: (done: R) => boolean): Promise<R> {
    const { events, db, log } = this.deps;
    return events.keepWith(db.knex, [said], change, { log, wanted });
  }

  /** Changes settings before start-up ends (a plugin's older configuration keys). */
  tune(settings: { [K in keyof ClusterSettings]?: ClusterSettings[K] | undefined | 0 }): void {
    Object.assign(this.settings, Object.fromEntries(Object.entries(settings).filter(([, v]) => v !== undefined)));
  }

  /** Waits for the background work still running (it sees the shutdown and stops early). */
  close(): Promise<void> {
    return this.jobs.drain();
  }
}
