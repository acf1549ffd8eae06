import { Type } from '@sinclair/typebox';
import type { Knex } from 'knex';
import { CLUSTER_MEMBERS, CLUSTERS } from '../../core/clusters/migrations.js';
import { NodeGrantHolders, NodeGrantsRef } from '../../core/clusters/projects.js';
import { conflict, notFound } from '../../core/errors.js';
import { Reply } from '../../core/http/reply.js';
import { NodeRef } from '../../core/http/resources.js';
import { defineRoute, type RouteDef, type Services } from '../../core/plugin.js';
import { NodesRef } from '../nodes/api.js';
import { NODE_GRANTS, type ProjectRecord } from './api.js';
import { ONE_PROJECT } from './grants.js';

/**
 * Nodes granted to projects (docs/tenancy.md "Nodes granted to projects"): a node is the
 * installation's until an installation admin grants it to a project; from then on it serves the
 * clusters of the projects it is granted to, and their members whose role grants `clusters:write`
 * join it to their clusters. A node serves several projects only when an admin says so (`share`).
 */
export function nodeGrants(services: Services, find: (ref: string) => Promise<ProjectRecord | null>): RouteDef[] {
  const knex = () => services.db.knex;
  const grantsOf = async (nodeId: string, trx?: Knex.Transaction): Promise<string[]> =>
    (await (trx ?? knex())(NODE_GRANTS).where({ node_id: nodeId }).select('project_id')).map((r: { project_id: string }) => r.project_id);
  services.provided.provide(NodeGrantsRef, { projectsOf: grantsOf });

  const requireProject = async (ref: string) => {
    const project = await find(ref);
    if (!project) throw notFound(`No project ${ref}`);
    return project;
  };
  const nodeStore = () => {
    const nodes = services.provided.find(NodesRef);
    if (!nodes) throw conflict('Granting nodes needs the nodes plugin, which is not loaded');
    return nodes.nodes;
  };
  const requireNode = (ref: string) => nodeStore().require(ref);
  const Params = Type.Object({ id: Type.String({ minLength: 1, maxLength: 100, description: 'the project’s id or name' }), node: NodeRef });
  const Grant = Type.Object(
    {
      node_id: Type.String(),
      project_id: Type.String(),
      projects: Type.Array(Type.String(), { description: 'every project the node is granted to now' }),
    },
    { additionalProperties: false },
  );
  const GrantedNode = Type.Object(
    {
      node_id: Type.String(),
      name: Type.String(),
      status: Type.String(),
      granted_at: Type.String({ format: 'date-time' }),
      shared: Type.Boolean({ description: 'whether it is granted to other projects too (an installation admin allowed it)' }),
    },
    { additionalProperties: false },
  );

  return [
    defineRoute({
      method: 'PUT',
      path: '/v1/projects/{id}/nodes/{node}',
      auth: { role: 'admin' },
      permission: 'nodes:write',
      errors: [409],
      otherStatuses: [201],
      summary: 'Grant a node to a project (installation admins): its members whose role grants clusters:write join it to the project’s clusters; 201 when granted, 200 when it was',
      description: 'A node granted to another project is refused (409) unless `share` is true: a node serves several projects only when an admin says so.',
      schemas: {
        params: Params,
        body: Type.Object({ share: Type.Optional(Type.Boolean({ description: 'let the node serve this project besides those it is granted to' })) }, { additionalProperties: false }),
        response: Grant,
      },
      async handler(req) {
        const project = await requireProject(req.params.id);
        const node = await requireNode(req.params.node);
        // The check and the grant in one transaction, the grants of one node one at a time (its row
        // locked on PostgreSQL; SQLite runs one writer at a time): of two grants of a node to two
        // projects at once without share, the later one finds the earlier one's.
        const outcome = await knex().transaction(async (trx) => {
          await nodeStore().lock(node.id, trx);
          const granted = await grantsOf(node.id, trx);
          if (granted.includes(project.id)) return { status: 200, projects: granted };
          if (granted.length && req.body.share !== true) return { status: 409, projects: granted };
          await trx(NODE_GRANTS).insert({ node_id: node.id, project_id: project.id, created_at: services.clock.now().toISOString() });
          return { status: 201, projects: await grantsOf(node.id, trx) };
        });
        if (outcome.status === 409) {
          const names = await Promise.all(outcome.projects.map(async (id) => (await find(id))?.name ?? id));
          throw conflict(`Node ${node.id} is granted to project ${names.join(', ')}: give share: true to let it serve project ${project.name} too`);
        }
        return new Reply(outcome.status, { data: { node_id: node.id, project_id: project.id, projects: outcome.projects } });
      },
    }),
    defineRoute({
      method: 'DELETE',
      path: '/v1/projects/{id}/nodes/{node}',
      auth: { role: 'admin' },
      permission: 'nodes:write',
      errors: [409],
      summary: 'Take a node back from a project (installation admins); refused (409) while it is a member of one of the project’s clusters or holds one of its volumes',
      schemas: { params: Params, response: Grant },
      async handler(req) {
        const project = await requireProject(req.params.id);
        const node = await requireNode(req.params.node);
        // What the node holds of the project checked and the grant deleted with its row locked, as a
        // placement on it writes (a volume's insert): one of the two finds the other's.
        const outcome = await knex().transaction(async (trx) => {
          await nodeStore().lock(node.id, trx);
          const serving = await trx(CLUSTER_MEMBERS).join(CLUSTERS, `${CLUSTERS}.id`, `${CLUSTER_MEMBERS}.cluster_id`).where({ [`${CLUSTER_MEMBERS}.node_id`]: node.id, [`${CLUSTERS}.project_id`]: project.id }).first(`${CLUSTERS}.name`);
          if (serving) return { refusal: `Node ${node.id} is a member of cluster ${serving.name} of project ${project.name}: remove it from the cluster first` };
          const held: string[] = [];
          for (const holder of services.provided.contributions(NodeGrantHolders)) held.push(...(await holder.heldOn(node.id, project.id, trx)));
          if (held.length) return { refusal: `Node ${node.id} holds ${held.join(', ')} of project ${project.name}: delete ${held.length > 1 ? 'them' : 'it'} first` };
          const removed = await trx(NODE_GRANTS).where({ node_id: node.id, project_id: project.id }).delete();
          return { removed, projects: await grantsOf(node.id, trx) };
        });
        if (outcome.refusal) throw conflict(outcome.refusal);
        if (!outcome.removed) throw notFound(`Node ${node.id} is not granted to project ${project.name}`);
        return { node_id: node.id, project_id: project.id, projects: outcome.projects };
      },
    }),
    defineRoute({
      method: 'GET',
      path: '/v1/projects/{id}/nodes',
      auth: 'authenticated',
      scope: ONE_PROJECT,
      summary: 'The nodes granted to a project (its members whose role reads the project, and installation admins and auditors)',
      schemas: { params: Type.Object({ id: Params.properties.id }), response: Type.Array(GrantedNode) },
      async handler(req) {
        const project = await requireProject(req.params.id);
        const rows: Array<{ node_id: string; created_at: string }> = await knex()(NODE_GRANTS).where({ project_id: project.id }).orderBy('node_id').select('node_id', 'created_at');
        const nodes = services.provided.find(NodesRef);
        const data = [];
        for (const row of rows) {
          const node = await nodes?.nodes.get(row.node_id);
          if (!node) continue;
          data.push({ node_id: node.id, name: node.name, status: node.status, granted_at: row.created_at, shared: (await grantsOf(node.id)).length > 1 });
        }
        return Reply.data(data);
      },
    }),
  ];
}
