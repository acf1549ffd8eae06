import { expect } from 'chai';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, type Credentials } from '../../support/identity.js';

const NODES = 6;

/**
 * A node serves several projects only when an admin says so (`share`, docs/tenancy.md): two admins
 * granting one node to two projects at the same moment, neither with share, leave it granted to
 * one of them; the other gets the 409 it would get a moment later. Over HTTP, several nodes in turn.
 */
describeEachDialect('nodes granted to projects: two grants of one node at once', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  const api = (method: string, p: string, body?: unknown) => t.request(method, p, { body, headers: bearer(admin.token) });

  before(async function () {
    this.timeout(60_000);
    t = await startHangar(dialect, { plugins: ['system', 'iam', 'nodes', 'agent-internal', 'projects'] });
    admin = await bootstrapAdmin(t);
    for (const p of ['a', 'b']) expect((await api('POST', '/v1/projects', { name: `race-${p}` })).status).to.equal(201);
  });
  after(async () => {
    await t?.stop();
  });

  it('without share, one of two grants made at once wins; the other is a 409 and the node serves one project', async function () {
    this.timeout(60_000);
    for (let i = 0; i < NODES; i++) {
      const node = await api('POST', '/v1/nodes', { name: `race-node-${i}`, ip_address: `192.0.2.${40 + i}` });
      expect(node.status, node.text).to.equal(201);
      const id = node.json.data.id as string;
      const answers = await Promise.all(['race-a', 'race-b'].map((project) => api('PUT', `/v1/projects/${project}/nodes/${id}`, {})));
      expect(answers.map((a) => a.status).sort(), answers.map((a) => a.text).join('\n')).to.deep.equal([201, 409]);
      const refused = answers.find((a) => a.status === 409)!;
      expect(refused.json.message).to.contain('share: true');
      const granted = answers.find((a) => a.status === 201)!;
      expect(granted.json.data.projects).to.have.length(1);
      const listed = await Promise.all(['race-a', 'race-b'].map(async (project) => (await api('GET', `/v1/projects/${project}/nodes`)).json.data as Array<{ node_id: string }>));
      expect(listed.flat().filter((n) => n.node_id === id), 'listed by one project').to.have.length(1);
    }
  });
});
