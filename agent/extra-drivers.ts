import type { AgentDriver } from '../core/clusters/backend.js';

/**
 * The agent drivers an agent executable is built with besides the built-in ones: none here. The
 * agent build puts the modules of `node scripts/build.mjs agent --driver MODULE` in place of this
 * list (an operator's backend in the single executable, which loads no modules at run time).
 */
export const EXTRA_AGENT_DRIVERS: readonly AgentDriver[] = [];
