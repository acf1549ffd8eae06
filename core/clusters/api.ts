import { CREATE_IN_PROJECT, requireHeldIn, type RouteScope } from '../auth/scope.js';
import { Type, type Static, type TObject, type TSchema } from '@sinclair/typebox';
import type { Knex } from 'knex';
import { ConfigError, badRequest, conflict, notFound } from '../errors.js';
import type { Principal } from '../auth/index.js';
import { Reply } from '../http/reply.js';
import { ForceQuery, IdParams, NodeRef, PageQuery } from '../http/resources.js';
import { newId } from '../ids.js';
import { defineRoute, type RouteDef, type Services } from '../plugin.js';
import type { DriverCall, TaskKind } from '../tasks/kinds.js';
import { NodeAvailabilityActors, NodeAvailabilityRecorders, recordObservedAvailability, type HangarAvailability } from '../node-availability.js';
import { SetNodeAvailability } from '../orchestrator.js';
import { defineMembership, DRIVER_AVAILABILITY, nodeAvailabilityActor, type Membership } from './membership.js';
import { ClusterObservers } from './observation.js';
import { ClusterRemovals } from './directory.js';
import type { ClusterNaming } from './backend-registry.js';
import { ClusterProjectsRef, requireNodeServes } from './projects.js';
import type { ClusterRecord, MemberRecord } from './store.js';

/** The parts of a node record the cluster API reads (the nodes plugin's NodeRecord). */
export interface JoinableNode {
  id: string;
  connection: string;
  removing: boolean;
  /** What hangar records of its scheduling (the nodes API's cordon, drain, uncordon). */
  availability: HangarAvailability;
}

/** Where a cluster API finds nodes and records what happens to them (the nodes plugin's NodesApi). */
export interface ClusterNodes<N extends JoinableNode> {
  nodes: { require(id: string): Promise<N>; get(id: string): Promise<N | null>; lock(id: string, trx: Knex.Transaction): Promise<void> };
  events: { record(event: { nodeId: string; kind: string; message: string; data?: Record<string, unknown> }): Promise<unknown> };
}

/** A member as the runtime reports it, by its runtime node id. */
type Reported = { runtime_node_id: string };

/**
 * A backend's cluster API, declared: defineClusterApi generates from it the cluster's list, get,
 * create and delete, its members' list, join and leave, and carries out the joins and leaves one at
 * a time (core/clusters/membership.ts). The paths, nouns and the field naming its clusters are the
 * backend's (core/clusters/backend.ts `api`); what is left here is what only the backend knows.
 */
export interface ClusterApiDef<N extends JoinableNode, C extends DriverCall = DriverCall, R extends Reported = Reported> {
  /** The backend whose clusters it serves: `swarm`, `k8s`. */
  backend: string;
  /** The nodes plugin's API (`nodesOf(services)`). */
  nodes: ClusterNodes<N>;
  /** A member as the API shows it. */
  memberView(member: MemberRecord): Record<string, unknown>;
  /** The backend's fields of a cluster's view (its members in order, the first manager first), between `status` and `error`. */
  view(cluster: ClusterRecord, members: MemberRecord[]): Promise<Record<string, unknown>> | Record<string, unknown>;
  create: {
    summary: string;
    /** The create body (`name` and the backend's own fields). */
    body: TSchema;
    /** 201: an empty cluster answered at once; 202: members were named and join in the background. */
    status: 201 | 202;
    /** The nodes a create body names, the first to manage the cluster; default none. */
    nodeIds?(body: Record<string, unknown>): string[];
    /** After the cluster's record is written, before its members: the backend's own record of it. */
    created?(cluster: ClusterRecord, body: Record<string, unknown>): Promise<void>;
  };
  summaries: { list: string; get: string; delete: string };
  /** The members' list: `GET <path>/{id}/<path>`, each member with what the cluster's manager reports of it. */
  members: {
    path: string;
    summary: string;
    /** The call that asks the manager, and the reported member in it. */
    report: { call: C; members(answer: Static<C['result']>): R[]; by: string };
    /** What a member's line adds from the report (`reported` undefined when the manager did not list it; `unanswered` when it did not answer at all). */
    fields(reported: R | undefined, unanswered: boolean): Record<string, unknown>;
    /**
     * The availability a reported member holds in hangar's terms. Given, the cluster's node is the
     * truth: each observation of the cluster (clusters.observe_interval_seconds) brings hangar's
     * record of an active member in line with it, with a node event.
     */
    availability?(reported: R): HangarAvailability;
    /**
     * Whether a reported member's node is ready (a kubelet's Ready condition, a swarm node's state),
     * and why not. Given, each observation records it on the member (readiness), which the
     * `cluster_member_not_ready` alert reads.
     */
    readiness?(reported: R): { ready: boolean; reason: string | null };
  };
  join: {
    /** `POST <cluster path>/{id}/<path>` with `{node_id}`. */
    path: string;
    summary: string;
    /** The body may ask for `role: manager` (default worker; the first member manages the cluster whatever it asks). */
    roles?: boolean;
  };
  leave: {
    /** `POST <cluster path>/{id}/<path>` with `{node_id}`, or `DELETE <cluster path>/{id}/<path>/{nodeId}`. */
    method: 'POST' | 'DELETE';
    path: string;
    summary: string;
    /** A 409 for a member the backend does not let go this way (the last manager of a swarm that has workers…). */
    refuse?(cluster: ClusterRecord, member: MemberRecord): Promise<void>;
  };
  /** The task kinds a node's agent must run to join (a 409 naming them otherwise). */
  joinKinds: readonly TaskKind[];
  /** What else a node must have to join or form a cluster (an address members reach; the files to install): a 409 otherwise. */
  checkNode?(node: N): Promise<unknown> | unknown;
  /** Carries out one pending member's join (a `joining` member) or leave (a `leaving` one); a failure marks it failed. */
  joinMember(cluster: ClusterRecord, member: MemberRecord, signal: AbortSignal): Promise<void>;
  leaveMember(cluster: ClusterRecord, member: MemberRecord, signal: AbortSignal): Promise<void>;
  /** Takes every member out when the cluster is deleted (the backend's order); core forgets the cluster after. */
  removeMembers(cluster: ClusterRecord, signal: AbortSignal): Promise<void>;
  /** A forced cleanup: leaves what it can without asking the members to drain (default: removeMembers, failures ignored). */
  abandon?(cluster: ClusterRecord): Promise<void>;
}

/** What defineClusterApi answers: the routes, and what the backend's own routes use. */
export interface ClusterApi {
  routes: RouteDef[];
  naming: ClusterNaming;
  membership: Membership;
  /** The cluster's view, as every route answers it. */
  view(cluster: ClusterRecord): Promise<Record<string, unknown>>;
  /** A cluster of this backend by id or name (404 otherwise). */
  require(idOrName: string): Promise<ClusterRecord>;
  /** The members, the first manager first, then in the order they were asked for. */
  membersOf(clusterId: string): Promise<MemberRecord[]>;
  /**
   * What the cluster's manager answers, for a read that lists hangar's records beside it: the
   * answer, or null and why not (the records are listed anyway); null and no reason without a manager.
   */
  ask<C extends DriverCall>(cluster: ClusterRecord, call: C, input: Static<C['input']>): Promise<{ answer: Static<C['result']> | null; error: string | null }>;
  /** Removes a cluster whatever its state (cleanup): its workloads by force, its members where they can go, its record. */
  forceRemove(idOrName: string): Promise<boolean>;
}

/** How long a read waits for the cluster's manager before listing hangar's records without its answer. */
const MANAGER_READ_TIMEOUT_MS = 15_000;

/** Managers first (the one that forms the cluster before those that join it), then in the order they were asked for. */
const memberOrder = (a: MemberRecord, b: MemberRecord) =>
  Number(b.role === 'manager') - Number(a.role === 'manager') || a.created_at.localeCompare(b.created_at) || a.id.localeCompare(b.id);

/**
 * The cluster API of a backend (its swarms plugin, kubernetes plugin, or a third party's): routes
 * under the backend's `api.path`, the membership lifecycle, cleanup by force, and cordon, drain and
 * uncordon of a member passed on to its cluster. A plugin adds only its backend's own routes.
 */
export function defineClusterApi<N extends JoinableNode, C extends DriverCall, R extends Reported>(services: Services, def: ClusterApiDef<N, C, R>): ClusterApi {
  const core = services.clusters;
  if (!core.findBackend(def.backend)) {
    throw new ConfigError(`a loaded plugin serves the clusters of the orchestrator backend ${def.backend}, which is not loaded: add ${def.backend} to drivers: (loaded: ${core.backendNames().join(', ') || 'none'})`);
  }
  const naming = core.naming(def.backend);
  const { noun, title, field } = naming;
  if (!naming.path) throw new ConfigError(`the orchestrator backend ${def.backend} names no api.path for its cluster API`);
  const base = naming.path;
  const { clusters, members } = core;
  const { nodes, events } = def.nodes;
  const now = () => services.clock.now().toISOString();
  const record = (nodeId: string, kind: string, message: string, cluster: ClusterRecord) => events.record({ nodeId, kind, message, data: { [field]: cluster.id } });

  const membersOf = async (clusterId: string) => (await members.of(clusterId)).sort(memberOrder);

  async function view(cluster: ClusterRecord) {
    return {
      id: cluster.id,
      name: cluster.name,
      status: cluster.status,
      ...(await def.view(cluster, await membersOf(cluster.id))),
      ...(await core.viewFields(cluster)),
      error: cluster.error,
      created_at: cluster.created_at,
      updated_at: cluster.updated_at,
    };
  }

  const require = (idOrName: string) => core.require(idOrName, def.backend);

  /** Member changes one at a time, the first manager first, then in the order asked: a node that joins while the cluster forms waits for its manager. */
  async function converge(cluster: ClusterRecord, signal: AbortSignal): Promise<void> {
    for (;;) {
      const [next] = (await membersOf(cluster.id)).filter((m) => m.status === 'joining' || m.status === 'leaving');
      if (!next || signal.aborted) return;
      const current = (await clusters.get(cluster.id))!;
      const step = next.status === 'joining' ? 'join' : 'leave';
      const done = await (step === 'join' ? def.joinMember(current, next, signal) : def.leaveMember(current, next, signal)).then(
        () => true,
        async (err: Error) => {
          if (signal.aborted) throw err;
          const doing = `${step === 'join' ? 'joining' : 'leaving'}`;
          await members.change(next.id, { status: 'failed', error: `${doing} failed: ${err.message}` });
          await record(next.node_id, `${def.backend}_${step}_failed`, `${doing} ${noun} ${current.name} failed: ${err.message}`, current);
          return false;
        },
      );
      if (done && step === 'join') await holdRecordedAvailability(current, next.id);
    }
  }

  const described = (cluster: ClusterRecord) => `${title} ${cluster.name}`;
  const recorders = () => services.provided.contributions(NodeAvailabilityRecorders);

  /**
   * A node that joins (or joins again) gets the availability hangar records of it: an operator who
   * cordoned or drained a node took it out of scheduling, and adding it to a cluster does not put it
   * back (uncordon does). When the cluster refuses, hangar's record follows what the cluster holds.
   */
  async function holdRecordedAvailability(cluster: ClusterRecord, memberId: string): Promise<void> {
    const member = await members.get(memberId);
    const node = member?.status === 'active' && member.runtime_node_id ? await nodes.get(member.node_id) : null;
    if (!member?.runtime_node_id || !node || node.availability === 'active') return;
    const drainSeconds = core.settings.drainTimeoutSeconds;
    try {
      await core.callOn(cluster, SetNodeAvailability, {
        runtime_node_id: member.runtime_node_id,
        availability: DRIVER_AVAILABILITY[node.availability],
        ...(node.availability === 'drained' && drainSeconds ? { drain_timeout_seconds: drainSeconds } : {}),
      });
      await record(node.id, `${def.backend}_availability_held`, `joined ${described(cluster)} ${node.availability}, as hangar records it (uncordon it to schedule onto it)`, cluster);
    } catch (err) {
      const reason = `joined ${described(cluster)} schedulable: holding its recorded availability (${node.availability}) there failed: ${(err as Error).message}`;
      await recordObservedAvailability(recorders(), { nodeId: node.id, recorded: node.availability, availability: 'active', source: described(cluster), reason });
    }
  }

  /**
   * Reads the cluster's members report once and brings hangar's records of its active members in line
   * with it: each one's availability (the cluster is the truth) and its readiness.
   */
  async function observeMembers(cluster: ClusterRecord): Promise<void> {
    const active = (await members.of(cluster.id)).filter((m) => m.status === 'active' && m.runtime_node_id);
    if (!active.length) return;
    // What hangar recorded before the cluster is asked: a change made through the nodes API while it answers is not overwritten.
    const recorded = new Map<string, HangarAvailability>();
    for (const m of active) {
      const node = await nodes.get(m.node_id);
      if (node) recorded.set(m.node_id, node.availability);
    }
    const answer = await core.callOn(cluster, def.members.report.call, {} as Static<C['input']>, { timeoutMs: MANAGER_READ_TIMEOUT_MS });
    const byRuntime = new Map(def.members.report.members(answer).map((r) => [r.runtime_node_id, r]));
    for (const m of active) {
      const reported = byRuntime.get(m.runtime_node_id!);
      const ready = reported && readinessOf ? readinessOf(reported) : null;
      const readiness = ready ? (ready.ready ? 'ready' : 'not_ready') : null;
      const reason = ready && !ready.ready ? ready.reason : null;
      if (readinessOf && ((m.readiness ?? null) !== readiness || (m.readiness_reason ?? null) !== reason)) await members.change(m.id, { readiness, readiness_reason: reason });
      const was = recorded.get(m.node_id);
      if (!heldBy || !reported || !was || heldBy(reported) === was) continue;
      await recordObservedAvailability(recorders(), { nodeId: m.node_id, recorded: was, availability: heldBy(reported), source: described(cluster) });
    }
  }
  const heldBy = def.members.availability;
  const readinessOf = def.members.readiness;
  if (heldBy || readinessOf) {
    services.provided.contribute(ClusterObservers, async (cluster) => async () => {
      if (cluster.backend !== def.backend) return;
      // Its own failure: the other observers of the cluster still hear of it.
      await observeMembers(cluster).catch((err: Error) => services.log.warn({ cluster_id: cluster.id, error: err.message }, 'observing a cluster’s nodes failed'));
    });
  }

  const membership = defineMembership(core, { noun, describe: (c) => `${title} ${c.name}`, converge, removeMembers: def.removeMembers });
  const { lifecycle, refused, requestDelete } = membership;

  // Cordon, drain and uncordon of a member (the nodes API) reach its cluster before they are recorded.
  services.provided.contribute(NodeAvailabilityActors, nodeAvailabilityActor(core, def.backend, (c) => `${title} ${c.name}`));

  /**
   * A node that may join a cluster (`cluster`, or one being created in `projectId`): live, with an
   * agent that runs the backend's kinds, in no other cluster, and granted to the cluster's project
   * when it is granted to any (docs/tenancy.md "Nodes granted to projects"). An installation admin
   * (its own credential) places the installation's nodes anywhere; anyone else joins only nodes
   * granted to the cluster's project, another node answering as one that does not exist.
   */
  async function requireJoinable(nodeId: string, cluster: ClusterRecord | undefined, principal: Principal | null, projectId?: string | null): Promise<N> {
    const node = await nodes.require(nodeId);
    const project = cluster ? (cluster.project_id ?? null) : (projectId ?? null);
    await requireNodeServes(services.provided, principal, node, nodeId, project, cluster ? `${noun} ${cluster.name}'s` : 'the new one’s');
    if (node.connection === 'pending') throw conflict(`Node ${node.id} has no agent yet: join the machine first`);
    await services.tasks.requireCapable(node.id, def.joinKinds);
    const existing = await members.findOne({ node_id: node.id });
    if (existing) {
      // A failed attempt to join this cluster is tried again.
      if (cluster && existing.cluster_id === cluster.id && existing.status === 'failed') await members.remove(existing.id);
      else throw conflict(`Node ${node.id} is already a member of ${noun} ${cluster && existing.cluster_id === cluster.id ? cluster.name : existing.cluster_id}`);
    }
    await def.checkNode?.(node);
    return node;
  }

  /**
   * A node `requireJoinable` let in, written as a member with its row locked (SQLite runs one writer at
   * a time) and its grants checked again there: a grant to the cluster's project taken back meanwhile
   * is seen here, or sees this member.
   */
  function addMember(cluster: ClusterRecord, node: N, role: MemberRecord['role'], principal: Principal | null): Promise<MemberRecord> {
    const at = now();
    return services.db.knex.transaction(async (trx) => {
      await nodes.lock(node.id, trx);
      await requireNodeServes(services.provided, principal, node, node.id, cluster.project_id ?? null, `${noun} ${cluster.name}'s`, trx);
      return members.insert({ id: newId('member'), cluster_id: cluster.id, node_id: node.id, role, status: 'joining', runtime_node_id: null, advertise_address: null, error: null, created_at: at, updated_at: at }, trx);
    });
  }

  async function ask<K extends DriverCall>(cluster: ClusterRecord, call: K, input: Static<K['input']>) {
    if (!cluster.manager_node_id) return { answer: null, error: null };
    try {
      return { answer: await core.callOn(cluster, call, input, { timeoutMs: MANAGER_READ_TIMEOUT_MS }), error: null };
    } catch (err) {
      return { answer: null, error: `the ${def.members.report.by} did not answer: ${(err as Error).message}` };
    }
  }

  async function forceRemove(idOrName: string): Promise<boolean> {
    const cluster = await clusters.findByIdOrName(idOrName);
    if (!cluster || cluster.backend !== def.backend) return false;
    await core.removeWorkloads(cluster.id);
    await (def.abandon ? def.abandon(cluster) : def.removeMembers(cluster, services.shutdown)).catch(() => undefined);
    await core.forget(cluster.id);
    return true;
  }
  services.provided.contribute(ClusterRemovals, { type: naming.resourceType, forceRemove });

  const Cluster = Type.Object({}, { additionalProperties: true });
  // Every create may name the project the cluster goes in; a list may be narrowed to one project.
  const ProjectRef = Type.String({ minLength: 1, maxLength: 100, description: 'a project (id or name); default: the caller’s default project' });
  const createBody = def.create.body as TObject;
  const CreateBody = createBody.type === 'object' && createBody.properties ? Type.Object({ ...createBody.properties, project_id: Type.Optional(ProjectRef) }, { additionalProperties: false }) : def.create.body;
  const ListQuery = Type.Object({ ...PageQuery.properties, project: Type.Optional(Type.String({ minLength: 1, maxLength: 100, description: 'only the clusters of this project (id or name; 400 when there is no such project)' })) }, { additionalProperties: false });
  /** The projects plugin when it is loaded (asked at each request: its setup may come after this one's). */
  const projects = () => services.provided.find(ClusterProjectsRef);
  async function projectForNew(principal: Principal | null, named: string | undefined): Promise<string | null> {
    const owner = projects();
    if (owner) return owner.forNew(principal, named);
    if (named !== undefined) throw badRequest('Validation failed: body.project_id names a project, but no loaded plugin keeps projects (add projects to plugins:)', [{ path: 'body.project_id', message: 'projects are not loaded' }]);
    return null;
  }
  const leaveByPath = def.leave.method === 'DELETE';
  const leavePath = `${base}/{id}/${def.leave.path}${leaveByPath ? '/{nodeId}' : ''}`;
  const joinPath = `${base}/{id}/${def.join.path}`;
  // The requests the backend names in messages (its api.join and api.leave) are these routes.
  const said = core.findBackend(def.backend)?.api ?? {};
  for (const [request, route] of [
    [said.join?.('{id}'), `POST ${joinPath}`],
    [said.leave?.('{id}', '{nodeId}'), `${def.leave.method} ${leavePath}`],
  ]) {
    if (request && request !== route) throw new ConfigError(`the ${def.backend} backend names ${request} in messages, but its cluster API serves ${route}`);
  }

  // The routes on one cluster act in its project (core/auth/scope.ts): its members' roles open them.
  // Creating a cluster and joining a node are installation admins' for the installation's nodes, and
  // the project's members' (clusters:write) for the nodes granted to the project.
  const ofCluster: RouteScope = { of: [{ kind: 'cluster', from: 'params.id', noun }] };
  const routes: RouteDef[] = [
    defineRoute({
      method: 'POST',
      path: base,
      // Installation admins, and (the scope) members whose role in the project it goes in grants clusters:write.
      auth: { role: 'admin' },
      scope: CREATE_IN_PROJECT,
      summary: def.create.summary,
      description: 'Installation admins create clusters in any project, on any node not granted to another project; members whose role in the project grants clusters:write create them in it, on the nodes granted to it only (docs/tenancy.md).',
      status: def.create.status,
      schemas: { body: CreateBody, response: Cluster },
      handler: async (req) => {
        const { project_id: namedProject, ...body } = req.body as Record<string, unknown> & { name: string; project_id?: string };
        const projectId = await projectForNew(req.principal, namedProject);
        requireHeldIn(req.ctx, projectId);
        if (await clusters.findOne({ name: body.name })) throw conflict(`A ${noun} named ${body.name} exists`);
        const chosen: N[] = [];
        for (const nodeId of def.create.nodeIds?.(body) ?? []) chosen.push(await requireJoinable(nodeId, undefined, req.principal, projectId));
        const id = newId(naming.resourceType);
        await clusters.insert({ id, name: body.name, backend: def.backend, status: 'empty', manager_node_id: null, runtime_id: null, ...(projectId ? { project_id: projectId } : {}), error: null, created_at: now(), updated_at: now() });
        const cluster = (await clusters.get(id))!;
        await def.create.created?.(cluster, body);
        for (const [i, node] of chosen.entries()) await addMember(cluster, node, i === 0 ? 'manager' : 'worker', req.principal);
        return view(chosen.length ? await lifecycle.start(id, 'members', { status: 'forming', error: null }, refused) : cluster);
      },
    }),
    defineRoute({
      method: 'GET',
      path: base,
      auth: 'authenticated',
      scope: { list: 'cluster' },
      summary: def.summaries.list,
      schemas: { query: ListQuery },
      handler: async (req) => {
        const { project } = req.query;
        let projectId: string | null = null;
        if (project !== undefined) {
          const owner = projects();
          if (!owner) throw badRequest('Validation failed: query.project names a project, but no loaded plugin keeps projects (add projects to plugins:)', [{ path: 'query.project', message: 'projects are not loaded' }]);
          projectId = await owner.resolve(req.principal, project);
        }
        const where = (q: Knex.QueryBuilder) => void q.where({ backend: def.backend, ...(projectId ? { project_id: projectId } : {}) });
        return Reply.pageOf(await clusters.page({ limit: req.query.limit, cursor: req.query.cursor, where }), view);
      },
    }),
    defineRoute({
      method: 'GET',
      path: `${base}/{id}`,
      auth: 'authenticated',
      scope: ofCluster,
      summary: def.summaries.get,
      schemas: { params: IdParams, response: Cluster },
      handler: async (req) => view(await require(req.params.id)),
    }),
    defineRoute({
      method: 'GET',
      path: `${base}/{id}/${def.members.path}`,
      auth: 'authenticated',
      scope: ofCluster,
      summary: def.members.summary,
      schemas: { params: IdParams },
      handler: async (req) => {
        const cluster = await require(req.params.id);
        const { answer, error } = await ask(cluster, def.members.report.call, {} as Static<C['input']>);
        const byRuntime = new Map((answer ? def.members.report.members(answer) : []).map((r) => [r.runtime_node_id, r]));
        return new Reply(200, {
          data: (await membersOf(cluster.id)).map((m) => ({ ...def.memberView(m), ...def.members.fields(m.runtime_node_id ? byRuntime.get(m.runtime_node_id) : undefined, !!error) })),
          ...(error ? { error } : {}),
        });
      },
    }),
    defineRoute({
      method: 'POST',
      path: joinPath,
      // Installation admins, and (the scope) members whose role in the cluster's project grants clusters:write.
      auth: { role: 'admin' },
      scope: ofCluster,
      errors: [403, 409],
      summary: def.join.summary,
      description: 'Installation admins join any node not granted to another project; members whose role in the cluster’s project grants clusters:write join the nodes granted to it (docs/tenancy.md).',
      status: 202,
      schemas: {
        params: IdParams,
        body: Type.Object(
          { node_id: NodeRef, ...(def.join.roles ? { role: Type.Optional(Type.Union([Type.Literal('worker'), Type.Literal('manager')])) } : {}) },
          { additionalProperties: false },
        ),
      },
      handler: async (req) => {
        const cluster = await core.requireUsable(req.params.id, def.backend);
        const node = await requireJoinable(req.body.node_id, cluster, req.principal);
        // The first node forms the cluster and manages it; nodes joined meanwhile wait their turn for its manager.
        const first = !cluster.manager_node_id && !(await members.of(cluster.id)).some((m) => m.role === 'manager' && m.status !== 'failed');
        const member = await addMember(cluster, node, first ? 'manager' : ((req.body.role as MemberRecord['role'] | undefined) ?? 'worker'), req.principal);
        await lifecycle.start(cluster.id, 'members', first ? { status: 'forming', error: null } : {}, refused);
        return def.memberView(member);
      },
    }),
    defineRoute({
      method: def.leave.method,
      path: leavePath,
      auth: { role: 'admin' },
      scope: ofCluster,
      summary: def.leave.summary,
      status: 202,
      schemas: leaveByPath
        ? { params: Type.Object({ id: IdParams.properties.id, nodeId: NodeRef }) }
        : { params: IdParams, body: Type.Object({ node_id: NodeRef }, { additionalProperties: false }) },
      handler: async (req) => {
        const cluster = await require(req.params.id);
        const nodeId = leaveByPath ? (req.params as { nodeId: string }).nodeId : (req.body as { node_id: string }).node_id;
        const member = await members.findOne({ node_id: nodeId, cluster_id: cluster.id });
        if (!member) throw notFound(`Node ${nodeId} is not a member of ${noun} ${cluster.name}`);
        if (member.status === 'leaving') throw conflict(`Node ${member.node_id} is already leaving`);
        if (member.status === 'joining') throw conflict(`Node ${member.node_id} is still joining; wait for it to finish`);
        await def.leave.refuse?.(cluster, member);
        const leaving = await members.change(member.id, { status: 'leaving' });
        await lifecycle.start(cluster.id, 'members', {}, refused);
        return def.memberView(leaving);
      },
    }),
    defineRoute({
      method: 'DELETE',
      path: `${base}/{id}`,
      auth: { role: 'admin' },
      scope: ofCluster,
      summary: def.summaries.delete,
      otherStatuses: [202],
      schemas: { params: IdParams, query: ForceQuery },
      handler: async (req) => requestDelete(await require(req.params.id), req.query.force === true, view),
    }),
  ];

  return { routes, naming, membership, view, require, membersOf, ask, forceRemove };
}
