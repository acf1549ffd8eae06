import type { HangarConfig } from '../../config/schema.js';
import { assembleServices, loadPlugins as loadFrom, migrateAll, type Assembly } from '../../core/assembly.js';
import type { Store } from '../../core/db/store.js';
import type { Logger } from '../../core/log.js';
import type { Plugin } from '../../core/plugin.js';
import { builtinCatalogue } from '../catalogue.js';

export { migrateAll };

/** The configured plugins from the built-in catalogue (or by module path), in set-up order. */
export const loadPlugins = (config: HangarConfig): Promise<Plugin[]> => loadFrom(config, builtinCatalogue);

/**
 * The control plane's services without its listeners and loops: what `hangar terminal` and the
 * `Hangar` runner class work with. The same assembly as `hangar serve` (core/app.ts), not serving:
 * nothing listens, no background loop runs, and the task queue enqueues (telling the serving control
 * plane, which wakes the agent's poll) but does not wait for wake-ups.
 */
export type AssembledServices = Assembly;

export function assembleToolServices(config: HangarConfig, db: Store, log: Logger): Promise<AssembledServices> {
  return assembleServices(config, db, { log, serving: false, catalogue: builtinCatalogue });
}
