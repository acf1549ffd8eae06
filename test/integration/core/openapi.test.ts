import { expect } from 'chai';
import { Validator } from '@seriousme/openapi-schema-validator';
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
    }
    const item = doc.paths['/v1/probe/items/{id}'].get;
    expect(item.parameters).to.deep.include({ name: 'id', in: 'path', required: true, schema: { type: 'integer', minimum: 1 } });
    expect(item.parameters.map((p: { name: string }) => p.name)).to.include.members(['verbose', 'limit']);
    const xml = doc.paths['/v1/probe/xml'].post;
    expect(xml.requestBody.content).to.have.keys('application/json', 'application/xml', 'text/xml');
    expect(doc.paths['/v1/probe/agent'].get.security).to.deep.equal([{ mutualTLS: [] }]);
    expect(doc.paths['/healthz'].get.security).to.deep.equal([]);
  });
});
