import { resourceCommand, type Resource } from './resource-commands.js';

/** `hangar whoami`: who the configured API key signs as, with which role and permissions (GET /v1/iam/whoami). */
const WHOAMI: Resource = {
  noun: 'whoami',
  describe: 'Who the configured API key signs as: user, role, permissions, credential',
  base: '/v1/iam/whoami',
  columns: [],
  verbs: [
    {
      command: '',
      describe: 'Who the configured API key signs as: user, installation role, its permissions, its projects (role and permissions in each), and the credential (kind, expiry)',
      method: 'GET',
      output: (d) =>
        [
          `user:        ${d.user.username ?? d.user.name} (${d.user.id})${d.user.email ? ` <${d.user.email}>` : ''}`,
          `role:        ${d.role}: ${d.role_about}`,
          `credential:  ${d.credential.kind}${d.credential.access_key_id ? ` ${d.credential.access_key_id}` : ''}${d.credential.key_description ? ` (${d.credential.key_description})` : ''}, ${d.credential.expires_at ? `expires ${d.credential.expires_at}` : 'does not expire'}`,
          ...(d.credential.scope
            ? [
                `scope:       ${d.credential.scope === 'project' ? `project ${d.credential.project_name ?? d.credential.project_id} (${d.credential.project_id})` : 'the installation'}${d.credential.key_role ? `, role ${d.credential.key_role}` : d.credential.limited ? ', a permission list' : ''}${d.credential.source_networks?.length ? `; from ${d.credential.source_networks.join(', ')} only` : ''}`,
              ]
            : []),
          `permissions: ${(d.permissions as string[]).join(' ')}`,
          ...(d.projects as Array<{ id: string; name: string; role: string | null; permissions: string[] }>).map(
            (p) => `project:     ${p.name} (${p.id})${p.role ? `, role ${p.role}` : ''}: ${p.permissions.join(' ')}`,
          ),
        ].join('\n'),
    },
  ],
};

export const whoamiCommand = resourceCommand(WHOAMI);
