import yargs, { type CommandModule } from 'yargs';
import { hideBin } from 'yargs/helpers';
import { usageExit } from './resource-commands.js';
import { versionInfo } from '../core/version.js';

type Commands = () => Promise<CommandModule<any, any>[]>;

/**
 * The commands, each loaded only when it runs: `hangar serve` does not load the agent, the runner or
 * the Docker client. `--help` and anything not listed here (the resource commands) load them all.
 */
const COMMANDS: Record<string, Commands> = {
  serve: async () => [(await import('./serve.js')).serveCommand],
  run: async () => [(await import('./run.js')).runCommand],
  terminal: async () => [(await import('./terminal.js')).terminalCommand],
  install: async () => [(await import('./install.js')).installCommand],
  uninstall: async () => [(await import('./install.js')).uninstallCommand],
  services: async () => [(await import('./install.js')).servicesCommand],
  endpoint: async () => [(await import('./endpoint.js')).endpointCommand],
  configure: async () => [(await import('./configure.js')).configureCommand],
  agent: async () => [(await import('../agent/command.js')).agentCommand],
  events: async () => [(await import('./events.js')).eventsCommand],
  notify: async () => [(await import('./notify.js')).notifyCommand],
  restore: async () => [(await import('./control-plane-backup.js')).restoreCommand],
  alerts: async () => [(await import('./alerts.js')).alertsCommand],
  whoami: async () => [(await import('./whoami.js')).whoamiCommand],
  login: async () => [(await import('./login.js')).loginCommand],
  project: async () => [(await import('./resource-commands.js')).resourceCommand((await import('./projects.js')).projectResource)],
};
const resources: Commands = async () => (await import('./resources.js')).resourceCommands;

/** The names a command answers to: the first word of its command string(s), and its aliases. */
function namesOf(command: CommandModule<any, any>): string[] {
  return [command.command ?? [], command.aliases ?? []].flat().map((c) => c.split(' ')[0]!);
}

async function commandsFor(argv: string[]): Promise<CommandModule<any, any>[]> {
  const named = COMMANDS[argv[0] ?? ''];
  if (named) return named();
  // A resource command (hangar node list…) loads the resource commands only: the others bring the
  // server, the runner and the agent (~0.3 s of CPU at every call). Anything else lists them all.
  const resourceCommands = await resources();
  const first = argv[0];
  if (first && resourceCommands.some((c) => namesOf(c).includes(first))) return resourceCommands;
  return [...(await Promise.all(Object.values(COMMANDS).map((load) => load()))).flat(), ...resourceCommands];
}

/** The `hangar` program: control plane, agent, resource commands and the script runner. */
export async function buildCli(argv: string[]) {
  const cli = usageExit(yargs(argv)).scriptName('hangar').usage('$0 <command> [options]');
  for (const command of await commandsFor(argv)) cli.command(command);
  return cli
    .demandCommand(1, 'Name a command; see the list above.')
    .strict()
    .version(versionInfo.version)
    .help()
    .alias('h', 'help')
    .wrap(Math.min(110, process.stdout.columns || 100));
}

/** Runs the `hangar` program on `argv` (the arguments after the script name). */
export async function runCli(argv: string[] = hideBin(process.argv)): Promise<void> {
  await (await buildCli(argv)).parseAsync();
}
