import { existsSync } from 'node:fs';
import { asList } from './runner/args.js';
import { CONTEXT_OPTIONS, inRunnerContext, type ContextArgs } from './runner/context.js';
import { readEnvFile } from './runner/envfile.js';
import { applyEnv } from './runner/environment.js';
import { failure, runnerCommand } from './runner/errors.js';
import { builtinRegistry } from './runner/registry.js';
import { checkName, readManifest } from './runner/system.js';
import { servicePaths } from './runner/templates.js';
import { startTerminal } from './runner/terminal.js';

interface TerminalArgs extends ContextArgs {
  service?: string;
  preload?: string | string[];
  helpers?: string | boolean;
  'root-prefix'?: string;
  verbose?: boolean;
}

export const terminalCommand = runnerCommand<TerminalArgs>({
  command: 'terminal [service]',
  describe: "Interactive terminal (node REPL, top-level await) with hangar's services, the store and helpers loaded",
  builder: (y) =>
    y
      .positional('service', { type: 'string', describe: 'an installed service: load its environment file (and its rootdir); --env wins over it' })
      .option('preload', { type: 'string', describe: 'module run before the prompt; its exports become globals (repeatable)' })
      .options(CONTEXT_OPTIONS)
      .option('helpers', { type: 'string', describe: 'project helper script (default: terminal.helpers in the configuration, else config/terminal.ts); --no-helpers skips it' })
      .option('root-prefix', { type: 'string', default: '/', describe: 'where installed services are looked up (tests)' })
      .example('$0 terminal', 'then: qq("select * from hangar_migrations")')
      .example('$0 terminal billing-report', 'with the environment of the installed service billing-report')
      .example('echo \'qq("select 1")\' | $0 terminal', 'scripted: lines from stdin, each awaited'),
  async run(args) {
    if (args.service) {
      checkName(args.service);
      const paths = servicePaths(args['root-prefix'] ?? '/', args.service);
      const manifest = readManifest(paths);
      if (!existsSync(paths.env)) throw failure(`no service named ${args.service} is installed (no ${paths.env}); hangar services lists them`);
      applyEnv(readEnvFile(paths.env));
      if (manifest?.rootdir && !args.rootdir && existsSync(manifest.rootdir)) process.chdir(manifest.rootdir);
    }
    const helpers = args.helpers === false || args.helpers === 'false' ? false : typeof args.helpers === 'string' ? args.helpers : undefined;
    return inRunnerContext(args, (ctx) => startTerminal({ ctx, registry: builtinRegistry(), helpers, preload: asList(args.preload), service: args.service }));
  },
});
