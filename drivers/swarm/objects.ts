import type Docker from 'dockerode';
import { attempt, body, checkName, dockerReason, failure, segment, isConflict, isNotFound, SwarmDriverError, type Raw, type SwarmContext } from './client.js';

export type ObjectKind = 'secret' | 'config';

/** The overlay network the load balancer shares with every workload it routes to. */
export const HANGAR_EDGE_NETWORK = 'hangar-edge';

/** Options of the `local` volume driver that mount an NFS share. */
export const nfsOptions = (server: string, path: string): Record<string, string> => ({ type: 'nfs', o: `addr=${server},rw,nfsvers=4`, device: `:${path}` });

/** On the node that holds a volume's folder the volume is a bind of the folder itself. */
export const bindOptions = (path: string): Record<string, string> => ({ type: 'none', o: 'bind', device: path });

function checkKind(kind: unknown): ObjectKind {
  if (kind !== 'secret' && kind !== 'config') throw new SwarmDriverError(`unknown object kind ${JSON.stringify(kind)}: secret or config`);
  return kind;
}

/** The id of the secret or config with exactly this name (the engine's name filter also matches prefixes), or null. */
export async function findObjectId(ctx: SwarmContext, kind: ObjectKind, name: string): Promise<string | null> {
  const filters = { name: [name] };
  const list = (await attempt<unknown[]>(`listing ${kind}s`, () => (kind === 'secret' ? ctx.docker.listSecrets({ filters }) : ctx.docker.listConfigs({ filters })))) as Raw[];
  const found = list.find((o) => o.Spec?.Name === name);
  return found ? (found.ID as string) : null;
}

/** Creates a secret or config, or answers the id of the one that already has this name (a retried task must not fail). */
export async function createObject(ctx: SwarmContext, kind: ObjectKind, name: string, dataBase64: string, labels: Record<string, string>): Promise<{ id: string }> {
  checkKind(kind);
  checkName(kind, name);
  if (typeof dataBase64 !== 'string' || !/^[A-Za-z0-9+/]*={0,2}$/.test(dataBase64)) throw new SwarmDriverError(`${kind} ${name}: the data is not base64`);
  const existing = await findObjectId(ctx, kind, name);
  if (existing) return { id: existing };
  const spec = { Name: name, Labels: { ...(labels ?? {}) }, Data: dataBase64 };
  try {
    const created = (await (kind === 'secret' ? ctx.docker.createSecret(body(spec)) : ctx.docker.createConfig(body(spec)))) as { id?: string; ID?: string };
    const id = created.id ?? created.ID;
    if (id) return { id };
    const found = await findObjectId(ctx, kind, name);
    if (found) return { id: found };
    throw new SwarmDriverError(`creating ${kind} ${name}: the engine answered no id`);
  } catch (err) {
    if (isConflict(err)) {
      // Created by a concurrent attempt between the look-up and the create.
      const found = await findObjectId(ctx, kind, name);
      if (found) return { id: found };
    }
    throw failure(`creating ${kind} ${name}`, err);
  }
}

/** Removes a secret or config by name; one still used by a service is refused with the engine's message. */
export async function removeObject(ctx: SwarmContext, kind: ObjectKind, name: string): Promise<{ removed: boolean }> {
  checkKind(kind);
  const id = await findObjectId(ctx, kind, name);
  if (!id) return { removed: false };
  try {
    await (kind === 'secret' ? ctx.docker.getSecret(id).remove() : ctx.docker.getConfig(id).remove());
    return { removed: true };
  } catch (err) {
    if (isNotFound(err)) return { removed: false };
    throw failure(`removing ${kind} ${name}`, err);
  }
}

/** Ensures a swarm-scoped, attachable overlay network with this name exists; answers its id. */
export async function ensureNetwork(ctx: SwarmContext, name: string): Promise<{ id: string }> {
  checkName('network', name);
  const find = async () => {
    const list = (await attempt('listing networks', () => ctx.docker.listNetworks({ filters: { name: [name] } }))) as Raw[];
    return list.find((n) => n.Name === name) ?? null;
  };
  const existing = await find();
  if (existing) {
    // A network created a moment ago may not have its driver allocated yet (Driver is empty then).
    if (existing.Scope !== 'swarm' || (existing.Driver && existing.Driver !== 'overlay')) {
      throw new SwarmDriverError(`network ${name} exists but is a ${existing.Scope ?? 'local'} ${existing.Driver || 'unknown-driver'} network, not a swarm overlay network: rename or remove it`);
    }
    return { id: existing.Id as string };
  }
  try {
    const network = await ctx.docker.createNetwork(body({ Name: name, Driver: 'overlay', Attachable: true, CheckDuplicate: true, Labels: {} }) as Docker.NetworkCreateOptions);
    return { id: network.id };
  } catch (err) {
    if (isConflict(err)) {
      const found = await find();
      if (found) return { id: found.Id as string };
    }
    throw failure(`creating network ${name}`, err);
  }
}

/** Names of the containers (running or not) that use a volume, for error messages. */
async function volumeUsers(ctx: SwarmContext, name: string): Promise<string[]> {
  try {
    const containers = (await ctx.docker.listContainers({ all: true, filters: { volume: [name] } })) as Raw[];
    return containers.map((c) => String(c.Names?.[0] ?? c.Id).replace(/^\//, ''));
  } catch {
    return [];
  }
}

async function removeVolume(ctx: SwarmContext, name: string, what: string): Promise<boolean> {
  try {
    await ctx.docker.getVolume(segment(name)).remove();
    return true;
  } catch (err) {
    if (isNotFound(err)) return false;
    if (isConflict(err)) {
      const users = await volumeUsers(ctx, name);
      throw new SwarmDriverError(`${what}: volume ${name} is in use${users.length ? ` by ${users.join(', ')}` : ''} (${dockerReason(err)})`, 409);
    }
    throw failure(what, err);
  }
}

const sameOptions = (a: Record<string, string> | null | undefined, b: Record<string, string>) => {
  const left = Object.entries(a ?? {}).sort(([x], [y]) => x.localeCompare(y));
  const right = Object.entries(b).sort(([x], [y]) => x.localeCompare(y));
  return JSON.stringify(left) === JSON.stringify(right);
};

/**
 * Defines a named volume on this engine with the `local` driver and these options. A volume that
 * already has the same options is kept (its data with it); one with other options is removed and
 * created again, which is refused while a container uses it.
 */
export async function defineVolume(ctx: SwarmContext, name: string, driverOptions: Record<string, string>, labels: Record<string, string>): Promise<{ name: string }> {
  checkName('volume', name);
  const options = { ...(driverOptions ?? {}) };
  let existing: Raw | null = null;
  try {
    existing = (await ctx.docker.getVolume(name).inspect()) as Raw;
  } catch (err) {
    if (!isNotFound(err)) throw failure(`inspecting volume ${name}`, err);
  }
  if (existing) {
    if (existing.Driver === 'local' && sameOptions(existing.Options, options)) return { name };
    await removeVolume(ctx, name, `redefining volume ${name} with other options`);
  }
  await attempt(`creating volume ${name}`, () => ctx.docker.createVolume(body({ Name: name, Driver: 'local', DriverOpts: options, Labels: { ...(labels ?? {}) } })));
  return { name };
}

export async function removeVolumeDefinition(ctx: SwarmContext, name: string): Promise<{ removed: boolean }> {
  return { removed: await removeVolume(ctx, name, `removing volume ${name}`) };
}

/**
 * Stages a hangar volume on this engine: a named volume of the local driver that mounts the NFS
 * share, or, on the node that holds the folder, binds the folder itself (no NFS to itself).
 */
export function stageVolume(ctx: SwarmContext, input: { name: string; nfs: { server: string; path: string }; local_path: string | null; labels: Record<string, string> }): Promise<{ name: string }> {
  const options = input.local_path ? bindOptions(input.local_path) : nfsOptions(input.nfs.server, input.nfs.path);
  return defineVolume(ctx, input.name, options, input.labels ?? {});
}
