import { useEffect, useState } from 'preact/hooks';
import { useAccess } from '../access';
import { b64encode, call } from '../api';
import { changed } from '../live';
import { href } from '../router';
import { NodeOptions, usePlaceableNodes } from './kubernetes';
import { ProjectName } from './projects';
import { Ago, Badge, ClusterLink, ConfirmButton, Field, FormButton, NAME_FILTER, Page, ResourceList, ShownOnce } from '../ui';

type Row = Record<string, any>;

// ——— volumes ———

export function Volumes() {
  const nodes = usePlaceableNodes(useAccess()?.project);
  return (
    <Page
      title="Volumes"
      actions={
        <FormButton
          label="Create volume"
          title="Create a volume"
          needs="POST /v1/volumes"
          primary
          submitLabel="Create"
          done="volume accepted: preparing its folder"
          onSubmit={(f) =>
            call('POST /v1/volumes', {
              body: { name: String(f.get('name') ?? '').trim(), type: f.get('type') === 'local' ? 'local' : 'nfs', node_id: String(f.get('node_id') ?? ''), folder: String(f.get('folder') ?? '').trim() },
            })
          }
        >
          <Field label="Name">
            <input name="name" required />
          </Field>
          <Field label="Type" hint="nfs: served by the node to every member of its cluster; local: the folder bound in place, its workloads pinned to the node">
            <select name="type">
              <option value="nfs">nfs</option>
              <option value="local">local</option>
            </select>
          </Field>
          <Field label="Node" hint="the ready node whose folder holds the data">
            <select name="node_id" required>
              <NodeOptions nodes={nodes} />
            </select>
          </Field>
          <Field label="Folder" hint="an absolute path on the node; made when missing">
            <input name="folder" required placeholder="/srv/data/app" />
          </Field>
        </FormButton>
      }
    >
      <ResourceList
        route="GET /v1/volumes"
        label="Volumes"
        filters={[NAME_FILTER]}
        live={changed('volume')}
        empty="No volumes."
        columns={[
          { label: 'Name', render: (v: Row) => v.name },
          { label: 'Status', render: (v: Row) => <Badge status={v.status} /> },
          { label: 'Kind', render: (v: Row) => v.kind ?? v.type ?? '–' },
          { label: 'Project', render: (v: Row) => <ProjectName id={v.project_id} /> },
          { label: 'Cluster', render: (v: Row) => <ClusterLink of={v} /> },
          { label: 'Created', render: (v: Row) => <Ago at={v.created_at} /> },
        ]}
        actions={(v: Row) => <ConfirmButton label="Delete" title="Delete volume" danger needs="DELETE /v1/volumes/{id}" project={v.project_id} confirm={<p>Volume {v.name} is removed (its data too, where hangar made the folder).</p>} onConfirm={() => call('DELETE /v1/volumes/{id}', { params: { id: v.id }, query: {} })} />}
      />
    </Page>
  );
}

// ——— secrets and configs: values are written, never shown ———

function ObjectList({ kind }: { kind: 'secret' | 'config' }) {
  const plural = kind === 'secret' ? 'Secrets' : 'Configs';
  const base = kind === 'secret' ? '/v1/secrets' : '/v1/configs';
  const value = (
    <Field label="Value" hint={kind === 'secret' ? 'written once; hangar never shows it again' : 'the config’s content'}>
      <textarea name="value" rows={6} required autocomplete="off" spellcheck={false} class="code" />
    </Field>
  );
  return (
    <Page
      title={plural}
      actions={
        <FormButton
          label={`Create ${kind}`}
          title={`Create a ${kind}`}
          primary
          needs={`POST ${base}` as 'POST /v1/secrets'}
          submitLabel="Create"
          done={`${kind} created`}
          onSubmit={(f) => call(`POST ${base}` as 'POST /v1/secrets', { body: { name: String(f.get('name')), swarm_id: String(f.get('swarm_id')), data: b64encode(String(f.get('value'))) } as never })}
        >
          <Field label="Name">
            <input name="name" required />
          </Field>
          <Field label="Swarm (id or name)">
            <input name="swarm_id" required />
          </Field>
          {value}
        </FormButton>
      }
    >
      <ResourceList
        route={`GET ${base}` as 'GET /v1/secrets'}
        label={plural}
        live={changed(kind)}
        empty={`No ${plural.toLowerCase()}.`}
        columns={[
          { label: 'Name', render: (s: Row) => s.name },
          { label: 'Cluster', render: (s: Row) => <ClusterLink of={s} /> },
          { label: 'Version', render: (s: Row) => String(s.version) },
          { label: 'Used by', render: (s: Row) => (s.services ?? []).join(', ') || '–' },
          { label: 'Updated', render: (s: Row) => <Ago at={s.updated_at} /> },
        ]}
        actions={(s: Row) => (
          <div class="row-actions" role="group" aria-label={`Actions for ${kind} ${s.name}`}>
            <FormButton label="Rotate" small needs={`PUT ${base}/{id}` as 'PUT /v1/secrets/{id}'} title={`New value for ${s.name}`} submitLabel="Rotate" done={`${kind} rotated`} onSubmit={(f) => call(`PUT ${base}/{id}` as 'PUT /v1/secrets/{id}', { params: { id: s.id }, body: { data: b64encode(String(f.get('value'))) } as never })}>
              {value}
            </FormButton>
            <ConfirmButton label="Delete" title={`Delete ${kind}`} danger needs={`DELETE ${base}/{id}` as 'DELETE /v1/secrets/{id}'} confirm={<p>{s.name} is removed from its swarm.</p>} onConfirm={() => call(`DELETE ${base}/{id}` as 'DELETE /v1/secrets/{id}', { params: { id: s.id } })} />
          </div>
        )}
      />
    </Page>
  );
}

export const Secrets = () => <ObjectList kind="secret" />;
export const Configs = () => <ObjectList kind="config" />;

// ——— object stores ———

export function ObjectStores() {
  return (
    <Page title="Object stores">
      <ResourceList
        route="GET /v1/s3/instances"
        label="Object stores"
        filters={[NAME_FILTER]}
        live={changed('s3')}
        empty="No object stores."
        columns={[
          { label: 'Name', render: (s: Row) => s.name },
          { label: 'Status', render: (s: Row) => <Badge status={s.status} /> },
          { label: 'Endpoint', render: (s: Row) => s.endpoint ?? s.domain ?? '–' },
          { label: 'Cluster', render: (s: Row) => <ClusterLink of={s} /> },
          { label: 'Created', render: (s: Row) => <Ago at={s.created_at} /> },
        ]}
        actions={(s: Row) => <ConfirmButton label="Delete" title="Delete object store" danger needs="DELETE /v1/s3/instances/{id}" confirm={<p>{s.name} is removed.</p>} onConfirm={() => call('DELETE /v1/s3/instances/{id}', { params: { id: s.id } })} />}
      />
    </Page>
  );
}

// ——— gateway: routes and load balancers ———

/** Where a route leads back to: the record that asked for it. */
function RouteSource({ route }: { route: Row }) {
  const id = <code>{route.source_id}</code>;
  if (route.source === 'service') return <a href={href('services', route.source_id)}>service {id}</a>;
  return (
    <>
      {route.source} {id}
    </>
  );
}

export function Gateway() {
  return (
    <Page title="Gateway">
      <h2>Routes</h2>
      <ResourceList
        route="GET /v1/gateway"
        label="Gateway routes"
        paged={false}
        rows={(data: Row) => data.routes}
        live={changed('instance', 'service', 's3', 'loadbalancer')}
        empty="No routes."
        rowKey={(r: Row) => `${r.domain}-${r.swarm_id ?? r.cluster_id}`}
        columns={[
          { label: 'Domain', render: (r: Row) => <code>{r.domain}</code> },
          { label: 'Goes to', render: (r: Row) => <code>{`${r.service}:${r.port}`}</code> },
          { label: 'From', render: (r: Row) => <RouteSource route={r} /> },
          { label: 'Cluster', render: (r: Row) => <ClusterLink of={r} /> },
          { label: 'Load balancer', render: (r: Row) => (r.load_balancer_id ? <code>{r.load_balancer_id}</code> : 'none') },
        ]}
      />
      <h2>Load balancers</h2>
      <ResourceList
        route="GET /v1/loadbalancers"
        label="Load balancers"
        filters={[NAME_FILTER]}
        live={changed('loadbalancer')}
        empty="No load balancers."
        columns={[
          { label: 'Name', render: (l: Row) => <span title={l.id}>{l.name}</span> },
          { label: 'Status', render: (l: Row) => <Badge status={l.status} /> },
          { label: 'Cluster', render: (l: Row) => <ClusterLink of={l} /> },
          { label: 'Image', render: (l: Row) => <code>{l.image}</code> },
          { label: 'Port', render: (l: Row) => String(l.http_port) },
          { label: 'Routes', render: (l: Row) => String(l.routes.length) },
          { label: 'Applied', render: (l: Row) => <Ago at={l.applied_at} /> },
          { label: 'Error', render: (l: Row) => l.error ?? '' },
        ]}
        actions={(l: Row) => (
          <ConfirmButton
            label="Redeploy"
            title="Redeploy the load balancer"
            needs="POST /v1/loadbalancers/{id}/redeploy"
            confirm={<p>{l.name} is deployed anew with the image the control plane is configured with now and the current routes.</p>}
            onConfirm={() => call('POST /v1/loadbalancers/{id}/redeploy', { params: { id: l.id } })}
            done="redeploy accepted"
          />
        )}
      />
    </Page>
  );
}

// ——— IAM: users and API keys ———

export function Users() {
  return (
    <Page
      title="Users"
      actions={
        <FormButton
          label="Create user"
          title="Create a user"
          needs="POST /v1/iam/users"
          primary
          submitLabel="Create"
          done="user created"
          onSubmit={(f) =>
            call('POST /v1/iam/users', {
              body: { username: String(f.get('username')), password: String(f.get('password')), role: String(f.get('role')) as never, ...(f.get('email') ? { email: String(f.get('email')) } : {}) },
            })
          }
        >
          <Field label="Username">
            <input name="username" required autocomplete="off" />
          </Field>
          <Field label="Email">
            <input name="email" type="email" />
          </Field>
          <Field label="Password" hint="12+ characters with upper and lower case, digits and symbols">
            <input name="password" type="password" required autocomplete="new-password" />
          </Field>
          <Field label="Role">
            <select name="role">
              <option value="user">user</option>
              <option value="auditor">auditor</option>
              <option value="admin">admin</option>
            </select>
          </Field>
        </FormButton>
      }
    >
      <ResourceList
        route="GET /v1/iam/users"
        label="Users"
        live={() => false}
        empty="No users."
        columns={[
          { label: 'Username', render: (u: Row) => <a href={href('users', u.id)}>{u.username}</a> },
          { label: 'Name', render: (u: Row) => u.name ?? '–' },
          { label: 'Email', render: (u: Row) => u.email ?? '–' },
          { label: 'Role', render: (u: Row) => u.role },
          { label: 'Created', render: (u: Row) => <Ago at={u.created_at} /> },
        ]}
      />
    </Page>
  );
}

/** Lifetimes offered for a new key (docs/api-auth.md "API keys"); the installation may cap them (iam.api_key_max_lifetime_days). */
const KEY_LIFETIMES = ['12h', '1d', '7d', '30d', '90d', '365d'];
const INSTALLATION_ROLES = ['admin', 'auditor', 'user'];

/**
 * Where a new key acts and what it holds: the installation or one of the projects the signed-in
 * user sees (the header's by default), and a role of that scope or a permission list; the API
 * refuses one wider than the key's owner, and says what the owner lacks.
 */
function KeyScopeFields() {
  const access = useAccess();
  const [project, setProject] = useState(access?.project ?? '');
  const [roles, setRoles] = useState<string[]>(INSTALLATION_ROLES);
  useEffect(() => {
    if (!project) return setRoles(INSTALLATION_ROLES);
    let current = true;
    call('GET /v1/projects/{id}/roles', { params: { id: project } }).then(
      (r) => current && setRoles(r.data.map((role) => role.name)),
      () => current && setRoles([]),
    );
    return () => void (current = false);
  }, [project]);
  return (
    <>
      <Field label="Project" hint="the key acts in this project only; the installation: wherever its owner may">
        <select name="project" value={project} onChange={(e) => setProject((e.currentTarget as HTMLSelectElement).value)}>
          <option value="">the installation</option>
          {access?.projects.map((p) => (
            <option key={p.id} value={p.id}>
              {p.name}
            </option>
          ))}
        </select>
      </Field>
      <Field label="Role" hint="the key holds what this role grants, within its owner’s">
        <select name="role">
          <option value="">everything its owner holds</option>
          {roles.map((r) => (
            <option key={r} value={r}>
              {r}
            </option>
          ))}
        </select>
      </Field>
      <Field label="Permissions" hint="instead of a role: permissions such as services:read services:deploy, separated by spaces">
        <input name="permissions" maxLength={2000} autocomplete="off" spellcheck={false} />
      </Field>
    </>
  );
}

const words = (value: FormDataEntryValue | null) => String(value ?? '').split(/[\s,]+/).filter(Boolean);
/** A moment as an operator reads it: `2026-12-29 04:15 UTC`. */
const utc = (at: string) => `${at.slice(0, 16).replace('T', ' ')} UTC`;

export function UserDetail({ id }: { id: string }) {
  const [created, setCreated] = useState<{ keyId: string; secret: string } | null>(null);
  const [reload, setReload] = useState(0);
  // Your own keys are yours whatever your role; another user's are an admin's (iam:admin).
  const mine = useAccess()?.userId === id;
  return (
    <Page
      title="API keys"
      actions={
        <FormButton
          label="Create API key"
          title="Create an API key"
          needs={mine ? undefined : 'POST /v1/iam/users/{id}/keys'}
          primary
          submitLabel="Create"
          onSubmit={async (f) => {
            const text = (name: string) => String(f.get(name) || '').trim() || undefined;
            const [permissions, networks] = [words(f.get('permissions')), words(f.get('source_networks'))];
            const res = await call('POST /v1/iam/users/{id}/keys', {
              params: { id },
              body: {
                description: text('description'),
                project: text('project'),
                role: text('role'),
                permissions: permissions.length ? permissions : undefined,
                expires_in: text('expires_in'),
                source_networks: networks.length ? networks : undefined,
              },
            });
            setCreated({ keyId: res.data.access_key_id as string, secret: res.data.secret_access_key });
            setReload((n) => n + 1);
          }}
        >
          <Field label="Description">
            <input name="description" maxLength={200} />
          </Field>
          <KeyScopeFields />
          <Field label="Expires in" hint="a number and a unit (s, m, h, d, w): 30d, 12h; empty: never (unless the installation sets a longest lifetime)">
            <input name="expires_in" maxLength={7} pattern="[0-9]{1,6}[smhdw]" list="key-lifetimes" autocomplete="off" />
          </Field>
          <datalist id="key-lifetimes">
            {KEY_LIFETIMES.map((value) => (
              <option key={value} value={value} />
            ))}
          </datalist>
          <Field label="Source networks" hint="CIDRs, separated by spaces or commas; empty: anywhere">
            <input name="source_networks" maxLength={1000} autocomplete="off" />
          </Field>
        </FormButton>
      }
    >
      <p class="muted">
        User <code>{id}</code>
      </p>
      <ResourceList
        key={reload}
        route="GET /v1/iam/users/{id}/keys"
        params={{ id }}
        paged={false}
        label="API keys"
        live={() => false}
        empty="No API keys."
        columns={[
          { label: 'Access key id', render: (k: Row) => <code>{k.access_key_id}</code> },
          { label: 'Description', render: (k: Row) => k.description ?? '–' },
          { label: 'Scope', render: (k: Row) => (k.scope === 'project' ? <a href={href('projects', k.project_id)}>project {k.project_name ?? k.project_id}</a> : 'installation') },
          { label: 'Holds', render: (k: Row) => k.role ?? (k.permissions ? (k.permissions as string[]).join(' ') : 'its owner’s permissions') },
          { label: 'Expires', render: (k: Row) => (k.expires_at ? <time dateTime={k.expires_at} class={k.expired ? 'badge bad' : undefined}>{k.expired ? `expired ${utc(k.expires_at)}` : utc(k.expires_at)}</time> : 'never') },
          { label: 'Source', render: (k: Row) => (k.source_networks as string[]).join(' ') || 'anywhere' },
          { label: 'Created', render: (k: Row) => <Ago at={k.created_at} /> },
          { label: 'Last used', render: (k: Row) => <Ago at={k.last_used_at} /> },
        ]}
        actions={(k: Row, again: () => void) => (
          <ConfirmButton label="Delete" title="Delete API key" danger needs={mine ? undefined : 'DELETE /v1/iam/users/{id}/keys/{keyId}'} confirm={<p>Requests signed with {k.access_key_id} fail from now on.</p>} onConfirm={async () => { await call('DELETE /v1/iam/users/{id}/keys/{keyId}', { params: { id, keyId: k.id } }); again(); }} />
        )}
      />
      {created && (
        <ShownOnce
          title="API key created"
          about="Store the secret now: hangar shows it this once and cannot show it again."
          fields={[
            { label: 'Access key id', value: created.keyId },
            { label: 'Secret access key', value: created.secret, testId: 'key-secret' },
          ]}
          kept="I have stored it"
          onClose={() => setCreated(null)}
        />
      )}
    </Page>
  );
}

// ——— SSH profiles ———

export function SshProfiles() {
  return (
    <Page title="SSH profiles">
      <ResourceList
        route="GET /v1/ssh-profiles"
        label="SSH profiles"
        live={changed('ssh_profile')}
        empty="No SSH profiles."
        columns={[
          { label: 'Name', render: (p: Row) => p.name },
          { label: 'User', render: (p: Row) => p.ssh_user ?? p.user ?? '–' },
          { label: 'Port', render: (p: Row) => String(p.ssh_port ?? p.port ?? 22) },
          { label: 'Created', render: (p: Row) => <Ago at={p.created_at} /> },
        ]}
        actions={(p: Row) => <ConfirmButton label="Delete" title="Delete SSH profile" danger needs="DELETE /v1/ssh-profiles/{id}" confirm={<p>The profile {p.name} and its stored credentials are deleted.</p>} onConfirm={() => call('DELETE /v1/ssh-profiles/{id}', { params: { id: p.id } })} />}
      />
    </Page>
  );
}

// ——— the audit log ———

export function Audit() {
  return (
    <Page title="Audit log">
      <ResourceList
        route="GET /v1/audit"
        label="Audit log"
        live={() => false}
        empty="No entries match."
        filters={[
          { name: 'principal', label: 'Principal', placeholder: 'user id or name' },
          { name: 'resource', label: 'Resource', placeholder: 'resource id' },
          { name: 'method', label: 'Method', options: ['POST', 'PUT', 'PATCH', 'DELETE'].map((m) => [m, m]) },
          { name: 'outcome', label: 'Outcome', options: [['success', 'success'], ['failure', 'failure']] },
        ]}
        columns={[
          { label: 'Time', render: (e: Row) => <time dateTime={e.created_at}>{new Date(e.created_at).toLocaleString()}</time> },
          { label: 'Principal', render: (e: Row) => (e.principal_name ? `${e.principal_name} (${e.auth_method})` : 'anonymous') },
          { label: 'Request', render: (e: Row) => <code>{`${e.method} ${e.route}`}</code> },
          { label: 'Resource', render: (e: Row) => e.resource_id ?? '–' },
          { label: 'Status', render: (e: Row) => <span class={e.status < 400 ? 'badge good' : 'badge bad'}>{String(e.status)}</span> },
          { label: 'From', render: (e: Row) => e.source_ip },
          { label: 'Client', render: (e: Row) => e.user_agent ?? '–' },
        ]}
      />
    </Page>
  );
}
