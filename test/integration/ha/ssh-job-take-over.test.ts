import { expect } from 'chai';
import { createServer, type AddressInfo, type Socket } from 'node:net';
import { waitFor } from '../../support/agents.js';
import { TestDialect } from '../../support/dialects.js';
import { serveControlPlane, type ControlPlane } from '../../support/control-plane.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, type Credentials } from '../../support/identity.js';
import { postgresAvailable, requireService } from '../../support/requirements.js';

const OP_LEASE_SECONDS = 4;

/**
 * An SSH job (plugins/provisioning) is an operation with a lease: started on control plane A, whose
 * process is killed while the job waits on the machine, it is run again by B once A's lease expires.
 * The machine is a loopback socket that accepts and never speaks, so each run of the job is one
 * connection the test counts.
 */
describe('two control planes on one PostgreSQL: an SSH job of a killed control plane is run again by the other', function () {
  this.timeout(120_000);
  const dialect = new TestDialect('postgres');
  let b: TestHangar;
  let a: ControlPlane | undefined;
  let admin: Credentials;
  const sockets: Socket[] = [];
  const silent = createServer((socket) => {
    socket.on('error', () => undefined);
    sockets.push(socket);
  });

  const viaB = (method: string, p: string, body?: unknown) => b.request(method, p, { body, headers: bearer(admin.token) });
  const viaA = (method: string, p: string, body?: unknown) => a!.client.request(method, p, { body, headers: bearer(admin.token) });

  before(async function () {
    requireService(this, await postgresAvailable(), 'PostgreSQL (HANGAR_TEST_PG_URL, or run scripts/services.sh as root)');
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    const storage = dialect.freshStorage();
    b = await startHangar(dialect, { storage, overrides: { clusters: { op_lease_seconds: OP_LEASE_SECONDS } } });
    admin = await bootstrapAdmin(b);
    a = await serveControlPlane({ name: 'a', schema: storage.schema!, caPem: () => b.caPem, env: { HANGAR_CLUSTERS__OP_LEASE_SECONDS: String(OP_LEASE_SECONDS) } });
  });

  after(async function () {
    this.timeout(60_000);
    a?.child.kill('SIGKILL');
    for (const socket of sockets) socket.destroy();
    silent.close();
    await b?.stop();
    await dialect.cleanup();
  });

  it('a start over SSH begun on A, whose process is killed, is begun again by B once A’s lease expires; its outcome is recorded once', async () => {
    const node = await viaB('POST', '/v1/nodes', { name: 'machine', ip_address: '127.0.0.1' });
    expect(node.status, node.text).to.equal(201);
    const nodeId = node.json.data.id as string;
    const body = { ssh_user: 'root', ssh_port: (silent.address() as AddressInfo).port, ssh_password: 'not-a-real-password', ssh_host_key: `SHA256:${'A'.repeat(43)}` };
    const started = await viaA('POST', `/v1/nodes/${nodeId}/start`, body);
    expect(started.status, started.text).to.equal(202);
    await waitFor(async () => sockets.length === 1, { timeoutMs: 30_000, intervalMs: 100, what: 'A’s job to connect' });
    // While it runs, B refuses another job on the node: the lease is in the store, not in A's memory.
    expect((await viaB('POST', `/v1/nodes/${nodeId}/start`, body)).status).to.equal(409);

    a!.child.kill('SIGKILL');
    const killedAt = Date.now();
    await waitFor(async () => sockets.length === 2, { timeoutMs: 60_000, intervalMs: 100, what: 'B to run the job again' });
    expect(Date.now() - killedAt, 'not before A’s lease ran out').to.be.at.least((OP_LEASE_SECONDS - 1) * 1000);

    // The machine hangs up on B's run: the job fails once, and the node takes the next one.
    for (const socket of sockets) socket.destroy();
    const events = async () => ((await viaB('GET', `/v1/nodes/events?node_id=${nodeId}`)).json.data as Array<{ kind: string }>).map((e) => e.kind);
    await waitFor(async () => (await events()).includes('agent_start_failed'), { timeoutMs: 30_000, what: 'the job’s outcome' });
    const kinds = await events();
    expect(kinds.filter((k) => k === 'agent_start_requested'), 'begun on A, begun again on B').to.have.length(2);
    expect(kinds.filter((k) => k === 'agent_start_failed' || k === 'agent_started'), 'one outcome').to.deep.equal(['agent_start_failed']);
    expect(await b.hangar.services.db.knex('provisioning_ssh_jobs').where({ id: nodeId }).first(), 'the job’s row (its sealed credentials) is gone').to.equal(undefined);
    expect((await viaB('POST', `/v1/nodes/${nodeId}/start`, body)).status).to.equal(202);
  });
});
