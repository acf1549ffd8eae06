import { Type } from '@sinclair/typebox';
import { defineServiceRef, type Services } from '../../core/plugin.js';

/** The ssh-profiles plugin's contract: what other plugins import of it (importing this never loads the plugin). */

/** The credential fields of deploy, update-ssh and start. */
export const SshCredentialFields = {
  ssh_profile: Type.Optional(Type.String({ minLength: 1, maxLength: 100, description: 'name (or id) of a stored SSH profile' })),
  ssh_user: Type.Optional(Type.String({ minLength: 1, maxLength: 32, pattern: '^[a-z_][a-z0-9_.-]*$', description: 'default root; a non-root user needs sudo' })),
  ssh_port: Type.Optional(Type.Integer({ minimum: 1, maximum: 65535, description: 'default 22' })),
  ssh_key: Type.Optional(Type.String({ minLength: 1, maxLength: 20000, description: 'private key content, not a path' })),
  ssh_password: Type.Optional(Type.String({ minLength: 1, maxLength: 1000 })),
};

export interface SshCredentials {
  username: string;
  port: number;
  privateKey?: string;
  password?: string;
  profile?: string;
}

export interface SshProfilesApi {
  /** Inline values over the profile's; 400 for an unknown profile. No credentials at all → the control plane's own agent and keys. */
  resolve(body: { ssh_profile?: string; ssh_user?: string; ssh_port?: number; ssh_key?: string; ssh_password?: string }): Promise<SshCredentials>;
}

export const SshProfilesRef = defineServiceRef<SshProfilesApi>('ssh-profiles', 'stored SSH credentials (the ssh-profiles plugin)');

export function sshProfilesOf(services: Services): SshProfilesApi {
  return services.provided.get(SshProfilesRef);
}
