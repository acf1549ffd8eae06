import type { CommandModule } from 'yargs';
import { loadConfig } from '../core/config.js';
import { Hangar } from '../core/app.js';
import { ConfigError } from '../core/errors.js';
import { builtinCatalogue } from './catalogue.js';

interface ServeArgs {
  config?: string;
  'data-dir'?: string;
}

export const serveCommand: CommandModule<object, ServeArgs> = {
  command: 'serve',
  describe: 'Start the control plane (control API on :8443, plus the login API when its plugin is enabled)',
  builder: (y) =>
    y
      .option('config', { type: 'string', describe: 'YAML configuration file (HANGAR_* variables override it)' })
      .option('data-dir', { type: 'string', describe: 'Directory for the CA, certificates, secrets and SQLite file' }),
  async handler(args) {
    let hangar: Hangar;
    try {
      const config = loadConfig({ file: args.config, dataDir: args['data-dir'] });
      hangar = await Hangar.start({ config, catalogue: builtinCatalogue });
    } catch (err) {
      if (err instanceof ConfigError) {
        console.error(`hangar: ${err.message}`);
        process.exit(2);
      }
      throw err;
    }
    let signals = 0;
    const stop = async (signal: string) => {
      if (++signals > 1) process.exit(1);
      hangar.log.info({ signal }, 'shutdown requested');
      await hangar.stop();
      process.exit(0);
    };
    process.on('SIGINT', () => void stop('SIGINT'));
    process.on('SIGTERM', () => void stop('SIGTERM'));
  },
};
