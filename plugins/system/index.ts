import { Type } from '@sinclair/typebox';
import { definePlugin } from '../../core/plugin.js';
import { notFound, unavailable } from '../../core/errors.js';
import { Reply } from '../../core/http/reply.js';
import { openApiRoute } from '../../core/openapi.js';
import { versionInfo } from '../../core/version.js';

/** Health, version, the CA certificate and the OpenAPI documents. */
export default definePlugin({
  name: 'system',
  description: 'health check, version, CA download, OpenAPI document',
  setup(services) {
    return {
      routes: [
        {
          method: 'GET',
          path: '/healthz',
          auth: 'public',
          summary: 'Health check: 200 when the store answers, 503 otherwise',
          schemas: { response: Type.Object({ status: Type.Literal('ok'), store: Type.String() }) },
          async handler() {
            try {
              await services.db.ping();
            } catch {
              throw unavailable('The store is not reachable');
            }
            return { status: 'ok', store: services.db.dialect };
          },
        },
        {
          method: 'GET',
          path: '/v1/version',
          auth: 'public',
          summary: 'Version of hangar and of its API',
          schemas: {
            response: Type.Object({
              version: Type.String(),
              api_version: Type.Literal('v1'),
              commit: Type.Optional(Type.String()),
              build_date: Type.Optional(Type.String()),
            }),
          },
          handler: () => versionInfo,
        },
        {
          method: 'GET',
          path: '/v1/ca',
          auth: 'public',
          summary: 'The CA certificate (PEM); 404 when the operator provided the server certificate',
          handler() {
            if (services.ca.operatorCertificates) {
              throw notFound('The server certificate was provided by the operator; there is no hangar CA to download');
            }
            return Reply.raw(services.ca.caPem, 'application/x-pem-file');
          },
        },
        openApiRoute(services, 'control', '/v1/openapi.json'),
      ],
    };
  },
});
