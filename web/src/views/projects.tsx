import { useEffect, useState } from 'preact/hooks';
import { call } from '../api';
import { can, chooseProject, loadAccess, seesEveryProject, useAccess } from '../access';
import { changed } from '../live';
import { go, href } from '../router';
import { Ago, Badge, ConfirmButton, Facts, Field, FormButton, Page, ResourceList, useRecord } from '../ui';
import { NodeOptions } from './kubernetes';

type Project = { id: string; name: string; description: string | null; role: string | null; created_at: string; updated_at: string };
type Member = { project_id: string; user_id: string; username: string; name: string | null; role: string; permissions: string[]; created_at: string };
type Role = { name: string; description: string | null; builtin: boolean; permissions: string[] };
type GrantedNode = { node_id: string; name: string; status: string; granted_at: string; shared: boolean };

const text = (form: FormData, name: string) => String(form.get(name) ?? '').trim();
/** Memberships and roles decide what the header's switcher offers and which buttons show: read them again after a change. */
const refreshAccess = () => loadAccess().catch(() => undefined);

/**
 * The header's project switcher: the projects the caller sees, and "All projects" for those who see
 * every one (installation admins and auditors) or are members of several. Choosing one narrows every
 * list to it and makes it the default project of creates; kept across reloads.
 */
export function ProjectSwitcher() {
  const access = useAccess();
  if (!access) return null;
  const { projects, project } = access;
  if (!projects.length && !seesEveryProject(access)) return <span class="switcher muted">No project</span>;
  const offersAll = seesEveryProject(access) || projects.length > 1;
  return (
    <label class="switcher">
      <span>Project</span>
      <select value={project ?? ''} onChange={(e) => chooseProject((e.currentTarget as HTMLSelectElement).value || null)}>
        {offersAll && <option value="">{seesEveryProject(access) ? 'All projects' : 'All my projects'}</option>}
        {projects.map((p) => (
          <option key={p.id} value={p.id}>
            {p.name}
          </option>
        ))}
      </select>
    </label>
  );
}

/** The project a record belongs to, by name (its id where the caller does not see the project), the id as its title. */
export function ProjectName({ id }: { id?: string | null }) {
  const access = useAccess();
  if (!id) return <>–</>;
  return <span title={id}>{access?.projects.find((p) => p.id === id)?.name ?? id}</span>;
}

const NameField = ({ value }: { value?: string }) => (
  <Field label="Name" hint="a DNS label: lower-case letters, digits and inner hyphens">
    <input name="name" required maxLength={63} pattern="[a-z0-9]([a-z0-9-]*[a-z0-9])?" value={value} />
  </Field>
);
const DescriptionField = ({ value }: { value?: string | null }) => (
  <Field label="Description">
    <input name="description" maxLength={500} value={value ?? ''} />
  </Field>
);

export function Projects() {
  return (
    <Page
      title="Projects"
      actions={
        <FormButton
          label="Create project"
          title="Create a project"
          primary
          needs="POST /v1/projects"
          submitLabel="Create"
          done="project created"
          onSubmit={async (f) => {
            const res = await call('POST /v1/projects', { body: { name: text(f, 'name'), description: text(f, 'description') || undefined } });
            await refreshAccess();
            go('projects', res.data.id);
          }}
        >
          <NameField />
          <DescriptionField />
        </FormButton>
      }
    >
      <ResourceList
        route="GET /v1/projects"
        label="Projects"
        live={changed('project')}
        empty="No projects you are a member of."
        columns={[
          { label: 'Name', render: (p: Project) => <a href={href('projects', p.id)}>{p.name}</a> },
          { label: 'Description', render: (p: Project) => p.description ?? '–' },
          { label: 'Your role', render: (p: Project) => p.role ?? '–' },
          { label: 'Created', render: (p: Project) => <Ago at={p.created_at} /> },
        ]}
      />
    </Page>
  );
}

/** A select of a project's roles, built-in and custom. */
function RoleSelect({ roles, value }: { roles: Role[]; value?: string }) {
  return (
    <select name="role" required value={value}>
      {roles.map((r) => (
        <option key={r.name} value={r.name}>
          {r.name}
          {r.builtin ? '' : ' (custom)'}
        </option>
      ))}
    </select>
  );
}

/** Usernames to pick from when adding a member (for those who may list users; others type one). */
function useUsernames(): string[] {
  const [names, setNames] = useState<string[]>([]);
  useEffect(() => {
    if (!can('GET /v1/iam/users')) return;
    call('GET /v1/iam/users', { query: { limit: 1000 } }).then(
      (r) => setNames((r.data as Array<{ username: string }>).map((u) => u.username)),
      () => undefined,
    );
  }, []);
  return names;
}

function Members({ project, roles }: { project: Project; roles: Role[] }) {
  const usernames = useUsernames();
  const manages = can('PUT /v1/projects/{id}/members/{user}', project.id);
  return (
    <>
      <h2>Members</h2>
      <ResourceList
        route="GET /v1/projects/{id}/members"
        params={{ id: project.id }}
        label="Members"
        live={changed('project')}
        empty="No members."
        rowKey={(m: Member) => m.user_id}
        toolbar={(reload) => (
          <FormButton
            label="Add member"
            title={`Add a member to ${project.name}`}
            primary
            needs="PUT /v1/projects/{id}/members/{user}"
            project={project.id}
            submitLabel="Add"
            done="member added"
            onSubmit={async (f) => {
              await call('PUT /v1/projects/{id}/members/{user}', { params: { id: project.id, user: text(f, 'user') }, body: { role: text(f, 'role') } });
              reload();
              await refreshAccess();
            }}
          >
            <Field label="User" hint="a username or user id">
              <input name="user" required maxLength={100} list="project-usernames" autocomplete="off" />
            </Field>
            <datalist id="project-usernames">
              {usernames.map((u) => (
                <option key={u} value={u} />
              ))}
            </datalist>
            <Field label="Role">
              <RoleSelect roles={roles} value="viewer" />
            </Field>
          </FormButton>
        )}
        columns={[
          { label: 'User', render: (m: Member) => m.username },
          { label: 'Name', render: (m: Member) => m.name ?? '–' },
          { label: 'Role', render: (m: Member) => m.role },
          { label: 'Member since', render: (m: Member) => <Ago at={m.created_at} /> },
        ]}
        actions={
          manages
            ? (m: Member, reload) => (
                <div class="row-actions" role="group" aria-label={`Actions for member ${m.username}`}>
                  <FormButton
                    label="Change role"
                    small
                    title={`Role of ${m.username} in ${project.name}`}
                    submitLabel="Change"
                    done="role changed"
                    onSubmit={async (f) => {
                      await call('PUT /v1/projects/{id}/members/{user}', { params: { id: project.id, user: m.user_id }, body: { role: text(f, 'role') } });
                      reload();
                      await refreshAccess();
                    }}
                  >
                    <Field label="Role">
                      <RoleSelect roles={roles} value={m.role} />
                    </Field>
                  </FormButton>
                  <ConfirmButton
                    label="Remove"
                    title="Remove member"
                    danger
                    confirm={<p>{m.username} loses its role in {project.name} at its next request, and its API keys of the project stop working.</p>}
                    done="member removed"
                    onConfirm={async () => {
                      await call('DELETE /v1/projects/{id}/members/{user}', { params: { id: project.id, user: m.user_id } });
                      reload();
                      await refreshAccess();
                    }}
                  />
                </div>
              )
            : undefined
        }
      />
    </>
  );
}

/**
 * The nodes granted to the project (docs/tenancy.md "Nodes granted to projects"): its members'
 * clusters and volumes go on them. Installation admins grant a node (to a second project only with
 * Share) and take it back; the API's refusals (granted elsewhere, still in use) show its words.
 */
function GrantedNodes({ project }: { project: Project }) {
  const [nodes, setNodes] = useState<Array<{ id: string; name: string }>>([]);
  const grants = can('PUT /v1/projects/{id}/nodes/{node}', project.id);
  useEffect(() => {
    if (grants) void call('GET /v1/nodes', { query: { limit: 1000 } }).then((r) => setNodes(r.data as never), () => undefined);
  }, [grants]);
  return (
    <>
      <h2>Nodes</h2>
      <ResourceList
        route="GET /v1/projects/{id}/nodes"
        params={{ id: project.id }}
        paged={false}
        label="Granted nodes"
        live={changed('node')}
        empty="No node is granted to this project: installation admins place its clusters and volumes."
        rowKey={(n: GrantedNode) => n.node_id}
        toolbar={(reload) => (
          <FormButton
            label="Grant node"
            title={`Grant a node to ${project.name}`}
            needs="PUT /v1/projects/{id}/nodes/{node}"
            project={project.id}
            submitLabel="Grant"
            done="node granted"
            onSubmit={async (f) => {
              await call('PUT /v1/projects/{id}/nodes/{node}', { params: { id: project.id, node: text(f, 'node') }, body: { share: f.get('share') === 'on' } });
              reload();
            }}
          >
            <Field label="Node">
              <select name="node" required>
                <NodeOptions nodes={nodes} />
              </select>
            </Field>
            <Field label="Share" hint="a node granted to another project serves this one too only when you say so">
              <input name="share" type="checkbox" />
            </Field>
          </FormButton>
        )}
        columns={[
          { label: 'Node', render: (n: GrantedNode) => <a href={href('nodes', n.node_id)}>{n.name}</a> },
          { label: 'Id', render: (n: GrantedNode) => <code>{n.node_id}</code> },
          { label: 'Status', render: (n: GrantedNode) => <Badge status={n.status} /> },
          { label: 'Shared', render: (n: GrantedNode) => (n.shared ? 'with other projects' : 'no') },
          { label: 'Granted', render: (n: GrantedNode) => <Ago at={n.granted_at} /> },
        ]}
        actions={
          can('DELETE /v1/projects/{id}/nodes/{node}', project.id)
            ? (n: GrantedNode, reload) => (
                <ConfirmButton
                  label="Revoke"
                  title="Take the node back"
                  danger
                  confirm={<p>{n.name} no longer serves {project.name}: its members place nothing more on it. Refused while it is a member of one of the project’s clusters or holds one of its volumes.</p>}
                  done="node taken back"
                  onConfirm={async () => {
                    await call('DELETE /v1/projects/{id}/nodes/{node}', { params: { id: project.id, node: n.node_id } });
                    reload();
                  }}
                />
              )
            : undefined
        }
      />
    </>
  );
}

/** The permissions a custom role may hold: those of the project's kinds (what an owner holds), as checkboxes. */
function PermissionChecks({ catalogue }: { catalogue: string[] }) {
  return (
    <fieldset class="checks">
      <legend>Permissions</legend>
      {catalogue.map((p) => (
        <label key={p}>
          <input type="checkbox" name="permissions" value={p} /> <code>{p}</code>
        </label>
      ))}
    </fieldset>
  );
}

function Roles({ project, roles, reload }: { project: Project; roles: Role[]; reload: () => void }) {
  const manages = can('POST /v1/projects/{id}/roles', project.id);
  const catalogue = roles.find((r) => r.name === 'owner')?.permissions ?? [];
  return (
    <>
      <div class="page-head">
        <h2>Roles</h2>
        <div class="toolbar">
          <FormButton
            label="Create role"
            title={`Create a role of ${project.name}`}
            wide
            needs="POST /v1/projects/{id}/roles"
            project={project.id}
            submitLabel="Create"
            done="role created"
            onSubmit={async (f) => {
              const permissions = f.getAll('permissions').map(String);
              await call('POST /v1/projects/{id}/roles', { params: { id: project.id }, body: { name: text(f, 'name'), description: text(f, 'description') || undefined, permissions } });
              reload();
            }}
          >
            <NameField />
            <DescriptionField />
            <PermissionChecks catalogue={catalogue} />
          </FormButton>
        </div>
      </div>
      <table aria-label="Roles">
        <thead>
          <tr>
            <th scope="col">Role</th>
            <th scope="col">Kind</th>
            <th scope="col">Permissions</th>
            {manages && <th scope="col">Actions</th>}
          </tr>
        </thead>
        <tbody>
          {roles.map((r) => (
            <tr key={r.name} data-id={r.name}>
              <td data-label="Role">
                {r.name}
                {r.description && <small class="muted"> {r.description}</small>}
              </td>
              <td data-label="Kind">{r.builtin ? 'built-in' : 'custom'}</td>
              <td data-label="Permissions">
                <code class="permissions">{r.permissions.join(' ')}</code>
              </td>
              {manages && (
                <td class="actions">
                  {!r.builtin && (
                    <ConfirmButton
                      label="Delete"
                      title="Delete role"
                      danger
                      confirm={<p>The role {r.name} is deleted (refused while a member holds it).</p>}
                      done="role deleted"
                      onConfirm={async () => {
                        await call('DELETE /v1/projects/{id}/roles/{name}', { params: { id: project.id, name: r.name } });
                        reload();
                      }}
                    />
                  )}
                </td>
              )}
            </tr>
          ))}
        </tbody>
      </table>
    </>
  );
}

export function ProjectDetail({ id }: { id: string }) {
  const [project, error, reload] = useRecord('GET /v1/projects/{id}', { id }, changed('project'));
  const [roles, , reloadRoles] = useRecord('GET /v1/projects/{id}/roles', { id }, () => false);
  if (error) return <Page title="Project"><p role="alert" class="error">{error}</p></Page>;
  const p = project as Project | null;
  if (!p || !roles) return <Page title="Project">Loading…</Page>;
  return (
    <Page
      title={`Project ${p.name}`}
      actions={
        <div class="row-actions" role="group" aria-label={`Actions for project ${p.name}`}>
          <FormButton
            label="Edit"
            small
            needs="PATCH /v1/projects/{id}"
            project={p.id}
            title={`Rename ${p.name} or change its description`}
            submitLabel="Save"
            done="project changed"
            onSubmit={async (f) => {
              await call('PATCH /v1/projects/{id}', { params: { id: p.id }, body: { name: text(f, 'name'), description: text(f, 'description') || null } });
              reload();
              await refreshAccess();
            }}
          >
            <NameField value={p.name} />
            <DescriptionField value={p.description} />
          </FormButton>
          <ConfirmButton
            label="Delete"
            title="Delete project"
            danger
            needs="DELETE /v1/projects/{id}"
            project={p.id}
            confirm={<p>Project {p.name} is deleted with its members and roles. A project that owns clusters is refused: delete or move them first.</p>}
            done="project deleted"
            onConfirm={async () => {
              await call('DELETE /v1/projects/{id}', { params: { id: p.id } });
              await refreshAccess();
              go('projects');
            }}
          />
        </div>
      }
    >
      <Facts
        label="Project"
        rows={[
          ['Id', <code>{p.id}</code>],
          ['Description', p.description ?? '–'],
          ['Your role', p.role ?? 'none (installation role)'],
          ['Created', <Ago at={p.created_at} />],
        ]}
      />
      <Members project={p} roles={roles as Role[]} />
      <Roles project={p} roles={roles as Role[]} reload={reloadRoles} />
      <GrantedNodes project={p} />
    </Page>
  );
}
