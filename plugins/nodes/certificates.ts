import { defineRoute, type RouteDef } from '../../core/plugin.js';
import type { NodesContext, NodesPart } from './context.js';
import { NodeParams } from './schemas.js';

/** A node's client certificates: one issued by an admin (key pair included, shown once), or all revoked. */
export function certificates(ctx: NodesContext): NodesPart {
  const { services, nodes, events } = ctx;
  const { ca } = services;

  const routes: RouteDef[] = [
    defineRoute({
      method: 'POST',
      path: '/v1/nodes/{id}/cert',
      auth: { role: 'admin' },
      summary: 'Issue a client certificate (and key) for the node; shown once',
      status: 201,
      schemas: { params: NodeParams },
      async handler(req) {
        const node = await nodes.requireLive(req.params.id);
        const cert = await ca.issueClientCertificate(node.id);
        await events.record({ nodeId: node.id, kind: 'certificate_issued', message: `client certificate ${cert.serial} issued` });
        return { node_id: node.id, serial: cert.serial, certificate: cert.cert_pem, private_key: cert.key_pem, ca_pem: cert.ca_pem, expires_at: cert.expires_at };
      },
    }),
    defineRoute({
      method: 'POST',
      path: '/v1/nodes/{id}/cert/revoke',
      auth: { role: 'admin' },
      summary: 'Revoke every client certificate of the node; its agent is refused from the next request on',
      schemas: { params: NodeParams },
      async handler(req) {
        const node = await nodes.require(req.params.id);
        const revoked = await ca.revokeNode(node.id);
        await events.record({ nodeId: node.id, kind: 'certificates_revoked', message: `${revoked} certificate(s) revoked` });
        return { node_id: node.id, revoked };
      },
    }),
  ];
  return { routes };
}
