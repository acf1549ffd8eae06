import { readFileSync } from 'node:fs';
import { connectionFile, connectionFromJson, readStoredConnection, resolveConnection, writeConnection, type Connection } from './runner/connection.js';
import { EXIT, runnerCommand, usageError } from './runner/errors.js';

interface ConfigureArgs {
  from?: string;
  'api-url'?: string;
  'access-key'?: string;
  'secret-key'?: string;
  'ca-file'?: string;
  project?: string;
  show?: boolean;
  verbose?: boolean;
}

function readText(file: string, what: string): string {
  try {
    return readFileSync(file === '-' ? 0 : file, 'utf8');
  } catch (err) {
    throw usageError(`${what} ${file}: ${(err as Error).message}`);
  }
}

export const configureCommand = runnerCommand<ConfigureArgs>({
  command: 'configure',
  describe: "Store how to reach the control plane (URL, API key, CA) in the user's config dir, mode 0600",
  builder: (y) =>
    y
      .option('from', { type: 'string', describe: 'the connection JSON that POST /v1/bootstrap returned (a file, or - for stdin)' })
      .option('api-url', { type: 'string', describe: 'control API URL, e.g. https://cp.example.com:8443' })
      .option('access-key', { type: 'string', describe: 'API access key id' })
      .option('secret-key', { type: 'string', describe: 'API secret access key' })
      .option('ca-file', { type: 'string', describe: "PEM file of the control plane's CA to pin (default: the system's CAs)" })
      .option('project', { type: 'string', describe: 'the project new clusters go in when a command names none (id or name; "" forgets it: the server then uses your default project)' })
      .option('show', { type: 'boolean', describe: 'print the effective connection (secret hidden) and where each value comes from' })
      .example('$0 configure --from connection.json', 'after bootstrap')
      .example('$0 configure --api-url https://cp:8443 --access-key HK… --secret-key … --ca-file ca.pem', 'by hand')
      .example('$0 configure --project team-a', 'new clusters go in project team-a'),
  async run(args) {
    const flags = { api_url: args['api-url'], access_key_id: args['access-key'], secret_access_key: args['secret-key'] };
    const anyFlag = Object.values(flags).some((v) => v !== undefined) || args['ca-file'] !== undefined;
    if (args.project !== undefined && !args.from && !anyFlag) {
      // Only the project: the stored connection keeps the rest.
      const stored = readStoredConnection();
      if (!stored) throw usageError(`no connection stored in ${connectionFile()} to add a project to: run hangar configure --from <connection.json> first`);
      const { project: _old, ...rest } = connectionFromJson(stored, connectionFile());
      const file = writeConnection({ ...rest, ...(args.project ? { project: args.project } : {}) });
      console.log(args.project ? `project ${args.project} saved to ${file}: new clusters go in it unless a command names another` : `project forgotten in ${file}: new clusters go in your default project`);
      return EXIT.ok;
    }
    if (args.show && !args.from && !anyFlag) {
      const c = resolveConnection();
      const source = (k: string) => (c.sources[k] ? `  (${c.sources[k]})` : '');
      console.log(`file:              ${connectionFile()}`);
      console.log(`api_url:           ${c.api_url ?? '(not set)'}${source('api_url')}`);
      console.log(`access_key_id:     ${c.access_key_id ?? '(not set)'}${source('access_key_id')}`);
      console.log(`secret_access_key: ${c.secret_access_key ? '(set, hidden)' : '(not set)'}${source('secret_access_key')}`);
      console.log(`ca:                ${c.ca_pem ? 'pinned PEM' : "the system's trusted CAs"}${source('ca_pem')}`);
      console.log(`project:           ${c.project ?? '(not set: your default project)'}${source('project')}`);
      return EXIT.ok;
    }
    if (!args.from && !anyFlag) {
      throw usageError('give --from <connection.json> (the bootstrap output), or --api-url, --access-key and --secret-key; --show prints the current one');
    }
    let base: Partial<Connection> = {};
    if (args.from) {
      const text = readText(args.from, '--from');
      let parsed: unknown;
      try {
        parsed = JSON.parse(text);
      } catch (err) {
        throw usageError(`--from ${args.from} is not JSON: ${(err as Error).message}`);
      }
      base = connectionFromJson(parsed, `--from ${args.from}`);
    }
    const merged: Record<string, unknown> = { ...base, ...(args.project ? { project: args.project } : {}) };
    for (const [k, v] of Object.entries(flags)) if (v !== undefined) merged[k] = v;
    if (args['ca-file'] !== undefined) {
      const pem = readText(args['ca-file'], '--ca-file');
      if (!pem.includes('-----BEGIN CERTIFICATE-----')) throw usageError(`--ca-file ${args['ca-file']} holds no PEM certificate`);
      merged.ca_pem = pem;
    }
    const connection = connectionFromJson(merged, args.from ? `--from ${args.from} with the options given` : 'the options (--api-url, --access-key, --secret-key)');
    const file = writeConnection(connection);
    console.log(`connection saved to ${file} (mode 0600): ${connection.api_url} with key ${connection.access_key_id}${connection.ca_pem ? ', CA pinned' : ''}`);
    return EXIT.ok;

  },
});
