import { ConfigError } from '../core/errors.js';
import { asList } from './runner/args.js';
import { CONTEXT_OPTIONS, inRunnerContext, type ContextArgs } from './runner/context.js';
import { EXIT, runnerCommand, RunnerError } from './runner/errors.js';
import { checkArity, convertArgs, loadBootstrap, resolveTarget } from './runner/invoke.js';
import { formatResult } from './runner/output.js';
import { builtinRegistry, describeRegistry } from './runner/registry.js';

interface RunArgs extends ContextArgs {
  method?: string;
  arg?: string | string[];
  bootstrap?: string;
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
      .options(CONTEXT_OPTIONS)
      .option('list', { type: 'boolean', describe: 'list the registered classes and their methods' })
      .example('$0 run "Runner::add" --arg 2 --arg 3', 'prints 5')
      .example('$0 run "Store::tables"', "lists the database's tables")
      .example('$0 run "./jobs/report.ts#Report::monthly" --arg 2024', "calls the operator's own code"),
  async run(args) {
    return inRunnerContext(args, async (ctx) => {
      const registry = builtinRegistry();
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
    });
  },
});
