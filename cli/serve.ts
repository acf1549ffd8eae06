import cluster from 'node:cluster';
import { parseArgs } from 'node:util';
import path from 'node:path';
import type { CommandModule } from 'yargs';
import { loadConfig } from '../core/config.js';
import type { Hangar } from '../core/app.js';
import { ConfigError } from '../core/errors.js';
import { createLogger } from '../core/log.js';
import { startStep } from '../core/startup.js';
import { reportReady, superviseWorkers, workerIndex } from '../core/workers.js';
import { giveHeapBackWhenQuiet, type Collect } from './young-generation.js';

interface ServeArgs {
  config?: string;
  'data-dir'?: string;
}

/** The options of `hangar serve`, for yargs and for its start without yargs (cli/main.ts). */
const SERVE_OPTIONS = {
  config: { type: 'string', describe: 'YAML configuration file (HANGAR_* variables override it)' },
  'data-dir': { type: 'string', describe: 'Directory for the CA, certificates, secrets and SQLite file' },
} as const;

export const serveCommand: CommandModule<object, ServeArgs> = {
  command: 'serve',
  describe: 'Start the control plane (control API on :8443, plus the login API when its plugin is enabled)',
  builder: (y) => y.options(SERVE_OPTIONS),
  handler: serve,
};

/**
 * The arguments of `hangar serve` when they are only its own options (`--config x`, `--data-dir=y`);
 * null otherwise (`--help`, a typo…), and then the yargs program parses them and says what is wrong.
 */
export function parseServeArgs(args: string[]): ServeArgs | null {
  try {
    const { values } = parseArgs({ args, options: SERVE_OPTIONS, strict: true, allowPositionals: false });
    return values;
  } catch {
    return null;
  }
}

/**
 * Starts the control plane and stops it on SIGINT/SIGTERM. With `api.workers` > 1 this process is
 * the primary: it starts and watches the workers (core/workers.ts), each of which runs this again.
 */
export async function serve(args: ServeArgs): Promise<void> {
  let hangar: Hangar;
  try {
    startStep('entry');
    // The control plane's own scheduled backups carry the operator's configuration file (plugins/backups/control-plane.ts).
    if (args.config) process.env.HANGAR_CONFIG = path.resolve(args.config);
    const config = loadConfig({ file: args.config, dataDir: args['data-dir'] });
    startStep('config_read');
    if (config.api.workers > 1 && cluster.isPrimary) {
      process.exit(await superviseWorkers(config.api.workers, createLogger(config.log.level)));
    }
    // Loaded here: the primary of several workers serves nothing and stays small without them.
    const [{ Hangar }, { builtinCatalogue }] = await Promise.all([import('../core/app.js'), import('./catalogue.js')]);
    startStep('modules_loaded');
    hangar = await Hangar.start({ config, catalogue: builtinCatalogue });
  } catch (err) {
    if (err instanceof ConfigError) {
      console.error(`hangar: ${err.message}`);
      process.exit(2);
    }
    throw err;
  }
  // The launcher (bin/hangar) runs `serve` with `--expose-gc` for this.
  const collect = (globalThis as { gc?: Collect }).gc;
  if (collect) {
    const log = hangar.log;
    giveHeapBackWhenQuiet(collect, (before, after) =>
      log.debug({ young_before_mb: Math.round(before / 2 ** 20), young_after_mb: Math.round(after / 2 ** 20) }, 'heap given back after load'),
    );
  }
  let signals = 0;
  const stop = async (why: string, signal: boolean) => {
    if (signal && ++signals > 1) process.exit(1);
    hangar.log.info({ signal: signal ? why : undefined, reason: signal ? undefined : why }, 'shutdown requested');
    await hangar.stop();
    process.exit(0);
  };
  process.on('SIGINT', () => void stop('SIGINT', true));
  process.on('SIGTERM', () => void stop('SIGTERM', true));
  if (workerIndex() !== null) reportReady((why) => void stop(why, false));
}
