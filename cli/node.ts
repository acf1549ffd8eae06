import type { ApiClient } from './api-client.js';
import { fileText, keyValues, many, POLL_MS, type Args, type Verb } from './resource-commands.js';

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

interface RolloutView {
  id: string;
  status: string;
  waves_total: number;
  waves_done: number;
  current_wave: number | null;
  next_wave_at: string | null;
  reason: string | null;
  failed_node: { id: string; name: string; error: string | null } | null;
  counts: Record<'total' | 'updated' | 'failed' | 'updating' | 'pending' | 'not_started' | 'current' | 'skipped', number>;
  target_versions: Record<string, string>;
  nodes: Array<{ node_id: string; name: string; wave: number | null; status: string; error: string | null }>;
}

/** One line of an agent rollout's progress: `wave 2/5 · 3 updated · 0 failed · 2 updating · 4 pending`. */
export function rolloutLine(r: RolloutView): string {
  const c = r.counts;
  const wave = r.current_wave ? `wave ${r.current_wave}/${r.waves_total}` : `${r.waves_done}/${r.waves_total} waves done`;
  const extra = [c.current ? `${c.current} already current` : '', c.skipped ? `${c.skipped} skipped (not ready)` : '', c.not_started ? `${c.not_started} not started` : ''].filter(Boolean);
  const waiting = r.status === 'running' && r.next_wave_at && !c.updating ? ` · next wave at ${r.next_wave_at.slice(11, 19)}` : '';
  return `${r.status} · ${wave} · ${c.updated} updated · ${c.failed} failed · ${c.updating} updating · ${c.pending} pending${extra.length ? ` · ${extra.join(' · ')}` : ''}${waiting}`;
}

/** What a finished rollout prints last, and its exit code (0 only when it completed). */
function rolloutEnd(r: RolloutView): number {
  if (r.reason) console.log(r.reason);
  for (const n of r.nodes.filter((n) => n.status === 'failed')) console.log(`✗ ${n.name} (${n.node_id}): ${n.error ?? 'failed'}`);
  return r.status === 'completed' ? 0 : 1;
}

/** Follows a rollout: a line whenever its progress changes, until it ends or `timeoutS` passes. */
async function followRollout(api: ApiClient, first: RolloutView, timeoutS: number): Promise<number> {
  const deadline = Date.now() + timeoutS * 1000;
  let r = first;
  let last = '';
  for (;;) {
    const line = rolloutLine(r);
    if (line !== last) console.log(`${new Date().toISOString().slice(11, 19)} ${line}`);
    last = line;
    if (r.status !== 'running') return rolloutEnd(r);
    if (Date.now() > deadline) {
      console.log(`still running after ${timeoutS} s; follow with: hangar node rollout ${r.id} --wait`);
      return 1;
    }
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
    r = await api.ok<RolloutView>('GET', `/v1/nodes/update-agent/${encodeURIComponent(r.id)}`);
  }
}

export const updateAgentVerb: Verb = {
  command: 'update-agent',
  describe: 'Update the agent of many nodes in waves (--all, --tag, --cluster or --node); a wave whose agent does not come back halts the rest. Follows its progress',
  method: 'POST',
  path: '/update-agent',
  options: {
    all: { type: 'boolean', describe: 'every node' },
    tag: { type: 'string', describe: 'the nodes with this tag, key=value (repeatable: every one)' },
    cluster: { type: 'string', describe: 'the members of this cluster (id or name)' },
    node: { type: 'string', describe: 'this node (id or name; repeatable, updated in the order given)' },
    'wave-size': { type: 'string', describe: 'nodes per wave: a count, or a percentage such as 10% (default 1)' },
    pause: { type: 'number', describe: 'seconds between waves (default 0)' },
    grace: { type: 'number', describe: 'seconds each new agent has to reach the control plane before it returns to the previous one (15–3600, default 120)' },
    wait: { type: 'boolean', default: true, describe: 'follow the rollout until it ends (--no-wait returns at once)' },
    timeout: { type: 'number', default: 86400, describe: 'seconds to follow' },
  },
  refs: { node: { noun: 'node', list: '/v1/nodes', id: /^node-[0-9a-z]+$/ } },
  body: (a) => ({
    ...(a.all ? { all: true } : {}),
    tags: keyValues('tag')(a),
    cluster_id: a.cluster,
    node_ids: many('node')(a),
    wave_size: a['wave-size'],
    pause_s: a.pause,
    grace_seconds: a.grace,
  }),
  output: async (r: RolloutView, a, api) => {
    console.log(`agent rollout ${r.id}: ${r.counts.total} node(s) selected, ${r.waves_total} wave(s), to ${Object.values(r.target_versions).join(', ') || 'the served version'}`);
    if (!a.wait) return `follow with: hangar node rollout ${r.id} --wait`;
    return followRollout(api, r, a.timeout as number);
  },
};

export const rolloutVerb: Verb = {
  command: 'rollout <rollout>',
  describe: 'An agent rollout’s progress (from node update-agent): waves done, nodes updated, failed and pending',
  method: 'GET',
  path: '/update-agent/{rollout}',
  positionals: { rollout: { describe: 'the rollout’s id (arol-…)' } },
  options: {
    wait: { type: 'boolean', default: false, describe: 'follow it until it ends' },
    timeout: { type: 'number', default: 86400, describe: 'seconds to follow' },
  },
  output: async (r: RolloutView, a, api) => {
    if (a.wait) return followRollout(api, r, a.timeout as number);
    console.log(rolloutLine(r));
    for (const n of r.nodes) console.log(`  ${n.wave ? `wave ${n.wave}` : '-'.padEnd(6)} ${n.status.padEnd(11)} ${n.name} (${n.node_id})${n.error ? `: ${n.error}` : ''}`);
    return r.status === 'running' || r.status === 'completed' ? 0 : rolloutEnd({ ...r, nodes: [] });
  },
};

export const rolloutCancelVerb: Verb = {
  command: 'rollout-cancel <rollout>',
  describe: 'Cancel an agent rollout: no further wave starts (the one in progress finishes)',
  method: 'POST',
  path: '/update-agent/{rollout}/cancel',
  positionals: { rollout: { describe: 'the rollout’s id (arol-…)' } },
  output: (r: RolloutView) => `cancelling agent rollout ${r.id}: no wave starts after the one in progress (${rolloutLine(r)})`,
};
