import type { Knex } from 'knex';
import type { Principal } from '../auth/index.js';
import { unlimitedAdmin } from '../auth/permissions.js';
import { conflict, notFound } from '../errors.js';
import { defineExtensionPoint, defineServiceRef, type ServiceRegistry } from '../provided.js';

/**
 * Which project a cluster belongs to (its `project_id`), as the plugin that keeps projects answers
 * it (plugins/projects). Core's cluster API asks it, when it is loaded, where a new cluster goes and
 * which project a list's `?project=` names; without it clusters belong to no project.
 */
export interface ClusterProjects {
  /**
   * The id of the project a new cluster goes in: the one the body names (`project_id`: id or name),
   * else the caller's default project. A 400 naming what to fix when there is none, or the caller
   * may not use it.
   */
  forNew(principal: Principal | null, named: string | undefined): Promise<string>;
  /** The id of the project a list's `?project=` names (id or name); a 400 when the caller knows no such project. */
  resolve(principal: Principal | null, ref: string): Promise<string>;
}

export const ClusterProjectsRef = defineServiceRef<ClusterProjects>('clusters.projects', 'the projects clusters belong to (the projects plugin)');

/**
 * The projects a node is granted to, as the plugin that keeps projects answers it. A node granted
 * to none is the installation's, placed by installation admins anywhere; a granted node serves the
 * clusters of its projects only, and their members whose role grants `clusters:write` join it to
 * them (docs/tenancy.md "Nodes granted to projects").
 */
export interface NodeGrants {
  projectsOf(nodeId: string, trx?: Knex.Transaction): Promise<string[]>;
}

export const NodeGrantsRef = defineServiceRef<NodeGrants>('clusters.node-grants', 'the projects nodes are granted to (the projects plugin)');

/**
 * Whether a node may hold a project's resource (a cluster's member, a volume's folder): a node
 * granted to projects serves those only. An installation admin (its own credential) places the
 * installation's nodes anywhere, a granted node in its projects (a 409 naming the grant
 * otherwise); anyone else places only nodes granted to the resource's project, another node
 * answering as one that does not exist (`No node <ref>`). `owner` says whose resource it is in
 * the 409 ("swarm web's", "the new volume's"). A node being removed is a 409 after that check,
 * never before it: a member learns nothing of a node outside their project. `trx`: read the grants
 * there (the placement's transaction, the node's row locked).
 */
export async function requireNodeServes(provided: ServiceRegistry, principal: Principal | null, node: { id: string; removing: boolean }, ref: string, projectId: string | null, owner: string, trx?: Knex.Transaction): Promise<void> {
  const granted = (await provided.find(NodeGrantsRef)?.projectsOf(node.id, trx)) ?? [];
  if (!unlimitedAdmin(principal)) {
    if (!projectId || !granted.includes(projectId)) throw notFound(`No node ${ref}`);
  } else if (granted.length && !(projectId && granted.includes(projectId))) {
    throw conflict(`Node ${node.id} is granted to other projects than ${owner}: grant it to that project too (PUT /v1/projects/{id}/nodes/${node.id} with share: true) or choose another node`);
  }
  if (node.removing) throw conflict(`Node ${node.id} is being removed`);
}

/**
 * What of a project a node holds besides its clusters' membership (a volume's folder), as each
 * plugin that places a project's resource on a node answers it: a grant is not taken back while the
 * node holds any (`volume data` …).
 */
export interface NodeGrantHolder {
  /** `trx`: the revoke's, the node's row locked (placements on the node wait for it). */
  heldOn(nodeId: string, projectId: string, trx?: Knex.Transaction): Promise<string[]>;
}

export const NodeGrantHolders = defineExtensionPoint<NodeGrantHolder>('clusters.node-grant-holders', 'what of a project a node granted to it holds (volumes…)');
