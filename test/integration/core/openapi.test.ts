import { expect } from 'chai';
import { Validator } from '@seriousme/openapi-schema-validator';
import { permissionOf } from '../../../core/auth/permissions.js';
import { describeEachDialect } from '../../support/dialects.js';
import { FIXTURE_PLUGIN, startHangar, type TestHangar } from '../../support/hangar.js';

describeEachDialect('OpenAPI document', (dialect) => {
  let t: TestHangar;
  before(async () => {
    t = await startHangar(dialect, { plugins: ['system', FIXTURE_PLUGIN] });
  });
  after(() => t?.stop());

  it('is a valid OpenAPI 3.1 document', async () => {
    const res = await t.request('GET', '/v1/openapi.json');
    expect(res.status).to.equal(200);
    expect(res.json.openapi).to.equal('3.1.0');
    const result = await new Validator().validate(res.json);
    expect(result.errors ?? [], JSON.stringify(result.errors)).to.deep.equal([]);
    expect(result.valid).to.equal(true);
  });

  it('lists every registered route with its method, parameters, body and auth', async () => {
    const doc = (await t.request('GET', '/v1/openapi.json')).json;
    const routes = t.hangar.routes.filter((r) => (r.route.listener ?? 'control') === 'control');
    expect(routes.length).to.be.greaterThan(10);
    for (const { route } of routes) {
      const op = doc.paths[route.path]?.[route.method.toLowerCase()];
      expect(op, `${route.method} ${route.path}`).to.exist;
      expect(op['x-hangar-auth']).to.deep.equal(route.auth);
      expect(op['x-hangar-permission'], `${route.method} ${route.path}`).to.equal(permissionOf(route)).and.match(/^[a-z][a-z0-9-]*:[a-z][a-z0-9-]*$/);
    }
    const item = doc.paths['/v1/probe/items/{id}'].get;
    expect(item.parameters).to.deep.include({ name: 'id', in: 'path', required: true, schema: { type: 'integer', minimum: 1 } });
    expect(item.parameters.map((p: { name: string }) => p.name)).to.include.members(['verbose', 'limit']);
    const xml = doc.paths['/v1/probe/xml'].post;
    expect(xml.requestBody.content).to.have.keys('application/json', 'application/xml', 'text/xml');
    expect(doc.paths['/v1/probe/agent'].get.security).to.deep.equal([{ mutualTLS: [] }]);
    expect(doc.paths['/healthz'].get.security).to.deep.equal([]);
  });

  it('documents each answer exactly: success statuses, raw content types, pages, and the error statuses', async () => {
    const doc = (await t.request('GET', '/v1/openapi.json')).json;
    const ca = doc.paths['/v1/ca'].get.responses;
    expect(Object.keys(ca['200'].content)).to.deep.equal(['application/x-pem-file']);
    expect(ca['404'].content['application/json'].schema).to.deep.equal({ $ref: '#/components/schemas/Error' });
    expect(Object.keys(doc.paths['/v1/agent/binary'].get.responses['200'].content)).to.deep.equal(['application/octet-stream']);
    const self = doc.paths['/v1/openapi.json'].get.responses['200'].content['application/json'].schema;
    expect(self.properties).not.to.have.property('data');
    // A paged list: data and next_cursor.
    const page = doc.paths['/v1/probe/things'].get.responses['200'].content['application/json'].schema;
    expect(page.required).to.deep.equal(['data', 'next_cursor']);
    // Errors are listed one by one, with no catch-all.
    const admin = doc.paths['/v1/probe/admin'].post.responses;
    expect(Object.keys(admin)).to.include.members(['200', '400', '401', '403', '409', '413', '415', '500']);
    expect(admin).not.to.have.property('default');
    const open = doc.paths['/v1/probe/echo'].post.responses;
    expect(Object.keys(open)).to.include.members(['408', '503']);
    expect(open).not.to.have.property('401');
  });
});
