import path from 'node:path';
import { pathToFileURL } from 'node:url';
import type { HangarConfig } from '../../config/schema.js';
import { builtinDrivers, builtinPlugins } from '../../plugins/index.js';
import { AuthRegistry } from '../../core/auth/index.js';
import { systemClock } from '../../core/clock.js';
import { validateConfigSection } from '../../core/config.js';
import { coreMigrations } from '../../core/db/core-migrations.js';
import { runMigrations, type MigrationSet } from '../../core/db/migrations.js';
import type { Store } from '../../core/db/store.js';
import { ConfigError } from '../../core/errors.js';
import { EventBus } from '../../core/events.js';
import type { Logger } from '../../core/log.js';
import { createMailer } from '../../core/mail.js';
import { Pki } from '../../core/pki/pki.js';
import type { Driver, DriverRegistry, Plugin, RegisteredRoute, Services } from '../../core/plugin.js';
import type { JsonSchema } from '../../core/validation.js';

/**
 * The control plane's services without its listeners and loops: what `hangar terminal` and the
 * `Hangar` runner class work with.
 *
 * This mirrors `Hangar.assemble()` in core/app.ts (which always listens) step by step: core
 * migrations, CA, plugins (config sections validated, migrations applied, `setup()` run so that
 * they register what they provide), drivers. Routes are collected but nothing listens, and no
 * background loop runs. Keep it in step with core/app.ts.
 */
export interface AssembledServices {
  services: Services;
  plugins: Plugin[];
  /** Migrations applied while assembling (normally none: `hangar serve` applied them). */
  applied: string[];
  close(): Promise<void>;
}

async function importModule<T>(spec: string, builtins: Record<string, () => Promise<{ default: T }>>, what: string): Promise<T> {
  const builtin = builtins[spec];
  if (builtin) return (await builtin()).default;
  if (!/[./\\]/.test(spec)) {
    throw new ConfigError(`${what} "${spec}" is neither built in (${Object.keys(builtins).join(', ') || 'none'}) nor a module path`);
  }
  let mod: Record<string, unknown>;
  try {
    mod = await import(pathToFileURL(path.resolve(spec)).href);
  } catch (err) {
    throw new ConfigError(`cannot load ${what} module ${spec}: ${(err as Error).message}`);
  }
  const value = (mod.default ?? mod.plugin ?? mod.driver) as T | undefined;
  if (!value) throw new ConfigError(`${what} module ${spec} has no default export`);
  return value;
}

/** The configured plugins, loaded but not set up. */
export async function loadPlugins(config: HangarConfig): Promise<Plugin[]> {
  const plugins: Plugin[] = [];
  for (const spec of config.plugins) plugins.push(await importModule<Plugin>(spec, builtinPlugins, 'plugin'));
  const names = plugins.map((p) => p.name);
  const duplicate = names.find((n, i) => names.indexOf(n) !== i);
  if (duplicate) throw new ConfigError(`plugins: "${duplicate}" is listed twice`);
  return plugins;
}

/** Core and plugin migrations, as `hangar serve` applies them at start. Returns the ids applied. */
export async function migrateAll(store: Store, plugins: Plugin[]): Promise<string[]> {
  const applied = await runMigrations(store, [coreMigrations]);
  const sets: MigrationSet[] = plugins.filter((p) => p.migrations?.length).map((p) => ({ owner: p.name, migrations: p.migrations! }));
  return [...applied, ...(await runMigrations(store, sets))];
}

class Drivers implements DriverRegistry {
  readonly instances = new Map<string, unknown>();
  get<T>(name: string): T {
    if (!this.instances.has(name)) throw new Error(`driver "${name}" is not loaded (configure it under drivers:)`);
    return this.instances.get(name) as T;
  }
  has(name: string): boolean {
    return this.instances.has(name);
  }
  names(): string[] {
    return [...this.instances.keys()];
  }
}

export async function assembleServices(config: HangarConfig, db: Store, log: Logger): Promise<AssembledServices> {
  const plugins = await loadPlugins(config);
  for (const plugin of plugins) {
    config[plugin.name] ??= {};
    if (plugin.configSchema) validateConfigSection(config[plugin.name], plugin.configSchema as unknown as JsonSchema, plugin.name);
  }
  const applied = await migrateAll(db, plugins);
  const clock = systemClock;
  const ca = await Pki.open({
    dataDir: config.data_dir,
    store: db,
    clock,
    tlsCertFile: config.api.tls_cert,
    tlsKeyFile: config.api.tls_key,
    serverNames: config.api.server_names,
    masterKey: config.secrets.master_key,
  });
  const shutdown = new AbortController();
  const drivers = new Drivers();
  const routes: RegisteredRoute[] = [];
  const closers: Array<() => Promise<void>> = [];
  const mail = createMailer(config.mail);
  const services: Services = {
    config,
    log,
    db,
    ca,
    events: new EventBus(),
    drivers,
    clock,
    auth: new AuthRegistry(),
    shutdown: shutdown.signal,
    plugins: plugins.map((p) => p.name),
    provided: new Map(),
    routeTable: () => routes,
    mail,
  };
  for (const spec of config.drivers) {
    const driver = await importModule<Driver>(spec, builtinDrivers, 'driver');
    drivers.instances.set(driver.name, await driver.create(services));
  }
  // Plugins may print operator notices with console.log at setup (iam's bootstrap hint); keep stdout
  // for results and send those to stderr.
  const log0 = console.log;
  console.log = (...args: unknown[]) => console.error(...args);
  try {
    for (const plugin of plugins) {
      const parts = await plugin.setup(services);
      for (const route of parts.routes ?? []) routes.push({ plugin: plugin.name, route });
      if (parts.close) closers.push(parts.close);
    }
  } finally {
    console.log = log0;
  }
  return {
    services,
    plugins,
    applied,
    async close() {
      shutdown.abort();
      for (const close of closers.reverse()) await close().catch(() => undefined);
      ca.removeAllListeners();
      mail.close();
    },
  };
}
