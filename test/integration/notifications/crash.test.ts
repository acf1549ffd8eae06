import { expect } from 'chai';
import { httpRequest } from '../../../core/http/client.js';
import { waitFor } from '../../support/agents.js';
import { serveControlPlane, type ControlPlane } from '../../support/control-plane.js';
import { TestDialect } from '../../support/dialects.js';
import { bearer, bootstrapAdmin, type Credentials } from '../../support/identity.js';
import { postgresAvailable, requireService } from '../../support/requirements.js';
import { Receiver } from './receiver.js';

const ENV = {
  HANGAR_PLUGINS: 'system,iam,nodes,notifications',
  HANGAR_NOTIFICATIONS__ALLOW_HTTP: 'true',
  HANGAR_NOTIFICATIONS__ALLOW_PRIVATE_ADDRESSES: 'true',
  HANGAR_NOTIFICATIONS__RETRY_BASE_SECONDS: '0.2',
  HANGAR_NOTIFICATIONS__RETRY_MAX_SECONDS: '0.5',
  HANGAR_NOTIFICATIONS__POLL_INTERVAL_MS: '200',
  HANGAR_NOTIFICATIONS__TIMEOUT_SECONDS: '5',
};

/**
 * A control plane killed (SIGKILL) while the receiver holds its delivery unanswered, and another
 * control plane on the same PostgreSQL: once the dead one's leadership lease and the delivery's
 * hold run out, the other sends it, with the same idempotency key (at least once). Two
 * `hangar serve` processes with data dirs of their own (so two holders of the lease).
 */
describe('notifications: a control plane killed mid-delivery, another on the same store delivers [postgres]', function () {
  this.timeout(180_000);
  const dialect = new TestDialect('postgres');
  const receiver = new Receiver();
  let a: ControlPlane | undefined;
  let c: ControlPlane | undefined;
  let caPem = '';
  let admin: Credentials;

  before(async function () {
    requireService(this, await postgresAvailable(), 'PostgreSQL (HANGAR_TEST_PG_URL, or run scripts/services.sh as root)');
    await receiver.start();
  });

  after(async function () {
    this.timeout(30_000);
    a?.child.kill('SIGKILL');
    c?.child.kill('SIGKILL');
    await receiver.stop();
    await dialect.cleanup();
  });

  it('delivers what the killed control plane was sending, with the same key', async () => {
    const { schema } = dialect.freshStorage();
    a = await serveControlPlane({ name: 'notify-a', schema, caPem: () => caPem, env: ENV });
    caPem = (await httpRequest(`${a.url}/v1/ca`, { ca: false })).text;
    admin = await bootstrapAdmin(a.client);
    const viaA = (method: string, p: string, body?: unknown) => a!.client.request(method, p, { body, headers: bearer(admin.token) });

    const channel = await viaA('POST', '/v1/notifications/channels', { name: 'hook', kind: 'webhook', url: receiver.url });
    expect(channel.status, channel.text).to.equal(201);
    receiver.secret = channel.json.data.secret;
    expect((await viaA('POST', '/v1/notifications/subscriptions', { channel_id: 'hook', event_types: ['node.created'] })).status).to.equal(201);

    receiver.mode = 'hold';
    const node = await viaA('POST', '/v1/nodes', { name: 'crash' });
    expect(node.status, node.text).to.equal(201);
    await waitFor(() => receiver.holding > 0, { timeoutMs: 20_000, what: 'the receiver to hold the delivery' });
    const key = receiver.requests.at(-1)!.key!;
    expect(key).to.match(/^ndl-/);
    // Killed mid-attempt: the attempt is never recorded, the delivery stays taken until its hold runs out.
    a.child.kill('SIGKILL');
    await new Promise((resolve) => a!.child.once('exit', resolve));
    receiver.mode = 'ok';
    receiver.release();

    c = await serveControlPlane({ name: 'notify-c', schema, caPem: () => caPem, env: ENV });
    const viaC = (method: string, p: string) => c!.client.request(method, p, { headers: bearer(admin.token) });
    const done = await waitFor(
      async () => ((await viaC('GET', '/v1/notifications/deliveries')).json.data as Array<Record<string, any>>).find((d) => d.id === key && d.status === 'delivered'),
      { timeoutMs: 90_000, intervalMs: 500, what: 'the other control plane to deliver it' },
    );
    expect(done.event.resource).to.deep.equal({ type: 'node', id: node.json.data.id });
    expect(done.attempts).to.have.length(1);
    expect(done.attempts[0]).to.include({ status_code: 200 });
    const got = receiver.withKey(key);
    expect(got).to.have.length(2);
    expect(got.every((r) => r.verified)).to.equal(true);
    expect(got[1]!.raw).to.equal(got[0]!.raw);
  });
});
