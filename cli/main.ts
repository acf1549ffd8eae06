import yargs from 'yargs';
import { hideBin } from 'yargs/helpers';
import { serveCommand } from './serve.js';
import { runCommand } from './run.js';
import { terminalCommand } from './terminal.js';
import { installCommand, servicesCommand, uninstallCommand } from './install.js';
import { endpointCommand } from './endpoint.js';
import { configureCommand } from './configure.js';
import { agentCommand } from './agent.js';
import { nodeCommand } from './node.js';
import { resourceCommands } from './resources.js';
import { usageExit } from './resource-commands.js';
import { eventsCommand } from './events.js';
import { versionInfo } from '../core/version.js';

/** The `hangar` program: control plane, agent, resource commands and the script runner. */
export function buildCli(argv: string[]) {
  return usageExit(yargs(argv))
    .scriptName('hangar')
    .usage('$0 <command> [options]')
    .command(serveCommand)
    .command(runCommand)
    .command(terminalCommand)
    .command(installCommand)
    .command(uninstallCommand)
    .command(servicesCommand)
    .command(endpointCommand)
    .command(configureCommand)
    .command(agentCommand)
    .command(nodeCommand)
    .command(resourceCommands)
    .command(eventsCommand)
    .demandCommand(1, 'Name a command; see the list above.')
    .strict()
    .version(versionInfo.version)
    .help()
    .alias('h', 'help')
    .wrap(Math.min(110, process.stdout.columns || 100));
}

await buildCli(hideBin(process.argv)).parseAsync();
