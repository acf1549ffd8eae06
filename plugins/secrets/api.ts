import { defineExtensionPoint, defineServiceRef, type Services } from '../../core/plugin.js';

/** Secrets and configs are one resource with two kinds (and two route sets). */
export type ObjectKind = 'secret' | 'config';

/** A hangar secret or config as a workload references it on one swarm: its current version. */
export interface ResolvedObject {
  id: string;
  name: string;
  /** Name of the runtime object holding the current version (`<name>-v<version>`). */
  runtime_name: string;
  version: number;
}

/**
 * What uses secrets and configs: a plugin whose workloads reference them answers who uses one, and
 * redeploys one of its workloads so it references the current version (after a rotation).
 */
export interface ObjectUsers {
  /**
   * The users of each of these objects (one lookup for a whole page); an object nothing uses may be
   * left out. `type` is what a user is (`service`, the default, or `workload`: a cluster's own
   * Deployment named `deployment/web`); `pinned`, the earlier version of the object it uses instead
   * of the current one (a rollback's), which a rotation does not remove.
   */
  usersOf(kind: ObjectKind, objectIds: string[]): Promise<Map<string, Array<{ id: string; name: string; type?: string; pinned?: number }>>>;
  /**
   * Redeploys (rolls out) one of its users so it reads the current version of `object`, the one
   * just rotated: a user a rollback left on an earlier version of it moves to the newest.
   */
  redeploy(userId: string, object: { kind: ObjectKind; id: string }): Promise<void>;
}

export interface SecretsApi {
  /** The current version of the secret or config called `name` on a swarm (id or name), or null. */
  resolve(kind: ObjectKind, swarmId: string, name: string): Promise<ResolvedObject | null>;
  /** By id, whatever its swarm; null when unknown. */
  get(kind: ObjectKind, id: string): Promise<ResolvedObject | null>;
  /**
   * One version of an object as a workload references it: the current one, or an earlier one that
   * is kept (a rollback's). With `deploy`, an earlier version's runtime object is made again when
   * it was removed (it goes at the next rotation or with the object). A 409 naming the versions
   * kept when this one is not (or when the object keeps its value in place: only the current one).
   */
  version(kind: ObjectKind, id: string, version: number, options: { deploy: boolean }): Promise<ResolvedObject>;
}

export const SecretsRef = defineServiceRef<SecretsApi>('secrets', 'secrets and configs (the secrets plugin)');

/** What uses secrets and configs (the services plugin's compose stacks). */
export const SecretUsersPoint = defineExtensionPoint<ObjectUsers>('secrets.users', 'secret and config users');

export function secretsOf(services: Services): SecretsApi {
  return services.provided.get(SecretsRef);
}
