import { Type, type Static } from '@sinclair/typebox';
import { HttpError, badRequest, conflict, notFound } from '../errors.js';
import { ResourceDeleted, type EventBus } from '../events.js';
import { BackgroundJobs } from '../jobs.js';
import { Lifecycle, type LeasedRecord, type LifecycleDef } from '../lifecycle.js';
import type { StampedRepository } from '../db/repository.js';
import type { Logger } from '../log.js';
import { BundleLogs, InspectWorkloads, WorkloadLogs, type WorkloadState } from '../orchestrator.js';
import { defineExtensionPoint, type ServiceRegistry } from '../provided.js';
import type { Clock } from '../clock.js';
import type { HangarConfig } from '../../config/schema.js';
import type { ClusterBackend, ClusterField } from './backend.js';
import type { Store } from '../db/store.js';
import type { DriverCall, PayloadOf, ResultOf, TaskKind } from '../tasks/kinds.js';
import { TASKS } from '../tasks/migrations.js';
import { NetworkConfirmPath, type PathTarget } from '../tasks/host-kinds.js';
import { overlayUnusable, type OverlayMember } from '../overlay.js';
import { consumesReadOnce, taskView, type Task, type TaskQueue } from '../tasks/queue.js';
import { capitalized, ClusterStore, MemberStore, type ClusterRecord } from './store.js';
import { RevisionStore } from './revisions.js';
import type { Peers } from '../workers.js';
import { ClusterMemberRemoved } from './topics.js';

/** A kind of workload plugins run on clusters: named in 409s, removed by forced deletes and cleanup. */
export interface WorkloadKind {
  /** The resource type as cleanup names it: instance, service, s3, loadbalancer. */
  type: string;
  inCluster(clusterId: string): Promise<Array<{ id: string; name: string }>>;
  /** Removes whatever exists of the resource in the runtime, then its record; false when unknown. */
  forceRemove(id: string): Promise<boolean>;
}

export interface ObservedCluster {
  cluster: ClusterRecord;
  workloads: WorkloadState[];
  /** Runtime node id → hangar node id. */
  nodeIds: Map<string, string>;
}

/** How the API names the clusters of one backend (core/clusters/backend.ts ClusterApiNaming, defaults filled in). */
export interface ClusterNaming {
  backend: string;
  noun: string;
  /** How summaries and the cluster API's own messages call one: `swarm`, `Kubernetes cluster`. */
  title: string;
  field: ClusterField;
  resourceType: string;
  path: string | null;
  /** "join a node to it first (POST /v1/swarms/swm-1/join)". */
  joinHint(clusterId: string): string;
  /** " (POST /v1/swarms/swm-1/leave)", or nothing when the backend names no request. */
  leaveHint(clusterId: string, nodeId: string): string;
}

/** What the fields that name a cluster call one in messages ("No swarm x", "No cluster x"). */
export const FIELD_NOUNS: Record<ClusterField, string> = { swarm_id: 'swarm', cluster_id: 'cluster' };

/** The query fields a list takes to show only what runs on one swarm or one Kubernetes cluster (resolve them with filterId). */
export const PlacementFilterQuery = {
  swarm_id: Type.Optional(Type.String({ minLength: 1, maxLength: 100, description: 'only those on this swarm (id or name; 400 when there is no such swarm)' })),
  cluster_id: Type.Optional(Type.String({ minLength: 1, maxLength: 100, description: 'only those on this Kubernetes cluster (id or name; 400 when there is no such cluster)' })),
};

/** The kinds of workload that run on clusters (compute, services, s3 and the gateway contribute). */
export const ClusterWorkloads = defineExtensionPoint<WorkloadKind>('clusters.workloads', 'workload kinds on clusters');
/** Clusters removed by force (cleanup), of each backend with a cluster API (core/clusters/api.ts): by resource type (`swarm`, `cluster`). */
export const ClusterRemovals = defineExtensionPoint<{ type: string; forceRemove(idOrName: string): Promise<boolean> }>('clusters.removals', 'clusters removed by force');
/** Called with each cluster observation (the state of every workload on it). */
export const ClusterObservers = defineExtensionPoint<(observed: ObservedCluster) => Promise<void>>('clusters.observers', 'cluster observers');
/** Run before a cluster's record is removed, for records that go with it (secrets and configs). */
export const BeforeClusterRemoved = defineExtensionPoint<(clusterId: string) => Promise<void>>('clusters.before-removed', 'records removed with a cluster');
/** Fields added to a cluster's view (the gateway adds `load_balancer`). */
export const ClusterViewFields = defineExtensionPoint<(cluster: ClusterRecord) => Promise<Record<string, unknown>>>('clusters.view', 'cluster view fields');

/** An orchestrator call the agent could not carry out; the message is the agent's reason. */
export class OrchestratorError extends Error {
  constructor(
    readonly method: string,
    reason: string,
    /** True when no agent took the task at all (offline, or refusing it): another manager may. */
    readonly unreachable = false,
  ) {
    super(reason);
  }
}

/** An orchestrator failure as an HTTP answer: the runtime refused what was asked (409), with its reason. */
export function asHttpError(err: unknown, what: string): Error {
  if (err instanceof OrchestratorError) return new HttpError(409, `${what} failed: ${err.message}`);
  return err as Error;
}

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

/** The parts of a node record that say how other members reach it. */
export interface AddressableNode extends OverlayMember {
  id: string;
  ip_address: string | null;
}

/** How other members reach a node: at `address` over `via`, and why not over the overlay when not. */
export interface Reach {
  address: string | null;
  via: 'overlay' | 'address' | null;
  /** Why the overlay is not used (null when it is, or when `advertise` is `address`). */
  overlayUnusable: string | null;
}

export interface CallOptions {
  timeoutMs?: number;
  subject?: string;
  /** Give up (unreachable) when no agent has taken the task after this long. */
  pickupTimeoutMs?: number;
  /** Told the task once it is queued (a request that answers 202 hands its id over). */
  onQueued?: (task: Task) => void;
  /**
   * Asked once the outcome is known: true keeps the task (read once: `tasks.take` deletes it),
   * for a caller that answered 202 with it; by default the task is deleted then.
   */
  keep?: () => boolean;
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
 * The backend-neutral orchestration layer: clusters and their members, typed tasks routed to the
 * right agent (a cluster's manager, failing over to another manager when it does not take the
 * task), background work, and the observation of every active cluster. Plugins reach it as
 * `services.clusters`; what is specific to a backend (how a swarm forms, what a k3s server
 * installs) lives in the backend's driver package and the plugin for its API.
 */
export class Clusters {
  readonly clusters: ClusterStore;
  readonly members: MemberStore;
  readonly jobs: BackgroundJobs;
  readonly settings: ClusterSettings;
  /** The spec revisions of instances and services (./revisions.ts). */
  readonly revisions: RevisionStore;
  private readonly backendCache = new Map<string, string>();
  private readonly registered = new Map<string, ClusterBackend>();
  private readonly lifecycles: Array<{ lifecycle: Lifecycle<LeasedRecord, unknown>; owner: string | null }> = [];
  /** The plugin being set up: the lifecycles made meanwhile are its own (resumed in its name). */
  private settingUp: string | null = null;

  constructor(
    private readonly deps: ClustersDeps,
    settings: ClusterSettings,
  ) {
    this.clusters = new ClusterStore(deps.db, deps.clock);
    this.members = new MemberStore(deps.db, deps.clock);
    this.jobs = new BackgroundJobs(deps.log, deps.shutdown);
    this.settings = { ...settings };
    this.revisions = new RevisionStore(deps.db, deps.clock, () => this.settings.revisionsKept ?? 10);
  }

  /** Changes settings before start-up ends (a plugin's older configuration keys). */
  tune(settings: { [K in keyof ClusterSettings]?: ClusterSettings[K] | undefined | 0 }): void {
    Object.assign(this.settings, Object.fromEntries(Object.entries(settings).filter(([, v]) => v !== undefined)));
  }

  // ---- backends ---------------------------------------------------------------------------------

  /** Makes a backend known: its clusters can be called, its task kinds queued. */
  registerBackend(backend: ClusterBackend): void {
    if (this.registered.has(backend.name)) throw new Error(`two orchestrator backends are named ${backend.name}`);
    this.registered.set(backend.name, backend);
    this.deps.tasks.kinds.register(...backend.taskKinds);
  }

  /** A registered backend; throws naming the known ones otherwise. */
  backend(name: string): ClusterBackend {
    const found = this.registered.get(name);
    if (!found) throw new Error(`no orchestrator backend ${name} is loaded (loaded: ${[...this.registered.keys()].join(', ') || 'none'})`);
    return found;
  }

  /** A registered backend, or undefined (a cluster whose backend is no longer loaded). */
  findBackend(name: string): ClusterBackend | undefined {
    return this.registered.get(name);
  }

  backendNames(): string[] {
    return [...this.registered.keys()];
  }

  /** Every registered backend, in the order they were loaded. */
  backends(): ClusterBackend[] {
    return [...this.registered.values()];
  }

  /** How the API names the clusters of a backend (one no longer loaded: as a `cluster`). */
  naming(backend: string): ClusterNaming {
    const found = this.registered.get(backend);
    const api = found?.api ?? {};
    return {
      backend,
      noun: found?.noun ?? 'cluster',
      title: api.title ?? found?.noun ?? 'cluster',
      field: api.field ?? 'cluster_id',
      resourceType: api.resourceType ?? 'cluster',
      path: api.path ?? null,
      joinHint: (id) => (api.join ? `join a node to it first (${api.join(id)})` : 'add a node to it first'),
      leaveHint: (id, nodeId) => (api.leave ? ` (${api.leave(id, nodeId)})` : ''),
    };
  }

  /** One of this cluster's kind in messages, lower case: `swarm`, `cluster`. */
  nounOf(cluster: Pick<ClusterRecord, 'backend'>): string {
    return this.naming(cluster.backend).noun;
  }

  /** The cluster as a sentence starts with it: "Swarm web". */
  private named(cluster: Pick<ClusterRecord, 'backend' | 'name'>): string {
    return `${capitalized(this.nounOf(cluster))} ${cluster.name}`;
  }

  /** The address inside a cluster of one part of a bundle (what its load balancer sends a domain to). */
  componentAddress(cluster: Pick<ClusterRecord, 'backend'>, bundle: string, component: string): string {
    return this.backend(cluster.backend).componentAddress(bundle, component);
  }

  /** The context core adds to a call about a cluster (only the parts the call takes). */
  private async context(cluster: ClusterRecord, call: DriverCall): Promise<Record<string, unknown>> {
    const takes = call.input.properties as Record<string, unknown>;
    const context: Record<string, unknown> = {};
    if ('cluster_nodes' in takes) {
      context.cluster_nodes = Object.fromEntries((await this.members.of(cluster.id)).filter((m) => m.runtime_node_id).map((m) => [m.node_id, m.runtime_node_id]));
    }
    if ('settings' in takes) context.settings = this.backend(cluster.backend).settings(this.deps.config);
    return context;
  }

  // ---- lifecycles ----------------------------------------------------------------------------

  /**
   * The lifecycle kit for one resource kind (core/lifecycle.ts), sharing this layer's jobs and lease
   * length. Core takes its operations over (the `lifecycle:take-over` loop) and resumes them at
   * start (in the name of the plugin that made it): the plugin does neither.
   */
  lifecycle<R extends LeasedRecord, O = never>(repo: StampedRepository<R>, def: LifecycleDef<R, O>): Lifecycle<R, O> {
    const { db, clock, log, shutdown, events } = this.deps;
    const lifecycle = new Lifecycle<R, O>(repo, def, { knex: db.knex, clock, log, jobs: this.jobs, shutdown, leaseMs: this.settings.opLeaseMs, bus: events });
    this.lifecycles.push({ lifecycle: lifecycle as unknown as Lifecycle<LeasedRecord, unknown>, owner: this.settingUp });
    return lifecycle;
  }

  /** Says which plugin is being set up (null once set-up is over): the lifecycles it makes are its own. */
  setUpBy(plugin: string | null): void {
    this.settingUp = plugin;
  }

  /** Takes over every operation whose lease expired, of every resource kind (any control plane may). */
  async takeOverExpired(): Promise<void> {
    for (const { lifecycle } of this.lifecycles) await lifecycle.takeOver();
  }

  /**
   * At start (`hangar serve`), the operations a previous process left on the records of a plugin's
   * lifecycles, taken over and run again: every one on SQLite served by one process, otherwise those
   * whose lease expired (see resumeEverything). One line per record, for the log.
   */
  async resume(plugin: string): Promise<string[]> {
    const lines: string[] = [];
    for (const { lifecycle, owner } of this.lifecycles) if (owner === plugin) lines.push(...(await lifecycle.takeOver({ everything: this.resumeEverything() })));
    return lines;
  }

  /** Whether a plugin made lifecycles (core resumes them in its name). */
  hasLifecycles(plugin: string): boolean {
    return this.lifecycles.some((l) => l.owner === plugin);
  }

  /**
   * At start: what a previous process left half done. On SQLite served by one process (it owns
   * the store) every operation left; otherwise those whose lease expired (a stop hands its leases
   * over): a worker (api.workers) that starts while the others serve leaves their operations alone.
   */
  resumeEverything(): boolean {
    return this.deps.db.dialect === 'sqlite' && !this.deps.peers.active;
  }

  // ---- records --------------------------------------------------------------------------------

  /** By id or name (names are unique), of this backend when one is named; 404 ("No swarm x") otherwise. */
  async require(idOrName: string, backend?: string): Promise<ClusterRecord> {
    const found = await this.clusters.findByIdOrName(idOrName);
    if (!found || (backend && found.backend !== backend)) throw notFound(`No ${backend ? this.naming(backend).noun : 'cluster'} ${idOrName}`);
    return found;
  }

  /** A cluster that takes new work: 409 while it is being deleted. */
  async requireUsable(idOrName: string, backend?: string): Promise<ClusterRecord> {
    const cluster = await this.require(idOrName, backend);
    if (cluster.status === 'deleting') throw conflict(`${this.named(cluster)} is being deleted`);
    return cluster;
  }

  /** A cluster with a manager, for work that runs on it. */
  async requireActive(idOrName: string, backend?: string): Promise<ClusterRecord & { manager_node_id: string }> {
    const cluster = await this.requireUsable(idOrName, backend);
    if (!cluster.manager_node_id) throw conflict(`${this.named(cluster)} has no manager yet: ${this.naming(cluster.backend).joinHint(cluster.id)}`);
    return cluster as ClusterRecord & { manager_node_id: string };
  }

  /**
   * The cluster a request names, the way the API names it: by the field its backend is named by
   * (`swarm_id` a swarm, `cluster_id` a cluster of any other backend), by id or name; 404 when it
   * names none, or one of a backend named by the other field. Active (it has a manager) unless
   * `state` says otherwise.
   */
  async requireTarget(body: { swarm_id?: string; cluster_id?: string }, options: { state?: 'active' | 'usable' | 'any' } = {}): Promise<ClusterRecord> {
    const field: ClusterField = body.swarm_id !== undefined ? 'swarm_id' : 'cluster_id';
    const ref = body[field];
    if (!ref) throw conflict('Name the cluster to run on: swarm_id (a swarm) or cluster_id');
    const found = await this.clusters.findByIdOrName(ref);
    if (!found) throw notFound(`No ${FIELD_NOUNS[field]} ${ref}`);
    const naming = this.naming(found.backend);
    if (naming.field !== field) throw notFound(`No ${FIELD_NOUNS[field]} ${ref} (it is a ${naming.noun}: name it with ${naming.field})`);
    const state = options.state ?? 'active';
    return state === 'any' ? found : state === 'usable' ? this.requireUsable(found.id) : this.requireActive(found.id);
  }

  /**
   * The id of the cluster a list's filter names (`?swarm_id=`, `?cluster_id=`), by id or name as
   * paths take them, of a backend named by that field; a 400 naming the field when there is none,
   * so that a wrong filter is never an empty list.
   */
  async filterId(ref: string, field: ClusterField): Promise<string> {
    const found = await this.clusters.findByIdOrName(ref);
    if (found && this.naming(found.backend).field === field) return found.id;
    const noun = FIELD_NOUNS[field];
    throw badRequest(`Validation failed: query.${field} names no ${noun} (${ref}): give a ${noun}’s id or name`, [{ path: `query.${field}`, message: `names no ${noun}` }]);
  }

  /** The backend of a cluster (never changes, so it is remembered); null when there is no such cluster. */
  async backendOf(clusterId: string): Promise<string | null> {
    const known = this.backendCache.get(clusterId);
    if (known) return known;
    const cluster = await this.clusters.get(clusterId);
    if (cluster) this.backendCache.set(clusterId, cluster.backend);
    return cluster?.backend ?? null;
  }

  /**
   * How an API names the cluster a record lives on: by its backend's field (`swarm_id` for a swarm,
   * as the specification has it; `cluster_id` for the others).
   */
  async placement(clusterId: string): Promise<{ swarm_id: string } | { cluster_id: string }> {
    const backend = await this.backendOf(clusterId);
    return (backend ? this.naming(backend).field : 'cluster_id') === 'swarm_id' ? { swarm_id: clusterId } : { cluster_id: clusterId };
  }

  /**
   * How other members reach a node. With `advertise: overlay`, at its overlay address only while
   * its agent reports the overlay interface up with that address and a peer answering (a live
   * WireGuard handshake): a key and an address alone do not make a path. Otherwise at its own
   * address (`ip_address`), or nowhere (null) when it has none.
   */
  reachOf(node: AddressableNode): Reach {
    const unusable = this.settings.advertise === 'overlay' ? overlayUnusable(node) : null;
    if (this.settings.advertise === 'overlay' && !unusable) return { address: node.overlay_ip, via: 'overlay', overlayUnusable: null };
    return { address: node.ip_address, via: node.ip_address ? 'address' : null, overlayUnusable: unusable };
  }

  /** The address other members reach a node at (see reachOf), or null when there is none. */
  addressOf(node: AddressableNode): string | null {
    return this.reachOf(node).address;
  }

  /** The address other members reach a node at; a 409 naming what is missing when there is none. */
  requireAddressOf(node: AddressableNode): string {
    const reach = this.reachOf(node);
    if (reach.address) return reach.address;
    const overlay = reach.overlayUnusable ? `its overlay cannot be used (${reach.overlayUnusable}) and ` : '';
    throw conflict(`Node ${node.id} has no address other members can reach: ${overlay}it has no node address (set one with POST /v1/nodes/${node.id}/ip)`);
  }

  /**
   * The target a member confirms its path to before it joins: `node` at `address`:`port`, over the
   * overlay (its WireGuard peer must answer first) when that is the node's overlay address.
   */
  pathTarget(node: AddressableNode | null, address: string, port: number): PathTarget {
    const overlay = !!node && !!node.wg_public_key && address === node.overlay_ip;
    return { node_id: node?.id ?? null, address, port, wireguard_public_key: overlay ? node.wg_public_key : null };
  }

  /**
   * Waits (on the node's agent) until the node reaches one of the targets: a live WireGuard
   * handshake with the target's peer when it is reached over the overlay, then a TCP connection,
   * tried again with backoff for `clusters.join_path_wait_seconds`. Answers the target reached;
   * throws an OrchestratorError naming the part of each path that is missing.
   */
  async confirmPath(nodeId: string, targets: PathTarget[], options: { subject?: string } = {}) {
    const waitSeconds = Math.max(1, Math.round(this.settings.joinPathWaitMs / 1000));
    return this.runTask(nodeId, NetworkConfirmPath, { targets, wait_seconds: waitSeconds }, { subject: options.subject, timeoutMs: waitSeconds * 1000 + 30_000 });
  }

  async nodeIdsByRuntime(clusterId: string): Promise<Map<string, string>> {
    const map = new Map<string, string>();
    for (const m of await this.members.of(clusterId)) if (m.runtime_node_id) map.set(m.runtime_node_id, m.node_id);
    return map;
  }

  /** The clusters a node belongs to, with its role in each. */
  async membershipsOf(nodeId: string): Promise<Array<{ cluster: ClusterRecord; role: 'manager' | 'worker'; manages: boolean }>> {
    const out = [];
    for (const m of await this.members.findAll({ node_id: nodeId })) {
      const cluster = await this.clusters.get(m.cluster_id);
      if (cluster) out.push({ cluster, role: m.role, manages: cluster.manager_node_id === nodeId || m.role === 'manager' });
    }
    return out;
  }

  /**
   * A node is being deleted (forced past its memberships): its member records go; a cluster it
   * managed fails over to another active manager, or is left without one, `failed`, saying so
   * (its records can then be deleted). `cluster.member.removed` is published for each membership,
   * so that the backend's plugin can tidy up the orchestrator's own list where it still can.
   */
  async detachNode(nodeId: string): Promise<void> {
    for (const member of await this.members.findAll({ node_id: nodeId })) {
      const cluster = await this.clusters.get(member.cluster_id);
      await this.members.remove(member.id);
      if (cluster && cluster.manager_node_id === nodeId) {
        const next = (await this.members.of(cluster.id)).find((m) => m.role === 'manager' && m.status === 'active');
        const noun = this.nounOf(cluster);
        await this.clusters.change(
          cluster.id,
          next
            ? { manager_node_id: next.node_id }
            : {
                manager_node_id: null,
                status: 'failed',
                error: `its manager, node ${nodeId}, was deleted; delete the ${noun} (force=true) to remove what hangar recorded of it, or join a node to start it anew`,
              },
        );
      }
      if (cluster) this.deps.events.publish(ClusterMemberRemoved, { cluster: (await this.clusters.get(cluster.id)) ?? cluster, member });
    }
  }

  // ---- workloads on clusters --------------------------------------------------------------------

  private kinds(): readonly WorkloadKind[] {
    return this.deps.provided.contributions(ClusterWorkloads);
  }

  workloadKind(type: string): WorkloadKind | undefined {
    return this.kinds().find((k) => k.type === type);
  }

  /** Everything of every kind running on a cluster. */
  async workloadsIn(clusterId: string): Promise<Array<{ type: string; id: string; name: string }>> {
    const all: Array<{ type: string; id: string; name: string }> = [];
    for (const kind of this.kinds()) for (const w of await kind.inCluster(clusterId)) all.push({ type: kind.type, ...w });
    return all;
  }

  /** Forced removal of every workload of every kind on the cluster. */
  async removeWorkloads(clusterId: string): Promise<void> {
    for (const w of await this.workloadsIn(clusterId)) await this.workloadKind(w.type)!.forceRemove(w.id);
  }

  /** Fields other plugins add to a cluster's view. */
  async viewFields(cluster: ClusterRecord): Promise<Record<string, unknown>> {
    let extra: Record<string, unknown> = {};
    for (const extend of this.deps.provided.contributions(ClusterViewFields)) extra = { ...extra, ...(await extend(cluster)) };
    return extra;
  }

  /** Removes a cluster's record (and what goes with it); announces `resource.deleted` for its tags. */
  async forget(clusterId: string): Promise<boolean> {
    const cluster = await this.clusters.get(clusterId);
    for (const hook of this.deps.provided.contributions(BeforeClusterRemoved)) await hook(clusterId);
    const removed = await this.clusters.remove(clusterId);
    this.backendCache.delete(clusterId);
    if (removed && cluster) this.deps.events.publish(ResourceDeleted, { type: this.naming(cluster.backend).resourceType, id: clusterId });
    return removed;
  }

  // ---- typed tasks --------------------------------------------------------------------------

  /**
   * Runs one task on a node's agent and waits for its outcome; throws OrchestratorError with the
   * agent's reason, when no result came in time, or (unreachable) when no agent took it within
   * `pickupTimeoutMs`.
   */
  async runTask<K extends TaskKind>(nodeId: string, kind: K, payload: PayloadOf<K>, options: CallOptions = {}): Promise<ResultOf<K>> {
    const what = (kind as unknown as Partial<DriverCall>).method ?? kind.name;
    let task;
    try {
      task = await this.deps.tasks.enqueue({ nodeId, kind, payload: payload as Record<string, unknown>, subject: options.subject, readOnce: options.keep !== undefined });
    } catch (err) {
      // The node's agent cannot run it (too old): another manager may.
      if (err instanceof HttpError && err.status === 409) throw new OrchestratorError(what, err.message, true);
      throw err;
    }
    options.onQueued?.(task);
    const timeoutMs = options.timeoutMs ?? this.settings.callTimeoutMs;
    const signal = this.deps.shutdown;
    if (options.pickupTimeoutMs !== undefined) {
      const picked = await this.deps.tasks.settle(task.id, { timeoutMs: Math.min(options.pickupTimeoutMs, timeoutMs), signal, until: ['leased', 'completed', 'failed'] });
      if (picked.status === 'pending') {
        await this.deps.db.knex(TASKS).where({ id: task.id, status: 'pending' }).delete();
        throw new OrchestratorError(what, `the agent on node ${nodeId} did not take the task within ${Math.round(options.pickupTimeoutMs / 1000)} s (is it online?)`, true);
      }
    }
    const done = await this.deps.tasks.settle(task.id, { timeoutMs, signal });
    // The payload may hold secret values; nothing needs the task once its outcome is known (unless
    // a caller answered 202 with it: then it is read once). A call nobody waits for any more must
    // not run later either: a still-pending one is withdrawn.
    if (done.status === 'pending' || (done.status !== 'leased' && !options.keep?.())) await this.deps.db.knex(TASKS).where({ id: task.id }).delete();
    if (done.status === 'completed') return done.result as ResultOf<K>;
    if (done.status === 'failed') throw new OrchestratorError(what, done.error ?? 'the agent reported a failure');
    throw new OrchestratorError(what, `no result from the agent on node ${nodeId} within ${Math.round(timeoutMs / 1000)} s (is it online?)`, done.status === 'pending');
  }

  /** Runs a driver call of `backend` on a node's agent (the payload is the backend plus the call's input). */
  call<C extends DriverCall>(nodeId: string, call: C, input: Static<C['input']>, options: CallOptions & { backend: string }): Promise<Static<C['result']>> {
    const { backend, ...rest } = options;
    return this.runTask(nodeId, call, { backend, ...input } as never, rest) as Promise<Static<C['result']>>;
  }

  /** The nodes asked for a cluster's orchestrator calls: its manager, then its other active managers. */
  async managersOf(cluster: ClusterRecord): Promise<string[]> {
    const others = (await this.members.of(cluster.id)).filter((m) => m.role === 'manager' && m.status === 'active' && m.node_id !== cluster.manager_node_id).map((m) => m.node_id);
    return [...(cluster.manager_node_id ? [cluster.manager_node_id] : []), ...others];
  }

  /**
   * Runs a driver call on the cluster's manager. When that manager's agent does not take the task
   * (offline, too old) and the cluster has other managers, the next one is asked, and the one that
   * answers becomes the cluster's manager.
   */
  async callOn<C extends DriverCall>(cluster: ClusterRecord, call: C, input: Static<C['input']>, options: Omit<CallOptions, 'pickupTimeoutMs'> = {}): Promise<Static<C['result']>> {
    const candidates = await this.managersOf(cluster);
    if (!candidates.length) throw conflict(`${this.named(cluster)} has no manager`);
    input = { ...(await this.context(cluster, call)), ...input };
    for (const [i, nodeId] of candidates.entries()) {
      const last = i === candidates.length - 1;
      try {
        const result = await this.call(nodeId, call, input, { ...options, backend: cluster.backend, subject: options.subject ?? cluster.id, pickupTimeoutMs: last ? undefined : this.settings.pickupTimeoutMs });
        if (nodeId !== cluster.manager_node_id) {
          this.deps.log.info({ cluster_id: cluster.id, from: cluster.manager_node_id, to: nodeId }, 'another manager answered; it manages the cluster now');
          await this.clusters.change(cluster.id, { manager_node_id: nodeId });
        }
        return result;
      } catch (err) {
        if (last || !(err instanceof OrchestratorError) || !err.unreachable) throw err;
        this.deps.log.warn({ cluster_id: cluster.id, node_id: nodeId, error: err.message }, 'a manager did not take a call; asking the next');
      }
    }
    throw new Error('unreachable');
  }

  /** Queues a read (logs) on the cluster's manager as a read-once task about `subject`; the task view for a 202. */
  async queueRead<C extends DriverCall>(cluster: ClusterRecord, call: C, input: Static<C['input']>, subject: string) {
    if (!cluster.manager_node_id) throw conflict(`${this.named(cluster)} has no manager`);
    const payload = { backend: cluster.backend, ...input } as Record<string, unknown>;
    return taskView(await this.deps.tasks.enqueue({ nodeId: cluster.manager_node_id, kind: call, payload, readOnce: true, subject }));
  }

  /** A queued read's state, and its result once done (read once: a second read is a 404; an auditor's read leaves it). */
  async takeRead(taskId: string, subject: string, kinds: readonly TaskKind[], reader: { role: string } | null) {
    return taskView(await this.deps.tasks.take(taskId, { subject, kind: kinds.map((k) => k.name), consume: consumesReadOnce(reader) }));
  }

  /** Queues a log read of a workload or a bundle on the cluster's manager (`lines` last lines, or everything after `since`). */
  queueLogs(cluster: ClusterRecord, call: typeof WorkloadLogs | typeof BundleLogs, name: string, options: { lines?: number; since?: string }, subject: string, placement: { namespace?: string; confined?: boolean } = {}) {
    const range = options.since ? { since: new Date(options.since).toISOString() } : { lines: options.lines ?? 100 };
    return this.queueRead(cluster, call, { name, ...placement, ...range }, subject);
  }

  /** A log read's state, and its lines once done (read once). */
  async readLogs(taskId: string, subject: string, reader: { role: string } | null): Promise<Record<string, unknown>> {
    const { result, ...rest } = (await this.takeRead(taskId, subject, [WorkloadLogs, BundleLogs], reader)) as ReturnType<typeof taskView> & { result?: { lines?: string[] } };
    return { ...rest, ...(result ? { lines: result.lines ?? [] } : {}) };
  }

  // ---- observation ------------------------------------------------------------------------------

  /** Asks every active cluster for the state of its workloads and hands it to the observers. */
  async observe(signal: AbortSignal): Promise<void> {
    const observers = this.deps.provided.contributions(ClusterObservers);
    if (!observers.length) return;
    for (const cluster of await this.clusters.findAll({ status: 'active' })) {
      if (signal.aborted) return;
      try {
        const { workloads } = await this.callOn(cluster, InspectWorkloads, {}, { timeoutMs: Math.max(5000, this.settings.observeIntervalMs) });
        const observed = { cluster, workloads, nodeIds: await this.nodeIdsByRuntime(cluster.id) };
        for (const observer of observers) await observer(observed);
      } catch (err) {
        this.deps.log.warn({ cluster_id: cluster.id, error: (err as Error).message }, 'observing a cluster failed');
      }
    }
  }

  /** Waits for the background work still running (it sees the shutdown and stops early). */
  close(): Promise<void> {
    return this.jobs.drain();
  }
}
