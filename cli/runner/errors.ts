import type { ArgumentsCamelCase, Argv, CommandModule } from 'yargs';
import { ConfigError } from '../../core/errors.js';

/** Exit codes of the runner commands (docs/runner.md, "Exit codes"). */
export const EXIT = {
  ok: 0,
  /** The operation ran and failed: the method threw, the server answered 4xx/5xx, not root, already installed… */
  failed: 1,
  /** The invocation is wrong: unknown class or method, wrong arity, bad argument or option, bad configuration. */
  usage: 2,
  /** `endpoint` could not reach the server (connection refused, TLS, timeout). */
  network: 3,
} as const;

/** An error the operator can act on: printed as `hangar <command>: <message>`, never with a stack. */
export class RunnerError extends Error {
  constructor(
    message: string,
    readonly exitCode: number = EXIT.usage,
    cause?: unknown,
  ) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = 'RunnerError';
  }
}

export const usageError = (message: string) => new RunnerError(message, EXIT.usage);
export const failure = (message: string) => new RunnerError(message, EXIT.failed);

/** Prints an error the runner way and returns the exit code to use. */
export function reportError(command: string, err: unknown, verbose = false): number {
  const e = err instanceof Error ? err : new Error(String(err));
  let code: number = EXIT.failed;
  if (e instanceof RunnerError) code = e.exitCode;
  else if (e instanceof ConfigError) code = EXIT.usage;
  console.error(`hangar ${command}: ${e.message}`);
  if (verbose) {
    const cause = (e as { cause?: unknown }).cause;
    console.error(cause instanceof Error && cause.stack ? cause.stack : e.stack);
  }
  return code;
}

/**
 * Runs a command body and exits the process with its code: 0, or the code of the error it threw.
 * Exiting explicitly matters: a method may leave timers or pools behind.
 */
export async function runAndExit(command: string, verbose: boolean | undefined, body: () => Promise<number | void>): Promise<never> {
  let code: number;
  try {
    code = (await body()) ?? EXIT.ok;
  } catch (err) {
    code = reportError(command, err, verbose);
  }
  process.exit(code);
}

/**
 * A command that runs through runAndExit (hangar configure, run, terminal, install…): its flags and
 * examples (`builder`), `--verbose` after them, and its work, whose failure is printed (its stack
 * with --verbose) and becomes the exit code.
 */
export function runnerCommand<A extends { verbose?: boolean }>(c: {
  command: string;
  describe: string;
  builder: (y: Argv<object>) => Argv<A>;
  run: (args: ArgumentsCamelCase<A>) => Promise<number | void>;
}): CommandModule<object, A> {
  const name = c.command.split(' ')[0]!;
  return {
    command: c.command,
    describe: c.describe,
    builder: (y) => c.builder(y).option('verbose', { type: 'boolean', describe: 'print stack traces of errors' }) as Argv<A>,
    handler: (args) => runAndExit(name, args.verbose, () => c.run(args)),
  };
}
