// Entry point of the agent executable (`hangar-agent`): the `hangar agent` command on its own.
import yargs from 'yargs';
import { hideBin } from 'yargs/helpers';
import { agentCommand } from './command.js';
import { versionInfo } from '../core/version.js';

void yargs(hideBin(process.argv))
  .scriptName('hangar-agent')
  .command({ ...agentCommand, command: '$0' })
  .strict()
  .version(versionInfo.version)
  .help()
  .parseAsync();
