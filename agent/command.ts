import { readFileSync } from 'node:fs';
import path from 'node:path';
import { pino } from 'pino';
import type { CommandModule } from 'yargs';
import { createLogger } from '../core/log.js';
import { Agent, joinControlPlane } from './agent.js';
import { loadAgentDrivers } from './executors/index.js';
import { defaultDataDir, identityExists, loadIdentity } from './identity.js';
import { mkdirSync } from 'node:fs';

interface AgentArgs {
  join?: boolean;
  token?: string;
  'token-stdin'?: boolean;
  'token-file'?: string;
  api?: string;
  'ca-file'?: string;
  'data-dir'?: string;
  'log-level'?: string;
  driver?: string[];
}

/** The join token: from stdin, a file, --token, else HANGAR_JOIN_TOKEN. */
function joinToken(args: AgentArgs): string {
  const source = args['token-stdin'] ? 'stdin' : (args['token-file'] ?? (args.token ? '--token' : 'HANGAR_JOIN_TOKEN'));
  const raw = args['token-stdin'] ? readFileSync(0, 'utf8') : args['token-file'] ? readFileSync(args['token-file'], 'utf8') : (args.token ?? process.env.HANGAR_JOIN_TOKEN ?? '');
  const token = raw.trim();
  if (!token) throw new Error(`no join token in ${source}`);
  return token;
}

export const agentCommand: CommandModule<object, AgentArgs> = {
  command: 'agent',
  describe: 'Run the machine agent (join first with --join --token-stdin --api https://HOST:8443, the token on stdin)',
  builder: (y) =>
    y
      .option('join', { type: 'boolean', describe: 'Join a control plane with a token before running' })
      .option('token-stdin', { type: 'boolean', describe: 'Read the join token (from POST /v1/nodes/token) from stdin' })
      .option('token-file', { type: 'string', describe: 'Read the join token from this file' })
      .option('token', { type: 'string', describe: 'Join token on the command line, where `ps` shows it to every user of the machine: prefer --token-stdin, --token-file or HANGAR_JOIN_TOKEN' })
      .option('api', { type: 'string', describe: 'Control API URL, e.g. https://cp.example:8443' })
      .option('ca-file', { type: 'string', describe: 'CA certificate to trust when the token pins none (operator certificates)' })
      .option('data-dir', { type: 'string', describe: 'Where the agent keeps its identity and log (default /var/lib/hangar-agent as root)' })
      .option('log-level', { type: 'string', default: 'info' })
      .option('driver', {
        type: 'string',
        array: true,
        describe: 'An orchestrator driver module to load (its agent half, docs/architecture.md "Adding an orchestrator backend"); repeatable. Default: HANGAR_AGENT_DRIVERS, comma-separated',
      })
      .check((args) => {
        if ([args.token, args['token-file'], args['token-stdin']].filter(Boolean).length > 1) throw new Error('give the join token one way: --token-stdin, --token-file or --token');
        if (args.join && !(args.token || args['token-file'] || args['token-stdin'] || process.env.HANGAR_JOIN_TOKEN)) {
          throw new Error('--join needs the token: --token-stdin, --token-file FILE, HANGAR_JOIN_TOKEN, or --token');
        }
        if (args.join && !args.api) throw new Error('--join needs --api');
        return true;
      }),
  async handler(args) {
    try {
      await loadAgentDrivers(args.driver ?? (process.env.HANGAR_AGENT_DRIVERS ?? '').split(',').filter((x) => x.trim()));
    } catch (err) {
      console.error(`hangar agent: ${(err as Error).message}`);
      process.exit(2);
    }
    const dataDir = path.resolve(args['data-dir'] ?? defaultDataDir());
    mkdirSync(dataDir, { recursive: true, mode: 0o700 });
    const logFile = path.join(dataDir, 'agent.log');
    const log = createLogger(args['log-level'] ?? 'info', pino.multistream([{ stream: process.stdout }, { stream: pino.destination({ dest: logFile, append: true, sync: true }) }]));
    let identity;
    try {
      if (args.join && !identityExists(dataDir)) {
        identity = await joinControlPlane({ apiUrl: args.api!, token: joinToken(args), dataDir, log, caPem: args['ca-file'] ? readFileSync(args['ca-file'], 'utf8') : undefined });
      } else if (identityExists(dataDir)) {
        if (args.join) log.info({ data_dir: dataDir }, 'already joined; resuming with the stored identity');
        identity = loadIdentity(dataDir);
      } else {
        console.error(`hangar agent: no identity in ${dataDir}; join first: hangar agent --join --token-stdin --api https://HOST:8443 --data-dir ${dataDir} (the token on stdin)`);
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
