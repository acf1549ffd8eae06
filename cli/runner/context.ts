import { pino } from 'pino';
import type { HangarConfig } from '../../config/schema.js';
import { loadConfig } from '../../core/config.js';
import { openStore, type Store } from '../../core/db/store.js';
import { createLogger, type Logger } from '../../core/log.js';
import type { Services } from '../../core/plugin.js';
import { asList, parseEnvPairs } from './args.js';
import { applyEnv, enterRootdir } from './environment.js';
import { assembleToolServices, type AssembledServices } from './services.js';

export interface ContextOptions {
  /** `--config`: the operator's YAML file (else HANGAR_CONFIG, as for `hangar serve`). */
  configFile?: string;
  /** `--data-dir`. */
  dataDir?: string;
}

/**
 * What a runner class gets in its constructor: the configuration, the store and the control
 * plane's services, each built on first use (a method that needs none of them opens nothing).
 * Log lines go to stderr so that stdout carries only results.
 */
export class RunnerContext {
  private cachedConfig?: HangarConfig;
  private cachedLog?: Logger;
  private storePromise?: Promise<Store>;
  private servicesPromise?: Promise<AssembledServices>;

  constructor(private readonly options: ContextOptions = {}) {}

  /** The configuration, loaded the way `hangar serve` loads it (files, HANGAR_* variables). */
  config(): HangarConfig {
    this.cachedConfig ??= loadConfig({ file: this.options.configFile, dataDir: this.options.dataDir });
    return this.cachedConfig;
  }

  log(): Logger {
    this.cachedLog ??= createLogger(this.config().log.level, pino.destination({ dest: 2, sync: true }));
    return this.cachedLog;
  }

  /** The configured store (knex on SQLite or PostgreSQL). Migrations are not run by this. */
  store(): Promise<Store> {
    this.storePromise ??= openStore(this.config());
    return this.storePromise;
  }

  /** The services of core and of every enabled plugin, assembled without listeners (see services.ts). */
  async services(): Promise<Services> {
    return (await this.assembled()).services;
  }

  async assembled(): Promise<AssembledServices> {
    this.servicesPromise ??= (async () => assembleToolServices(this.config(), await this.store(), this.log()))();
    return this.servicesPromise;
  }

  /** Whether the store has been opened (so something must be closed). */
  get opened(): boolean {
    return Boolean(this.storePromise);
  }

  async close(): Promise<void> {
    const services = this.servicesPromise;
    const store = this.storePromise;
    this.servicesPromise = undefined;
    this.storePromise = undefined;
    if (services) await (await services.catch(() => null))?.close();
    if (store) await (await store.catch(() => null))?.close();
  }
}

/** The options of a command that works in a runner context (hangar run, hangar terminal): its environment, directory and configuration. */
export const CONTEXT_OPTIONS = {
  env: { type: 'string', describe: 'KEY=VALUE set in the environment before anything loads (repeatable)' },
  rootdir: { type: 'string', describe: 'working directory (configuration, data dir and module paths resolve against it)' },
  config: { type: 'string', describe: 'YAML configuration file (as for hangar serve)' },
  'data-dir': { type: 'string', describe: 'data directory (as for hangar serve)' },
} as const;

export interface ContextArgs {
  env?: string | string[];
  rootdir?: string;
  config?: string;
  'data-dir'?: string;
}

/** Sets the `--env` pairs, enters `--rootdir`, then runs `work` in a context of `--config` and `--data-dir`, closed afterwards. */
export async function inRunnerContext<T>(args: ContextArgs, work: (ctx: RunnerContext) => Promise<T>): Promise<T> {
  applyEnv(parseEnvPairs(asList(args.env)));
  if (args.rootdir) enterRootdir(args.rootdir);
  const ctx = new RunnerContext({ configFile: args.config, dataDir: args['data-dir'] });
  try {
    return await work(ctx);
  } finally {
    await ctx.close();
  }
}
