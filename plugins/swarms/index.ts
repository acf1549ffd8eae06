import { Type } from '@sinclair/typebox';
import { conflict, notFound } from '../../core/errors.js';
import { Reply } from '../../core/http/reply.js';
import { newId } from '../../core/ids.js';
import { BackgroundJobs } from '../../core/jobs.js';
import type { RuntimeAvailability, SwarmMember, WorkloadState } from '../../core/orchestrator.js';
import { recordRemover } from '../../core/events.js';
import { definePlugin } from '../../core/plugin.js';
import { nodesOf } from '../nodes/index.js';
import type { NodeRecord } from '../nodes/nodes.js';
import { swarmMigrations } from './migrations.js';
import { logReads, orchestratorCalls, taskRunner, SwarmsConfigSchema, type ObservedSwarm, type SwarmsApi, type SwarmsConfig, type WorkloadKind } from './orchestration.js';
import { DnsName, ForceQuery, NodeRef } from './schemas.js';
import { IdParams, PageQuery } from '../../core/http/resources.js';
import { MemberStore, SwarmStore, type MemberRecord, type SwarmRecord } from './store.js';
import { sleep } from '../../core/clock.js';

const AVAILABILITY: Record<NodeRecord['availability'], RuntimeAvailability> = { active: 'active', cordoned: 'pause', drained: 'drain' };

function memberView(m: MemberRecord) {
  return { node_id: m.node_id, role: m.role, status: m.status, runtime_node_id: m.runtime_node_id, advertise_address: m.advertise_address, error: m.error, joined_at: m.created_at };
}

export default definePlugin({
  name: 'swarms',
  description: 'Docker Swarm groups: membership through the agents, node availability, workload observation',
  configSchema: SwarmsConfigSchema,
  migrations: swarmMigrations,
  setup(services) {
    const { db, clock, log } = services;
    const settings = services.config.swarms as SwarmsConfig;
    const { nodes, events } = nodesOf(services);
    const swarms = new SwarmStore(db, clock);
    const removalHooks: Array<(swarmId: string) => Promise<void>> = [];
    const removeRecord = recordRemover(services.events, 'swarm', swarms);
    const forget = async (swarmId: string) => {
      for (const hook of removalHooks) await hook(swarmId);
      return removeRecord(swarmId);
    };
    const members = new MemberStore(db, clock);
    const jobs = new BackgroundJobs(log, services.shutdown);
    const runTask = taskRunner(services, settings);
    const call = orchestratorCalls(runTask);
    const kinds = new Map<string, WorkloadKind>();
    const observers: Array<(o: ObservedSwarm) => Promise<void>> = [];
    const viewExtensions: Array<(swarm: SwarmRecord) => Promise<Record<string, unknown>>> = [];
    const now = () => clock.now().toISOString();

    /** The address a node advertises to the swarm: its overlay address when it has one (and the setting says so). */
    function advertiseAddress(node: Pick<NodeRecord, 'overlay_ip' | 'wg_public_key' | 'ip_address'>): string | null {
      if (settings.advertise === 'overlay' && node.overlay_ip && node.wg_public_key) return node.overlay_ip;
      return node.ip_address;
    }

    async function nodeIdsByRuntime(swarmId: string): Promise<Map<string, string>> {
      const map = new Map<string, string>();
      for (const m of await members.of(swarmId)) if (m.runtime_node_id) map.set(m.runtime_node_id, m.node_id);
      return map;
    }

    async function workloadsIn(swarmId: string) {
      const all: Array<{ type: string; id: string; name: string }> = [];
      for (const kind of kinds.values()) for (const w of await kind.inSwarm(swarmId)) all.push({ type: kind.type, ...w });
      return all;
    }

    /** Forced removal of every workload of every kind on the swarm. */
    async function removeWorkloads(swarmId: string): Promise<void> {
      for (const w of await workloadsIn(swarmId)) await kinds.get(w.type)!.forceRemove(w.id);
    }

    const api: SwarmsApi = {
      swarms,
      members,
      settings,
      jobs,
      runTask,
      call,
      onManager: (swarm, method, args) => {
        if (!swarm.manager_node_id) throw conflict(`Swarm ${swarm.name} has no manager`);
        return call(swarm.manager_node_id, method, args, { subject: swarm.id });
      },
      registerWorkloads: (kind) => void kinds.set(kind.type, kind),
      workloadKind: (type) => kinds.get(type),
      workloadsIn,
      nodeIdsByRuntime,
      addressOf: advertiseAddress,
      onObserved: (listener) => void observers.push(listener),
      beforeRemoved: (hook) => void removalHooks.push(hook),
      ...logReads(services),
      extendView: (fn) => void viewExtensions.push(fn),
      forceRemove: async (id) => {
        const swarm = await swarms.get(id);
        if (!swarm) return false;
        await removeWorkloads(swarm.id);
        for (const m of await members.of(swarm.id)) {
          if (m.runtime_node_id) await call(m.node_id, 'leave', [true], { subject: swarm.id, timeoutMs: 30_000 }).catch(() => undefined);
        }
        await forget(swarm.id);
        return true;
      },
    };
    services.provided.set('swarms', api);

    async function view(swarm: SwarmRecord) {
      const list = await members.of(swarm.id);
      const manager = list.find((m) => m.node_id === swarm.manager_node_id) ?? null;
      let extra: Record<string, unknown> = { load_balancer: null };
      for (const extend of viewExtensions) extra = { ...extra, ...(await extend(swarm)) };
      return {
        id: swarm.id,
        name: swarm.name,
        status: swarm.status,
        manager: manager ? memberView(manager) : null,
        members: list.map(memberView),
        ...extra,
        error: swarm.error,
        created_at: swarm.created_at,
        updated_at: swarm.updated_at,
      };
    }


    async function recordNodeEvent(nodeId: string, kind: string, message: string, data?: Record<string, unknown>) {
      await events.record({ nodeId, kind, message, data });
    }

    /** The join, run in the background: init the swarm on its first node, join the others with the manager's token. */
    async function join(swarm: SwarmRecord, member: MemberRecord, node: NodeRecord, first: boolean): Promise<void> {
      const advertise = advertiseAddress(node);
      const current = (await swarms.get(swarm.id))!;
      if (!current.manager_node_id && !first) throw new Error(`swarm ${swarm.name} has no manager to join (its first node did not initialise it); join this node again once the swarm is active`);
      if (!current.manager_node_id) {
        const result = await call<{ cluster_id: string; runtime_node_id: string }>(node.id, 'init', [advertise], { subject: swarm.id });
        await members.change(member.id, { status: 'active', role: 'manager', runtime_node_id: result.runtime_node_id, advertise_address: advertise, error: null });
        await swarms.change(swarm.id, { status: 'active', manager_node_id: node.id, cluster_id: result.cluster_id, error: null });
      } else {
        const manager = (await members.findOne({ node_id: current.manager_node_id }))!;
        const tokens = await call<{ worker: string; manager: string; managers: string[] }>(current.manager_node_id, 'joinTokens', [], { subject: swarm.id });
        const remotes = tokens.managers.length ? tokens.managers : [`${manager.advertise_address}:2377`];
        const token = member.role === 'manager' ? tokens.manager : tokens.worker;
        const result = await call<{ runtime_node_id: string }>(node.id, 'join', [remotes, token, advertise], { subject: swarm.id });
        await members.change(member.id, { status: 'active', runtime_node_id: result.runtime_node_id, advertise_address: advertise, error: null });
        if (node.availability !== 'active') await call(current.manager_node_id, 'setNodeAvailability', [result.runtime_node_id, AVAILABILITY[node.availability]], { subject: swarm.id });
      }
      await recordNodeEvent(node.id, 'swarm_joined', `joined swarm ${swarm.name} as ${member.role}`, { swarm_id: swarm.id });
      services.events.publish('swarm.member.joined', { swarmId: swarm.id, nodeId: node.id });
    }

    function startJoin(swarm: SwarmRecord, member: MemberRecord, node: NodeRecord, first: boolean): void {
      jobs.run(`join ${node.id} to ${swarm.name}`, () => join(swarm, member, node, first), async (err) => {
        await members.change(member.id, { status: 'failed', error: `joining failed: ${err.message}` });
        if (first) await swarms.change(swarm.id, { status: 'failed', error: `initialising the swarm on ${node.id} failed: ${err.message}` });
        await recordNodeEvent(node.id, 'swarm_join_failed', `joining swarm ${swarm.name} failed: ${err.message}`, { swarm_id: swarm.id });
      });
    }

    /** The leave, run in the background: a worker is drained first; the manager leaves last. */
    async function leave(swarm: SwarmRecord, member: MemberRecord, signal: AbortSignal): Promise<void> {
      const isManager = swarm.manager_node_id === member.node_id;
      if (member.runtime_node_id && !isManager && swarm.manager_node_id) {
        // Best effort: a node the manager no longer knows (a leave resumed after removeMember) has nothing to drain.
        const drained = await call(swarm.manager_node_id, 'setNodeAvailability', [member.runtime_node_id, 'drain'], { subject: swarm.id }).then(
          () => true,
          async (err: Error) => {
            await recordNodeEvent(member.node_id, 'swarm_drain_failed', `draining before leaving swarm ${swarm.name} failed: ${err.message}`, { swarm_id: swarm.id });
            return false;
          },
        );
        if (drained) await sleep(settings.drain_wait_seconds * 1000, signal);
      }
      if (member.status !== 'failed' || member.runtime_node_id) {
        await call(member.node_id, 'leave', [isManager], { subject: swarm.id }).catch(async (err: Error) => {
          // A machine that is gone cannot leave by itself; the manager forgets it below.
          await recordNodeEvent(member.node_id, 'swarm_leave_failed', `leaving swarm ${swarm.name} on the machine failed: ${err.message}`, { swarm_id: swarm.id });
        });
      }
      if (!isManager && member.runtime_node_id && swarm.manager_node_id) {
        await call(swarm.manager_node_id, 'removeMember', [member.runtime_node_id, true], { subject: swarm.id });
      }
      await members.remove(member.id);
      if (isManager) {
        const rest = await members.of(swarm.id);
        const next = rest.find((m) => m.role === 'manager' && m.status === 'active');
        await swarms.change(swarm.id, next ? { manager_node_id: next.node_id } : { manager_node_id: null, cluster_id: null, status: swarm.status === 'deleting' ? 'deleting' : 'empty' });
      }
      await recordNodeEvent(member.node_id, 'swarm_left', `left swarm ${swarm.name}`, { swarm_id: swarm.id });
    }

    async function startLeave(swarm: SwarmRecord, member: MemberRecord): Promise<MemberRecord> {
      const leaving = await members.change(member.id, { status: 'leaving' });
      leaveInBackground(swarm, leaving);
      return leaving;
    }

    function leaveInBackground(swarm: SwarmRecord, member: MemberRecord): void {
      jobs.run(`leave ${member.node_id} from ${swarm.name}`, () => leave(swarm, member, services.shutdown), async (err) => {
        await members.change(member.id, { status: 'failed', error: `leaving failed: ${err.message}` });
      });
    }

    /** Deletes a swarm in the background: forced removal of its workloads, then workers leave, then the manager. */
    async function deleteSwarm(swarm: SwarmRecord, force: boolean): Promise<void> {
      if (force) await removeWorkloads(swarm.id);
      const list = await members.of(swarm.id);
      const ordered = [...list.filter((m) => m.node_id !== swarm.manager_node_id), ...list.filter((m) => m.node_id === swarm.manager_node_id)];
      for (const m of ordered) await leave((await swarms.get(swarm.id))!, m, services.shutdown);
      await forget(swarm.id);
    }

    function startDelete(swarm: SwarmRecord, force: boolean): void {
      jobs.run(`delete swarm ${swarm.name}`, () => deleteSwarm(swarm, force), async (err) => {
        await swarms.change(swarm.id, { status: 'failed', error: `deleting failed: ${err.message}` });
      });
    }

    /**
     * Joins, leaves and deletions a previous process left half done run again (init and join answer
     * what the engine already has; leave is a no-op off a swarm). A deletion resumes forced: its
     * 409 check passed when it was asked, and no workload can be added to a deleting swarm.
     */
    async function resume(): Promise<string[]> {
      const resumed: string[] = [];
      const deleting = new Set<string>();
      for (const swarm of await swarms.findAll({ status: 'deleting' })) {
        deleting.add(swarm.id);
        startDelete(swarm, true);
        resumed.push(`swarm ${swarm.name}: deleting`);
      }
      for (const member of await members.findAll({ status: 'joining' })) {
        const swarm = await swarms.get(member.swarm_id);
        const node = await nodes.get(member.node_id);
        if (!swarm || !node || deleting.has(swarm.id)) continue;
        startJoin(swarm, member, node, member.role === 'manager' && !swarm.manager_node_id);
        resumed.push(`node ${node.id}: joining swarm ${swarm.name}`);
      }
      for (const member of await members.findAll({ status: 'leaving' })) {
        const swarm = await swarms.get(member.swarm_id);
        if (!swarm || deleting.has(swarm.id)) continue;
        leaveInBackground(swarm, member);
        resumed.push(`node ${member.node_id}: leaving swarm ${swarm.name}`);
      }
      return resumed;
    }

    // Cordon, drain and uncordon reach the swarm as pause, drain and active.
    services.events.subscribe('node.availability', (payload) => {
      const { node } = payload as { node: NodeRecord };
      jobs.run(`availability of ${node.id}`, async () => {
        const member = await members.findOne({ node_id: node.id });
        if (!member?.runtime_node_id) return;
        const swarm = await swarms.get(member.swarm_id);
        if (!swarm?.manager_node_id) return;
        await call(swarm.manager_node_id, 'setNodeAvailability', [member.runtime_node_id, AVAILABILITY[node.availability]], { subject: swarm.id });
      }, (err) => recordNodeEvent(node.id, 'swarm_availability_failed', `setting swarm availability failed: ${err.message}`), { resumable: false });
    });

    async function observe(signal: AbortSignal): Promise<void> {
      if (!observers.length) return;
      for (const swarm of await swarms.findAll({ status: 'active' })) {
        if (signal.aborted) return;
        try {
          const { workloads } = await call<{ workloads: WorkloadState[] }>(swarm.manager_node_id!, 'inspectWorkloads', [{}], {
            subject: swarm.id,
            timeoutMs: Math.max(5000, settings.observe_interval_seconds * 1000),
          });
          const observed = { swarm, workloads, nodeIds: await nodeIdsByRuntime(swarm.id) };
          for (const observer of observers) await observer(observed);
        } catch (err) {
          log.warn({ swarm_id: swarm.id, error: (err as Error).message }, 'observing a swarm failed');
        }
      }
    }

    const Swarm = Type.Object({}, { additionalProperties: true });

    return {
      resume,
      close: () => jobs.drain(),
      loops: [{ name: 'swarms:observe', intervalMs: settings.observe_interval_seconds * 1000, once: true, run: observe }],
      routes: [
        {
          method: 'POST',
          path: '/v1/swarms',
          auth: { role: 'admin' },
          summary: 'Create an empty swarm group',
          status: 201,
          schemas: { body: Type.Object({ name: DnsName }, { additionalProperties: false }), response: Swarm },
          handler: async (req) => {
            if (await swarms.findOne({ name: req.body.name })) throw conflict(`A swarm named ${req.body.name} exists`);
            const id = newId('swarm');
            await swarms.insert({ id, name: req.body.name, status: 'empty', manager_node_id: null, cluster_id: null, error: null, created_at: now(), updated_at: now() });
            return view((await swarms.get(id))!);
          },
        },
        {
          method: 'GET',
          path: '/v1/swarms',
          auth: 'authenticated',
          summary: 'List swarm groups',
          schemas: { query: PageQuery },
          handler: async (req) => {
            const page = await swarms.page({ limit: req.query.limit, cursor: req.query.cursor });
            return new Reply(200, { data: await Promise.all(page.items.map(view)), next_cursor: page.next_cursor });
          },
        },
        {
          method: 'GET',
          path: '/v1/swarms/{id}',
          auth: 'authenticated',
          summary: 'Get a swarm group: manager, members, load balancer, status',
          schemas: { params: IdParams, response: Swarm },
          handler: async (req) => view(await swarms.require(req.params.id)),
        },
        {
          method: 'POST',
          path: '/v1/swarms/{id}/join',
          auth: { role: 'admin' },
          summary: 'Add a node: the first initialises the swarm and manages it, later ones join as workers (or managers)',
          status: 202,
          schemas: {
            params: IdParams,
            body: Type.Object({ node_id: NodeRef, role: Type.Optional(Type.Union([Type.Literal('worker'), Type.Literal('manager')])) }, { additionalProperties: false }),
          },
          handler: async (req) => {
            const swarm = await swarms.requireUsable(req.params.id);
            // Only the first node may create the swarm: others wait for its manager (and its join token).
            if (swarm.status === 'forming') throw conflict(`Swarm ${swarm.name} is still forming (its first node is initialising it); join more nodes once it is active`);
            const node = await nodes.requireLive(req.body.node_id);
            if (node.connection === 'pending') throw conflict(`Node ${node.id} has no agent yet: join the machine first`);
            const existing = await members.findOne({ node_id: node.id });
            if (existing) {
              if (existing.swarm_id === swarm.id && existing.status === 'failed') await members.remove(existing.id);
              else throw conflict(`Node ${node.id} is already a member of swarm ${existing.swarm_id === swarm.id ? swarm.name : existing.swarm_id}`);
            }
            const first = !swarm.manager_node_id && !(await members.of(swarm.id)).length;
            const member = await members.insert({
              id: newId('member'),
              swarm_id: swarm.id,
              node_id: node.id,
              role: first ? 'manager' : (req.body.role ?? 'worker'),
              status: 'joining',
              runtime_node_id: null,
              advertise_address: null,
              error: null,
              created_at: now(),
              updated_at: now(),
            });
            if (first) await swarms.change(swarm.id, { status: 'forming' });
            startJoin(swarm, member, node, first);
            return memberView(member);
          },
        },
        {
          method: 'POST',
          path: '/v1/swarms/{id}/leave',
          auth: { role: 'admin' },
          summary: 'Remove a node: a worker is drained and leaves; the last manager may leave only an empty swarm',
          status: 202,
          schemas: { params: IdParams, body: Type.Object({ node_id: NodeRef }, { additionalProperties: false }) },
          handler: async (req) => {
            const swarm = await swarms.require(req.params.id);
            const member = await members.findOne({ node_id: req.body.node_id, swarm_id: swarm.id });
            if (!member) throw notFound(`Node ${req.body.node_id} is not a member of swarm ${swarm.name}`);
            if (member.status === 'leaving') throw conflict(`Node ${member.node_id} is already leaving`);
            if (member.status === 'joining') throw conflict(`Node ${member.node_id} is still joining; wait for it to finish`);
            if (swarm.manager_node_id === member.node_id) {
              const others = (await members.of(swarm.id)).filter((m) => m.id !== member.id);
              const otherManagers = others.filter((m) => m.role === 'manager' && m.status === 'active');
              if (!otherManagers.length && others.length) {
                throw conflict(`Node ${member.node_id} is the last manager of swarm ${swarm.name}; remove the other members first: ${others.map((m) => m.node_id).join(', ')}`);
              }
              if (!otherManagers.length) {
                const running = await workloadsIn(swarm.id);
                if (running.length) throw conflict(`Swarm ${swarm.name} still runs workloads: ${running.map((w) => `${w.type} ${w.name}`).join(', ')}; remove them first`, running);
              }
            }
            return memberView(await startLeave(swarm, member));
          },
        },
        {
          method: 'GET',
          path: '/v1/swarms/{id}/members',
          auth: 'authenticated',
          summary: 'List members with their state and availability as the swarm reports them',
          schemas: { params: IdParams },
          handler: async (req) => {
            const swarm = await swarms.require(req.params.id);
            const list = await members.of(swarm.id);
            let reported: SwarmMember[] = [];
            let error: string | null = null;
            if (swarm.manager_node_id) {
              try {
                reported = (await call<{ members: SwarmMember[] }>(swarm.manager_node_id, 'members', [], { subject: swarm.id, timeoutMs: 15_000 })).members;
              } catch (err) {
                error = `the manager did not answer: ${(err as Error).message}`;
              }
            }
            const byRuntime = new Map(reported.map((r) => [r.runtime_node_id, r]));
            return new Reply(200, {
              data: list.map((m) => {
                const r = m.runtime_node_id ? byRuntime.get(m.runtime_node_id) : undefined;
                return { ...memberView(m), hostname: r?.hostname ?? null, state: r?.state ?? (error ? 'unknown' : null), availability: r?.availability ?? null, leader: r?.leader ?? false };
              }),
              ...(error ? { error } : {}),
            });
          },
        },
        {
          method: 'DELETE',
          path: '/v1/swarms/{id}',
          auth: { role: 'admin' },
          summary: 'Delete a swarm group: 202 while its nodes leave, 200 when nothing was left; 409 while workloads run unless forced',
          otherStatuses: [202],
          schemas: { params: IdParams, query: ForceQuery },
          handler: async (req) => {
            const swarm = await swarms.require(req.params.id);
            if (swarm.status === 'deleting') return Reply.accepted(await view(swarm));
            const running = await workloadsIn(swarm.id);
            if (running.length && !req.query.force) {
              throw conflict(`Swarm ${swarm.name} still runs workloads: ${running.map((w) => `${w.type} ${w.name}`).join(', ')}; remove them or pass force=true`, running);
            }
            if (!(await members.of(swarm.id)).length && !running.length) {
              await forget(swarm.id);
              return { id: swarm.id, deleted: true };
            }
            const deleting = await swarms.change(swarm.id, { status: 'deleting' });
            startDelete(deleting, Boolean(req.query.force));
            return Reply.accepted(await view(deleting));
          },
        },
      ],
    };
  },
});

export { asHttpError, swarmsOf } from './orchestration.js';
