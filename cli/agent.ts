import { readFileSync } from 'node:fs';
import path from 'node:path';
import { pino } from 'pino';
import type { CommandModule } from 'yargs';
import { createLogger } from '../core/log.js';
import { Agent, joinControlPlane } from '../agent/agent.js';
import { defaultDataDir, identityExists, loadIdentity } from '../agent/identity.js';
import { mkdirSync } from 'node:fs';

interface AgentArgs {
  join?: boolean;
  token?: string;
  api?: string;
  'ca-file'?: string;
  'data-dir'?: string;
  'log-level'?: string;
}

export const agentCommand: CommandModule<object, AgentArgs> = {
  command: 'agent',
  describe: 'Run the machine agent (join first with --join --token T --api https://HOST:8443)',
  builder: (y) =>
    y
      .option('join', { type: 'boolean', describe: 'Join a control plane with a token before running' })
      .option('token', { type: 'string', describe: 'Join token (from POST /v1/nodes/token)' })
      .option('api', { type: 'string', describe: 'Control API URL, e.g. https://cp.example:8443' })
      .option('ca-file', { type: 'string', describe: 'CA certificate to trust when the token pins none (operator certificates)' })
      .option('data-dir', { type: 'string', describe: 'Where the agent keeps its identity and log (default /var/lib/hangar-agent as root)' })
      .option('log-level', { type: 'string', default: 'info' })
      .check((args) => {
        if (args.join && (!args.token || !args.api)) throw new Error('--join needs --token and --api');
        return true;
      }),
  async handler(args) {
    const dataDir = path.resolve(args['data-dir'] ?? defaultDataDir());
    mkdirSync(dataDir, { recursive: true, mode: 0o700 });
    const logFile = path.join(dataDir, 'agent.log');
    const log = createLogger(args['log-level'] ?? 'info', pino.multistream([{ stream: process.stdout }, { stream: pino.destination({ dest: logFile, append: true, sync: true }) }]));
    let identity;
    try {
      if (args.join && !identityExists(dataDir)) {
        identity = await joinControlPlane({ apiUrl: args.api!, token: args.token!, dataDir, log, caPem: args['ca-file'] ? readFileSync(args['ca-file'], 'utf8') : undefined });
      } else if (identityExists(dataDir)) {
        if (args.join) log.info({ data_dir: dataDir }, 'already joined; resuming with the stored identity');
        identity = loadIdentity(dataDir);
      } else {
        console.error(`hangar agent: no identity in ${dataDir}; join first: hangar agent --join --token T --api https://HOST:8443 --data-dir ${dataDir}`);
        process.exit(2);
      }
    } catch (err) {
      console.error(`hangar agent: ${(err as Error).message}`);
      process.exit(1);
    }
    const agent = new Agent(identity, { dataDir, logFile, log });
    // A bug must not go unrecorded: log it, then exit non-zero so the supervisor starts a fresh agent.
    process.on('uncaughtException', (err) => {
      log.fatal({ error: err.message, stack: err.stack }, 'agent crashed');
      process.exit(70);
    });
    const stop = (signal: string) => {
      log.info({ signal }, 'agent stopping');
      agent.stop();
    };
    process.on('SIGINT', () => stop('SIGINT'));
    process.on('SIGTERM', () => stop('SIGTERM'));
    await agent.run();
    process.exit(0);
  },
};
