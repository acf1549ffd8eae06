import { expect } from 'chai';
import { tagsOf } from '../../../plugins/tags/api.js';
import { waitFor } from '../../support/agents.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, createUser, type Credentials } from '../../support/identity.js';

describeEachDialect('tags: set, find by key and value, delete', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  let reader: Credentials;
  let swarmId: string;
  let nodeId: string;

  const api = (method: string, p: string, body?: unknown, creds: Credentials = admin) => t.request(method, p, { body, headers: bearer(creds.token) });
  const put = (resource_type: string, resource_id: string, key: string, value: string) => api('PUT', '/v1/tags', { resource_type, resource_id, key, value });

  before(async () => {
    t = await startHangar(dialect, { plugins: ['system', 'iam', 'nodes', 'swarms', 'volumes', 'secrets', 'compute', 'services', 's3', 'gateway', 'tags'] });
    admin = await bootstrapAdmin(t);
    reader = await createUser(t, admin, { username: 'reader', role: 'user' });
    swarmId = (await api('POST', '/v1/swarms', { name: 'tagged' })).json.data.id;
    nodeId = (await api('POST', '/v1/nodes', { name: 'tagged-node', ip_address: '10.9.0.1' })).json.data.id;
  });
  after(() => t?.stop());

  it('sets tags (an existing key gets the new value) and finds resources by key, value and type', async () => {
    const set = await put('swarm', swarmId, 'env', 'staging');
    expect(set.status, set.text).to.equal(200);
    expect(set.json.data).to.deep.equal({ resource_type: 'swarm', resource_id: swarmId, key: 'env', value: 'staging' });
    expect((await put('swarm', swarmId, 'env', 'production')).json.data.value).to.equal('production');
    await put('node', nodeId, 'env', 'production');
    await put('node', nodeId, 'team/owner', 'platform');
    // A type no loaded plugin answers for is taken on trust.
    expect((await put('cluster', 'cluster-abc', 'env', 'dev')).status).to.equal(200);
    await put('cluster', 'cluster-abc', 'empty', '');

    const all = await api('GET', '/v1/tags?key=env', undefined, reader);
    expect(all.status).to.equal(200);
    expect(all.json.data).to.deep.equal([
      { resource_type: 'cluster', resource_id: 'cluster-abc', key: 'env', value: 'dev' },
      { resource_type: 'node', resource_id: nodeId, key: 'env', value: 'production' },
      { resource_type: 'swarm', resource_id: swarmId, key: 'env', value: 'production' },
    ]);
    const production = await api('GET', '/v1/tags?key=env&value=production');
    expect(production.json.data.map((x: { resource_id: string }) => x.resource_id)).to.deep.equal([nodeId, swarmId]);
    const nodes = await api('GET', '/v1/tags?key=env&value=production&resource_type=node');
    expect(nodes.json.data).to.deep.equal([{ resource_type: 'node', resource_id: nodeId, key: 'env', value: 'production' }]);
    expect((await api('GET', '/v1/tags?key=empty&value=')).json.data).to.have.length(1);
    expect((await api('GET', '/v1/tags?key=nothing')).json.data).to.deep.equal([]);
    expect(await tagsOf(t.hangar.services).of('node', nodeId)).to.deep.equal({ env: 'production', 'team/owner': 'platform' });

    const page = await api('GET', '/v1/tags?key=env&limit=2');
    expect(page.json.data).to.have.length(2);
    const next = await api('GET', `/v1/tags?key=env&limit=2&cursor=${page.json.next_cursor}`);
    expect(next.json.data).to.deep.equal([{ resource_type: 'swarm', resource_id: swarmId, key: 'env', value: 'production' }]);
    expect(next.json.next_cursor).to.equal(null);
  });

  it('refuses bad input (400), unknown resources of checked types (404), and writes by non-admins (403)', async () => {
    for (const body of [
      { resource_type: 'planet', resource_id: swarmId, key: 'k', value: 'v' },
      { resource_type: 'swarm', resource_id: swarmId, key: 'bad key', value: 'v' },
      { resource_type: 'swarm', resource_id: swarmId, key: 'k'.repeat(64), value: 'v' },
      { resource_type: 'swarm', resource_id: swarmId, key: '', value: 'v' },
      { resource_type: 'swarm', resource_id: swarmId, key: 'k', value: 'v'.repeat(256) },
      { resource_type: 'swarm', resource_id: swarmId, key: 'k' },
      { resource_type: 'swarm', key: 'k', value: 'v' },
      { resource_type: 'swarm', resource_id: swarmId, key: 'k', value: 'v', extra: 1 },
    ]) {
      const res = await api('PUT', '/v1/tags', body);
      expect(res.status, JSON.stringify(body).slice(0, 100)).to.equal(400);
      expect(res.json.message).to.match(/^Validation failed:/);
    }
    expect((await api('GET', '/v1/tags')).status).to.equal(400);
    expect((await api('GET', '/v1/tags?key=env&resource_type=planet')).status).to.equal(400);
    const unknown = await put('swarm', 'swarm-0000000000000000', 'env', 'x');
    expect(unknown.status).to.equal(404);
    expect(unknown.json.message).to.equal('No swarm swarm-0000000000000000');
    for (const [type, id] of [['node', 'node-0000000000000000'], ['instance', 'inst-0000000000000000'], ['service', 'svc-0000000000000000'], ['s3', 's3-0000000000000000'], ['loadbalancer', 'lb-0000000000000000'], ['volume', 'vol-0000000000000000'], ['secret', 'sec-0000000000000000']]) {
      const res = await put(type!, id!, 'env', 'x');
      expect(res.status, `${type} ${id}`).to.equal(404);
      expect(res.json.message).to.equal(`No ${type} ${id}`);
    }
    const forbidden = await api('PUT', '/v1/tags', { resource_type: 'swarm', resource_id: swarmId, key: 'k', value: 'v' }, reader);
    expect(forbidden.status).to.equal(403);
    expect((await api('DELETE', `/v1/tags?resource_type=swarm&resource_id=${swarmId}&key=env`, undefined, reader)).status).to.equal(403);
  });

  it('takes a swarm (and other resources whose paths take names) by name: stored, found and deleted by id; a node name is a 400 saying nodes go by id', async () => {
    const byName = await put('swarm', 'tagged', 'owner', 'team-a');
    expect(byName.status, byName.text).to.equal(200);
    expect(byName.json.data).to.deep.equal({ resource_type: 'swarm', resource_id: swarmId, key: 'owner', value: 'team-a' });
    expect((await api('GET', '/v1/tags?key=owner')).json.data).to.deep.equal([{ resource_type: 'swarm', resource_id: swarmId, key: 'owner', value: 'team-a' }]);
    const volume = await api('PUT', '/v1/tags', { resource_type: 'volume', resource_id: 'no-such-volume', key: 'owner', value: 'x' });
    expect(volume.status).to.equal(404);
    expect(volume.json.message).to.equal('No volume no-such-volume');
    const node = await put('node', 'tagged-node', 'owner', 'x');
    expect(node.status).to.equal(400);
    expect(node.json.message).to.equal('Validation failed: resource_id of a node is its id (node-…): nodes are not addressed by name');
    const removed = await api('DELETE', '/v1/tags?resource_type=swarm&resource_id=tagged&key=owner');
    expect(removed.status, removed.text).to.equal(200);
    expect(removed.json.data).to.deep.equal({ resource_type: 'swarm', resource_id: swarmId, key: 'owner', deleted: true });
    expect((await api('GET', '/v1/tags?key=owner')).json.data).to.deep.equal([]);
  });

  it('deletes a tag named in the body or the query string; 404 when there is none; 400 when it is not named', async () => {
    const byBody = await api('DELETE', '/v1/tags', { resource_type: 'node', resource_id: nodeId, key: 'team/owner' });
    expect(byBody.status, byBody.text).to.equal(200);
    expect(byBody.json.data).to.deep.equal({ resource_type: 'node', resource_id: nodeId, key: 'team/owner', deleted: true });
    const byQuery = await api('DELETE', `/v1/tags?resource_type=swarm&resource_id=${swarmId}&key=env`);
    expect(byQuery.status, byQuery.text).to.equal(200);
    const again = await api('DELETE', `/v1/tags?resource_type=swarm&resource_id=${swarmId}&key=env`);
    expect(again.status).to.equal(404);
    expect(again.json.message).to.equal(`No tag env on swarm ${swarmId}`);
    const missing = await api('DELETE', '/v1/tags', { resource_type: 'node', key: 'env' });
    expect(missing.status).to.equal(400);
    expect(missing.json.message).to.equal('Validation failed: resource_id required (in the body or the query string)');
    expect((await api('DELETE', '/v1/tags?key=bad%20key&resource_type=node&resource_id=x')).status).to.equal(400);
    expect((await api('GET', '/v1/tags?key=env')).json.data.map((x: { resource_type: string }) => x.resource_type)).to.deep.equal(['cluster', 'node']);
  });

  it('drops a resource’s tags when it is deleted through the API (a swarm at once, a node once its removal finishes)', async function () {
    this.timeout(20_000);
    const doomed = (await api('POST', '/v1/swarms', { name: 'doomed' })).json.data.id;
    await put('swarm', doomed, 'env', 'gone-soon');
    expect((await api('DELETE', `/v1/swarms/${doomed}`)).status).to.equal(200);
    expect((await api('DELETE', `/v1/nodes/${nodeId}`)).status).to.be.oneOf([200, 202]);
    await waitFor(async () => Object.keys(await tagsOf(t.hangar.services).of('node', nodeId)).length === 0, { timeoutMs: 15_000, what: 'the node’s tags to go' });
    expect(await tagsOf(t.hangar.services).of('swarm', doomed)).to.deep.equal({});
    expect((await api('GET', '/v1/tags?key=env')).json.data.map((x: { resource_type: string }) => x.resource_type)).to.deep.equal(['cluster']);
  });
});
