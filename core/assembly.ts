import { setMaxListeners } from 'node:events';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { CoreConfigSchema, type HangarConfig } from '../config/schema.js';
import { AuthRegistry } from './auth/index.js';
import { systemClock, type Clock } from './clock.js';
import { validateConfigSection } from './config.js';
import { coreMigrations } from './db/core-migrations.js';
import { refuseNewerStore, runMigrations, type MigrationSet } from './db/migrations.js';
import type { Store } from './db/store.js';
import { importFile } from './typescript.js';
import { ConfigError } from './errors.js';
import { EventBus } from './events.js';
import { RequestObservers } from './http/observers.js';
import { Metrics } from './metrics.js';
import type { Logger } from './log.js';
import { createMailer } from './mail.js';
import { Pki } from './pki/pki.js';
import { startStep } from './startup.js';
import { requireSharedKeyring } from './pki/keyring.js';
import { TaskCompleted, TaskFailed, TaskQueue } from './tasks/queue.js';
import { RateLimiter } from './ratelimit.js';
import { TaskKindRegistry } from './tasks/kinds.js';
import { HOST_KINDS } from './tasks/host-kinds.js';
import { ORCHESTRATOR_CALLS } from './orchestrator.js';
import { backendFaults, type ClusterBackend } from './clusters/backend.js';
import type { BackgroundLoop, Catalogue, Driver, DriverRef, DriverRegistry, Plugin, RegisteredRoute, Services } from './plugin.js';
import { ServiceRegistry } from './provided.js';
import { Clusters } from './clusters/service.js';
import { speaksForWorkers, peers as workerPeers } from './workers.js';
import type { JsonSchema } from './validation.js';

/*
 * Assembly: the control plane built from its configuration — the plugins loaded and ordered, the
 * migrations applied, the CA opened, the services made, the drivers created (orchestrator backends
 * registered) and the plugins set up, with the routes, loops and resume hooks they answer. Nothing
 * here listens or runs a loop: `hangar serve` hands the assembly to core/app.ts (the runtime), the
 * runner uses it as it is.
 */

async function importModule<T>(spec: string, builtins: Record<string, () => Promise<{ default: T }>>, what: string): Promise<T> {
  const builtin = builtins[spec];
  if (builtin) return (await builtin()).default;
  if (!/[./\\]/.test(spec)) {
    throw new ConfigError(`${what} "${spec}" is neither built in (${Object.keys(builtins).join(', ') || 'none'}) nor a module path`);
  }
  const url = pathToFileURL(path.resolve(spec)).href;
  let mod: Record<string, unknown>;
  try {
    mod = await importFile(url);
  } catch (err) {
    throw new ConfigError(`cannot load ${what} module ${spec}: ${(err as Error).message}`);
  }
  const value = (mod.default ?? mod.plugin ?? mod.driver) as T | undefined;
  if (!value) throw new ConfigError(`${what} module ${spec} has no default export`);
  return value;
}

/**
 * A backend a `drivers:` entry of kind `orchestrator` brings: what its create() answered must be a
 * backend (core/clusters/backend.ts) under a name no other backend has; otherwise start-up stops
 * naming the module and what is wrong.
 */
function registerConfiguredBackend(clusters: Clusters, spec: string, instance: unknown): void {
  const faults = backendFaults(instance);
  if (faults.length) throw new ConfigError(`drivers: ${spec} is an orchestrator driver, but its create() did not answer a backend (defineBackend): ${faults.join('; ')}`);
  const backend = instance as ClusterBackend;
  if (clusters.backendNames().includes(backend.name)) throw new ConfigError(`drivers: ${spec} brings the orchestrator backend "${backend.name}", which is already loaded`);
  clusters.registerBackend(backend);
}

class Drivers implements DriverRegistry {
  readonly instances = new Map<string, unknown>();
  get<T>(ref: DriverRef<T>): T {
    if (!this.instances.has(ref.name)) throw new Error(`driver "${ref.name}" is not loaded (configure it under drivers:)`);
    return this.instances.get(ref.name) as T;
  }
  has(name: string): boolean {
    return this.instances.has(name);
  }
  names(): string[] {
    return [...this.instances.keys()];
  }
}

/**
 * The configured plugins, loaded (not set up) and in the order they are set up: every plugin after
 * the providers of what it needs, otherwise in configuration order. Names must be unique; a need
 * no loaded plugin provides, two providers of one thing and a cycle stop the start naming them.
 */
export async function loadPlugins(config: HangarConfig, catalogue: Catalogue): Promise<Plugin[]> {
  const plugins: Plugin[] = [];
  for (const spec of config.plugins) plugins.push(await importModule<Plugin>(spec, catalogue.plugins, 'plugin'));
  const names = plugins.map((p) => p.name);
  const duplicate = names.find((n, i) => names.indexOf(n) !== i);
  if (duplicate) throw new ConfigError(`plugins: "${duplicate}" is listed twice`);
  return orderPlugins(plugins);
}

/** Topological order by declared dependencies, stable with respect to the given order. */
export function orderPlugins(plugins: Plugin[]): Plugin[] {
  const provider = new Map<string, Plugin>();
  for (const plugin of plugins) {
    for (const ref of plugin.provides ?? []) {
      const other = provider.get(ref.name);
      if (other) throw new ConfigError(`plugins ${other.name} and ${plugin.name} both provide ${ref.description} (${ref.name}); load one of them`);
      provider.set(ref.name, plugin);
    }
  }
  const before = new Map<Plugin, Set<Plugin>>();
  for (const plugin of plugins) {
    const needs = new Set<Plugin>();
    for (const ref of plugin.deps ?? []) {
      const p = provider.get(ref.name);
      if (!p) throw new ConfigError(`plugin ${plugin.name} needs ${ref.description} (${ref.name}), which no loaded plugin provides: add the plugin that provides it to plugins:`);
      if (p !== plugin) needs.add(p);
    }
    for (const ref of plugin.optionalDeps ?? []) {
      const p = provider.get(ref.name);
      if (p && p !== plugin) needs.add(p);
    }
    before.set(plugin, needs);
  }
  const ordered: Plugin[] = [];
  const placed = new Set<Plugin>();
  while (ordered.length < plugins.length) {
    const next = plugins.find((p) => !placed.has(p) && [...before.get(p)!].every((d) => placed.has(d)));
    if (!next) {
      const stuck = plugins.filter((p) => !placed.has(p)).map((p) => p.name);
      throw new ConfigError(`plugins ${stuck.join(', ')} depend on each other in a cycle`);
    }
    ordered.push(next);
    placed.add(next);
  }
  return ordered;
}

/** Core and plugin migrations, as start-up applies them. Returns the ids applied now. */
export async function migrateAll(db: Store, plugins: Plugin[]): Promise<string[]> {
  await refuseNewerStore(db, [coreMigrations, ...plugins.map((p) => ({ owner: p.name, migrations: p.migrations ?? [] }))]);
  const applied = await runMigrations(db, [coreMigrations]);
  const sets: MigrationSet[] = plugins.filter((p) => p.migrations?.length).map((p) => ({ owner: p.name, migrations: p.migrations! }));
  return [...applied, ...(await runMigrations(db, sets))];
}

/** Everything the control plane is made of, before (or without) listening. */
export interface Assembly {
  services: Services;
  plugins: Plugin[];
  routes: RegisteredRoute[];
  loops: BackgroundLoop[];
  /** Each plugin's start-up hook for work a previous process left half done. */
  resumers: Array<{ plugin: string; resume: () => Promise<string[]> }>;
  /** Migration ids applied while assembling. */
  applied: string[];
  /** Stops what assembling started (plugin close hooks, the task queue, mail), in reverse order. */
  close(): Promise<void>;
}

export interface AssembleOptions {
  log: Logger;
  catalogue: Catalogue;
  clock?: Clock;
  /** True for `hangar serve`: plugins may then announce things meant for the operator at start. */
  serving: boolean;
}

/**
 * Builds the services and sets up every plugin: migrations, CA, drivers, routes and loops. Used by
 * `hangar serve` (which then listens) and by the runner (which never does).
 */
export async function assembleServices(config: HangarConfig, db: Store, options: AssembleOptions): Promise<Assembly> {
  const { log } = options;
  const clock = options.clock ?? systemClock;
  const { catalogue } = options;
  const plugins = await loadPlugins(config, catalogue);
  startStep('plugins_loaded');
  const names = plugins.map((p) => p.name);
  const known = new Set([...Object.keys(CoreConfigSchema.properties), ...names, ...Object.keys(catalogue.plugins)]);
  for (const setting of Object.keys(config)) {
    if (!known.has(setting)) log.warn({ setting }, 'configuration section is neither a core setting nor a plugin; ignored');
  }
  for (const plugin of plugins) {
    config[plugin.name] ??= {};
    if (plugin.configSchema) validateConfigSection(config[plugin.name], plugin.configSchema as unknown as JsonSchema, plugin.name);
  }
  startStep('config_checked');
  requireSharedKeyring(db.dialect, config.secrets.master_key);
  const applied = await migrateAll(db, plugins);
  startStep('migrations');
  if (applied.length) log.info({ migrations: applied }, 'migrations applied');
  const ca = await Pki.open({
    dataDir: config.data_dir,
    store: db,
    clock,
    tlsCertFile: config.api.tls_cert,
    tlsKeyFile: config.api.tls_key,
    serverNames: [...config.api.server_names, ...config.api.public_addresses],
    masterKey: config.secrets.master_key,
    log,
  });
  startStep('pki');
  db.cursors.useKey(ca.deriveKey('page-cursors'));
  const shutdown = new AbortController();
  // Every request in flight listens for shutdown; there may be thousands (long-polls).
  setMaxListeners(0, shutdown.signal);
  const drivers = new Drivers();
  const events = new EventBus();
  const kinds = new TaskKindRegistry([...HOST_KINDS, ...ORCHESTRATOR_CALLS]);
  const peers = workerPeers();
  const metrics = new Metrics(peers);
  const tasks = new TaskQueue(db, clock, events, ca.secretBox('tasks'), {
    leaseMs: config.tasks.lease_seconds * 1000,
    batch: config.tasks.batch,
    maxHoldMs: config.tasks.max_hold_seconds * 1000,
    onPollLook: (queried) => metrics.pollLooks.inc({ store: queried ? 'queried' : 'known_idle' }),
  }, kinds, log);
  const mail = createMailer(config.mail);
  metrics.watchCore(db, () => tasks.openPolls);
  const requests = new RequestObservers();
  requests.add('metrics', metrics.observeRequest);
  for (const [outcome, topic] of [['completed', TaskCompleted], ['failed', TaskFailed]] as const) {
    events.subscribe(topic, (task) => {
      if (task.completed_at) metrics.taskDuration.observe({ kind: task.kind, outcome }, Math.max(0, Date.parse(task.completed_at) - Date.parse(task.created_at)) / 1000);
    });
  }
  const routes: RegisteredRoute[] = [];
  const closers: Array<() => Promise<void>> = [];
  const provided = new ServiceRegistry();
  const clusters = new Clusters(
    { config, db, clock, tasks, events, log, shutdown: shutdown.signal, provided, peers },
    {
      callTimeoutMs: config.clusters.call_timeout_seconds * 1000,
      observeIntervalMs: config.clusters.observe_interval_seconds * 1000,
      pickupTimeoutMs: config.clusters.pickup_timeout_seconds * 1000,
      opLeaseMs: config.clusters.op_lease_seconds * 1000,
      localDomain: config.clusters.local_domain,
      advertise: config.clusters.advertise,
      joinPathWaitMs: config.clusters.join_path_wait_seconds * 1000,
      availabilityWaitMs: config.clusters.availability_wait_seconds * 1000,
      drainTimeoutSeconds: config.clusters.drain_timeout_seconds,
      revisionsKept: config.clusters.revisions_kept,
    },
  );
  const services: Services = {
    config,
    log,
    db,
    ca,
    events,
    drivers,
    clock,
    auth: new AuthRegistry(),
    shutdown: shutdown.signal,
    serving: options.serving,
    plugins: names,
    provided,
    clusters,
    routeTable: () => routes,
    ports: new Map(),
    mail,
    tasks,
    limits: new RateLimiter(db, clock),
    metrics,
    peers,
    requests,
  };
  const close = async () => {
    shutdown.abort();
    for (const closer of closers.reverse()) {
      await closer().catch((err: Error) => log.error({ err: { message: err.message } }, 'plugin close failed'));
    }
    await clusters.close();
    await tasks.close();
    ca.removeAllListeners();
    mail.close();
  };
  try {
    // Drivers, in configuration order; a driver of kind `orchestrator` brings a backend (the built-in swarm and k8s too).
    for (const spec of config.drivers) {
      const driver = await importModule<Driver>(spec, catalogue.drivers, 'driver');
      if (drivers.has(driver.name)) throw new ConfigError(`drivers: two entries provide a driver named "${driver.name}"`);
      const instance = await driver.create(services);
      drivers.instances.set(driver.name, instance);
      if (driver.kind === 'orchestrator') registerConfiguredBackend(clusters, spec, instance);
    }
    startStep('drivers');
    const loops: BackgroundLoop[] = [
      ...(config.api.watch_addresses_seconds > 0 && !ca.operatorCertificates && speaksForWorkers()
        ? [{ name: 'pki:local-addresses', intervalMs: config.api.watch_addresses_seconds * 1000, run: () => coverLocalAddresses(ca, log) }]
        : []),
      { name: 'rate-limits:prune', intervalMs: 600_000, once: true, run: async () => void (await services.limits.prune()) },
      // Every control plane expires leases (each update is conditional, so two never clash): a task
      // whose agent went away returns to pending without waiting for a leader to take over.
      {
        name: 'tasks:expire-leases',
        intervalMs: config.tasks.expiry_check_ms,
        async run() {
          const { retried, failed } = await tasks.expireLeases();
          if (retried) metrics.leaseExpiries.inc({ outcome: 'retried' }, retried);
          if (failed) metrics.leaseExpiries.inc({ outcome: 'failed' }, failed);
        },
      },
    ];
    const resumers: Assembly['resumers'] = [];
    for (const plugin of plugins) {
      clusters.setUpBy(plugin.name);
      const parts = await plugin.setup(services);
      clusters.setUpBy(null);
      for (const ref of plugin.provides ?? []) {
        if (!services.provided.has(ref)) throw new ConfigError(`plugin ${plugin.name} says it provides ${ref.description} (${ref.name}) but did not provide it in setup`);
      }
      for (const route of parts.routes ?? []) routes.push({ plugin: plugin.name, route });
      loops.push(...(parts.loops ?? []));
      // Its lifecycles' operations first (core resumes them), then what else it picks up.
      if (parts.resume || clusters.hasLifecycles(plugin.name)) {
        const { resume } = parts;
        resumers.push({ plugin: plugin.name, resume: async () => [...(await clusters.resume(plugin.name)), ...(resume ? await resume() : [])] });
      }
      if (parts.close) closers.push(parts.close);
    }
    startStep('plugins_set_up');
    // After setup: plugins may have tuned the interval (older configuration keys).
    loops.push({ name: 'clusters:observe', intervalMs: clusters.settings.observeIntervalMs, once: true, run: (signal) => clusters.observe(signal) });
    loops.push({ name: 'lifecycle:take-over', intervalMs: Math.max(1000, Math.floor(clusters.settings.opLeaseMs / 2)), run: () => clusters.takeOverExpired() });
    const seen = new Set<string>();
    for (const { plugin, route } of routes) {
      const key = `${route.listener ?? 'control'} ${route.method} ${route.path}`;
      if (seen.has(key)) throw new ConfigError(`plugin ${plugin} declares ${key}, which another plugin already declares`);
      seen.add(key);
    }
    return { services, plugins, routes, loops, resumers, applied, close };
  } catch (err) {
    await close();
    throw err;
  }
}

/**
 * Reissues the server certificate when this host gained an address it does not name (a network
 * made after the start: a machine there would be refused). One worker of several does it; the others
 * take the new files up when told (SERVER_CERTIFICATE_CHANNEL).
 */
async function coverLocalAddresses(ca: Pki, log: Logger): Promise<void> {
  const added = await ca.coverLocalAddresses();
  if (added.length) log.info({ added_sans: added }, 'server certificate reissued: this host has new addresses');
}
