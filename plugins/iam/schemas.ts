import { Type } from '@sinclair/typebox';
import { KeyScopeView } from './keys.js';

export const Username = Type.String({ minLength: 1, maxLength: 20, pattern: '^[A-Za-z0-9._@-]+$', description: 'unique; letters, digits, . _ @ -' });
export const Email = Type.String({ format: 'email', maxLength: 120 });
export const DisplayName = Type.String({ maxLength: 50 });
export const Role = Type.String({ minLength: 1, maxLength: 50, pattern: '^[a-z][a-z0-9_-]*$', description: 'built in: admin, auditor (reads everything, changes nothing), user; docs/tenancy.md' });
export const Password = Type.String({ maxLength: 1024 });
export const PropertyInput = Type.Object(
  { name: Type.String({ minLength: 1, maxLength: 50 }), value: Type.Union([Type.String({ maxLength: 250 }), Type.Null()]) },
  { additionalProperties: false },
);

export const UserProperty = Type.Object({ id: Type.Integer(), name: Type.String(), value: Type.Union([Type.String(), Type.Null()]) }, { additionalProperties: false });

/** What a DELETE that removes a small thing answers. */
export const Deleted = Type.Object({ deleted: Type.Literal(true) }, { additionalProperties: false });

export const UserIdParams = Type.Object({ id: Type.String({ format: 'uuid' }) });

export const UserView = Type.Object({
  id: Type.String({ format: 'uuid' }),
  userid: Type.String({ format: 'uuid' }),
  username: Type.String(),
  name: Type.Union([Type.String(), Type.Null()]),
  email: Type.Union([Type.String(), Type.Null()]),
  role: Type.String(),
  created_at: Type.String({ format: 'date-time' }),
  updated_at: Type.Union([Type.String({ format: 'date-time' }), Type.Null()]),
  deleted_at: Type.Union([Type.String({ format: 'date-time' }), Type.Null()]),
  properties: Type.Array(UserProperty),
});

export const KeyView = Type.Object({
  id: Type.String(),
  access_key_id: Type.String(),
  user_id: Type.String(),
  description: Type.Union([Type.String(), Type.Null()]),
  created_at: Type.String({ format: 'date-time' }),
  last_used_at: Type.Union([Type.String({ format: 'date-time' }), Type.Null()], { description: 'when a request signed with it last went through (written at most once a minute)' }),
  ...KeyScopeView,
});

export const TokenView = Type.Object({
  token: Type.String(),
  token_type: Type.Literal('Bearer'),
  expires_at: Type.String({ format: 'date-time' }),
});


export const KeepApiKeys = Type.Boolean({ description: "keep the user's API keys working (default false: a new password deletes them)" });

export const PasswordChanged = Type.Object({
  updated: Type.Literal(true),
  keys_deleted: Type.Integer({ minimum: 0, description: 'API keys deleted with the change (0 with keep_api_keys)' }),
});
