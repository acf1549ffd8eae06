import { Type, type Static } from '@sinclair/typebox';
import type { Clock } from '../../core/clock.js';
import { isUniqueViolation, StampedRepository } from '../../core/db/repository.js';
import type { Store } from '../../core/db/store.js';
import { badRequest, conflict } from '../../core/errors.js';
import { Reply } from '../../core/http/reply.js';
import { readRoutes } from '../../core/http/resources.js';
import { newId } from '../../core/ids.js';
import { defineLifecycle, LEASE_DATES, type LeaseFields, type OperationContext } from '../../core/lifecycle.js';
import { defineRoute, type RouteDef } from '../../core/plugin.js';
import { Nullable } from '../../core/validation.js';
import { AgentUpdate } from '../../core/tasks/host-kinds.js';
import { AgentBinariesRef, missingExecutable } from '../system/api.js';
import { TagsRef } from '../tags/api.js';
import type { NodesContext, NodesPart } from './context.js';
import { AGENT_ROLLOUTS } from './migrations.js';
import { nodeStatus, type NodeRecord } from './nodes.js';
import { NodeId } from './schemas.js';

/**
 * The agent updated on many nodes in waves (`POST /v1/nodes/update-agent`, issue 29): the selected
 * nodes are split into waves of `wave_size`; a wave queues the single-node update (`agent.update`,
 * guarded by the agent's watchdog, agent/update-guard.ts) on each of its nodes and is over when each
 * reported the new version — or failed: its task failed, or it did not report the new version within
 * its grace period and a margin (the watchdog put the previous executable back). A failed wave halts
 * the rollout; the waves after it never start. The rollout is a record with an operation lease
 * (core/lifecycle.ts) whose progress is written as it goes, so another control plane, or this one
 * after a restart, takes it over where it was.
 */

export type RolloutStatus = 'running' | 'completed' | 'halted' | 'cancelled' | 'failed';
/**
 * pending: its wave has not started; updating: its task is queued; updated: it reported the new
 * version; failed; not_started: its wave never started (the rollout halted or was cancelled);
 * current: it ran the new version already; skipped: it was not ready when the rollout started.
 */
export type NodeStep = 'pending' | 'updating' | 'updated' | 'failed' | 'not_started' | 'current' | 'skipped';

interface NodeProgress {
  name: string;
  architecture: string | null;
  /** 1-based; null for nodes in no wave (current, skipped). */
  wave: number | null;
  status: NodeStep;
  from_version: string | null;
  task_id: string | null;
  error: string | null;
  started_at: string | null;
  finished_at: string | null;
}

interface Selector {
  all?: boolean;
  tags?: Record<string, string>;
  cluster_id?: string;
  node_ids?: string[];
}

export interface RolloutRecord extends LeaseFields {
  id: string;
  name: string;
  status: RolloutStatus;
  selector: Selector;
  wave_size: string;
  pause_s: number;
  grace_seconds: number;
  targets: Record<string, { version: string; sha256: string }>;
  waves: string[][];
  nodes: Record<string, NodeProgress>;
  /** The wave in progress, or the next one to start (0-based). */
  current_wave: number;
  next_wave_at: string | null;
  cancel_requested: boolean;
  reason: string | null;
  failed_node_id: string | null;
  created_by: string | null;
  finished_at: string | null;
  created_at: string;
  updated_at: string;
  [key: string]: unknown;
}

class RolloutStore extends StampedRepository<RolloutRecord> {
  constructor(store: Store, clock: Clock) {
    super(store, AGENT_ROLLOUTS, { json: ['selector', 'targets', 'waves', 'nodes'], bool: ['cancel_requested'], dates: ['next_wave_at', 'finished_at', 'created_at', 'updated_at', ...LEASE_DATES] }, clock);
  }
}

const RolloutId = Type.String({ pattern: '^arol-[0-9a-z]+$', maxLength: 64 });

export const RolloutBody = Type.Object(
  {
    all: Type.Optional(Type.Boolean({ description: 'every node (those being removed excepted)' })),
    tags: Type.Optional(Type.Record(Type.String({ minLength: 1, maxLength: 63 }), Type.String({ maxLength: 255 }), { description: 'the nodes that carry every one of these tags (key → value)' })),
    cluster_id: Type.Optional(Type.String({ minLength: 1, maxLength: 100, description: 'the members of this cluster (id or name)' })),
    node_ids: Type.Optional(Type.Array(NodeId, { minItems: 1, maxItems: 10000, uniqueItems: true, description: 'these nodes, in this order' })),
    wave_size: Type.Optional(
      Type.Union([Type.Integer(), Type.String({ maxLength: 20 })], { description: 'nodes per wave: a count (default 1) or a percentage of the nodes to update, such as "10%" (rounded up; at least one node)' }),
    ),
    pause_s: Type.Optional(Type.Integer({ minimum: 0, maximum: 86400, description: 'seconds between the end of a wave and the start of the next (default 0)' })),
    grace_seconds: Type.Optional(Type.Integer({ minimum: 15, maximum: 3600, description: 'how long each new agent has to reach the control plane before its watchdog puts the previous one back (default 120)' })),
  },
  { additionalProperties: false },
);

const NodeProgressView = Type.Object({
  node_id: Type.String(),
  name: Type.String(),
  wave: Nullable(Type.Integer()),
  status: Type.Union(['pending', 'updating', 'updated', 'failed', 'not_started', 'current', 'skipped'].map((s) => Type.Literal(s))),
  from_version: Nullable(Type.String()),
  task_id: Nullable(Type.String()),
  error: Nullable(Type.String()),
  started_at: Nullable(Type.String()),
  finished_at: Nullable(Type.String()),
});

export const RolloutView = Type.Object({
  id: Type.String(),
  status: Type.Union(['running', 'completed', 'halted', 'cancelled', 'failed'].map((s) => Type.Literal(s))),
  selector: Type.Any(),
  wave_size: Type.String(),
  pause_s: Type.Integer(),
  grace_seconds: Type.Integer(),
  target_versions: Type.Record(Type.String(), Type.String(), { description: 'the version each architecture updates to' }),
  waves_total: Type.Integer(),
  waves_done: Type.Integer(),
  current_wave: Nullable(Type.Integer({ description: 'the wave in progress or next (1-based) while running' })),
  next_wave_at: Nullable(Type.String()),
  cancel_requested: Type.Boolean(),
  reason: Nullable(Type.String()),
  failed_node: Nullable(Type.Object({ id: Type.String(), name: Type.String(), error: Nullable(Type.String()) })),
  counts: Type.Object({
    total: Type.Integer(),
    updated: Type.Integer(),
    failed: Type.Integer(),
    updating: Type.Integer(),
    pending: Type.Integer(),
    not_started: Type.Integer(),
    current: Type.Integer(),
    skipped: Type.Integer(),
  }),
  waves: Type.Array(Type.Object({ number: Type.Integer(), status: Type.String(), node_ids: Type.Array(Type.String()) })),
  nodes: Type.Array(NodeProgressView),
  created_by: Nullable(Type.String()),
  created_at: Type.String(),
  updated_at: Type.String(),
  finished_at: Nullable(Type.String()),
});

const STEPS: NodeStep[] = ['updated', 'failed', 'updating', 'pending', 'not_started', 'current', 'skipped'];
const DONE: ReadonlySet<NodeStep> = new Set(['updated', 'current']);

/** What a wave is: pending (not started), running, completed, failed (a node of it did), not_started (never will). */
function waveStatus(r: RolloutRecord, ids: string[]): string {
  const steps = ids.map((id) => r.nodes[id]?.status ?? 'pending');
  if (steps.some((s) => s === 'failed')) return 'failed';
  if (steps.every((s) => DONE.has(s))) return 'completed';
  if (steps.every((s) => s === 'not_started')) return 'not_started';
  if (steps.every((s) => s === 'pending')) return 'pending';
  return 'running';
}

export function rolloutView(r: RolloutRecord): Static<typeof RolloutView> {
  const entries = Object.entries(r.nodes);
  const counts = Object.fromEntries(STEPS.map((s) => [s, entries.filter(([, n]) => n.status === s).length])) as Record<NodeStep, number>;
  const failed = r.failed_node_id ? r.nodes[r.failed_node_id] : undefined;
  // The wave in progress or next: a wave whose nodes are all done counts as done before the record moves past it.
  const current = r.status === 'running' ? r.waves.findIndex((ids, i) => i >= r.current_wave && waveStatus(r, ids) !== 'completed') : -1;
  return {
    id: r.id,
    status: r.status,
    selector: r.selector,
    wave_size: r.wave_size,
    pause_s: r.pause_s,
    grace_seconds: r.grace_seconds,
    target_versions: Object.fromEntries(Object.entries(r.targets).map(([arch, t]) => [arch, t.version])),
    waves_total: r.waves.length,
    waves_done: r.waves.filter((ids) => waveStatus(r, ids) === 'completed').length,
    current_wave: current === -1 ? null : current + 1,
    next_wave_at: r.status === 'running' ? r.next_wave_at : null,
    cancel_requested: r.cancel_requested,
    reason: r.reason,
    failed_node: failed ? { id: r.failed_node_id!, name: failed.name, error: failed.error } : null,
    counts: { total: entries.length, ...counts },
    waves: r.waves.map((ids, i) => ({ number: i + 1, status: waveStatus(r, ids), node_ids: ids })),
    nodes: entries.map(([id, n]) => ({
      node_id: id,
      name: n.name,
      wave: n.wave,
      status: n.status,
      from_version: n.from_version,
      task_id: n.task_id,
      error: n.error,
      started_at: n.started_at,
      finished_at: n.finished_at,
    })),
    created_by: r.created_by,
    created_at: r.created_at,
    updated_at: r.updated_at,
    finished_at: r.finished_at,
  };
}

const invalid = (field: string, message: string) => badRequest(`Validation failed: ${field} ${message}`, [{ path: `body.${field}`, message }]);

/** `wave_size` as given (a count, "3", or "10%") → the number of nodes per wave out of `total`. */
export function waveSizeOf(given: number | string | undefined, total: number): number {
  if (given === undefined) return 1;
  const text = String(given).trim();
  const hint = 'must be a number of nodes (at least 1) or a percentage above 0% and at most 100%, such as "10%"';
  const percent = /^(\d+(?:\.\d+)?)%$/.exec(text);
  if (percent) {
    const p = Number(percent[1]);
    if (!(p > 0) || p > 100) throw invalid('wave_size', `${hint}; ${text} is ${p > 100 ? 'over 100%' : '0%'}`);
    return Math.max(1, Math.ceil((total * p) / 100));
  }
  if (!/^\d+$/.test(text)) throw invalid('wave_size', `${hint}; got ${JSON.stringify(given)}`);
  const count = Number(text);
  if (count < 1) throw invalid('wave_size', `${hint}; got ${text}`);
  return count;
}

const sleep = (ms: number, signal: AbortSignal) =>
  new Promise<void>((resolve) => {
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    }
    signal.addEventListener('abort', done, { once: true });
  });

export function rollouts(ctx: NodesContext): NodesPart {
  const { services, settings, nodes, events } = ctx;
  const { tasks } = services;
  const store = new RolloutStore(services.db, services.clock);
  const now = () => services.clock.now();
  const label = (r: RolloutRecord, id: string) => `node ${r.nodes[id]?.name ?? id} (${id})`;
  const note = (r: RolloutRecord, kind: string, message: string, data: Record<string, unknown> = {}, nodeId?: string) =>
    events.record({ identifier: r.id, nodeId: nodeId ?? null, kind: `agent_rollout_${kind}`, message: `agent rollout ${r.id}: ${message}`, data: { rollout_id: r.id, ...data } });

  /** Writes progress of the run that holds the lease (a run taken over writes nothing). */
  async function progress(r: RolloutRecord, opId: string, patch: Partial<RolloutRecord>): Promise<RolloutRecord> {
    const written = await store
      .query()
      .where({ id: r.id, op_id: opId })
      .update(store.codec.encode({ ...patch, updated_at: now().toISOString() }));
    if (!written) throw new Error(`agent rollout ${r.id} was taken over by another control plane`);
    store.changed(r.id, 'update');
    return { ...r, ...patch };
  }

  /** The patch that ends the rollout: nodes still waiting never start. */
  function finish(r: RolloutRecord, status: RolloutStatus, reason: string | null, failedNode: string | null = null): Partial<RolloutRecord> {
    const left = Object.fromEntries(Object.entries(r.nodes).map(([id, n]) => [id, n.status === 'pending' ? { ...n, status: 'not_started' as const } : n]));
    return { status, reason, failed_node_id: failedNode, nodes: left, next_wave_at: null, finished_at: now().toISOString() };
  }

  /** Queues the update on each node of the wave (one that is no longer ready fails at once). */
  async function startWave(r: RolloutRecord, opId: string): Promise<RolloutRecord> {
    const number = r.current_wave + 1;
    const ids = r.waves[r.current_wave]!;
    const at = now().toISOString();
    const next = { ...r.nodes };
    for (const id of ids) {
      const entry = { ...next[id]!, started_at: at };
      const node = await nodes.get(id);
      const target = node?.architecture ? r.targets[node.architecture] : undefined;
      if (!node || node.removing) next[id] = { ...entry, status: 'failed', error: 'was removed', finished_at: at };
      else if (nodeStatus(node) !== 'ready') next[id] = { ...entry, status: 'failed', error: `is ${nodeStatus(node)}; update-agent needs it ready`, finished_at: at };
      else if (!target) next[id] = { ...entry, status: 'failed', error: missingExecutable(node.architecture ?? 'its architecture'), finished_at: at };
      else if (node.agent_version === target.version) next[id] = { ...entry, status: 'current', from_version: node.agent_version, finished_at: at };
      else {
        try {
          const task = await tasks.enqueue({
            nodeId: id,
            kind: AgentUpdate,
            payload: { architecture: node.architecture!, version: target.version, sha256: target.sha256, grace_seconds: r.grace_seconds },
            subject: id,
          });
          next[id] = { ...entry, status: 'updating', from_version: node.agent_version, task_id: task.id };
        } catch (err) {
          next[id] = { ...entry, status: 'failed', error: `its update could not be queued: ${(err as Error).message}`, finished_at: at };
        }
      }
    }
    const updated = await progress(r, opId, { nodes: next, next_wave_at: null });
    await note(updated, 'wave_started', `wave ${number} of ${r.waves.length} started: ${ids.map((id) => label(r, id)).join(', ')}`, { wave: number, node_ids: ids });
    return updated;
  }

  /** Looks at the wave's updating nodes: updated once the node reports the new version; failed when its task failed or time ran out. */
  async function checkWave(r: RolloutRecord, opId: string): Promise<RolloutRecord> {
    const ids = r.waves[r.current_wave]!;
    const at = now();
    const next = { ...r.nodes };
    let changed = false;
    for (const id of ids) {
      const entry = next[id]!;
      if (entry.status !== 'updating') continue;
      const [node, task] = await Promise.all([nodes.get(id), entry.task_id ? tasks.get(entry.task_id) : null]);
      const target = r.targets[entry.architecture ?? node?.architecture ?? '']!;
      let outcome: { status: 'updated' | 'failed'; error: string | null } | null = null;
      if (node && node.agent_version === target.version && (!task || task.status === 'completed')) outcome = { status: 'updated', error: null };
      else if (!node || node.removing) outcome = { status: 'failed', error: 'was removed during its update' };
      else if (!task) outcome = { status: 'failed', error: `its update task is gone and it reports version ${node.agent_version ?? 'none'}` };
      else if (task.status === 'failed') outcome = { status: 'failed', error: `its update task failed: ${task.error ?? 'no reason given'}` };
      else if (task.status === 'completed') {
        const finished = Date.parse(task.completed_at ?? task.updated_at);
        const allowed = r.grace_seconds + settings.agent_rollout_margin_seconds;
        if (at.getTime() > finished + allowed * 1000) {
          // Heard from after the grace period with the version it had: the watchdog put the previous executable back.
          const back = node.agent_version === entry.from_version && Date.parse(node.last_heartbeat_at ?? '') > finished + r.grace_seconds * 1000;
          outcome = {
            status: 'failed',
            error: back
              ? `did not come back with version ${target.version}: it runs ${node.agent_version} again (the new agent did not reach the control plane within ${r.grace_seconds} s and its watchdog returned it to the previous executable)`
              : `did not report version ${target.version} within ${allowed} s of taking its update (it reports ${node.agent_version ?? 'no version'}, last heartbeat ${node.last_heartbeat_at ?? 'never'})`,
          };
        }
      } else if (at.getTime() > Date.parse(entry.started_at!) + settings.agent_rollout_task_timeout_seconds * 1000) {
        outcome = { status: 'failed', error: `its agent did not finish the update task within ${settings.agent_rollout_task_timeout_seconds} s (the task is ${task.status})` };
      }
      if (!outcome) continue;
      changed = true;
      next[id] = { ...entry, ...outcome, finished_at: at.toISOString() };
      if (outcome.status === 'updated') await note(r, 'node_updated', `${label(r, id)} runs ${target.version}`, { wave: r.current_wave + 1, version: target.version }, id);
      else await note(r, 'node_failed', `${label(r, id)} ${outcome.error}`, { wave: r.current_wave + 1, error: outcome.error }, id);
    }
    return changed ? progress(r, opId, { nodes: next }) : r;
  }

  /** The rollout's run: from wherever its record says it is (a take-over resumes it there). */
  async function roll(claimed: RolloutRecord, { opId, signal }: OperationContext): Promise<Partial<RolloutRecord>> {
    for (;;) {
      if (signal.aborted) throw new Error('stopped: the control plane is shutting down');
      const r = await store.get(claimed.id);
      if (!r || r.op_id !== opId) throw new Error(`agent rollout ${claimed.id} was taken over by another control plane`);
      const ids = r.waves[r.current_wave];
      if (!ids) {
        const updated = Object.values(r.nodes).filter((n) => n.status === 'updated').length;
        const reason = r.waves.length ? `${updated} node(s) updated in ${r.waves.length} wave(s)` : 'no selected node needed the update';
        await note(r, 'completed', reason, { waves: r.waves.length, updated });
        return finish(r, 'completed', reason);
      }
      const number = r.current_wave + 1;
      if (ids.every((id) => r.nodes[id]?.status === 'pending')) {
        if (r.cancel_requested) {
          const reason = `cancelled before wave ${number} of ${r.waves.length}`;
          await note(r, 'cancelled', reason, { wave: number });
          return finish(r, 'cancelled', reason);
        }
        const wait = r.next_wave_at ? Date.parse(r.next_wave_at) - now().getTime() : 0;
        if (wait > 0) await sleep(Math.min(wait, settings.agent_rollout_check_ms), signal);
        else await startWave(r, opId);
        continue;
      }
      const checked = await checkWave(r, opId);
      if (ids.some((id) => checked.nodes[id]?.status === 'updating')) {
        await sleep(settings.agent_rollout_check_ms, signal);
        continue;
      }
      const failed = ids.filter((id) => checked.nodes[id]?.status === 'failed');
      if (failed.length) {
        const first = failed[0]!;
        const more = failed.length > 1 ? ` (and ${failed.length - 1} more node(s) of the wave failed)` : '';
        const reason = `halted at wave ${number} of ${r.waves.length}: ${label(checked, first)} ${checked.nodes[first]!.error}${more}; the waves after it were not started`;
        await note(checked, 'halted', reason, { wave: number, failed_node_ids: failed }, first);
        return finish(checked, 'halted', reason, first);
      }
      const last = number === r.waves.length;
      await note(checked, 'wave_completed', `wave ${number} of ${r.waves.length} completed${last || !r.pause_s ? '' : `; the next starts in ${r.pause_s} s`}`, { wave: number });
      await progress(checked, opId, { current_wave: r.current_wave + 1, next_wave_at: last ? null : new Date(now().getTime() + r.pause_s * 1000).toISOString() });
    }
  }

  const lifecycle = services.clusters.lifecycle(
    store,
    defineLifecycle<RolloutRecord>({
      noun: 'agent rollout',
      operations: {
        roll: {
          from: ['running'],
          during: 'running',
          label: (r) => `agent rollout ${r.id}`,
          run: roll,
          failed: (r, err) => ({ ...finish(r, 'failed', `the rollout stopped: ${err.message}`) }),
        },
      },
    }),
  );

  /** The selected nodes, live ones only: in the order given (node_ids), else by name then id. */
  async function select(body: Static<typeof RolloutBody>): Promise<NodeRecord[]> {
    const given = [body.all === true ? 'all' : null, body.tags !== undefined ? 'tags' : null, body.cluster_id !== undefined ? 'cluster_id' : null, body.node_ids !== undefined ? 'node_ids' : null].filter(
      (k): k is string => k !== null,
    );
    if (!given.length) throw badRequest('Validation failed: say which nodes to update: all: true, tags, cluster_id or node_ids', [{ path: 'body', message: 'needs a selector: all, tags, cluster_id or node_ids' }]);
    if (given.length > 1) throw badRequest(`Validation failed: give one selector, not ${given.join(' and ')}`, [{ path: 'body', message: 'one selector of all, tags, cluster_id, node_ids' }]);
    const byName = (list: NodeRecord[]) => list.filter((n) => !n.removing).sort((a, b) => a.name.localeCompare(b.name) || a.id.localeCompare(b.id));
    if (body.all) return byName(await nodes.findAll());
    if (body.tags !== undefined) {
      if (!Object.keys(body.tags).length) throw invalid('tags', 'must name at least one tag (key → value)');
      const tags = services.provided.find(TagsRef);
      if (!tags) throw invalid('tags', 'cannot select nodes: this control plane does not load the tags plugin');
      const ids = new Set(await tags.withAll('node', body.tags));
      return byName((await nodes.findAll()).filter((n) => ids.has(n.id)));
    }
    if (body.cluster_id !== undefined) {
      const cluster = await services.clusters.require(body.cluster_id);
      const ids = new Set((await services.clusters.members.of(cluster.id)).map((m) => m.node_id));
      return byName((await nodes.findAll()).filter((n) => ids.has(n.id)));
    }
    const found = await Promise.all(body.node_ids!.map((id) => nodes.get(id)));
    const unknown = body.node_ids!.filter((_, i) => !found[i]);
    if (unknown.length) throw invalid('node_ids', `names no node ${unknown.join(', ')}`);
    return (found as NodeRecord[]).filter((n) => !n.removing);
  }

  const RolloutParams = Type.Object({ id: RolloutId });
  const routes: RouteDef[] = [
    defineRoute({
      method: 'POST',
      path: '/v1/nodes/update-agent',
      auth: { role: 'admin' },
      summary: 'Update the agent of many nodes in waves (all, by tags, a cluster’s members, or given nodes): a wave whose agent does not come back halts the rest',
      status: 202,
      schemas: { body: RolloutBody, response: RolloutView },
      async handler(req) {
        const body = req.body;
        const selected = await select(body);
        if (!selected.length) throw badRequest('Validation failed: the selector matches no node', [{ path: 'body', message: 'matches no node' }]);
        const binaries = services.provided.find(AgentBinariesRef);
        const ready = selected.filter((n) => nodeStatus(n) === 'ready');
        const targets: RolloutRecord['targets'] = {};
        for (const arch of new Set(ready.map((n) => n.architecture ?? ''))) {
          const binary = arch ? binaries?.describe(arch) : null;
          if (!binary) throw conflict(arch ? missingExecutable(arch) : `Node ${ready.find((n) => !n.architecture)!.id} has not reported its architecture yet; try again after its next heartbeat`);
          targets[arch] = { version: binary.version, sha256: binary.sha256 };
        }
        const running = await store.findOne({ status: 'running' });
        if (running) throw conflict(`Agent rollout ${running.id} is still running: wait for it, or cancel it (POST /v1/nodes/update-agent/${running.id}/cancel)`);
        const toUpdate = ready.filter((n) => n.agent_version !== targets[n.architecture!]!.version);
        const size = waveSizeOf(body.wave_size, toUpdate.length);
        const waves: string[][] = [];
        for (let i = 0; i < toUpdate.length; i += size) waves.push(toUpdate.slice(i, i + size).map((n) => n.id));
        const waveOf = new Map(waves.flatMap((ids, i) => ids.map((id) => [id, i + 1] as const)));
        const progressOf = (n: NodeRecord): NodeProgress => {
          const wave = waveOf.get(n.id) ?? null;
          const status: NodeStep = wave ? 'pending' : nodeStatus(n) === 'ready' ? 'current' : 'skipped';
          const error = status === 'skipped' ? `was ${nodeStatus(n)} when the rollout started` : null;
          return { name: n.name, architecture: n.architecture, wave, status, from_version: n.agent_version, task_id: null, error, started_at: null, finished_at: null };
        };
        const at = now().toISOString();
        const id = newId('arol');
        const values: RolloutRecord = {
          id,
          name: id,
          status: 'running',
          selector: Object.fromEntries(Object.entries({ all: body.all, tags: body.tags, cluster_id: body.cluster_id, node_ids: body.node_ids }).filter(([, v]) => v !== undefined)),
          wave_size: String(body.wave_size ?? 1),
          pause_s: body.pause_s ?? 0,
          grace_seconds: body.grace_seconds ?? 120,
          targets,
          waves,
          nodes: Object.fromEntries(selected.map((n) => [n.id, progressOf(n)])),
          current_wave: 0,
          next_wave_at: null,
          cancel_requested: false,
          reason: null,
          failed_node_id: null,
          created_by: req.principal?.id ?? null,
          finished_at: null,
          created_at: at,
          updated_at: at,
          op: null,
          op_id: null,
          op_lease_until: null,
          op_rev: 0,
        };
        const record = await store.insert(values).catch(async (err: unknown) => {
          // The index that allows one running rollout (store.insert answers its violation as a 409 of its own words).
          if (!isUniqueViolation(err) && (err as { status?: number }).status !== 409) throw err;
          const other = await store.findOne({ status: 'running' });
          throw conflict(`Agent rollout ${other?.id ?? ''} started meanwhile and is still running: wait for it, or cancel it`);
        });
        const versions = [...new Set(Object.values(targets).map((t) => t.version))].join(', ');
        await note(record, 'started', `updating ${toUpdate.length} of ${selected.length} selected node(s) to ${versions || 'the served version'} in ${waves.length} wave(s) of ${size}`, {
          waves: waves.length,
          wave_size: record.wave_size,
          selected: selected.length,
        });
        const begun = await lifecycle.start(id, 'roll', {}, () => conflict(`Agent rollout ${id} could not start`));
        return Reply.accepted(rolloutView(begun));
      },
    }),
    ...readRoutes({
      path: '/v1/nodes/update-agent',
      auth: { role: 'admin' },
      permission: 'nodes:inspect',
      summaries: {
        list: 'Agent rollouts in waves, oldest first',
        get: 'An agent rollout’s progress: waves done, each node updated, failed or pending, and why it halted',
      },
      page: (options) => store.page(options),
      find: (id) => store.requireByIdOrName(id, 'agent rollout'),
      view: rolloutView,
      response: RolloutView,
    }),
    defineRoute({
      method: 'POST',
      path: '/v1/nodes/update-agent/{id}/cancel',
      auth: { role: 'admin' },
      summary: 'Cancel an agent rollout: no further wave starts (the wave in progress finishes: an update handed to an agent is not taken back)',
      status: 202,
      schemas: { params: RolloutParams, response: RolloutView },
      async handler(req) {
        const r = await store.requireByIdOrName(req.params.id, 'agent rollout');
        const cancelled = await store.changeIf(r.id, ['running'], { cancel_requested: true });
        if (!cancelled) throw conflict(`Agent rollout ${r.id} is ${r.status}; only a running one can be cancelled`);
        if (!r.cancel_requested) await note(cancelled, 'cancel_requested', `cancel requested by ${req.principal?.name ?? 'an admin'}: no wave starts after the one in progress`);
        return Reply.accepted(rolloutView(cancelled));
      },
    }),
  ];
  return { routes };
}
