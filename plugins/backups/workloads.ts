import { setTimeout as sleep } from 'node:timers/promises';
import { conflict, HttpError } from '../../core/errors.js';
import type { Services } from '../../core/plugin.js';
import { VolumeUserStoppers, type VolumeUser } from '../volumes/api.js';
import type { RunRecord, RunStore, StoppedWorkload } from './store.js';

/** How long bringing a workload back waits after a 409 (another operation holds it) before trying again; then the settle loop goes on. */
const BUSY_BACKOFF_MS = [500, 1000, 2000, 4000, 8000, 16000];

/** What a run's `workloads` shows: what was stopped and the replicas it is brought back to (not the bring-back's bookkeeping). */
export const workloadsView = (workloads: StoppedWorkload[] | null | undefined) => (workloads ?? null)?.map(({ type, id, name, replicas }) => ({ type, id, name, replicas })) ?? null;

/** A run whose workloads were stopped and are not all back yet (its outcome is recorded: they are due back). */
export const awaitsWorkloads = (r: RunRecord) => !!r.workloads?.length && !r.workloads_started_at && r.status !== 'running' && r.status !== 'stopping';

/**
 * Stopping the workloads that use a volume for a run (a restore into it, a backup with consistency
 * `stop`) and bringing them back, so that no control plane dying at any point leaves them at zero:
 *
 * - the run is inserted as `stopping`, with every workload and the replicas it runs, **before**
 *   anything is stopped, and held by a lease its control plane renews while it stops them;
 * - its outcome recorded (the run no longer `running`), the workloads are brought back, each
 *   marked `back` in the run as it is; a 409 (another operation holds the workload) is tried again
 *   with a backoff;
 * - `settle()` (the `backups:settle` loop and the start-up's resume) takes over a `stopping` run
 *   whose lease ran out (failed, nothing run) and brings back the workloads of any finished run not
 *   brought back.
 */
export function workloadStops({ services, runs, what }: { services: Services; runs: RunStore; what: (run: RunRecord) => string }) {
  const { log, clock } = services;
  const leaseMs = services.config.clusters.op_lease_seconds * 1000;
  const now = () => clock.now().toISOString();
  const leaseUntil = () => new Date(clock.now().getTime() + leaseMs).toISOString();
  const stopperOf = (type: string) => services.provided.contributions(VolumeUserStoppers).find((s) => s.type === type);
  /** Runs this process is bringing workloads back for (the loop and the follower must not both). */
  const bringing = new Set<string>();

  /** Which of the users are stoppable; the ones that are not, to refuse (409) before anything is stopped. */
  function unstoppable(using: VolumeUser[]): VolumeUser[] {
    return using.filter((u) => !stopperOf(u.type));
  }

  /** What each user runs now: those running anything are the workloads a run stops (in that order). */
  async function plan(volumeId: string, using: VolumeUser[]): Promise<StoppedWorkload[]> {
    const planned: StoppedWorkload[] = [];
    for (const u of using) {
      const replicas = await stopperOf(u.type)!.replicas(u.id, volumeId);
      if (replicas) planned.push({ type: u.type, id: u.id, name: u.name, replicas });
    }
    return planned;
  }

  /** The lease fields of a run about to stop workloads (status `stopping`). */
  const stoppingFields = (workloads: StoppedWorkload[]) => ({ status: 'stopping' as const, workloads, workloads_stopped_at: now(), lease_until: leaseUntil() });

  /**
   * Stops the workloads of a `stopping` run one after the other, renewing its lease meanwhile and
   * before each stop. One that cannot be stopped: those before it are brought back, the run is
   * failed, and a 409 says why. The run no longer held (taken over by another control plane, which
   * brings its workloads back): nothing more is stopped, those this process stopped are brought
   * back by it too (the taker may have started them before they were stopped), and a 409 says so.
   */
  async function stopAll(run: RunRecord, purpose: string): Promise<RunRecord> {
    let lost = false;
    const renewed = async () => {
      if (!lost && !(await runs.changeIf(run.id, ['stopping'], { lease_until: leaseUntil() }))) lost = true;
      return !lost;
    };
    const renew = setInterval(() => {
      if (services.shutdown.aborted) return clearInterval(renew);
      renewed().catch((err: Error) => log.warn({ run_id: run.id, error: err.message }, 'renewing a run’s lease failed'));
    }, Math.max(200, Math.floor(leaseMs / 3)));
    renew.unref();
    const workloads = (run.workloads ?? []).map((w) => ({ ...w }));
    const nothing = purpose === 'restore' ? 'restored' : 'backed up';
    /** Gives the run up to its taker: brings back what this process stopped (the first `count`), and says so (409). */
    const givenUp = async (count: number) => {
      const notBack = await startAgain(run.volume_id, workloads.slice(0, count));
      log.warn({ run_id: run.id, volume_id: run.volume_id, not_back: notBack }, `${what(run)} taken over by another control plane while this one stopped its workloads: stopped stopping them, those it stopped brought back`);
      return conflict(
        `The ${purpose} ${run.id} was taken over by another control plane while its workloads were being stopped: nothing was ${nothing}${count ? (notBack.length ? `, and bringing back those stopped failed: ${notBack.join('; ')}` : ', and those stopped are back') : ''}`,
      );
    };
    try {
      for (let i = 0; i < workloads.length; i++) {
        const w = workloads[i]!;
        if (!(await renewed())) throw await givenUp(i);
        let ran: number | null;
        try {
          ran = await stopperOf(w.type)!.stop(w.id, run.volume_id);
        } catch (err) {
          // Cut short by this control plane's shutdown: the run stays `stopping`, and its lease runs out for the next one to take it over.
          if (services.shutdown.aborted) throw err;
          // Refused up front (409: busy), it changed nothing; failed later (its wait for the scale-down), it may be down: brought back too.
          const stopped = workloads.slice(0, isBusy(err) ? i : i + 1);
          const failed = await runs.changeIf(run.id, ['stopping'], {
            status: 'failed',
            workloads: stopped,
            lease_until: null,
            finished_at: now(),
            error: `stopping ${w.type} ${w.name} failed: ${(err as Error).message}; nothing was run`,
          });
          if (!failed) throw await givenUp(i);
          const back = await bringBack(failed);
          const notBack = back.workloads?.filter((x) => x.error).map((x) => `${x.type} ${x.name}: ${x.error}`) ?? [];
          throw conflict(
            `Stopping ${w.type} ${w.name} for the ${purpose} failed: ${(err as Error).message}; nothing was ${nothing}${stopped.length ? (notBack.length ? `, and bringing back those stopped before failed: ${notBack.join('; ')}` : back.workloads_started_at ? ', and those stopped before are back' : ', and those stopped before are being brought back') : ''}`,
          );
        }
        // One that ran nothing by now (scaled to zero meanwhile) is not brought back.
        if (ran === null) {
          workloads.splice(i--, 1);
          const changed = await runs.changeIf(run.id, ['stopping'], { workloads });
          if (!changed) throw await givenUp(i + 1);
          run = changed;
        }
      }
      // Still held once all are stopped (the task is queued with the run's move to `running`, which checks it again).
      if (!(await renewed())) throw await givenUp(workloads.length);
    } finally {
      clearInterval(renew);
    }
    return run;
  }

  const isBusy = (err: unknown) => err instanceof HttpError && err.status === 409;

  /**
   * Starts a stopped workload again at its replicas: a 409 is tried again with a backoff. Answers
   * `back`, `busy` (still refused then), `stopped` (cut short by this control plane's shutdown)
   * or the error.
   */
  async function startOne(volumeId: string, w: StoppedWorkload): Promise<'back' | 'stopped' | { busy: string } | { error: string }> {
    for (let attempt = 0; ; attempt++) {
      try {
        const stopper = stopperOf(w.type);
        if (!stopper) throw new Error(`no ${w.type} plugin is loaded`);
        await stopper.start(w.id, w.replicas, volumeId);
        return 'back';
      } catch (err) {
        // Cut short by this control plane's shutdown: not a verdict; the next one brings it back.
        if (services.shutdown.aborted) return 'stopped';
        if (isBusy(err) && attempt < BUSY_BACKOFF_MS.length) {
          await sleep(BUSY_BACKOFF_MS[attempt]!, undefined, { signal: services.shutdown }).catch(() => undefined);
          if (services.shutdown.aborted) return 'stopped';
          continue;
        }
        return isBusy(err) ? { busy: (err as Error).message } : { error: (err as Error).message };
      }
    }
  }

  /** Starts workloads again outside any run's record (a run taken over); what was not brought back, one line each. */
  async function startAgain(volumeId: string, list: StoppedWorkload[]): Promise<string[]> {
    const notBack: string[] = [];
    for (const w of list) {
      const outcome = await startOne(volumeId, w);
      if (outcome !== 'back') notBack.push(`${w.type} ${w.name}: ${outcome === 'stopped' ? 'this control plane stopped' : 'busy' in outcome ? outcome.busy : outcome.error}`);
    }
    return notBack;
  }

  /**
   * Brings a run's stopped workloads back to their replicas, every one tried, each marked `back` as
   * it is; a 409 is tried again with a backoff, and one still refused then is left for the settle
   * loop. Once every one is back (or failed otherwise: the run's error says so), the run says when
   * and how long they were down. Answers the run after.
   */
  async function bringBack(run: RunRecord): Promise<RunRecord> {
    if (bringing.has(run.id)) return run;
    bringing.add(run.id);
    try {
      const workloads = (run.workloads ?? []).map((w) => ({ ...w }));
      const waiting: string[] = [];
      for (const w of workloads) {
        if (w.back) continue;
        const outcome = await startOne(run.volume_id, w);
        if (outcome === 'stopped') return run;
        if (outcome === 'back') w.back = true;
        else if ('busy' in outcome) waiting.push(`${w.type} ${w.name}: ${outcome.busy}`);
        else Object.assign(w, { back: true, error: outcome.error });
        run = await runs.change(run.id, { workloads });
      }
      if (waiting.length) {
        log.warn({ run_id: run.id, volume_id: run.volume_id, waiting }, `workloads stopped for ${what(run)} are busy; bringing them back is tried again`);
        return run;
      }
      const at = now();
      const failed = workloads.filter((w) => w.error).map((w) => `${w.type} ${w.name}: ${w.error}`);
      const patch: Partial<RunRecord> = { workloads_started_at: at, gap_seconds: (Date.parse(at) - Date.parse(run.workloads_stopped_at ?? run.started_at)) / 1000 };
      if (failed.length) {
        patch.error = `${run.error ?? (run.operation === 'restore' ? 'restored' : 'backed up')}; bringing the workloads back failed: ${failed.join('; ')}`;
        log.warn({ run_id: run.id, volume_id: run.volume_id, error: patch.error }, `workloads stopped for ${what(run)} not brought back`);
      }
      return await runs.change(run.id, patch);
    } finally {
      bringing.delete(run.id);
    }
  }

  /**
   * Takes over the `stopping` runs whose control plane is gone (lease run out): failed, nothing
   * run, their workloads brought back; and brings back those of any finished run not brought back.
   * Answers what it took up, one line each.
   */
  async function settle(): Promise<string[]> {
    const taken: string[] = [];
    for (const run of await runs.findAll({ status: 'stopping' })) {
      const failed = await runs.takeOverStopping(run.id, {
        status: 'failed',
        lease_until: null,
        finished_at: now(),
        error: `the control plane stopping the workloads for it stopped before it was run: nothing was ${run.operation === 'restore' ? 'restored' : 'backed up'}; the workloads are brought back`,
      });
      if (!failed) continue;
      log.warn({ run_id: run.id, volume_id: run.volume_id }, `${what(run)} taken over while stopping its workloads (its control plane stopped): failed, workloads brought back`);
      taken.push(`${what(run)}: failed while stopping its workloads, brought back`);
      await bringBack(failed);
    }
    for (const run of (await runs.query().whereNotNull('workloads').whereNull('workloads_started_at').whereNotIn('status', ['running', 'stopping'])).map(runs.decode)) {
      if (!awaitsWorkloads(run)) continue;
      taken.push(`${what(run)}: workloads brought back`);
      await bringBack(run);
    }
    return taken;
  }

  /**
   * At start-up: settles, and once more when the leases of `stopping` runs held then have run out
   * (a control plane restarted at once finds its predecessor's lease still running).
   */
  async function settleAtStart(): Promise<string[]> {
    const taken = await settle();
    const held = await runs.findAll({ status: 'stopping' });
    const until = Math.max(0, ...held.map((r) => Date.parse(r.lease_until ?? '') || 0));
    const wait = Math.min(until - clock.now().getTime(), leaseMs) + 100;
    if (held.length && wait > 0) {
      await sleep(wait, undefined, { signal: services.shutdown }).catch(() => undefined);
      if (!services.shutdown.aborted) taken.push(...(await settle()));
    }
    return taken;
  }

  return { unstoppable, plan, stoppingFields, stopAll, bringBack, settle, settleAtStart };
}
