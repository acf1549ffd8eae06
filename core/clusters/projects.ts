import type { Principal } from '../auth/index.js';
import { defineServiceRef } from '../provided.js';

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
  projectsOf(nodeId: string): Promise<string[]>;
}

export const NodeGrantsRef = defineServiceRef<NodeGrants>('clusters.node-grants', 'the projects nodes are granted to (the projects plugin)');
