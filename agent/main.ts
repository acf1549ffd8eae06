// Entry point of the agent executable (`hangar-agent`): the `hangar agent` command on its own.
import yargs from 'yargs';
import { hideBin } from 'yargs/helpers';
import { agentCommand } from './command.js';
import { versionInfo } from '../core/version.js';
import { WATCHDOG_FLAG, watchUpdate } from './update-guard.js';

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
