import { randomUUID } from 'node:crypto';
import type { Knex } from 'knex';
import type { Clock } from '../../core/clock.js';
import type { SecretBox } from '../../core/crypto.js';
import { RowCodec, isUniqueViolation, paginate, uniqueViolationConflict, type Page, type Row } from '../../core/db/repository.js';
import { NoticedCache } from '../../core/cache.js';
import type { Store } from '../../core/db/store.js';
import { conflict, notFound, type HttpError } from '../../core/errors.js';
import { newId, randomToken } from '../../core/ids.js';
import { lockForTransaction } from '../../core/db/locks.js';
import { USER_CHANGES } from './api.js';
import type { KeyScope } from './keys.js';
import { API_KEYS, BOOTSTRAP_CLAIM, BOOTSTRAP_CLAIM_ID, emailClashes, ensureEmailIndex, USERS, USER_PROPERTIES } from './migrations.js';

/** What a login's username field holds. */
export type LoginIdentifier = 'email' | 'username' | 'email_or_username';
export interface UserProperty {
  id: number;
  name: string;
  value: string | null;
}

/** A user row; `password` is the stored hash and never leaves the plugin. */
export interface UserRecord {
  userid: string;
  name: string | null;
  email: string | null;
  username: string;
  password: string;
  role: string;
  /** Bumped by every password change; tokens issued in an earlier epoch stop working. */
  token_epoch: number;
  created_at: string;
  updated_at: string | null;
  deleted_at: string | null;
}

export interface ApiKeyRecord {
  id: string;
  access_key_id: string;
  userid: string;
  secret_sealed: string;
  description: string | null;
  created_at: string;
  last_used_at: string | null;
  /** Its scope (keys.ts): null project: the installation's. */
  project_id: string | null;
  role: string | null;
  /** What it is limited to (within its owner's); null: its owner's. */
  permissions: string[] | null;
  expires_at: string | null;
  /** CIDRs it is accepted from; null: anywhere. */
  source_networks: string[] | null;
}

/** What the API shows of a user: never the hash. */
export function publicUser(user: UserRecord, properties: UserProperty[] = []) {
  return {
    id: user.userid,
    userid: user.userid,
    username: user.username,
    name: user.name,
    email: user.email,
    role: user.role,
    created_at: user.created_at,
    updated_at: user.updated_at,
    deleted_at: user.deleted_at,
    properties,
  };
}

export function publicKey(key: ApiKeyRecord, projectName: string | null = null, now = new Date()) {
  return {
    id: key.id,
    access_key_id: key.access_key_id,
    user_id: key.userid,
    description: key.description,
    created_at: key.created_at,
    last_used_at: key.last_used_at,
    scope: key.project_id ? ('project' as const) : ('installation' as const),
    project_id: key.project_id,
    project_name: key.project_id ? projectName : null,
    role: key.role,
    permissions: key.permissions,
    expires_at: key.expires_at,
    expired: key.expires_at !== null && Date.parse(key.expires_at) <= now.getTime(),
    source_networks: key.source_networks ?? [],
  };
}

const userCodec = new RowCodec({ dates: ['created_at', 'updated_at', 'deleted_at'] });
const keyCodec = new RowCodec({ dates: ['created_at', 'last_used_at', 'expires_at'], json: ['permissions', 'source_networks'] });

/** How often a key's last-used time is written, at most (keeps hot keys from writing on every request). */
const TOUCH_INTERVAL_MS = 60_000;

/** Notices on this topic name a user whose record changed (any process): cached copies go. */
export { USER_CHANGES };
/** Notices on this topic name a user one of whose API keys was deleted (long-lived requests signed with it end). */
export const KEY_CHANGES = 'iam.keys';

/** The one user store behind the control API's IAM and the login API. */
export class UserStore {
  /** Live users by id, for authenticating requests without a query each (core/cache.ts). */
  private readonly authenticating: NoticedCache<UserRecord>;

  constructor(
    private readonly store: Store,
    private readonly clock: Clock,
    private readonly keySecrets: SecretBox,
  ) {
    this.authenticating = new NoticedCache(store.notices, USER_CHANGES, { ttlMs: 30_000, max: 10_000 });
  }

  /** Tells every control plane that a user changed (after the change is committed). */
  private async changed(userid: string): Promise<void> {
    await this.store.notices.publish(USER_CHANGES, userid);
  }

  /**
   * A live user by id as a request's authenticator needs it (role, token epoch, deletion): from
   * memory while unchanged. Every write to a user below announces itself, so a password change, a
   * deletion or a new role counts from the next request on, on every control plane.
   */
  async current(userid: string): Promise<UserRecord | null> {
    return this.authenticating.get(userid, () => this.get(userid));
  }

  private get knex(): Knex {
    return this.store.knex;
  }

  private now(): string {
    return this.clock.now().toISOString();
  }

  private decodeUser = (row: Row) => userCodec.decode<UserRecord>(row);

  async create(
    input: { username: string; email?: string | null; name?: string | null; passwordHash: string; role: string; properties?: { name: string; value?: string | null }[] },
    trx?: Knex.Transaction,
  ): Promise<UserRecord> {
    const db = trx ?? this.knex;
    // Among live users only: a deleted user's username and email are free again.
    const taken = await this.taken(db, { username: input.username, email: input.email ?? null });
    if (taken) throw taken;
    const userid = randomUUID();
    const row = {
      userid,
      username: input.username,
      email: input.email ?? null,
      name: input.name ?? null,
      password: input.passwordHash,
      role: input.role,
      created_at: this.now(),
    };
    // The check above and this insert are two steps: a concurrent create of the same name loses here.
    await db(USERS)
      .insert(row)
      .catch(async (err: unknown) => {
        throw (await this.takenAfter(err, { username: input.username, email: input.email ?? null })) ?? err;
      });
    for (const property of input.properties ?? []) {
      await db(USER_PROPERTIES).insert({ userid, name: property.name, value: property.value ?? null });
    }
    return (await this.get(userid, { trx }))!;
  }

  /**
   * The 409 when a live user other than `except` has the username, or the email compared without
   * case (alice@example.com and Alice@Example.com are one address: login and reset match it so).
   * The answer names the field, not the value sent.
   */
  private async taken(db: Knex | Knex.Transaction, wanted: { username?: string; email?: string | null }, except?: string): Promise<HttpError | null> {
    const { username, email } = wanted;
    if (username === undefined && !email) return null;
    const q = db(USERS)
      .whereNull('deleted_at')
      .andWhere((w) => {
        if (username !== undefined) w.orWhere({ username });
        if (email) w.orWhereRaw('lower(email) = ?', [email.toLowerCase()]);
      });
    if (except) q.whereNot({ userid: except });
    const row = await q.first('username');
    if (!row) return null;
    return row.username === username ? conflict('The username is already taken; choose another') : conflict('The email address is already registered to another user (emails are compared without case)');
  }

  /** After a write refused by a unique index (a concurrent create or change won the race): the 409 naming the field. */
  private async takenAfter(err: unknown, wanted: { username?: string; email?: string | null }, except?: string): Promise<HttpError | null> {
    if (!isUniqueViolation(err)) return null;
    return (await this.taken(this.knex, wanted, except)) ?? uniqueViolationConflict(err, USERS);
  }

  /** A user by id; soft-deleted users only when asked for. */
  async get(userid: string, options: { includeDeleted?: boolean; trx?: Knex.Transaction } = {}): Promise<UserRecord | null> {
    if (!/^[0-9a-f-]{36}$/i.test(userid)) return null;
    const q = (options.trx ?? this.knex)(USERS).where({ userid });
    if (!options.includeDeleted) q.whereNull('deleted_at');
    const row = await q.first();
    return row ? this.decodeUser(row) : null;
  }

  async require(userid: string): Promise<UserRecord> {
    const user = await this.get(userid);
    if (!user) throw notFound(`No user ${userid}`);
    return user;
  }

  /**
   * A live (not deleted) user by login identifier. `email_or_username`: the user whose email is the
   * value, else the one whose username is (a username may hold an `@`; the email wins). Emails
   * compare without case, usernames exactly. An email that two live users share (left from before
   * emails were unique without case, see migration 005) names neither: they log in by username.
   */
  async findForLogin(field: LoginIdentifier, value: string): Promise<UserRecord | null> {
    const live = () => this.knex(USERS).whereNull('deleted_at');
    const byEmail = async () => {
      const rows = await live().whereRaw('lower(email) = ?', [value.toLowerCase()]).limit(2);
      return rows.length === 1 ? rows[0] : undefined;
    };
    const byUsername = () => live().where({ username: value }).first();
    const row = field === 'email' ? await byEmail() : field === 'username' ? await byUsername() : ((await byEmail()) ?? (await byUsername()));
    return row ? this.decodeUser(row) : null;
  }

  /** Live users that share an email without regard to case (none once migration 005's index exists). */
  async emailClashes(): Promise<Awaited<ReturnType<typeof emailClashes>>> {
    return emailClashes(this.knex);
  }

  /**
   * Makes emails unique without case once no live users share one (migrations.ts ensureEmailIndex);
   * answers the users that still do. Two control planes starting together may both try: the loser's
   * error is ignored when the index is there.
   */
  async ensureEmailIndex(): Promise<Awaited<ReturnType<typeof emailClashes>>> {
    try {
      return await ensureEmailIndex(this.knex);
    } catch (err) {
      const clashes = await emailClashes(this.knex);
      if (clashes.length) return clashes;
      throw err;
    }
  }

  async list(options: { limit?: number; cursor?: string | null; includeDeleted?: boolean }): Promise<Page<UserRecord>> {
    const q = this.knex(USERS);
    if (!options.includeDeleted) q.whereNull('deleted_at');
    return paginate(q, { keys: ['created_at', 'userid'], limit: options.limit, cursor: options.cursor, decode: this.decodeUser, cursors: this.store.cursors, list: USERS });
  }

  /**
   * A new password (a change or a reset): the tokens issued before it stop working (the token
   * epoch moves on), and so do the user's API keys unless `keepApiKeys`. Answers how many keys went.
   */
  async setPassword(userid: string, passwordHash: string, options: { keepApiKeys: boolean }): Promise<{ keys_deleted: number }> {
    const outcome = await this.knex.transaction(async (trx) => {
      await trx(USERS).where({ userid }).update({ password: passwordHash, token_epoch: trx.raw('token_epoch + 1'), updated_at: this.now() });
      const keysDeleted = options.keepApiKeys ? 0 : await trx(API_KEYS).where({ userid }).delete();
      return { keys_deleted: keysDeleted };
    });
    await this.changed(userid);
    return outcome;
  }

  /** The same password, hashed the configured way (a legacy hash upgraded at login): nothing is revoked. */
  async upgradeHash(userid: string, passwordHash: string): Promise<void> {
    await this.knex(USERS).where({ userid }).update({ password: passwordHash });
    await this.changed(userid);
  }

  /**
   * Changes a user's name, email or role. A new role moves the token epoch on (as a password change
   * does): tokens and sessions from before it stop working, so a demoted admin's token no longer
   * says admin. The last live admin is never demoted: the count and the change are one step,
   * serialised with deletions across control planes. Answers the user and whether tokens were revoked.
   */
  async update(userid: string, patch: { name?: string | null; email?: string | null; role?: string }): Promise<{ user: UserRecord; revoked: boolean }> {
    const outcome = await this.knex.transaction(async (trx) => {
      if (patch.role !== undefined) await lockForTransaction(trx, this.store.dialect, 'iam:admins');
      const current = await this.get(userid, { trx });
      if (!current) throw notFound(`No user ${userid}`);
      const newRole = patch.role !== undefined && patch.role !== current.role ? patch.role : undefined;
      if (newRole !== undefined && current.role === 'admin') {
        const [row] = await trx(USERS).where({ role: 'admin' }).whereNull('deleted_at').whereNot({ userid }).count<{ n: string | number }[]>({ n: '*' });
        if (Number(row?.n ?? 0) === 0) throw conflict('Cannot change the role of the last admin: make another user admin first');
      }
      if (patch.email) {
        const taken = await this.taken(trx, { email: patch.email }, userid);
        if (taken) throw taken;
      }
      const values: Record<string, unknown> = { updated_at: this.now() };
      if (patch.name !== undefined) values.name = patch.name;
      if (patch.email !== undefined) values.email = patch.email;
      if (newRole !== undefined) {
        values.role = newRole;
        values.token_epoch = trx.raw('token_epoch + 1');
      }
      await trx(USERS)
        .where({ userid })
        .update(values)
        .catch(async (err: unknown) => {
          throw (await this.takenAfter(err, { email: patch.email ?? null }, userid)) ?? err;
        });
      return { revoked: newRole !== undefined };
    });
    await this.changed(userid);
    return { user: (await this.get(userid))!, revoked: outcome.revoked };
  }

  /**
   * Takes every credential a user holds away and lowers its role, in one transaction: its API keys
   * deleted, its token epoch moved on (its sessions and tokens end), its role set to `role` (the
   * last live admin keeps its role: hangar is never left without one), and `also` (memberships) in
   * the same transaction. Single sign-on's answer to a user the provider no longer gives a role.
   */
  async cutOff(userid: string, role: string, also: (trx: Knex.Transaction) => Promise<void>): Promise<{ user: UserRecord; keys_deleted: number; demoted: boolean }> {
    const outcome = await this.knex.transaction(async (trx) => {
      await lockForTransaction(trx, this.store.dialect, 'iam:admins');
      const current = await this.get(userid, { trx });
      if (!current) throw notFound(`No user ${userid}`);
      let demoted = current.role !== role;
      if (demoted && current.role === 'admin') {
        const [row] = await trx(USERS).where({ role: 'admin' }).whereNull('deleted_at').whereNot({ userid }).count<{ n: string | number }[]>({ n: '*' });
        demoted = Number(row?.n ?? 0) > 0;
      }
      await trx(USERS)
        .where({ userid })
        .update({ ...(demoted ? { role } : {}), token_epoch: trx.raw('token_epoch + 1'), updated_at: this.now() });
      const keysDeleted = await trx(API_KEYS).where({ userid }).delete();
      await also(trx);
      return { keys_deleted: keysDeleted, demoted };
    });
    await this.changed(userid);
    await this.store.notices.publish(KEY_CHANGES, userid);
    return { user: (await this.get(userid))!, ...outcome };
  }

  /**
   * Soft delete: the user can no longer log in, and its tokens and keys stop working. The last
   * live admin is never deleted: the check and the delete are one step (two admins deleting each
   * other at the same moment leave one), serialised across control planes.
   */
  async softDelete(userid: string): Promise<boolean> {
    const deleted = await this.knex.transaction(async (trx) => {
      await lockForTransaction(trx, this.store.dialect, 'iam:admins');
      const user = await trx(USERS).where({ userid }).whereNull('deleted_at').first('role');
      if (!user) return false;
      if (user.role === 'admin') {
        const [row] = await trx(USERS).where({ role: 'admin' }).whereNull('deleted_at').whereNot({ userid }).count<{ n: string | number }[]>({ n: '*' });
        if (Number(row?.n ?? 0) === 0) throw conflict('Cannot delete the last admin');
      }
      const n = await trx(USERS).where({ userid }).whereNull('deleted_at').update({ deleted_at: this.now(), updated_at: this.now() });
      return n > 0;
    });
    if (deleted) await this.changed(userid);
    return deleted;
  }

  /** Whether the first admin has been created (then bootstrap stays closed for good). */
  async bootstrapClaimed(trx?: Knex.Transaction): Promise<boolean> {
    return Boolean(await (trx ?? this.knex)(BOOTSTRAP_CLAIM).where({ id: BOOTSTRAP_CLAIM_ID }).first('id'));
  }

  /**
   * Creates the first admin and marks bootstrap claimed, in one transaction: of two concurrent
   * calls one wins, the other gets the 409.
   */
  async claimBootstrap<T>(create: (trx: Knex.Transaction) => Promise<T & { user: UserRecord }>): Promise<T & { user: UserRecord }> {
    const claimed = conflict('hangar is already bootstrapped: the first admin was created');
    return this.knex.transaction(async (trx) => {
      await lockForTransaction(trx, this.store.dialect, 'iam:bootstrap');
      if (await this.bootstrapClaimed(trx)) throw claimed;
      const created = await create(trx);
      await trx(BOOTSTRAP_CLAIM).insert({ id: BOOTSTRAP_CLAIM_ID, userid: created.user.userid, claimed_at: this.now() });
      return created;
    });
  }

  async properties(userid: string): Promise<UserProperty[]> {
    return this.knex(USER_PROPERTIES).where({ userid }).orderBy('id').select('id', 'name', 'value');
  }

  async addProperty(userid: string, name: string, value: string | null): Promise<UserProperty> {
    const [row] = await this.knex(USER_PROPERTIES).insert({ userid, name, value }).returning(['id', 'name', 'value']);
    await this.knex(USERS).where({ userid }).update({ updated_at: this.now() });
    return row as UserProperty;
  }

  /** Changes a property's name or value; null when the user has no such property. */
  async updateProperty(userid: string, id: number, patch: { name?: string; value?: string | null }): Promise<UserProperty | null> {
    const values: Record<string, unknown> = {};
    if (patch.name !== undefined) values.name = patch.name;
    if (patch.value !== undefined) values.value = patch.value;
    if (Object.keys(values).length && !(await this.knex(USER_PROPERTIES).where({ userid, id }).update(values))) return null;
    const row = await this.knex(USER_PROPERTIES).where({ userid, id }).first('id', 'name', 'value');
    if (!row) return null;
    await this.knex(USERS).where({ userid }).update({ updated_at: this.now() });
    return row as UserProperty;
  }

  async removeProperty(userid: string, id: number): Promise<boolean> {
    return (await this.knex(USER_PROPERTIES).where({ userid, id }).delete()) > 0;
  }

  /** Creates an API key pair (of the installation, its owner's, without expiry unless `scope` says otherwise); the secret is returned here once and stored sealed. */
  async createKey(userid: string, description: string | null, trx?: Knex.Transaction, scope: Partial<KeyScope> = {}): Promise<{ key: ApiKeyRecord; secret: string }> {
    const secret = randomToken(40);
    const key: ApiKeyRecord = {
      id: newId('key'),
      access_key_id: `HK${randomToken(18).toUpperCase()}`,
      userid,
      secret_sealed: this.keySecrets.seal(secret),
      description,
      created_at: this.now(),
      last_used_at: null,
      project_id: scope.project_id ?? null,
      role: scope.role ?? null,
      permissions: scope.permissions ?? null,
      expires_at: scope.expires_at ?? null,
      source_networks: scope.source_networks ?? null,
    };
    await (trx ?? this.knex)(API_KEYS).insert(keyCodec.encode(key as unknown as Row));
    return { key, secret };
  }

  async listKeys(userid: string): Promise<ApiKeyRecord[]> {
    const rows: Row[] = await this.knex(API_KEYS).where({ userid }).orderBy('created_at');
    return rows.map((r) => keyCodec.decode<ApiKeyRecord>(r));
  }

  async deleteKey(userid: string, keyId: string): Promise<boolean> {
    const deleted = (await this.knex(API_KEYS).where({ userid, id: keyId }).delete()) > 0;
    if (deleted) await this.store.notices.publish(KEY_CHANGES, userid);
    return deleted;
  }

  /** The key `keyId` of a live user `userid` (read from the store, not a cache), or null when either is gone. */
  async liveKey(userid: string, keyId: string): Promise<{ key: ApiKeyRecord; user: UserRecord } | null> {
    const row = await this.knex(API_KEYS).where({ userid, id: keyId }).first();
    const user = row ? await this.get(userid) : null;
    return row && user ? { key: keyCodec.decode<ApiKeyRecord>(row), user } : null;
  }

  /** The key, its owner (live) and its secret, for verifying a signature. */
  async keyForSigning(accessKeyId: string): Promise<{ key: ApiKeyRecord; user: UserRecord; secret: string } | null> {
    const row = await this.knex(API_KEYS).where({ access_key_id: accessKeyId }).first();
    if (!row) return null;
    const key = keyCodec.decode<ApiKeyRecord>(row);
    const user = await this.get(key.userid);
    if (!user) return null;
    return { key, user, secret: this.keySecrets.openString(key.secret_sealed) };
  }

  async touchKey(key: ApiKeyRecord): Promise<void> {
    const now = this.clock.now();
    if (key.last_used_at && now.getTime() - Date.parse(key.last_used_at) < TOUCH_INTERVAL_MS) return;
    await this.knex(API_KEYS).where({ id: key.id }).update({ last_used_at: now.toISOString() });
  }
}
