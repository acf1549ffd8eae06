import type { ApiClient } from './api-client.js';
import { fileText, type Args, type Verb } from './resource-commands.js';

/**
 * `hangar node deploy`: the one node verb that is more than a request — it follows the deploy's
 * events until it completes. The other node verbs are plain entries of cli/resources.ts.
 */

interface NodeEvent {
  id: number;
  kind: string;
  message: string | null;
  created_at: string;
}

const FINAL = { deploy_completed: 0, deploy_failed: 1 } as Record<string, number>;

/** Follows a deploy's events until it completes or fails; each step is one line. */
async function follow(api: ApiClient, nodeId: string, since: string, timeoutS: number, out: (line: string) => void): Promise<number> {
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

/** The SSH password: from --ssh-password-file (- is stdin), else HANGAR_SSH_PASSWORD; never on the command line. */
const sshPassword = (a: Args) => fileText('ssh-password-file', true)(a) ?? (process.env.HANGAR_SSH_PASSWORD || undefined);

export const deployVerb: Verb = {
  command: 'deploy <address>',
  describe: 'Deploy the agent to a machine over SSH and follow its progress',
  method: 'POST',
  path: '/deploy',
  positionals: { address: { describe: 'IP address of the machine' } },
  options: {
    name: { type: 'string', describe: 'display name of the node' },
    'ssh-user': { type: 'string', describe: 'default root; a non-root user needs sudo' },
    'ssh-port': { type: 'number' },
    'ssh-key-file': { type: 'string', describe: 'private key file; its content is sent (over TLS) and never stored unless in a profile' },
    'ssh-password-file': { type: 'string', describe: 'file (or - for stdin) holding the password; HANGAR_SSH_PASSWORD works too. Never on the command line.' },
    'ssh-profile': { type: 'string', describe: 'a stored SSH profile (name or id: hangar ssh-profile list)' },
    'ssh-host-key': { type: 'string', describe: 'pin the host key: SHA256:…' },
    wait: { type: 'boolean', default: true, describe: 'follow the deploy until it completes (--no-wait returns at once)' },
    timeout: { type: 'number', default: 600, describe: 'seconds to follow' },
  },
  body: {
    ip_address: 'address',
    name: 'name',
    ssh_user: 'ssh-user',
    ssh_port: 'ssh-port',
    ssh_profile: 'ssh-profile',
    ssh_host_key: 'ssh-host-key',
    ssh_key: fileText('ssh-key-file'),
    ssh_password: sshPassword,
  },
  output: async (started: { node_id: string; started_at: string }, a, api) => {
    console.log(`deploying ${a.address} as node ${started.node_id}`);
    if (!a.wait) return 0;
    return follow(api, started.node_id, started.started_at, a.timeout as number, (line) => console.log(line));
  },
};
