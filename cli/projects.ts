import type { Options } from 'yargs';
import { resolveConnection } from './runner/connection.js';
import type { Args, Resource } from './resource-commands.js';

/**
 * `hangar project …`: projects, their members and roles (docs/tenancy.md), and the `--project` of
 * the commands that create clusters (default: the project `hangar configure --project` stored).
 */

/** The `--project` option of a create: where the new cluster goes. */
export const projectOption: Record<string, Options> = {
  project: { type: 'string', describe: 'the project it goes in (id or name); default: the one hangar configure --project stored, else your default project' },
};

/** The `--project` option of a list: only what one project owns. */
export const projectFilter: Record<string, Options> = {
  project: { type: 'string', describe: 'only those of this project (id or name)' },
};

/** The project a create names: `--project`, else the configured one (HANGAR_PROJECT or the connection file), else none (the server's default). */
export const projectOf = (a: Args): string | undefined => (a.project as string | undefined) || resolveConnection().project || undefined;

const user = { describe: 'the user: its id or username' };

export const projectResource: Resource = {
  noun: 'project',
  describe: 'Projects: which users may use which clusters, with which role',
  base: '/v1/projects',
  columns: ['id', 'name', 'role', 'description', 'created_at'],
  verbs: [
    {
      command: 'create <name>',
      describe: 'Create a project (installation admins)',
      method: 'POST',
      options: { description: { type: 'string', describe: 'what the project is for' } },
      body: { name: 'name', description: 'description' },
      output: 'done',
      says: ['created', 'creating'],
    },
    {
      command: 'list',
      describe: 'List the projects you are a member of, with your role (installation admins: every project)',
      method: 'GET',
      options: { node: { type: 'string', describe: 'only those this node is granted to (its id)' } },
      query: { node: 'node' },
      output: 'list',
      empty: 'no projects (you are a member of none)',
    },
    { command: 'show <id>', describe: 'Show a project', method: 'GET', path: '/{id}', output: 'record' },
    {
      command: 'delete <id>',
      describe: 'Delete a project (installation admins; refused while it owns clusters)',
      method: 'DELETE',
      path: '/{id}',
      output: 'done',
      says: ['deleted', 'deleting'],
      label: (a) => `project ${a.id}`,
    },
    {
      command: 'members <id>',
      describe: 'List the members of a project with their roles',
      method: 'GET',
      path: '/{id}/members',
      output: 'list',
      columns: ['user_id', 'username', 'role', 'created_at'],
      empty: 'no members',
    },
    {
      command: 'add-member <id> <user>',
      describe: 'Add a user to a project with a role, or change its role (installation admins, owners of the project)',
      method: 'PUT',
      path: '/{id}/members/{user}',
      positionals: { user },
      options: { role: { type: 'string', demandOption: true, describe: 'viewer, deployer, maintainer, owner, or a custom role of the project' } },
      body: { role: 'role' },
      output: (d: { username: string; role: string }, a) => `${d.username} is ${d.role} of project ${a.id}`,
    },
    {
      command: 'remove-member <id> <user>',
      describe: 'Remove a user from a project: its next request is refused (installation admins, owners of the project)',
      method: 'DELETE',
      path: '/{id}/members/{user}',
      positionals: { user },
      output: (_d, a) => `removed ${a.user} from project ${a.id}`,
    },
    {
      command: 'roles <id>',
      describe: 'List the roles of a project (built-in and custom) with their permissions',
      method: 'GET',
      path: '/{id}/roles',
      output: 'list',
      paged: false,
      columns: ['name', 'builtin', ['permissions', (r: { permissions: string[] }) => r.permissions.join(' ')]],
    },
    {
      command: 'add-role <id> <role>',
      describe: 'Create a custom role of a project: a named set of permissions (installation admins, owners of the project)',
      method: 'POST',
      path: '/{id}/roles',
      positionals: { role: { describe: 'the new role’s name' } },
      options: {
        permission: { type: 'string', array: true, demandOption: true, describe: 'a permission it grants, <kind>:<verb> (repeat it): services:deploy, secrets:read-metadata…' },
        description: { type: 'string', describe: 'what the role is for' },
      },
      body: { name: 'role', description: 'description', permissions: (a) => ([] as unknown[]).concat(a.permission).map(String) },
      output: (d: { name: string; permissions: string[] }, a) => `created role ${d.name} of project ${a.id}: ${d.permissions.join(' ')}`,
    },
    {
      command: 'remove-role <id> <role>',
      describe: 'Delete a custom role of a project (refused while a member has it)',
      method: 'DELETE',
      path: '/{id}/roles/{role}',
      positionals: { role: { describe: 'the custom role’s name' } },
      output: (_d, a) => `deleted role ${a.role} of project ${a.id}`,
    },
    {
      command: 'nodes <id>',
      describe: 'List the nodes granted to a project',
      method: 'GET',
      path: '/{id}/nodes',
      output: 'list',
      paged: false,
      columns: ['node_id', 'name', 'status', 'shared', 'granted_at'],
      empty: 'no nodes granted to it',
    },
    {
      command: 'grant-node <id> <node>',
      describe: 'Grant a node to a project: its maintainers join it to the project’s clusters (installation admins)',
      method: 'PUT',
      path: '/{id}/nodes/{node}',
      positionals: { node: { describe: 'the node’s id' } },
      options: { share: { type: 'boolean', describe: 'let a node granted to another project serve this one too' } },
      body: { share: 'share' },
      output: (d: { node_id: string; projects: string[] }, a) => `granted node ${d.node_id} to project ${a.id} (it serves ${d.projects.length} project${d.projects.length === 1 ? '' : 's'})`,
    },
    {
      command: 'revoke-node <id> <node>',
      describe: 'Take a node back from a project (installation admins; refused while it serves one of the project’s clusters)',
      method: 'DELETE',
      path: '/{id}/nodes/{node}',
      positionals: { node: { describe: 'the node’s id' } },
      output: (d: { node_id: string }, a) => `took node ${d.node_id} back from project ${a.id}`,
    },
  ],
};
