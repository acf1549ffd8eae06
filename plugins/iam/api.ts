import type { Principal } from '../../core/auth/index.js';
import { defineServiceRef, type Services } from '../../core/plugin.js';
import type { Identity } from './identity.js';
import type { UserRecord } from './users.js';

/** The iam plugin's contract: what other plugins import of it (importing this never loads the plugin). */

export type { Identity } from './identity.js';
export type { LoginIdentifier, UserRecord } from './users.js';
/** Store notices on this topic name a user that changed (deleted, another role, a new password): holders of its credentials check them. */
export const USER_CHANGES = 'iam.users';
/** Request fields other plugins' routes share with iam's (schemas only). */
export { Email, KeepApiKeys, Password } from './schemas.js';

/** The users table: other plugins' tables reference a user by `userid` in it. */
export const USERS = 'users';

/** The identity plugin's shared services (users, JWTs, password policy), for plugins that build on it (login, runner…). */
export const IdentityRef = defineServiceRef<Identity>('iam', 'users and tokens (the iam plugin)');

export function identityOf(services: Services): Identity {
  return services.provided.get(IdentityRef);
}

/** Who a login with a password established (the audit log's principal of the login request). */
export function passwordPrincipal(user: Pick<UserRecord, 'userid' | 'name' | 'username' | 'role'>): Principal {
  return { id: user.userid, name: user.name ?? user.username, role: user.role, method: 'password' };
}
