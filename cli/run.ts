import { ConfigError } from '../core/errors.js';
import { asList, parseEnvPairs } from './runner/args.js';
import { RunnerContext } from './runner/context.js';
import { applyEnv, enterRootdir } from './runner/environment.js';
import { EXIT, runnerCommand, RunnerError } from './runner/errors.js';
import { checkArity, convertArgs, loadBootstrap, resolveTarget } from './runner/invoke.js';
import { formatResult } from './runner/output.js';
import { builtinRegistry, describeRegistry } from './runner/registry.js';

interface RunArgs {
  method?: string;
  arg?: string | string[];
  bootstrap?: string;
  rootdir?: string;
  env?: string | string[];
  config?: string;
  'data-dir'?: string;
  list?: boolean;
  verbose?: boolean;
}

function describeThrown(err: unknown): string {
  if (err instanceof Error) return `${err.name}: ${err.message}`;
  return String(err);
}

export const runCommand = runnerCommand<RunArgs>({
  command: 'run [method]',
  describe: 'Call a public method: "Class::method" of a registered class, or "path/to/module.js#Class::method"',
  builder: (y) =>
    y
      .positional('method', { type: 'string', describe: '"Class::method" or "path/to/module.js#Class::method"' })
      .option('arg', { type: 'string', describe: 'an argument, in order (repeatable): 12 → number, true → boolean, {…}/[…] → JSON, s:12 → the string "12"' })
      .option('bootstrap', { type: 'string', describe: 'module imported first; may export register(registry) to add classes' })
      .option('rootdir', { type: 'string', describe: 'working directory to run in (configuration, data dir and module paths resolve against it)' })
      .option('env', { type: 'string', describe: 'KEY=VALUE set in the environment before anything loads (repeatable)' })
      .option('config', { type: 'string', describe: 'YAML configuration file (as for hangar serve)' })
      .option('data-dir', { type: 'string', describe: 'data directory (as for hangar serve)' })
      .option('list', { type: 'boolean', describe: 'list the registered classes and their methods' })
      .example('$0 run "Runner::add" --arg 2 --arg 3', 'prints 5')
      .example('$0 run "Store::tables"', "lists the database's tables")
      .example('$0 run "./jobs/report.ts#Report::monthly" --arg 2024', "calls the operator's own code"),
  async run(args) {
    applyEnv(parseEnvPairs(asList(args.env)));
    if (args.rootdir) enterRootdir(args.rootdir);
    const ctx = new RunnerContext({ configFile: args.config, dataDir: args['data-dir'] });
    const registry = builtinRegistry();
    try {
      if (args.bootstrap) await loadBootstrap(args.bootstrap, registry, ctx);
      if (args.list || !args.method) {
        if (!args.list) throw new RunnerError('name a method: hangar run "Class::method" [--arg V]… (hangar run --list shows them)');
        console.log(describeRegistry(registry));
        return EXIT.ok;
      }
      const target = await resolveTarget(args.method, registry, ctx);
      const raw = asList(args.arg);
      checkArity(target, raw.length);
      const values = convertArgs(target, raw);
      let result: unknown;
      try {
        result = await target.call(values);
      } catch (err) {
        if (err instanceof RunnerError) throw err;
        if (err instanceof ConfigError) throw new RunnerError(`${target.label}: ${err.message}`, EXIT.usage, err);
        throw new RunnerError(`${target.label} threw ${describeThrown(err)}`, EXIT.failed, err);
      }
      const text = formatResult(result);
      if (text !== null) process.stdout.write(`${text}\n`);
      return EXIT.ok;
    } finally {
      await ctx.close();
    }

  },
});
