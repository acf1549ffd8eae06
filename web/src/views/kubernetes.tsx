import { useEffect, useState } from 'preact/hooks';
import { can, seesEveryProject, useAccess } from '../access';
import { call } from '../api';
import { changed } from '../live';
import { href } from '../router';
import { ProjectName } from './projects';
import { Ago, Badge, ConfirmButton, Facts, Field, FormButton, Page, ResourceList, useAction, useRecord } from '../ui';

type ClusterNode = { node_id: string; role: 'server' | 'agent'; status: string; address?: string | null; error?: string | null };
type Cluster = { id: string; name: string; status: string; project_id?: string | null; server_node_id: string | null; nodes: ClusterNode[]; version: string | null; kubeconfig_endpoint: string; error: string | null; created_at: string };
type ReportedNode = ClusterNode & { ready: boolean | null; roles: string[]; kubelet_version: string | null; availability: string | null };

const CLUSTER_EVENTS = changed('cluster', 'swarm_member');
const text = (form: FormData, name: string) => String(form.get(name) ?? '').trim();

/**
 * The ready nodes a cluster of `project` can be made of or grow by: every one for installation
 * admins (the API refuses one granted to another project); for a member, those granted to the
 * project, the only ones it may place (docs/tenancy.md "Nodes granted to projects").
 */
export function usePlaceableNodes(project: string | null | undefined): Array<{ id: string; name: string }> {
  const access = useAccess();
  const granted = access && !seesEveryProject(access) && project ? project : null;
  const [nodes, setNodes] = useState<Array<{ id: string; name: string }>>([]);
  useEffect(() => {
    const asked = granted
      ? call('GET /v1/projects/{id}/nodes', { params: { id: granted } }).then((r) => (r.data as Array<{ node_id: string; name: string; status: string }>).filter((n) => n.status === 'ready').map((n) => ({ id: n.node_id, name: n.name })))
      : call('GET /v1/nodes', { query: { status: ['ready'], limit: 1000 } }).then((r) => r.data as Array<{ id: string; name: string }>);
    void asked.then(setNodes, () => undefined);
  }, [granted]);
  return nodes;
}

export function NodeOptions({ nodes }: { nodes: Array<{ id: string; name: string }> }) {
  return (
    <>
      {nodes.map((n) => (
        <option key={n.id} value={n.id}>
          {n.name} ({n.id})
        </option>
      ))}
    </>
  );
}

export function KubernetesClusters() {
  const nodes = usePlaceableNodes(useAccess()?.project);
  return (
    <Page
      title="Kubernetes clusters"
      actions={
        <FormButton
          label="Create cluster"
          title="Create a Kubernetes (k3s) cluster"
          needs="POST /v1/kubernetes/clusters"
          primary
          submitLabel="Create"
          done="cluster accepted: installing k3s"
          onSubmit={(f) =>
            call('POST /v1/kubernetes/clusters', {
              body: { name: text(f, 'name'), node_ids: [text(f, 'server'), ...f.getAll('agents').map(String).filter((id) => id !== text(f, 'server'))], options: { kubeconfig_endpoint: text(f, 'endpoint') || 'public' } },
            })
          }
        >
          <Field label="Name" hint="a DNS label: lower-case letters, digits and -">
            <input name="name" required pattern="[a-z0-9]([a-z0-9-]*[a-z0-9])?" />
          </Field>
          <Field label="Server node" hint="runs k3s server (the cluster's API)">
            <select name="server" required>
              <NodeOptions nodes={nodes} />
            </select>
          </Field>
          <Field label="Agent nodes" hint="run k3s agent; more can be added later">
            <select name="agents" multiple size={Math.min(6, Math.max(2, nodes.length))}>
              <NodeOptions nodes={nodes} />
            </select>
          </Field>
          <Field label="Kubeconfig endpoint" hint="public, overlay, or an IPv4 address clients reach the API server at">
            <input name="endpoint" placeholder="public" />
          </Field>
        </FormButton>
      }
    >
      <ResourceList
        route="GET /v1/kubernetes/clusters"
        label="Kubernetes clusters"
        live={CLUSTER_EVENTS}
        empty="No Kubernetes clusters yet."
        columns={[
          { label: 'Name', render: (c: Cluster) => <a href={href('kubernetes', c.id)}>{c.name}</a> },
          { label: 'Status', render: (c: Cluster) => <Badge status={c.status} /> },
          { label: 'Project', render: (c: Cluster) => <ProjectName id={c.project_id} /> },
          { label: 'Server', render: (c: Cluster) => (c.server_node_id ? <a href={href('nodes', c.server_node_id)}>{c.server_node_id}</a> : '–') },
          { label: 'Nodes', render: (c: Cluster) => String(c.nodes.length) },
          { label: 'Version', render: (c: Cluster) => c.version ?? '–' },
          { label: 'Created', render: (c: Cluster) => <Ago at={c.created_at} /> },
        ]}
      />
    </Page>
  );
}

/** Saves a kubeconfig of the user's own as a file: a token of its ServiceAccount, cluster-admin for admins, view otherwise (the API never logs it). */
function KubeconfigButton({ cluster }: { cluster: Cluster }) {
  const [busy, run] = useAction();
  return (
    <button
      type="button"
      class="small"
      disabled={busy}
      onClick={() =>
        run(async () => {
          const answer = await call('GET /v1/kubernetes/clusters/{id}/kubeconfig', { params: { id: cluster.id } });
          const url = URL.createObjectURL(new Blob([(answer.data as { kubeconfig: string }).kubeconfig], { type: 'application/yaml' }));
          const link = Object.assign(document.createElement('a'), { href: url, download: `${cluster.name}.kubeconfig` });
          link.click();
          URL.revokeObjectURL(url);
        })
      }
    >
      Download kubeconfig
    </button>
  );
}

export function KubernetesClusterDetail({ id }: { id: string; admin: boolean }) {
  const [cluster, error] = useRecord('GET /v1/kubernetes/clusters/{id}', { id }, CLUSTER_EVENTS);
  const nodes = usePlaceableNodes((cluster as Cluster | null)?.project_id);
  if (error) return <Page title="Kubernetes cluster"><p role="alert" class="error">{error}</p></Page>;
  const c = cluster as Cluster | null;
  if (!c) return <Page title="Kubernetes cluster">Loading…</Page>;
  return (
    <Page
      title={`Kubernetes cluster ${c.name}`}
      actions={
        <div class="row-actions" role="group" aria-label={`Actions for cluster ${c.name}`}>
          {c.status === 'active' && can('GET /v1/kubernetes/clusters/{id}/kubeconfig', c.project_id) && <KubeconfigButton cluster={c} />}
          <FormButton label="Add a node" small needs="POST /v1/kubernetes/clusters/{id}/nodes" project={c.project_id} title={`Add a node to ${c.name}`} submitLabel="Add" done="node accepted: installing k3s agent" onSubmit={(f) => call('POST /v1/kubernetes/clusters/{id}/nodes', { params: { id }, body: { node_id: text(f, 'node_id') } })}>
            <Field label="Node">
              <select name="node_id" required>
                <NodeOptions nodes={nodes} />
              </select>
            </Field>
          </FormButton>
          <ConfirmButton
            label="Delete"
            title="Delete cluster"
            needs="DELETE /v1/kubernetes/clusters/{id}"
            project={c.project_id}
            danger
            confirm={<p>k3s is uninstalled from every node of {c.name}. A cluster with workloads is refused: remove them first.</p>}
            onConfirm={async () => {
              await call('DELETE /v1/kubernetes/clusters/{id}', { params: { id } });
              location.hash = href('kubernetes');
            }}
          />
        </div>
      }
    >
      <Facts
        label="Cluster"
        rows={[
          ['Id', <code>{c.id}</code>],
          ['Status', <Badge status={c.status} />],
          ['Server', c.server_node_id ? <a href={href('nodes', c.server_node_id)}>{c.server_node_id}</a> : '–'],
          ['Version', c.version ?? '–'],
          ['Kubeconfig endpoint', c.kubeconfig_endpoint],
          ['Error', c.error ?? ''],
        ]}
      />
      <h2>Nodes</h2>
      <ResourceList
        route="GET /v1/kubernetes/clusters/{id}/nodes"
        params={{ id }}
        paged={false}
        label="Nodes"
        live={changed('cluster', 'swarm_member', 'node')}
        empty="No nodes."
        rowKey={(n: ReportedNode) => n.node_id}
        columns={[
          { label: 'Node', render: (n: ReportedNode) => <a href={href('nodes', n.node_id)}>{n.node_id}</a> },
          { label: 'Role', render: (n: ReportedNode) => n.role },
          { label: 'Status', render: (n: ReportedNode) => <Badge status={n.status} /> },
          { label: 'Ready', render: (n: ReportedNode) => (n.ready === null ? '–' : n.ready ? 'Ready' : 'NotReady') },
          { label: 'Roles', render: (n: ReportedNode) => n.roles.join(', ') || '–' },
          { label: 'Kubelet', render: (n: ReportedNode) => n.kubelet_version ?? '–' },
          { label: 'Error', render: (n: ReportedNode) => n.error ?? '' },
        ]}
        actions={(n: ReportedNode) =>
          n.role === 'server' ? null : (
            <ConfirmButton label="Remove" title="Remove the node" danger needs="DELETE /v1/kubernetes/clusters/{id}/nodes/{nodeId}" project={c.project_id} confirm={<p>Node {n.node_id} is drained (its pods evicted, disruption budgets honoured) and k3s is uninstalled from it.</p>} onConfirm={() => call('DELETE /v1/kubernetes/clusters/{id}/nodes/{nodeId}', { params: { id, nodeId: n.node_id } })} done="removal accepted" />
          )
        }
      />
    </Page>
  );
}
