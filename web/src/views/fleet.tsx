import { useEffect, useState } from 'preact/hooks';
import { can } from '../access';
import { call, settle } from '../api';
import { changed, useLive } from '../live';
import { href } from '../router';
import { Ago, Badge, bytes, ConfirmButton, Facts, Field, LogsButton, Modal, notify, Page, ResourceList, useAction, useRecord, type Column } from '../ui';

type Node = { id: string; name: string; status: string; hostname: string | null; ip_address: string | null; architecture: string | null; agent_version: string | null; last_heartbeat_at: string | null; resources: any; gpus?: unknown[] };

const STATUSES = ['pending', 'ready', 'offline', 'needs_reboot', 'cordoned', 'drained', 'removing'];

const nodeLive = (e: { type: string; data: any }) => changed('node')(e) || e.type === 'node.status';

/** The actions an admin takes on a node, each confirmed first. */
export function NodeActions({ node }: { node: Node }) {
  const act = (action: 'cordon' | 'drain' | 'uncordon' | 'update-agent' | 'reboot') => () => call(`POST /v1/nodes/{id}/${action}` as 'POST /v1/nodes/{id}/cordon', { params: { id: node.id } });
  const who = `${node.name} (${node.id})`;
  return (
    <div class="row-actions" role="group" aria-label={`Actions for node ${node.name}`}>
      {node.status === 'cordoned' || node.status === 'drained' ? (
        <ConfirmButton label="Uncordon" needs="POST /v1/nodes/{id}/uncordon" title="Uncordon node" confirm={<p>New workloads may be placed on {who} again.</p>} onConfirm={act('uncordon')} done={`${node.name} uncordoned`} />
      ) : (
        <>
          <ConfirmButton label="Cordon" needs="POST /v1/nodes/{id}/cordon" title="Cordon node" confirm={<p>No new workloads will be placed on {who}; what runs there keeps running.</p>} onConfirm={act('cordon')} done={`${node.name} cordoned`} />
          <ConfirmButton label="Drain" needs="POST /v1/nodes/{id}/drain" title="Drain node" danger confirm={<p>{who} is cordoned and its workloads move to other nodes.</p>} onConfirm={act('drain')} done={`${node.name} draining`} />
        </>
      )}
      <ConfirmButton label="Update agent" needs="POST /v1/nodes/{id}/update-agent" title="Update the agent" confirm={<p>{who} downloads this control plane's agent executable and restarts its agent.</p>} onConfirm={act('update-agent')} done="agent update queued" />
      <ConfirmButton label="Reboot" needs="POST /v1/nodes/{id}/reboot" title="Reboot the machine" danger confirm={<p>The machine {who} reboots now. Its workloads stop until it is back.</p>} onConfirm={act('reboot')} done="reboot queued" />
      <LogsButton
        needs="POST /v1/nodes/{id}/logs"
        title={`Agent logs of ${node.name}`}
        read={async () => settle('GET /v1/nodes/{id}/logs/{taskId}', { id: node.id, taskId: (await call('POST /v1/nodes/{id}/logs', { params: { id: node.id }, query: { lines: 200 } })).data.task_id })}
      />
    </div>
  );
}

/** A join token and the one command that joins a machine with it. */
function JoinDialog({ onClose }: { onClose: () => void }) {
  const [token, setToken] = useState<{ token: string; expires_at: string; api_url: string; api_urls: string[]; join_commands: { amd64: string; arm64: string } } | null>(null);
  const [arch, setArch] = useState<'amd64' | 'arm64'>('amd64');
  const [busy, run] = useAction();
  // The control plane says how a machine reaches it (api.public_addresses, else its own addresses): not this browser's address.
  const command = token ? token.join_commands[arch] : '';
  return (
    <Modal title="Add a machine" onClose={onClose} wide>
      {!token ? (
        <>
          <p>A join token lets one machine join once. It expires after the time the control plane is configured with (10 minutes by default).</p>
          <div class="buttons">
            <button type="button" onClick={onClose}>
              Cancel
            </button>
            <button type="button" class="primary" disabled={busy} onClick={() => run(async () => setToken((await call('POST /v1/nodes/token', { body: {} })).data))}>
              Create a join token
            </button>
          </div>
        </>
      ) : (
        <>
          <Field label="Machine architecture">
            <select value={arch} onChange={(e) => setArch((e.currentTarget as HTMLSelectElement).value as 'amd64' | 'arm64')}>
              <option value="amd64">amd64 (x86-64)</option>
              <option value="arm64">arm64 (aarch64, Raspberry Pi 4/5)</option>
            </select>
          </Field>
          <Field
            label="Run this on the machine"
            hint={`The machine reaches the control plane at ${token.api_url}${token.api_urls.length > 1 ? ` (also: ${token.api_urls.slice(1).join(', ')})` : ''}; set api.public_addresses if it should use another address. The token expires at ${new Date(token.expires_at).toLocaleString()}. The agent checks the control plane's CA against the token before it sends anything.`}
          >
            <textarea class="command" readOnly rows={4} value={command} onFocus={(e) => (e.currentTarget as HTMLTextAreaElement).select()} />
          </Field>
          <p id="join-token" class="muted">
            Token: <code data-testid="join-token">{token.token}</code>
          </p>
          <div class="buttons">
            <button type="button" onClick={() => navigator.clipboard?.writeText(command).then(() => notify('join command copied'), () => notify('copy it by hand', 'error'))}>
              Copy command
            </button>
            <button type="button" class="primary" onClick={onClose}>
              Done
            </button>
          </div>
        </>
      )}
    </Modal>
  );
}

const columns: Column<Node>[] = [
  { label: 'Name', render: (n) => <a href={href('nodes', n.id)}>{n.name}</a> },
  { label: 'Status', render: (n) => <Badge status={n.status} /> },
  { label: 'Address', render: (n) => n.ip_address ?? n.hostname ?? '–' },
  { label: 'Resources', render: (n) => (n.resources ? `${n.resources.cpus ?? '?'} CPU · ${bytes(n.resources.memory_total_bytes)}` : '–') },
  { label: 'GPUs', render: (n) => String(n.gpus?.length ?? 0) },
  { label: 'Agent', render: (n) => n.agent_version ?? '–' },
  { label: 'Last heartbeat', render: (n) => <Ago at={n.last_heartbeat_at} /> },
];

export function Fleet() {
  const [joining, setJoining] = useState(false);
  return (
    <Page
      title="Fleet"
      actions={
        can('POST /v1/nodes/token') && (
          <button type="button" class="primary" onClick={() => setJoining(true)}>
            Add a machine
          </button>
        )
      }
    >
      <ResourceList
        route="GET /v1/nodes"
        label="Nodes"
        columns={columns}
        live={nodeLive}
        filters={[{ name: 'status', label: 'Status', options: STATUSES.map((s) => [s, s.replace('_', ' ')]) }]}
        empty="No machines yet: add one with a join token."
        actions={(n: Node) => <NodeActions node={n} />}
      />
      {joining && <JoinDialog onClose={() => setJoining(false)} />}
    </Page>
  );
}

type NodeEvent = { id: number; kind: string; message: string | null; created_at: string };

/**
 * The projects a node is granted to (of those the caller sees; docs/tenancy.md "Nodes granted to
 * projects"), each linking to its page where admins grant and revoke; none: the installation's.
 */
function NodeProjects({ nodeId }: { nodeId: string }) {
  const [projects, setProjects] = useState<Array<{ id: string; name: string }> | null>(null);
  // Every project it serves that the caller sees, whichever the header's switcher chose (`project: undefined`: not narrowed).
  useEffect(() => void call('GET /v1/projects', { query: { node: nodeId, limit: 1000, project: undefined } }).then((r) => setProjects(r.data as never), () => setProjects([])), [nodeId]);
  if (!projects) return <>…</>;
  if (!projects.length) return <span class="muted">granted to none (the installation’s)</span>;
  return (
    <span aria-label="Granted to projects">
      {projects.flatMap((p, i) => [
        i > 0 ? ', ' : '',
        <a key={p.id} href={href('projects', p.id)}>
          {p.name}
        </a>,
      ])}
    </span>
  );
}

export function NodeDetail({ id }: { id: string }) {
  const [node, error] = useRecord('GET /v1/nodes/{id}', { id }, (e) => (changed('node')(e) && e.data.id === id) || (e.type === 'node.status' && e.data.node_id === id));
  const [events, setEvents] = useState<NodeEvent[]>([]);
  const loadEvents = async () => setEvents(((await call('GET /v1/nodes/events', { query: { node_id: id, limit: 200 } })).data ?? []) as NodeEvent[]);
  useEffect(() => void loadEvents(), [id]);
  useLive((e) => e.type === 'node.event' && e.data.node_id === id, loadEvents, [id]);
  if (error) return <Page title="Node">{<p role="alert" class="error">{error}</p>}</Page>;
  if (!node) return <Page title="Node">Loading…</Page>;
  const n = node as Node & Record<string, any>;
  return (
    <Page title={`Node ${n.name}`} actions={<NodeActions node={n} />}>
      <Facts
        label="Node"
        rows={[
          ['Id', <code>{n.id}</code>],
          ['Status', <Badge status={n.status} />],
          ['Hostname', n.hostname],
          ['Address', n.ip_address],
          ['Overlay address', n.overlay_ip],
          ['Architecture', n.architecture],
          ['OS', n.os?.pretty_name ?? n.os?.name ?? null],
          ['CPUs', n.resources?.cpus],
          ['Memory', n.resources ? `${bytes(n.resources.memory_free_bytes)} free of ${bytes(n.resources.memory_total_bytes)}` : null],
          ['GPUs', (n.gpus ?? []).length ? (n.gpus as any[]).map((g) => g.name ?? g.model ?? 'GPU').join(', ') : 'none'],
          ['Agent', n.agent_version],
          ['Last heartbeat', <Ago at={n.last_heartbeat_at} />],
          ['Pending updates', n.pending_updates ?? '–'],
          ['Reboot required', n.reboot_required ? 'yes' : 'no'],
          ['Projects', can('GET /v1/projects') ? <NodeProjects nodeId={n.id} /> : null],
        ]}
      />
      <h2>Events</h2>
      <ol class="events" aria-label="Node events, newest first">
        {[...events].reverse().map((e) => (
          <li key={e.id}>
            <Ago at={e.created_at} /> <strong>{e.kind.replace(/_/g, ' ')}</strong> {e.message}
          </li>
        ))}
        {!events.length && <li class="muted">No events.</li>}
      </ol>
    </Page>
  );
}
