import type { Clock } from '../clock.js';
import type { StampedRepository } from '../db/repository.js';
import type { Store } from '../db/store.js';
import type { EventBus } from '../events.js';
import type { BackgroundJobs } from '../jobs.js';
import { Lifecycle, type LeasedRecord, type LifecycleDef } from '../lifecycle.js';
import type { Logger } from '../log.js';
import type { Peers } from '../workers.js';

export interface LifecyclesDeps {
  db: Store;
  clock: Clock;
  log: Logger;
  shutdown: AbortSignal;
  events: EventBus;
  jobs: BackgroundJobs;
  /** The other workers of this control plane (api.workers), which share its store. */
  peers: Peers;
  /** How long an operation's lease holds unless renewed (read when a lifecycle is made). */
  leaseMs(): number;
}

/**
 * Every lifecycle plugins make (core/lifecycle.ts), with the plugin that made it: core takes their
 * operations over (the `lifecycle:take-over` loop) and resumes them at start in that plugin's name.
 */
export class ClusterLifecycles {
  private readonly made: Array<{ lifecycle: Lifecycle<LeasedRecord, unknown>; owner: string | null }> = [];
  /** The plugin being set up: the lifecycles made meanwhile are its own (resumed in its name). */
  private settingUp: string | null = null;

  constructor(private readonly deps: LifecyclesDeps) {}

  /**
   * The lifecycle kit for one resource kind (core/lifecycle.ts), sharing this layer's jobs and lease
   * length. Core takes its operations over (the `lifecycle:take-over` loop) and resumes them at
   * start (in the name of the plugin that made it): the plugin does neither.
   */
  lifecycle<R extends LeasedRecord, O = never>(repo: StampedRepository<R>, def: LifecycleDef<R, O>): Lifecycle<R, O> {
    const { db, clock, log, shutdown, events, jobs } = this.deps;
    const lifecycle = new Lifecycle<R, O>(repo, def, { knex: db.knex, clock, log, jobs, shutdown, leaseMs: this.deps.leaseMs(), bus: events });
    this.made.push({ lifecycle: lifecycle as unknown as Lifecycle<LeasedRecord, unknown>, owner: this.settingUp });
    return lifecycle;
  }

  /** Says which plugin is being set up (null once set-up is over): the lifecycles it makes are its own. */
  setUpBy(plugin: string | null): void {
    this.settingUp = plugin;
  }

  /** Takes over every operation whose lease expired, of every resource kind (any control plane may). */
  async takeOverExpired(): Promise<void> {
    for (const { lifecycle } of this.made) await lifecycle.takeOver();
  }

  /**
   * At start (`hangar serve`), the operations a previous process left on the records of a plugin's
   * lifecycles, taken over and run again: every one on SQLite served by one process (but a failed
   * reaction waiting for its retry), otherwise those whose lease expired (see resumeEverything). One line
   * per record, for the log.
   */
  async resume(plugin: string): Promise<string[]> {
    const lines: string[] = [];
    for (const { lifecycle, owner } of this.made) if (owner === plugin) lines.push(...(await lifecycle.takeOver({ everything: this.resumeEverything() })));
    return lines;
  }

  /** Whether a plugin made lifecycles (core resumes them in its name). */
  hasLifecycles(plugin: string): boolean {
    return this.made.some((l) => l.owner === plugin);
  }

  /**
   * At start: what a previous process left half done. On SQLite served by one process (it owns
   * the store) every operation left; otherwise those whose lease expired (a stop hands its leases
   * over): a worker (api.workers) that starts while the others serve leaves their operations alone.
   */
  resumeEverything(): boolean {
    return this.deps.db.dialect === 'sqlite' && !this.deps.peers.active;
  }
}
