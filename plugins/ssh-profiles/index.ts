import { Type } from '@sinclair/typebox';
import { badRequest, conflict, notFound } from '../../core/errors.js';
import { Repository } from '../../core/db/repository.js';
import { readRoutes } from '../../core/http/resources.js';
import { newId } from '../../core/ids.js';
import { definePlugin, defineRoute } from '../../core/plugin.js';
import { SshCredentialFields, SshProfilesRef, type SshProfilesApi } from './api.js';
import { recordId, recordTimes } from '../../core/db/columns.js';
import { createTables } from '../../core/db/migrations.js';

const TABLE = 'ssh_profiles';

interface ProfileRecord {
  id: string;
  name: string;
  user: string;
  port: number;
  key_sealed: string | null;
  password_sealed: string | null;
  created_at: string;
  updated_at: string;
  [key: string]: unknown;
}

/**
 * Refuses an SSH key that is not key content (a file path, say): the control plane never reads
 * files named by a caller. The same check wherever a key is accepted (profiles, deploy, update-ssh, start).
 */
function assertPrivateKeyContent(key: string | undefined, where: string): void {
  if (key === undefined || /-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----/.test(key)) return;
  throw badRequest(`Validation failed: ${where} must be a private key (PEM or OpenSSH), not a path`, [{ path: where, message: 'must be private key content' }]);
}

const view = (p: ProfileRecord) => ({
  id: p.id,
  name: p.name,
  user: p.user,
  port: p.port,
  has_key: Boolean(p.key_sealed),
  has_password: Boolean(p.password_sealed),
  created_at: p.created_at,
  updated_at: p.updated_at,
});

const ProfileView = Type.Object({
  id: Type.String(),
  name: Type.String(),
  user: Type.String(),
  port: Type.Integer(),
  has_key: Type.Boolean(),
  has_password: Type.Boolean(),
  created_at: Type.String(),
  updated_at: Type.String(),
});

/** Stored SSH credentials, encrypted at rest with a key derived from the CA key, never returned. */
export default definePlugin({
  name: 'ssh-profiles',
  description: 'stored SSH credentials for deploy, update-ssh and start',
  provides: [SshProfilesRef],
  migrations: [
    createTables('001_ssh_profiles', {
      [TABLE]: (t) => {
        recordId(t);
        t.string('name', 100).notNullable().unique();
        t.string('user', 32).notNullable();
        t.integer('port').notNullable();
        t.text('key_sealed').nullable();
        t.text('password_sealed').nullable();
        recordTimes(t, { paged: true });
      },
    }),
  ],
  setup(services) {
    const profiles = new Repository<ProfileRecord>(services.db, TABLE, { dates: ['created_at', 'updated_at'] });
    const box = services.ca.secretBox('ssh-profiles');
    const find = (ref: string) => profiles.findByIdOrName(ref);
    /** The profile `{id}` names (its id or name); 404 otherwise. */
    async function requireProfile(ref: string): Promise<ProfileRecord> {
      const profile = await find(ref);
      if (!profile) throw notFound(`No SSH profile ${ref}`);
      return profile;
    }

    const api: SshProfilesApi = {
      async resolve(body) {
        assertPrivateKeyContent(body.ssh_key, 'body.ssh_key');
        let profile: ProfileRecord | null = null;
        if (body.ssh_profile) {
          profile = await find(body.ssh_profile);
          if (!profile) throw badRequest(`Unknown SSH profile ${body.ssh_profile}`, [{ path: 'body.ssh_profile', message: 'names no stored SSH profile' }]);
        }
        return {
          username: body.ssh_user ?? profile?.user ?? 'root',
          port: body.ssh_port ?? profile?.port ?? 22,
          privateKey: body.ssh_key ?? (profile?.key_sealed ? box.openString(profile.key_sealed) : undefined),
          password: body.ssh_password ?? (profile?.password_sealed ? box.openString(profile.password_sealed) : undefined),
          profile: profile?.name,
        };
      },
    };
    services.provided.provide(SshProfilesRef, api);

    const Params = Type.Object({ id: Type.String({ minLength: 1, maxLength: 100, description: 'id or name' }) });
    return {
      routes: [
        defineRoute({
          method: 'POST',
          path: '/v1/ssh-profiles',
          auth: { role: 'admin' },
          summary: 'Store SSH credentials under a name (key and password encrypted, never returned)',
          status: 201,
          schemas: {
            body: Type.Object(
              {
                name: Type.String({ minLength: 1, maxLength: 100, pattern: '^[A-Za-z0-9][A-Za-z0-9_.-]*$' }),
                user: Type.Optional(SshCredentialFields.ssh_user),
                port: Type.Optional(SshCredentialFields.ssh_port),
                key: Type.Optional(SshCredentialFields.ssh_key),
                password: Type.Optional(SshCredentialFields.ssh_password),
              },
              { additionalProperties: false },
            ),
            response: ProfileView,
          },
          async handler(req) {
            if (await profiles.findOne({ name: req.body.name })) throw conflict(`An SSH profile named ${req.body.name} exists already`);
            assertPrivateKeyContent(req.body.key, 'body.key');
            const now = services.clock.now().toISOString();
            const profile = await profiles.insert({
              id: newId('sshp'),
              name: req.body.name,
              user: req.body.user ?? 'root',
              port: req.body.port ?? 22,
              key_sealed: req.body.key ? box.seal(req.body.key) : null,
              password_sealed: req.body.password ? box.seal(req.body.password) : null,
              created_at: now,
              updated_at: now,
            });
            return view(profile);
          },
        }),
        ...readRoutes({
          path: '/v1/ssh-profiles',
          auth: { role: 'admin' },
          summaries: { list: 'List SSH profiles (with has_key and has_password)', get: 'Get an SSH profile by id or name' },
          page: (options) => profiles.page(options),
          find: requireProfile,
          view,
          response: ProfileView,
        }),
        defineRoute({
          method: 'DELETE',
          path: '/v1/ssh-profiles/{id}',
          auth: { role: 'admin' },
          summary: 'Delete an SSH profile',
          schemas: { params: Params, response: Type.Object({ id: Type.String(), deleted: Type.Literal(true) }, { additionalProperties: false }) },
          async handler(req) {
            const profile = await requireProfile(req.params.id);
            await profiles.remove(profile.id);
            return { id: profile.id, deleted: true };
          },
        }),
      ],
    };
  },
});
