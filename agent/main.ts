// Entry point of the agent executable (`hangar-agent`): the `hangar agent` command on its own.
import v8 from 'node:v8';
import yargs from 'yargs';
import { hideBin } from 'yargs/helpers';
import { agentCommand } from './command.js';
import { versionInfo } from '../core/version.js';
import { WATCHDOG_FLAG, watchUpdate } from './update-guard.js';

// V8 let the old generation fill with the garbage of the agent's tasks up to a limit it raises with
// each collection, and kept the pages (a task a second: RSS +7.4 % in 20 minutes). Optimised for size,
// it grows the heap conservatively, near what is live (docs/performance.md, "The agent's heap kept
// near what is live"). Node refuses the flag in NODE_OPTIONS; V8 reads it at every collection.
v8.setFlagsFromString('--optimize-for-size');

const watchdog = process.argv.indexOf(WATCHDOG_FLAG);
// The previous executable watching an update it handed over to (agent/update-guard.ts).
if (watchdog >= 0) void watchUpdate(process.argv[watchdog + 1] ?? '', process.argv[watchdog + 2] ?? '').then(() => process.exit(0), () => process.exit(1));
else void yargs(hideBin(process.argv))
  .scriptName('hangar-agent')
  .command({ ...agentCommand, command: '$0' })
  .strict()
  .version(versionInfo.version)
  .help()
  .parseAsync();
