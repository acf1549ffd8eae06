import type { Argv, CommandModule } from 'yargs';
import { apiClient } from './api-client.js';
import { readInput, restoreDashes } from './resource-commands.js';
import { runAndExit } from './runner/errors.js';
import { renderTable } from './runner/output.js';

interface DeployArgs {
  address: string;
  name?: string;
  'ssh-user'?: string;
  'ssh-port'?: number;
  'ssh-key-file'?: string;
  'ssh-password-file'?: string;
  'ssh-profile'?: string;
  'ssh-host-key'?: string;
  wait: boolean;
  timeout: number;
}

interface NodeEvent {
  id: number;
  kind: string;
  message: string | null;
  created_at: string;
}

const FINAL = { deploy_completed: 0, deploy_failed: 1 } as Record<string, number>;

/** A file's text (`-` is stdin); one that cannot be read is a usage error. */
const readSecretFile = (file: string, flag: string): string => readInput(file, flag).toString('utf8');

/** Follows a deploy's events until it completes or fails; each step is one line. */
async function follow(nodeId: string, since: string, timeoutS: number, out: (line: string) => void): Promise<number> {
  const api = apiClient();
  const seen = new Set<number>();
  const deadline = Date.now() + timeoutS * 1000;
  // Only this deploy's events: an earlier deploy of the same machine has its own.
  const after = new Date(Date.parse(since) - 1).toISOString();
  while (Date.now() < deadline) {
    const events = await api.ok<NodeEvent[]>('GET', `/v1/nodes/events?node_id=${encodeURIComponent(nodeId)}&since=${encodeURIComponent(after)}`);
    for (const e of events) {
      if (seen.has(e.id) || !e.kind.startsWith('deploy_')) continue;
      seen.add(e.id);
      const mark = e.kind === 'deploy_failed' ? '✗' : e.kind === 'deploy_completed' ? '✓' : '·';
      out(`${e.created_at.slice(11, 19)} ${mark} ${e.kind.replace(/^deploy_/, '').padEnd(18)} ${e.message ?? ''}`);
      if (e.kind in FINAL) return FINAL[e.kind]!;
    }
    await new Promise((r) => setTimeout(r, 1000));
  }
  out(`still deploying after ${timeoutS} s; follow with: hangar endpoint GET '/v1/nodes/events?node_id=${nodeId}'`);
  return 1;
}

const deployCommand: CommandModule<object, DeployArgs> = {
  command: 'deploy <address>',
  describe: 'Deploy the agent to a machine over SSH and follow its progress',
  builder: (y) =>
    y
      .positional('address', { type: 'string', demandOption: true, describe: 'IP address of the machine' })
      .option('name', { type: 'string', describe: 'display name of the node' })
      .option('ssh-user', { type: 'string', describe: 'default root; a non-root user needs sudo' })
      .option('ssh-port', { type: 'number' })
      .option('ssh-key-file', { type: 'string', describe: 'private key file; its content is sent (over TLS) and never stored unless in a profile' })
      .option('ssh-password-file', { type: 'string', describe: 'file (or - for stdin) holding the password; HANGAR_SSH_PASSWORD works too. Never on the command line.' })
      .option('ssh-profile', { type: 'string', describe: 'a stored SSH profile (name or id)' })
      .option('ssh-host-key', { type: 'string', describe: 'pin the host key: SHA256:…' })
      .option('wait', { type: 'boolean', default: true, describe: 'follow the deploy until it completes (--no-wait returns at once)' })
      .option('timeout', { type: 'number', default: 600, describe: 'seconds to follow' })
      // `--ssh-password-file -` (stdin) would otherwise reach yargs as an empty value and a stray `-`.
      .middleware((argv) => restoreDashes(argv as never, ['address']), true) as unknown as Argv<DeployArgs>,
  handler: (args) =>
    runAndExit('node deploy', false, async () => {
      const password = args['ssh-password-file'] ? readSecretFile(args['ssh-password-file'], '--ssh-password-file').replace(/\r?\n$/, '') : process.env.HANGAR_SSH_PASSWORD;
      const body = {
        ip_address: args.address,
        ...(args.name ? { name: args.name } : {}),
        ...(args['ssh-user'] ? { ssh_user: args['ssh-user'] } : {}),
        ...(args['ssh-port'] ? { ssh_port: args['ssh-port'] } : {}),
        ...(args['ssh-profile'] ? { ssh_profile: args['ssh-profile'] } : {}),
        ...(args['ssh-host-key'] ? { ssh_host_key: args['ssh-host-key'] } : {}),
        ...(args['ssh-key-file'] ? { ssh_key: readSecretFile(args['ssh-key-file'], '--ssh-key-file') } : {}),
        ...(password ? { ssh_password: password } : {}),
      };
      const started = await apiClient().ok<{ node_id: string; started_at: string }>('POST', '/v1/nodes/deploy', body);
      console.log(`deploying ${args.address} as node ${started.node_id}`);
      if (!args.wait) return 0;
      return follow(started.node_id, started.started_at, args.timeout, (line) => console.log(line));
    }),
};

const listCommand: CommandModule = {
  command: 'list',
  describe: 'List nodes',
  handler: () =>
    runAndExit('node list', false, async () => {
      const nodes = await apiClient().ok<Record<string, unknown>[]>('GET', '/v1/nodes?limit=1000');
      const rows = nodes.map((n) => ({ id: n.id, name: n.name, status: n.status, hostname: n.hostname, ip_address: n.ip_address, overlay_ip: n.overlay_ip, architecture: n.architecture, agent: n.agent_version }));
      console.log(rows.length ? renderTable(rows) : 'no nodes');
      return 0;
    }),
};

export const nodeCommand: CommandModule = {
  command: 'node <command>',
  describe: 'Nodes: deploy over SSH (with progress), list',
  builder: (y) => y.command(deployCommand).command(listCommand).demandCommand(1),
  handler: () => undefined,
};
