import type { RuntimeAvailability, SwarmMember } from './membership-calls.js';
import { attempt, body, failure, isNotFound, segment, statusOf, SwarmDriverError, waitUntil, type Raw, type SwarmContext } from './client.js';

const AVAILABILITIES: readonly RuntimeAvailability[] = ['active', 'pause', 'drain'];
const LISTEN_ADDR = '0.0.0.0:2377';
const JOIN_WAIT_MS = 30_000;
const NODE_DOWN_WAIT_MS = 30_000;

async function swarmInfo(ctx: SwarmContext): Promise<Raw> {
  const info = (await attempt('reading the engine information', () => ctx.docker.info())) as Raw;
  return info.Swarm ?? {};
}

/** Makes this engine a single-node swarm, or answers the swarm it already manages. */
export async function init(ctx: SwarmContext, advertiseAddress: string | null): Promise<{ cluster_id: string; runtime_node_id: string }> {
  const swarm = await swarmInfo(ctx);
  if (swarm.LocalNodeState === 'active') {
    if (!swarm.ControlAvailable) throw new SwarmDriverError(`this engine is already a worker of swarm ${swarm.Cluster?.ID ?? '(unknown)'}; it cannot start a swarm of its own until it leaves`, 409);
    return { cluster_id: swarm.Cluster?.ID, runtime_node_id: swarm.NodeID };
  }
  if (swarm.LocalNodeState === 'pending' || swarm.LocalNodeState === 'locked' || swarm.LocalNodeState === 'error') {
    throw new SwarmDriverError(`this engine's swarm state is ${swarm.LocalNodeState}${swarm.Error ? ` (${swarm.Error})` : ''}; it must leave first`, 409);
  }
  await attempt('initialising the swarm', () => ctx.docker.swarmInit({ ListenAddr: LISTEN_ADDR, AdvertiseAddr: advertiseAddress ?? undefined }));
  let ready: Raw = {};
  await waitUntil(async () => {
    ready = await swarmInfo(ctx);
    return ready.LocalNodeState === 'active' && !!ready.Cluster?.ID && !!ready.NodeID;
  }, 15_000, 250);
  if (!ready.Cluster?.ID) throw new SwarmDriverError(`initialising the swarm: the engine reports state ${ready.LocalNodeState ?? 'unknown'}${ready.Error ? ` (${ready.Error})` : ''}`);
  return { cluster_id: ready.Cluster.ID, runtime_node_id: ready.NodeID };
}

export async function joinTokens(ctx: SwarmContext): Promise<{ worker: string; manager: string; managers: string[] }> {
  const inspect = (await attempt('reading the swarm join tokens', () => ctx.docker.swarmInspect())) as Raw;
  const swarm = await swarmInfo(ctx);
  const managers = ((swarm.RemoteManagers ?? []) as Raw[]).map((m) => m.Addr as string).filter(Boolean);
  return { worker: inspect.JoinTokens?.Worker, manager: inspect.JoinTokens?.Manager, managers };
}

/** Joins this engine to a swarm (a no-op answering its node id when it already is in one). */
export async function join(ctx: SwarmContext, remoteAddresses: string[], token: string, advertiseAddress: string | null): Promise<{ runtime_node_id: string }> {
  const swarm = await swarmInfo(ctx);
  if (swarm.LocalNodeState === 'active' && swarm.NodeID) return { runtime_node_id: swarm.NodeID };
  if (!Array.isArray(remoteAddresses) || remoteAddresses.length === 0) throw new SwarmDriverError('joining the swarm: no manager address given');
  if (typeof token !== 'string' || !token) throw new SwarmDriverError('joining the swarm: no join token given');
  try {
    await ctx.docker.swarmJoin({ ListenAddr: LISTEN_ADDR, AdvertiseAddr: advertiseAddress ?? undefined, RemoteAddrs: remoteAddresses, JoinToken: token });
  } catch (err) {
    // The reason never holds the token (the engine does not echo it); the addresses are not secret.
    throw failure(`joining the swarm at ${remoteAddresses.join(', ')}`, err);
  }
  let now: Raw = {};
  await waitUntil(async () => {
    now = await swarmInfo(ctx);
    return now.LocalNodeState === 'active' && !!now.NodeID;
  }, JOIN_WAIT_MS, 250);
  if (now.LocalNodeState !== 'active' || !now.NodeID) {
    throw new SwarmDriverError(`joining the swarm at ${remoteAddresses.join(', ')}: the engine reports state ${now.LocalNodeState ?? 'unknown'}${now.Error ? ` (${now.Error})` : ''}`);
  }
  return { runtime_node_id: now.NodeID };
}

export async function leave(ctx: SwarmContext, force: boolean): Promise<{ left: boolean }> {
  const swarm = await swarmInfo(ctx);
  if (!swarm.LocalNodeState || swarm.LocalNodeState === 'inactive') return { left: false };
  try {
    await ctx.docker.swarmLeave({ force: !!force });
  } catch (err) {
    // 503: "This node is not part of a swarm" — left between the check and the call.
    if (statusOf(err) === 503) return { left: false };
    throw failure('leaving the swarm', err);
  }
  return { left: true };
}

function memberOf(node: Raw): SwarmMember {
  const availability = node.Spec?.Availability;
  return {
    runtime_node_id: node.ID,
    hostname: node.Description?.Hostname ?? '',
    address: node.Status?.Addr || null,
    role: node.Spec?.Role === 'manager' ? 'manager' : 'worker',
    state: node.Status?.State ?? 'unknown',
    availability: AVAILABILITIES.includes(availability) ? availability : 'active',
    leader: !!node.ManagerStatus?.Leader,
  };
}

export async function members(ctx: SwarmContext): Promise<{ members: SwarmMember[] }> {
  const nodes = (await attempt('listing the swarm nodes', () => ctx.docker.listNodes())) as Raw[];
  return { members: nodes.map(memberOf) };
}

async function inspectNode(ctx: SwarmContext, id: string): Promise<Raw | null> {
  try {
    return (await ctx.docker.getNode(segment(id)).inspect()) as Raw;
  } catch (err) {
    if (isNotFound(err)) return null;
    throw failure(`inspecting node ${id}`, err);
  }
}

/**
 * Removes a node from the manager's list. Without `force` it waits (up to 30 s) for the node to
 * be reported down, as it is shortly after it left; with `force` it removes it whatever its state.
 */
export async function removeMember(ctx: SwarmContext, runtimeNodeId: string, force: boolean): Promise<{ removed: boolean }> {
  let node = await inspectNode(ctx, runtimeNodeId);
  if (!node) return { removed: false };
  if (!force) {
    await waitUntil(async () => {
      node = await inspectNode(ctx, runtimeNodeId);
      return !node || node.Status?.State === 'down';
    }, NODE_DOWN_WAIT_MS, 1000);
    if (!node) return { removed: false };
    if (node.Status?.State !== 'down') {
      throw new SwarmDriverError(`removing node ${runtimeNodeId}: it is still ${node.Status?.State ?? 'up'} after ${NODE_DOWN_WAIT_MS / 1000} s; make it leave the swarm first, or remove it by force`, 409);
    }
  }
  try {
    await ctx.docker.getNode(node.ID).remove({ force: !!force });
    return { removed: true };
  } catch (err) {
    if (isNotFound(err)) return { removed: false };
    throw failure(`removing node ${runtimeNodeId}`, err);
  }
}

/** Sets a node's availability (hangar's cordon / drain / uncordon). */
export async function setNodeAvailability(ctx: SwarmContext, runtimeNodeId: string, availability: RuntimeAvailability): Promise<{ availability: RuntimeAvailability }> {
  if (!AVAILABILITIES.includes(availability)) throw new SwarmDriverError(`unknown availability ${JSON.stringify(availability)}: active, pause or drain`);
  const node = await inspectNode(ctx, runtimeNodeId);
  if (!node) throw new SwarmDriverError(`setting node ${runtimeNodeId} to ${availability}: no such node in this swarm`, 404);
  const spec = { ...(node.Spec ?? {}), Role: node.Spec?.Role, Availability: availability, Labels: node.Spec?.Labels ?? {} };
  await attempt(`setting node ${runtimeNodeId} to ${availability}`, () => ctx.docker.getNode(node.ID).update(body(spec, { version: node.Version?.Index })));
  return { availability };
}
