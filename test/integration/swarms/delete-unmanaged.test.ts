import { expect } from 'chai';
import { randomBytes } from 'node:crypto';
import { docker, dockerOk } from '../../../lab/docker.js';
import { cleanupAgents } from '../../support/agents.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { hostSwarm, TEST_IMAGE } from '../../support/host-swarm.js';
import { bearer, bootstrapAdmin, type Credentials } from '../../support/identity.js';
import { requireService } from '../../support/requirements.js';
import { hostSwarmMember, SWARM_TEST_OVERRIDES, type SwarmMember } from '../../support/swarm-member.js';

/**
 * Deleting a swarm makes its members leave it, which destroys every service on it, hangar's or not.
 * Against the host engine's real swarm (an agent on this host manages it): a service made with
 * `docker service create` holds the deletion (409 naming it) until it is gone. The swarm is never
 * deleted here (other suites share the engine): only the refusals, which change nothing.
 */
describeEachDialect('deleting a swarm that runs services hangar did not create (host engine)', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  let member: SwarmMember;
  const suffix = randomBytes(3).toString('hex');
  const byHand = `by-hand-${dialect.name.slice(0, 2)}-${suffix}`;
  const api = (method: string, p: string) => t.request(method, p, { headers: bearer(admin.token) });

  before(async function () {
    this.timeout(120_000);
    const missing = await hostSwarm();
    requireService(this, missing === null, missing ?? '');
    t = await startHangar(dialect, { plugins: ['system', 'iam', 'nodes', 'agent-internal', 'swarms'], overrides: SWARM_TEST_OVERRIDES });
    admin = await bootstrapAdmin(t);
    member = await hostSwarmMember(t, admin, `del-${dialect.name.slice(0, 2)}-${suffix}`);
  });
  after(async function () {
    this.timeout(60_000);
    await docker(['service', 'rm', byHand]);
    await cleanupAgents();
    await t?.stop();
  });

  it('is refused (409) naming the service made with docker service create, and is not started; the service stays (the deletion is never asked without it: a swarm that deletes would take the shared engine out of swarm mode)', async function () {
    this.timeout(60_000);
    await dockerOk(['service', 'create', '--detach', '--name', byHand, '--label', 'made-by=operator', TEST_IMAGE, 'sleep', '3600']);
    const refused = await api('DELETE', `/v1/swarms/${member.swarmId}`);
    expect(refused.status, refused.text).to.equal(409);
    // The host engine may run other suites' services too: this one is among those named.
    expect(refused.json.message).to.match(new RegExp(`^Swarm ${member.swarmName} runs workloads hangar did not create: .*service ${byHand}.* \\(deleting the swarm destroys them\\); remove them or pass force=true$`));
    const detail = refused.json.details.find((d: { name: string }) => d.name === byHand);
    expect(detail).to.include({ type: 'service', name: byHand, managed: false });
    expect(detail.id).to.equal((await dockerOk(['service', 'inspect', byHand, '--format', '{{.ID}}'])).trim());
    expect((await api('GET', `/v1/swarms/${member.swarmId}`)).json.data.status, 'not deleting').to.equal('active');

    expect((await dockerOk(['service', 'inspect', byHand, '--format', '{{index .Spec.Labels "made-by"}}'])).trim(), 'the service stays').to.equal('operator');
  });
});
