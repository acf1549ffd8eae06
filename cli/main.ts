import yargs from 'yargs';
import { hideBin } from 'yargs/helpers';
import { serveCommand } from './serve.js';
import { agentCommand } from './agent.js';
import { versionInfo } from '../core/version.js';

/** The `hangar` program: control plane, agent, resource commands and the script runner. */
export function buildCli(argv: string[]) {
  return yargs(argv)
    .scriptName('hangar')
    .usage('$0 <command> [options]')
    .command(serveCommand)
    .command(agentCommand)
    .demandCommand(1, 'Name a command; see the list above.')
    .strict()
    .version(versionInfo.version)
    .help()
    .alias('h', 'help')
    .wrap(Math.min(110, process.stdout.columns || 100));
}

await buildCli(hideBin(process.argv)).parseAsync();
