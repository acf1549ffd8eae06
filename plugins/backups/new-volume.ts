import { badRequest, conflict } from '../../core/errors.js';
import type { Services } from '../../core/plugin.js';
import type { Task } from '../../core/tasks/queue.js';
import type { VolumeRecord, VolumeRestorer } from '../volumes/api.js';
import { localTargetRefusal, type RunRecord, type RunStore, type TargetRecord, type TargetStore } from './store.js';

/** How long a new volume's operation waits for its restore (the task's own limit is the agent's). */
const RESTORE_WAIT_MS = 24 * 3600_000;

/** What the backups plugin lends the restore into a new volume (plugins/backups/index.ts). */
export interface NewVolumeRestoreDeps {
  services: Services;
  runs: RunStore;
  targets: TargetStore;
  /** 409 when the node cannot run restic (no agent, too old, no restic: saying how to add it). */
  requireResticNode(nodeId: string, what: string): Promise<void>;
  /** Queues the restore of `source` into the volume's folder: the run and its task. */
  queueRestore(volume: VolumeRecord, target: TargetRecord, source: { id: string; snapshot_id: string }, options: { newVolume: boolean }): Promise<{ task: Task; run: RunRecord }>;
  /** Records a run's outcome from its task (idempotent). */
  record(run: RunRecord, task: Task | null): Promise<void>;
  runView(run: RunRecord): Record<string, unknown>;
  /** The project a target belongs to (null without the projects plugin). */
  projectOfTarget(id: string): Promise<string | null>;
}

const FIELD = 'body.restore_from.snapshot_id';
const refused = (message: string, field = FIELD) => badRequest(`Validation failed: ${field}: ${message}`, [{ path: field, message }]);

/**
 * Fills a new volume (`POST /v1/volumes {restore_from}`) from one of hangar's finished backups, by
 * its id (bak-…) or restic's snapshot id (on a target): the same `volume.restore` task as a restore
 * into the same volume, told that the folder is new (missing or empty, else it fails) and that the
 * snapshot's own folder (the backed-up volume's) is what goes into it. The run is a restore of the
 * new volume, listed by `GET /v1/volumes/{id}/restores`.
 */
export function newVolumeRestorer(deps: NewVolumeRestoreDeps): VolumeRestorer {
  const { runs, targets } = deps;

  async function latestRestore(volumeId: string): Promise<RunRecord | null> {
    const row = await runs.query().where({ volume_id: volumeId, operation: 'restore' }).orderBy([{ column: 'started_at', order: 'desc' }, { column: 'id', order: 'desc' }]).first();
    return row ? runs.decode(row) : null;
  }

  const restorer: VolumeRestorer = {
    async resolve(from, nodeId, projectId) {
      // A request joins resources of one project (core/auth/scope.ts): another project's targets and backups are none it can name, and no message tells of them.
      const projects = new Map<string, Promise<string | null>>();
      const ofProject = async (targetId: string) => {
        if (!projectId) return true;
        if (!projects.has(targetId)) projects.set(targetId, deps.projectOfTarget(targetId));
        return (await projects.get(targetId)) === projectId;
      };
      let target: TargetRecord | null = null;
      if (from.target_id !== undefined) {
        target = await targets.findByIdOrName(from.target_id);
        if (target && !(await ofProject(target.id))) target = null;
        if (!target) throw refused(`no backup target ${from.target_id}: give the id or name of one (GET /v1/backups/targets)`, 'body.restore_from.target_id');
      }
      const ref = from.snapshot_id;
      const hex = /^[0-9a-f]{8,64}$/.test(ref);
      if (!ref.startsWith('bak-') && !hex) throw refused(`${JSON.stringify(ref)} is neither a backup’s id (bak-…) nor restic’s snapshot id (8 or more hex digits)`);
      const query = runs.query().where({ operation: 'backup' });
      if (target) query.andWhere({ target_id: target.id });
      query.andWhere((q) => (hex ? q.where({ id: ref }).orWhere('snapshot_id', 'like', `${ref}%`) : q.where({ id: ref })));
      const found: RunRecord[] = [];
      for (const b of ((await query) as Record<string, unknown>[]).map(runs.decode)) if (await ofProject(b.target_id)) found.push(b);
      const on = target ? ` on backup target ${target.name}` : '';
      if (!found.length) throw refused(`no backup ${ref}${on}: give a finished backup’s id (bak-…) or restic’s snapshot id, as GET /v1/volumes/{id}/backups lists them`);
      const finished = found.filter((b) => b.status === 'succeeded' && b.snapshot_id);
      if (!finished.length) {
        const b = found[0]!;
        throw refused(
          b.status === 'forgotten'
            ? `backup ${b.id} was forgotten: a schedule’s retention removed its snapshot from the repository, so it can no longer be restored`
            : `backup ${b.id} is ${b.status}, not a finished backup: only a succeeded one can be restored`,
        );
      }
      const distinct = new Map(finished.map((b) => [`${b.target_id}/${b.snapshot_id}`, b]));
      if (distinct.size > 1) throw refused(`${ref} names ${distinct.size} snapshots (${[...distinct.values()].map((b) => b.id).join(', ')}): give the backup’s id (bak-…), more digits or target_id`);
      const source = finished[0]!;
      const sourceTarget = await targets.get(source.target_id);
      if (!sourceTarget) throw refused(`the backup target of backup ${source.id} is gone`);
      const refusal = localTargetRefusal(sourceTarget, nodeId, 'the new volume');
      if (refusal) throw conflict(refusal, [{ path: 'body.node_id', message: refusal }]);
      await deps.requireResticNode(nodeId, 'the new volume');
      return { source_id: source.id, target_id: source.target_id, snapshot_id: source.snapshot_id! };
    },

    async start(volume, source) {
      const target = await targets.get(source.target_id);
      if (!target) throw conflict(`The target of backup ${source.source_id} is gone`);
      const { run } = await deps.queueRestore(volume, target, { id: source.source_id, snapshot_id: source.snapshot_id }, { newVolume: true });
      return deps.runView(run);
    },

    async finish(volume, source, signal) {
      let run = await latestRestore(volume.id);
      // The operation was taken over before its restore was queued.
      if (!run) {
        await restorer.start(volume, source);
        run = (await latestRestore(volume.id))!;
      }
      if (run.status === 'running') {
        // The task is deleted once its outcome is recorded (by this process's follower or the settle loop): then the run says it.
        const task: Task | null = run.task_id ? await deps.services.tasks.settle(run.task_id, { timeoutMs: RESTORE_WAIT_MS, signal }).catch(() => null) : null;
        if (signal.aborted) throw new Error('interrupted (the restore goes on on the node; the volume’s operation is taken over)');
        await deps.record(run, task);
        run = (await runs.get(run.id)) ?? run;
      }
      if (run.status === 'running') throw new Error(`restore ${run.id} did not finish within ${RESTORE_WAIT_MS / 3600_000} h`);
      if (run.status !== 'succeeded') throw new Error(`restore ${run.id} of backup ${source.source_id} failed: ${run.error ?? 'no reason given'}`);
    },
  };
  return restorer;
}
