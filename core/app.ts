import type { DestinationStream } from 'pino';
import type { HangarConfig } from '../config/schema.js';
import type { Clock } from './clock.js';
import { openStore, type Store } from './db/store.js';
import { loopLeaseMs } from './db/leadership.js';
import { runningFrom } from './typescript.js';
import { buildKoaApp } from './http/koa-app.js';
import { Listener } from './http/listeners.js';
import { createLogger, type Logger } from './log.js';
import { startStep, startSteps } from './startup.js';
import type { BackgroundLoop, Catalogue, ListenerName, RegisteredRoute, RouteDef, Services } from './plugin.js';
import { assembleServices, type Assembly } from './assembly.js';

/*
 * The runtime: a control plane started from an assembly (core/assembly.ts) — it resumes what a
 * previous process left, opens the listeners, runs the background loops, and stops all of it.
 */

export interface StartOptions {
  config: HangarConfig;
  /** The built-in plugins and drivers (the composition root, cli/catalogue.ts, passes them). */
  catalogue: Catalogue;
  clock?: Clock;
  /** Where log lines go (default stdout). */
  logDestination?: DestinationStream;
}

/** The workers' channel for a reissued server certificate (core/workers.ts). */
const SERVER_CERTIFICATE_CHANNEL = 'server-certificate';

/** The running control plane: store, CA, plugins, listeners and loops. */
export class Hangar {
  readonly listeners = new Map<ListenerName, Listener>();
  private readonly loopTimers: NodeJS.Timeout[] = [];
  private readonly loopRuns = new Set<Promise<void>>();
  private stopping?: Promise<void>;
  /** Whether a control plane was started in this process before (its start steps are the process's). */
  private static started = false;

  private constructor(private readonly assembly: Assembly) {}

  get services(): Services {
    return this.assembly.services;
  }

  get routes(): RegisteredRoute[] {
    return this.assembly.routes;
  }

  get log(): Logger {
    return this.services.log;
  }

  get store(): Store {
    return this.services.db;
  }

  /** Base URL of a listener, e.g. https://127.0.0.1:8443. */
  url(listener: ListenerName = 'control', host = '127.0.0.1'): string {
    const l = this.listeners.get(listener);
    if (!l) throw new Error(`listener ${listener} is not running`);
    return `${l.secure ? 'https' : 'http'}://${host}:${l.port}`;
  }

  static async start(options: StartOptions): Promise<Hangar> {
    const { config } = options;
    const firstStart = !Hangar.started;
    Hangar.started = true;
    const log = createLogger(config.log.level, options.logDestination);
    const db = await openStore(config);
    startStep('store_opened');
    db.health.logTo(log);
    let assembly: Assembly | undefined;
    try {
      assembly = await assembleServices(config, db, { log, clock: options.clock, serving: true, catalogue: options.catalogue });
      const hangar = new Hangar(assembly);
      await db.notices.start(config.database.url, log, assembly.services.peers);
      assembly.services.tasks.start();
      startStep('notices');
      // Before the listeners: no request can start a step for a record whose interrupted step is resumed.
      await hangar.resume();
      startStep('resumed');
      await hangar.listen();
      startStep('listening');
      hangar.startLoops(assembly.loops);
      log.info(
        {
          plugins: assembly.services.plugins,
          drivers: assembly.services.drivers.names(),
          dialect: db.dialect,
          urls: [...hangar.listeners.keys()].map((l) => hangar.url(l)),
          running_from: runningFrom(),
          // The first control plane of this process (hangar serve): when each step of its start was done.
          ...(firstStart ? startSteps() : {}),
        },
        'hangar started',
      );
      return hangar;
    } catch (err) {
      // Leave nothing half-started behind.
      await assembly?.close();
      await db.close();
      throw err;
    }
  }

  private async listen(): Promise<void> {
    const byListener = new Map<ListenerName, RouteDef[]>([['control', []]]);
    for (const { route } of this.routes) {
      const name = route.listener ?? 'control';
      byListener.set(name, [...(byListener.get(name) ?? []), route]);
    }
    try {
      await this.openListeners(byListener);
    } catch (err) {
      await Promise.all([...this.listeners.values()].map((l) => l.close(0).catch(() => undefined)));
      throw err;
    }
  }

  private async openListeners(byListener: Map<ListenerName, RouteDef[]>): Promise<void> {
    const { config, ca } = this.services;
    for (const [name, routes] of byListener) {
      const app = buildKoaApp(name, routes, this.services);
      if (name === 'control') {
        const listener = new Listener(
          name,
          app,
          { credentials: ca.serverCredentials, caPem: ca.caPem, agentHttp2: config.api.agent_http2, agentQuietMs: this.services.tasks.heartbeatCeilingMs },
          config.api.request_timeout_ms,
        );
        // A reissued certificate is written to the data dir; the other workers (api.workers) take it from there.
        ca.on('server-certificate', (credentials) => {
          listener.swapCertificate(credentials);
          void this.services.peers.broadcast(SERVER_CERTIFICATE_CHANNEL, null);
        });
        this.services.peers.subscribe(SERVER_CERTIFICATE_CHANNEL, () => {
          const reloaded = ca.reloadServerCertificate();
          if (reloaded) listener.swapCertificate(reloaded);
        });
        // This worker may have written a new one as it started (a new local address): the others look.
        void this.services.peers.broadcast(SERVER_CERTIFICATE_CHANNEL, null);
        this.listeners.set(name, listener);
        await listener.listen(config.api.port, config.api.host, 'api.port');
        this.services.ports.set(name, listener.port);
      } else {
        const section = (config[name] ?? {}) as { host?: string | null; port?: number };
        const listener = new Listener(name, app, undefined, config.api.request_timeout_ms);
        this.listeners.set(name, listener);
        await listener.listen(section.port ?? 8080, section.host ?? config.api.host, `${name}.port`);
        this.services.ports.set(name, listener.port);
      }
    }
  }

  /** Restarts what the previous process left half done (a plugin that fails to is logged, not fatal). */
  private async resume(): Promise<void> {
    for (const { plugin, resume } of this.assembly.resumers) {
      try {
        const resumed = await resume();
        if (resumed.length) this.log.info({ plugin, resumed }, 'resumed work a previous process left half done');
      } catch (err) {
        this.log.error({ plugin, err: { message: (err as Error).message } }, 'resuming interrupted work failed');
      }
    }
  }

  /** Whether this control plane takes this turn of a loop: always, or for a `once` loop when it leads it. */
  private async takesTurn(loop: BackgroundLoop): Promise<boolean> {
    if (!loop.once) return true;
    try {
      return await this.store.leadership.lead(`loop:${loop.name}`, loopLeaseMs(loop.intervalMs));
    } catch (err) {
      this.log.warn({ loop: loop.name, err: { message: (err as Error).message } }, 'could not take or renew the loop’s leadership; skipping this turn');
      return false;
    }
  }

  private startLoops(loops: BackgroundLoop[]): void {
    for (const loop of loops) {
      let running = false;
      const tick = () => {
        if (running || this.services.shutdown.aborted) return;
        running = true;
        const { metrics } = this.services;
        const turn = async () => {
          if (!(await this.takesTurn(loop))) return;
          const stopTimer = metrics.loopDuration.startTimer({ loop: loop.name });
          try {
            await loop.run(this.services.shutdown);
            metrics.loopRuns.inc({ loop: loop.name, outcome: 'ok' });
          } catch (err) {
            metrics.loopRuns.inc({ loop: loop.name, outcome: 'failed' });
            this.log.error({ loop: loop.name, err: { message: (err as Error).message } }, 'background loop failed');
          } finally {
            stopTimer();
          }
        };
        const run = turn().finally(() => {
          running = false;
          this.loopRuns.delete(run);
        });
        this.loopRuns.add(run);
      };
      const timer = setInterval(tick, loop.intervalMs);
      timer.unref();
      this.loopTimers.push(timer);
      if (loop.immediately) tick();
    }
  }

  /** Graceful shutdown: stop loops, finish in-flight requests (bounded), close plugins and the store. */
  stop(): Promise<void> {
    this.stopping ??= (async () => {
      this.log.info('hangar stopping');
      for (const timer of this.loopTimers) clearInterval(timer);
      const grace = this.services.config.shutdown_timeout_ms;
      // Closing the listeners first lets held requests (long-polls) see the shutdown signal and answer.
      const closing = Promise.all([...this.listeners.values()].map((l) => l.close(grace)));
      await this.assembly.close();
      await closing;
      await Promise.all([...this.loopRuns]);
      // The loops this control plane led go to another one at its next turn, not after the lease.
      await this.services.db.leadership.releaseAll().catch((err: Error) => this.log.warn({ err: { message: err.message } }, 'releasing loop leadership failed'));
      await this.services.db.close();
      this.log.info('hangar stopped');
    })();
    return this.stopping;
  }
}
