import type { Catalogue } from '../core/plugin.js';
import { builtinDrivers, builtinPlugins } from '../plugins/index.js';

/**
 * The composition root's catalogue: the plugins and drivers built into this program, by the names
 * `plugins:` and `drivers:` use. Core knows none of them; `hangar serve`, the runner and the tests
 * hand this to it.
 */
export const builtinCatalogue: Catalogue = {
  plugins: builtinPlugins,
  drivers: builtinDrivers,
};
