import type { ComponentChildren } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import { b64encode, call, settle } from '../api';
import { lineDiff } from '../diff';
import { changed } from '../live';
import { href } from '../router';
import { DiffLines, Revisions, type Workload } from './revisions';
import { usePlaceableNodes } from './kubernetes';
import { ProjectName } from './projects';
import { Ago, Badge, ClusterLink, ConfirmButton, Facts, Field, FormButton, knownClusters, LogsButton, NAME_FILTER, Page, ResourceList, useAction, useRecord, notify } from '../ui';

type Swarm = { id: string; name: string; status: string; project_id?: string | null; manager?: { node_id: string } | null; members?: unknown[]; created_at: string };

/** The swarms, for the selects of create forms. */
function useSwarms(): Swarm[] {
  const [swarms, setSwarms] = useState<Swarm[]>([]);
  useEffect(
    () =>
      void call('GET /v1/swarms', { query: { limit: 1000 } }).then(
        (r) => {
          knownClusters('swarm', r.data as Swarm[]);
          setSwarms(r.data as Swarm[]);
        },
        () => undefined,
      ),
    [],
  );
  return swarms;
}

function SwarmSelect({ name = 'swarm_id' }: { name?: string }) {
  const swarms = useSwarms();
  return (
    <select name={name} required>
      {swarms.map((s) => (
        <option key={s.id} value={s.id}>
          {s.name} ({s.status})
        </option>
      ))}
    </select>
  );
}

const text = (form: FormData, name: string) => String(form.get(name) ?? '').trim();

// ——— swarms ———

export function Swarms() {
  return (
    <Page
      title="Swarms"
      actions={
        <FormButton label="Create swarm" title="Create a swarm" primary needs="POST /v1/swarms" submitLabel="Create" done="swarm created" onSubmit={(f) => call('POST /v1/swarms', { body: { name: text(f, 'name') } })}>
          <Field label="Name" hint="a DNS label: lower-case letters, digits and -">
            <input name="name" required pattern="[a-z0-9]([a-z0-9-]*[a-z0-9])?" />
          </Field>
        </FormButton>
      }
    >
      <ResourceList
        route="GET /v1/swarms"
        label="Swarms"
        live={changed('swarm', 'swarm_member')}
        empty="No swarms yet."
        columns={[
          { label: 'Name', render: (s: Swarm) => <a href={href('swarms', s.id)}>{s.name}</a> },
          { label: 'Status', render: (s: Swarm) => <Badge status={s.status} /> },
          { label: 'Project', render: (s: Swarm) => <ProjectName id={s.project_id} /> },
          { label: 'Manager', render: (s: Swarm) => (s.manager ? <a href={href('nodes', s.manager.node_id)}>{s.manager.node_id}</a> : '–') },
          { label: 'Members', render: (s: Swarm) => String(s.members?.length ?? 0) },
          { label: 'Created', render: (s: Swarm) => <Ago at={s.created_at} /> },
        ]}
      />
    </Page>
  );
}

type Member = { node_id: string; role: string; status: string; hostname?: string; state?: string; availability?: string; leader?: boolean; error?: string | null };

export function SwarmDetail({ id }: { id: string }) {
  const [swarm, error] = useRecord('GET /v1/swarms/{id}', { id }, changed('swarm', 'swarm_member'));
  const nodes = usePlaceableNodes((swarm as Swarm | null)?.project_id);
  if (error) return <Page title="Swarm"><p role="alert" class="error">{error}</p></Page>;
  const s = swarm as Swarm | null;
  if (!s) return <Page title="Swarm">Loading…</Page>;
  return (
    <Page
      title={`Swarm ${s.name}`}
      actions={
        <FormButton label="Join a node" needs="POST /v1/swarms/{id}/join" project={s.project_id} title={`Join a node to ${s.name}`} submitLabel="Join" done="join accepted" onSubmit={(f) => call('POST /v1/swarms/{id}/join', { params: { id }, body: { node_id: text(f, 'node_id') } })}>
          <Field label="Node">
            <select name="node_id" required>
              {nodes.map((n) => (
                <option key={n.id} value={n.id}>
                  {n.name} ({n.id})
                </option>
              ))}
            </select>
          </Field>
        </FormButton>
      }
    >
      <Facts label="Swarm" rows={[['Id', <code>{s.id}</code>], ['Status', <Badge status={s.status} />], ['Manager', s.manager?.node_id ?? '–']]} />
      <h2>Members</h2>
      <ResourceList
        route="GET /v1/swarms/{id}/members"
        params={{ id }}
        paged={false}
        label="Members"
        live={changed('swarm', 'swarm_member', 'node')}
        empty="No members: join a node."
        rowKey={(m: Member) => m.node_id}
        columns={[
          { label: 'Node', render: (m: Member) => <a href={href('nodes', m.node_id)}>{m.hostname ?? m.node_id}</a> },
          { label: 'Role', render: (m: Member) => m.role + (m.leader ? ' (leader)' : '') },
          { label: 'Status', render: (m: Member) => <Badge status={m.status} /> },
          { label: 'State', render: (m: Member) => m.state ?? '–' },
          { label: 'Availability', render: (m: Member) => m.availability ?? '–' },
          { label: 'Error', render: (m: Member) => m.error ?? '' },
        ]}
        actions={(m: Member) => (
          <ConfirmButton label="Leave" title="Leave the swarm" danger needs="POST /v1/swarms/{id}/leave" project={s.project_id} confirm={<p>Node {m.node_id} is drained and leaves {s.name}.</p>} onConfirm={() => call('POST /v1/swarms/{id}/leave', { params: { id }, body: { node_id: m.node_id } })} done="leave accepted" />
        )}
      />
    </Page>
  );
}

// ——— instances ———

type Instance = {
  id: string;
  name: string;
  swarm_id?: string;
  cluster_id?: string;
  image: string;
  status: string;
  reason?: string | null;
  replicas: number;
  running?: number | null;
  type: string;
  domain?: string | null;
  env?: Record<string, string>;
  updated_at: string;
};

function ScaleButton({ instance }: { instance: Instance }) {
  return (
    <FormButton
      label="Scale"
      small
      needs="POST /v1/compute/instances/{id}/scale"
      title={`Scale ${instance.name}`}
      submitLabel="Scale"
      done={`scaling ${instance.name}`}
      onSubmit={(f) => call('POST /v1/compute/instances/{id}/scale', { params: { id: instance.id }, body: { replicas: Number(f.get('replicas')) } })}
    >
      <Field label="Replicas">
        <input name="replicas" type="number" min={0} max={100} required value={String(instance.replicas)} />
      </Field>
    </FormButton>
  );
}

/** What an instance's row and its page offer: scale, stop or start, logs, delete (`deleted`: what follows a delete). */
function InstanceActions({ instance: i, deleted }: { instance: Instance; deleted?: () => void }) {
  return (
    <div class="row-actions" role="group" aria-label={`Actions for instance ${i.name}`}>
      <ScaleButton instance={i} />
      {i.status === 'stopped' ? (
        <ConfirmButton label="Start" title="Start instance" needs="POST /v1/compute/instances/{id}/start" confirm={<p>{i.name} starts with {i.replicas} replicas.</p>} onConfirm={() => call('POST /v1/compute/instances/{id}/start', { params: { id: i.id } })} />
      ) : (
        <ConfirmButton label="Stop" title="Stop instance" needs="POST /v1/compute/instances/{id}/stop" confirm={<p>{i.name} stops (its replicas go to 0; the record stays).</p>} onConfirm={() => call('POST /v1/compute/instances/{id}/stop', { params: { id: i.id } })} />
      )}
      <LogsButton title={`Logs of ${i.name}`} needs="POST /v1/compute/instances/{id}/logs" read={async () => settle('GET /v1/compute/instances/{id}/logs/{taskId}', { id: i.id, taskId: ((await call('POST /v1/compute/instances/{id}/logs', { params: { id: i.id }, query: { lines: 200 } })).data as { task_id: string }).task_id })} />
      <ConfirmButton
        label="Delete"
        title="Delete instance"
        needs="DELETE /v1/compute/instances/{id}"
        danger
        confirm={<p>{i.name} and its swarm service are removed.</p>}
        onConfirm={async () => {
          await call('DELETE /v1/compute/instances/{id}', { params: { id: i.id } });
          deleted?.();
        }}
      />
    </div>
  );
}

export function Instances() {
  const swarms = useSwarms();
  return (
    <Page
      title="Instances"
      actions={
        <FormButton
          label="Create instance"
          title="Create an instance"
          needs="POST /v1/compute/instances"
          primary
          submitLabel="Create"
          done="instance accepted: deploying"
          onSubmit={(f) =>
            call('POST /v1/compute/instances', {
              body: { name: text(f, 'name'), swarm_id: text(f, 'swarm_id'), image: text(f, 'image'), replicas: Number(f.get('replicas') || 1), type: text(f, 'type') as never, ...(text(f, 'ports') ? { ports: text(f, 'ports').split(/[\s,]+/) } : {}), ...(text(f, 'command') ? { command: ['sh', '-c', text(f, 'command')] } : {}) },
            })
          }
        >
          <Field label="Name">
            <input name="name" required pattern="[a-z0-9]([a-z0-9-]*[a-z0-9])?" />
          </Field>
          <Field label="Swarm">
            <SwarmSelect />
          </Field>
          <Field label="Image" hint="an image the swarm's machines have or can pull">
            <input name="image" required />
          </Field>
          <Field label="Replicas">
            <input name="replicas" type="number" min={0} max={100} value="1" />
          </Field>
          <Field label="Type">
            <select name="type">
              {['nano', 'micro', 'small', 'medium', 'large', 'xlarge'].map((t) => (
                <option key={t} value={t} selected={t === 'micro'}>
                  {t}
                </option>
              ))}
            </select>
          </Field>
          <Field label="Ports" hint="HOST:CONTAINER, separated by spaces (optional)">
            <input name="ports" />
          </Field>
          <Field label="Command" hint="run with sh -c (optional; the image's own command otherwise)">
            <input name="command" />
          </Field>
        </FormButton>
      }
    >
      <ResourceList
        route="GET /v1/compute/instances"
        label="Instances"
        live={changed('instance')}
        filters={[{ name: 'swarm_id', label: 'Swarm', options: swarms.map((s) => [s.id, s.name]) }]}
        empty="No instances."
        columns={[
          { label: 'Name', render: (i: Instance) => <a href={href('instances', i.id)}>{i.name}</a> },
          { label: 'Status', render: (i: Instance) => <Badge status={i.status} /> },
          { label: 'Replicas', render: (i: Instance) => `${i.running ?? '?'} / ${i.replicas}` },
          { label: 'Image', render: (i: Instance) => <code>{i.image}</code> },
          { label: 'Type', render: (i: Instance) => i.type },
          { label: 'Cluster', render: (i: Instance) => <ClusterLink of={i} /> },
          { label: 'Reason', render: (i: Instance) => i.reason ?? '' },
        ]}
        actions={(i: Instance) => <InstanceActions instance={i} />}
      />
    </Page>
  );
}

/** An instance's page: what it runs, its rollout live, and its revisions with rollback. */
export function InstanceDetail({ id }: { id: string }) {
  const [instance, error] = useRecord('GET /v1/compute/instances/{id}', { id }, (e) => changed('instance')(e) && e.data.id === id);
  const i = instance as Instance | null;
  if (error) return <Page title="Instance"><p role="alert" class="error">{error}</p></Page>;
  if (!i) return <Page title="Instance">Loading…</Page>;
  return (
    <Page title={`Instance ${i.name}`} actions={<InstanceActions instance={i} deleted={() => (location.hash = href('instances'))} />}>
      <Facts
        label="Instance"
        rows={[
          ['Id', <code>{i.id}</code>],
          ['Status', <Badge status={i.status} />],
          ['Image', <code>{i.image}</code>],
          ['Replicas', `${i.running ?? '?'} / ${i.replicas}`],
          ['Type', i.type],
          ['Cluster', <ClusterLink of={i} />],
          ['Domain', i.domain ?? '–'],
        ]}
      />
      <Revisions workload={{ kind: 'instance', id: i.id, name: i.name, status: i.status, reason: i.reason, running: i.running, desired: i.replicas, updated_at: i.updated_at }} />
    </Page>
  );
}

// ——— services (compose stacks) ———

type AppliedObject = { kind: string; name: string; namespace: string; api_version: string };
/** A compose stack on a swarm (backend compose), or manifests applied to a Kubernetes cluster (backend manifest). */
type Service = {
  id: string;
  name: string;
  status: string;
  backend?: 'compose' | 'manifest';
  swarm_id?: string | null;
  stack?: string;
  compose_file?: string;
  cluster_id?: string | null;
  manifest?: string;
  applied_objects?: AppliedObject[];
  error?: string | null;
  replicas?: Record<string, { desired: number | null; running: number }>;
  updated_at: string;
};
const isManifest = (s: Service) => s.backend === 'manifest';

/** The Kubernetes clusters, for the select of the manifest service form. */
function ClusterSelect() {
  const [clusters, setClusters] = useState<Array<{ id: string; name: string; status: string }>>([]);
  useEffect(() => void call('GET /v1/kubernetes/clusters', { query: { limit: 1000 } }).then((r) => setClusters(r.data as never), () => undefined), []);
  return (
    <select name="cluster_id" required>
      {clusters.map((c) => (
        <option key={c.id} value={c.id}>
          {c.name} ({c.status})
        </option>
      ))}
    </select>
  );
}

/** The two kinds of service a user creates: a compose stack on a swarm, manifests applied to a Kubernetes cluster. */
const SERVICE_FORMS = {
  compose: { label: 'Create service', title: 'Create a service (a compose stack)', primary: true, submitLabel: 'Deploy', done: 'service accepted: deploying', place: ['Swarm', 'swarm_id', SwarmSelect], source: ['Compose file (YAML)', 'compose_file'] },
  manifest: { label: 'Create manifest service', title: 'Create a service from Kubernetes manifests', primary: false, submitLabel: 'Apply', done: 'service accepted: applying', place: ['Kubernetes cluster', 'cluster_id', ClusterSelect], source: ['Manifests (YAML, documents separated by ---)', 'manifest'] },
} as const;

function CreateServiceButton({ form }: { form: (typeof SERVICE_FORMS)[keyof typeof SERVICE_FORMS] }) {
  const [placeLabel, placeField, PlaceSelect] = form.place;
  const [sourceLabel, sourceField] = form.source;
  return (
    <FormButton
      label={form.label}
      title={form.title}
      needs="POST /v1/services"
      primary={form.primary}
      wide
      submitLabel={form.submitLabel}
      done={form.done}
      onSubmit={(f) => call('POST /v1/services', { body: { name: text(f, 'name'), [placeField]: text(f, placeField), [sourceField]: b64encode(String(f.get(sourceField) ?? '')) } })}
    >
      <Field label="Name">
        <input name="name" required pattern="[a-z0-9]([a-z0-9-]*[a-z0-9])?" />
      </Field>
      <Field label={placeLabel}>
        <PlaceSelect />
      </Field>
      <Field label={sourceLabel}>
        <textarea name={sourceField} rows={14} required class="code" spellcheck={false} />
      </Field>
    </FormButton>
  );
}

export function Services() {
  return (
    <Page
      title="Services"
      actions={
        <>
          <CreateServiceButton form={SERVICE_FORMS.compose} />
          <CreateServiceButton form={SERVICE_FORMS.manifest} />
        </>
      }
    >
      <ResourceList
        route="GET /v1/services"
        label="Services"
        live={changed('service')}
        filters={[NAME_FILTER]}
        empty="No services."
        columns={[
          { label: 'Name', render: (s: Service) => <a href={href('services', s.id)}>{s.name}</a> },
          { label: 'Status', render: (s: Service) => <Badge status={s.status} /> },
          { label: 'Replicas', render: (s: Service) => Object.entries(s.replicas ?? {}).map(([k, r]) => `${k} ${r.running}/${r.desired ?? '?'}`).join(', ') || '–' },
          {
            label: 'Runs on',
            render: (s: Service) => (
              <>
                <ClusterLink of={s} />
                {!isManifest(s) && (
                  <>
                    {' · stack '}
                    <code>{s.stack}</code>
                  </>
                )}
              </>
            ),
          },
          { label: 'Updated', render: (s: Service) => <Ago at={s.updated_at} /> },
        ]}
      />
    </Page>
  );
}

/** A compose file's text: the API keeps it as given (base64 in, YAML or base64 out). */
function composeText(value: string | undefined): string {
  if (!value) return '';
  if (/^[A-Za-z0-9+/=\s]+$/.test(value) && value.length % 4 === 0) {
    try {
      return new TextDecoder().decode(Uint8Array.from(atob(value), (c) => c.charCodeAt(0)));
    } catch {
      /* plain text */
    }
  }
  return value;
}

/** A service as its rollout and revisions see it: replicas summed over its parts (compose services, Deployments). */
function serviceWorkload(s: Service): Workload {
  const parts = Object.values(s.replicas ?? {});
  return { kind: 'service', id: s.id, name: s.name, status: s.status, reason: s.error, running: parts.reduce((n, r) => n + r.running, 0), desired: parts.reduce((n, r) => n + (r.desired ?? 0), 0), updated_at: s.updated_at };
}

export function ServiceDetail({ id }: { id: string }) {
  const [service, error] = useRecord('GET /v1/services/{id}', { id }, (e) => changed('service')(e) && e.data.id === id);
  const [draft, setDraft] = useState<string | null>(null);
  const [reviewing, setReviewing] = useState(false);
  const [busy, run] = useAction();
  const s = service as Service | null;
  if (error) return <Page title="Service"><p role="alert" class="error">{error}</p></Page>;
  if (!s) return <Page title="Service">Loading…</Page>;
  const manifest = isManifest(s);
  const source = manifest ? 'Manifests' : 'Compose file';
  const current = composeText(manifest ? s.manifest : s.compose_file);
  const diff = draft === null ? [] : lineDiff(current, draft);
  const changes = diff.filter((d) => d.op !== ' ').length;
  return (
    <Page
      title={`Service ${s.name}`}
      actions={
        <div class="row-actions" role="group" aria-label={`Actions for service ${s.name}`}>
          {s.status === 'stopped' ? (
            <ConfirmButton label="Start" title="Start service" needs="POST /v1/services/{id}/start" confirm={<p>{s.name} is {manifest ? 'applied' : 'deployed'} again.</p>} onConfirm={() => call('POST /v1/services/{id}/start', { params: { id } })} />
          ) : (
            <ConfirmButton label="Stop" title="Stop service" needs="POST /v1/services/{id}/stop" confirm={<p>{manifest ? `${s.name}'s objects are deleted from the cluster (start applies them again).` : `${s.name}'s services scale to 0.`}</p>} onConfirm={() => call('POST /v1/services/{id}/stop', { params: { id } })} />
          )}
          <LogsButton title={`Logs of ${s.name}`} needs="POST /v1/services/{id}/logs" read={async () => settle('GET /v1/services/{id}/logs/{taskId}', { id, taskId: ((await call('POST /v1/services/{id}/logs', { params: { id }, query: { lines: 200 } })).data as { task_id: string }).task_id })} />
          <ConfirmButton label="Delete" title="Delete service" danger needs="DELETE /v1/services/{id}" confirm={<p>{manifest ? `Its objects are deleted from cluster ${s.cluster_id}.` : `The stack ${s.stack} is removed from its swarm.`}</p>} onConfirm={async () => { await call('DELETE /v1/services/{id}', { params: { id } }); location.hash = href('services'); }} />
        </div>
      }
    >
      <Facts
        label="Service"
        rows={[
          ['Id', <code>{s.id}</code>],
          ['Status', <Badge status={s.status} />],
          ...(manifest
            ? ([['Cluster', <ClusterLink of={s} />]] as Array<[string, ComponentChildren]>)
            : ([['Stack', <code>{s.stack}</code>], ['Swarm', <ClusterLink of={s} />]] as Array<[string, ComponentChildren]>)),
          ['Error', s.error ?? ''],
        ]}
      />
      {manifest && (
        <>
          <h2>Applied objects</h2>
          <table aria-label="Applied objects">
            <thead>
              <tr>
                <th scope="col">Kind</th>
                <th scope="col">Name</th>
                <th scope="col">Namespace</th>
                <th scope="col">API version</th>
              </tr>
            </thead>
            <tbody>
              {(s.applied_objects ?? []).map((o) => (
                <tr key={`${o.kind}/${o.namespace}/${o.name}`}>
                  <td>{o.kind}</td>
                  <td>{o.name}</td>
                  <td>{o.namespace}</td>
                  <td>{o.api_version}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </>
      )}
      <Revisions workload={serviceWorkload(s)} />
      <h2>{source}</h2>
      {draft === null ? (
        <>
          <pre class="code" tabIndex={0} aria-label={source}>
            {current}
          </pre>
          <button type="button" onClick={() => setDraft(current)}>
            Edit
          </button>
        </>
      ) : (
        <>
          <Field label={`${source} (YAML)`}>
            <textarea class="code" rows={18} spellcheck={false} value={draft} onInput={(e) => { setDraft((e.currentTarget as HTMLTextAreaElement).value); setReviewing(false); }} />
          </Field>
          {reviewing && (
            <section aria-labelledby="diff-title">
              <h3 id="diff-title">Changes to apply ({changes} line{changes === 1 ? '' : 's'})</h3>
              <DiffLines lines={diff} label={`Difference between the deployed and the edited ${source.toLowerCase()}`} />
            </section>
          )}
          <div class="buttons">
            <button type="button" onClick={() => { setDraft(null); setReviewing(false); }}>
              Cancel
            </button>
            {!reviewing ? (
              <button type="button" class="primary" disabled={!changes} onClick={() => setReviewing(true)}>
                Review changes
              </button>
            ) : (
              <button
                type="button"
                class="primary"
                disabled={busy}
                onClick={() =>
                  run(async () => {
                    await call('PUT /v1/services/{id}', { params: { id }, body: manifest ? { manifest: b64encode(draft) } : { compose_file: b64encode(draft) } });
                    notify(`${s.name}: update accepted, redeploying`);
                    setDraft(null);
                    setReviewing(false);
                  })
                }
              >
                Apply changes
              </button>
            )}
          </div>
        </>
      )}
    </Page>
  );
}
