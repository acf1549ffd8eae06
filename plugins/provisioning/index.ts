import { Type } from '@sinclair/typebox';
import type { Clock } from '../../core/clock.js';
import { leaseColumns } from '../../core/clusters/migrations.js';
import { StampedRepository } from '../../core/db/repository.js';
import type { Store } from '../../core/db/store.js';
import { conflict, HttpError } from '../../core/errors.js';
import { newId } from '../../core/ids.js';
import { recordRemover } from '../../core/events.js';
import { defineLifecycle, LEASE_DATES, REMOVED, type LeasedRecord, type Operation } from '../../core/lifecycle.js';
import { definePlugin, defineRoute } from '../../core/plugin.js';
import { SshDriverRef, SshError, type HostKeyStore, type SshSession } from '../../drivers/ssh/api.js';
import { IpAddress, NodeName, NodeParams, NodesRef, nodesOf, type NodeRecord } from '../nodes/api.js';
import { SshCredentialFields, SshProfilesRef, sshProfilesOf, type SshCredentials } from '../ssh-profiles/api.js';
import { AgentBinariesRef, missingExecutable } from '../system/api.js';
import { detectMachine, existingNodeId, installPrerequisites, machineWireguardKey, REMOTE, startAgent, stopAgent, type MachineFacts } from './remote.js';
import { recordId, recordTimes } from '../../core/db/columns.js';
import { createTables } from '../../core/db/migrations.js';

const HOST_KEYS = 'ssh_host_keys';
const SSH_JOBS = 'provisioning_ssh_jobs';

/**
 * The SSH job running on a node (a deploy, an update or a start of its agent): one at a time per
 * node, under an operation lease (core/lifecycle.ts), so that a second request is a 409 and a job
 * a dead control plane left is run again by another one (or the next start). Its row lives while
 * the job runs; the credentials it needs are sealed in it and go with it.
 */
interface SshJobRecord extends LeasedRecord {
  /** The node's id. */
  id: string;
  /** The node's name (resume lines). */
  name: string;
  /** The address SSH goes to. */
  address: string;
  /** The SshCredentials, sealed (null once the job ended). */
  credentials: string | null;
  host_key: string | null;
  /** When it was asked for: the agent's first heartbeat after it says it is done. */
  requested_at: string;
  created_at: string;
  updated_at: string;
}

class SshJobStore extends StampedRepository<SshJobRecord> {
  constructor(store: Store, clock: Clock) {
    super(store, SSH_JOBS, { dates: ['requested_at', 'created_at', 'updated_at', ...LEASE_DATES] }, clock);
  }
}

type SshJobKind = 'deploy' | 'update-ssh' | 'start';

/** The node event an SSH job ends with. */
interface Outcome {
  nodeId: string;
  identifier?: string;
  kind: string;
  message: string;
}

/** The node events a job of each kind ends with (named in the 409 of a second request). */
const OUTCOMES: Record<SshJobKind, string> = {
  deploy: 'deploy_completed or deploy_failed',
  'update-ssh': 'ssh_update_completed or ssh_update_failed',
  start: 'agent_started or agent_start_failed',
};

export const ProvisioningConfigSchema = Type.Object(
  {
    advertise_address: Type.Union([Type.String(), Type.Null()], {
      default: null,
      description: 'control-plane URL agents are told to use; default https://<the local address SSH left from>:<api.port>',
    }),
    heartbeat_wait_seconds: Type.Integer({ minimum: 5, default: 90, description: 'how long a deploy waits for the first heartbeat' }),
    ssh_timeout_seconds: Type.Integer({ minimum: 1, default: 20 }),
  },
  { additionalProperties: false, default: {} },
);

interface ProvisioningConfig {
  advertise_address: string | null;
  heartbeat_wait_seconds: number;
  ssh_timeout_seconds: number;
}

const HostKey = Type.String({ pattern: '^SHA256:[A-Za-z0-9+/]{43}$', description: 'pin the host key (SHA256:… fingerprint)' });

/**
 * update-ssh and start go to the address hangar has for a node, which a joined node only claimed:
 * the host key must be known (recorded by a deploy, or given here), never trusted on first use.
 */
const Credentials = Type.Object(
  {
    ...SshCredentialFields,
    ssh_host_key: Type.Optional(
      Type.String({
        ...HostKey,
        description: 'the machine’s host key (SHA256:… fingerprint); needed when none is recorded for its address (a node that joined rather than being deployed), and recorded from then on',
      }),
    ),
  },
  { additionalProperties: false },
);

/** Deploy, update and start agents over SSH, recording each step as a node event. */
export default definePlugin({
  name: 'provisioning',
  description: 'deploy, update-ssh and start over SSH',
  deps: [NodesRef, SshProfilesRef, AgentBinariesRef],
  configSchema: ProvisioningConfigSchema,
  migrations: [
    createTables('001_ssh_host_keys', {
      [HOST_KEYS]: (t) => {
        t.string('host', 255).notNullable();
        t.integer('port').notNullable();
        t.string('fingerprint', 100).notNullable();
        t.timestamp('recorded_at', { useTz: true }).notNullable();
        t.primary(['host', 'port']);
      },
    }),
    createTables('002_ssh_jobs', {
      [SSH_JOBS]: (t) => {
        recordId(t);
        t.string('name', 255).notNullable();
        t.string('address', 255).notNullable();
        t.text('credentials').nullable();
        t.string('host_key', 100).nullable();
        t.timestamp('requested_at', { useTz: true }).notNullable();
        recordTimes(t);
        leaseColumns(t);
      },
    }),
  ],
  setup(services) {
    const { db, clock, ca, log, config } = services;
    const settings = config.provisioning as ProvisioningConfig;
    const nodesApi = nodesOf(services);
    const { nodes, events } = nodesApi;
    const forgetNode = recordRemover(services.events, 'node', nodes);
    const profiles = sshProfilesOf(services);
    const ssh = services.drivers.get(SshDriverRef);
    const binaries = services.provided.get(AgentBinariesRef);
    const jobs = new SshJobStore(db, clock);
    const sealed = ca.secretBox('provisioning-ssh-jobs');

    const hostKeys: HostKeyStore = {
      async get(host, port) {
        const row = await db.knex(HOST_KEYS).where({ host, port }).first('fingerprint');
        return row?.fingerprint ?? null;
      },
      async set(host, port, fingerprint) {
        await db.knex(HOST_KEYS).insert({ host, port, fingerprint, recorded_at: clock.now().toISOString() }).onConflict(['host', 'port']).merge();
      },
    };

    const connect = (ip: string, creds: SshCredentials, hostKey: { pinned?: string; requireKnown?: boolean } = {}) =>
      ssh.open(
        { host: ip, port: creds.port, username: creds.username, privateKey: creds.privateKey, password: creds.password },
        { hostKeys, pinnedHostKey: hostKey.pinned, requireKnownHostKey: hostKey.requireKnown, timeoutMs: settings.ssh_timeout_seconds * 1000 },
      );

    const apiUrlFor = (session: SshSession) => {
      if (settings.advertise_address) return settings.advertise_address.replace(/\/+$/, '');
      const host = session.localAddress.includes(':') ? `[${session.localAddress}]` : session.localAddress;
      return `https://${host}:${services.ports.get('control') ?? services.config.api.port}`;
    };

    async function waitForHeartbeat(nodeId: string, after: string): Promise<NodeRecord> {
      const deadline = Date.now() + settings.heartbeat_wait_seconds * 1000;
      for (;;) {
        const node = await nodes.get(nodeId);
        if (node?.last_heartbeat_at && node.last_heartbeat_at > after && node.connection === 'online') return node;
        if (Date.now() > deadline) throw new SshError('command', `the agent on ${node?.ip_address ?? nodeId} did not send a heartbeat within ${settings.heartbeat_wait_seconds} s`);
        await new Promise((r) => setTimeout(r, 500));
      }
    }

    /** Uploads the executable and a fresh identity, then (re)starts the agent. */
    async function installAgent(session: SshSession, machine: MachineFacts, node: NodeRecord, step: (kind: string, message: string) => Promise<void>) {
      const binary = binaries.describe(machine.architecture);
      if (!binary) throw new HttpError(409, missingExecutable(machine.architecture));
      await step('deploy_uploading_agent', `uploading the agent ${binary.version} for ${machine.architecture} (${(binary.size / 1e6).toFixed(0)} MB)`);
      await stopAgent(session, machine);
      const { readFile } = await import('node:fs/promises');
      await session.upload(await readFile(binary.file), REMOTE.executable, { mode: 0o755 });
      const wgKey = await machineWireguardKey(session);
      const cert = await ca.issueClientCertificate(node.id);
      await step('deploy_writing_identity', `client certificate ${cert.serial} issued; writing the identity`);
      const agentJson = { node_id: node.id, api_url: apiUrlFor(session), overlay_ip: node.overlay_ip, overlay_prefix: nodesApi.overlay.prefix };
      await session.upload(cert.key_pem!, `${REMOTE.dataDir}/client.key`, { mode: 0o600 });
      await session.upload(cert.cert_pem, `${REMOTE.dataDir}/client.crt`, { mode: 0o644 });
      await session.upload(cert.ca_pem, `${REMOTE.dataDir}/ca.crt`, { mode: 0o644 });
      await session.upload(`${JSON.stringify(agentJson, null, 2)}\n`, `${REMOTE.dataDir}/agent.json`, { mode: 0o600 });
      const changes: Partial<NodeRecord> = { architecture: machine.architecture, hostname: machine.hostname };
      if (wgKey) changes.wg_public_key = wgKey;
      await nodes.change(node.id, changes);
      if (wgKey) await nodesApi.publishPeers();
      const how = await startAgent(session, machine);
      await step('deploy_agent_started', `agent started (${how}); waiting for its first heartbeat`);
    }

    async function deploy(nodeId: string, ip: string, creds: SshCredentials, pinned: string | undefined, requestedAt: string): Promise<Outcome> {
      // Every step is the node's event from the first one (and names the address it went to).
      let current = nodeId;
      const step = async (kind: string, message: string) => {
        await events.record({ nodeId: current, identifier: ip, kind, message });
      };
      let session: SshSession | undefined;
      try {
        await step('deploy_connecting', `connecting to ${creds.username}@${ip}:${creds.port}`);
        session = await connect(ip, creds, { pinned });
        await step('deploy_connected', `connected (host key ${session.hostKeyFingerprint})`);
        const machine = await detectMachine(session);
        await step('deploy_detected', `${machine.os} ${machine.osVersion} on ${machine.architecture}, ${machine.systemd ? 'systemd' : 'no systemd'}`);
        const installed = await installPrerequisites(session);
        await step('deploy_prerequisites', installed.length ? `installed ${installed.join(', ')}` : 'Docker, WireGuard and restic already present');
        // Re-deploying keeps the node the machine already is.
        const previous = await existingNodeId(session);
        const known = previous ? await nodes.get(previous) : null;
        let node = known && !known.removing ? known : await nodes.require(nodeId);
        if (known && !known.removing && known.id !== nodeId) {
          await forgetNode(nodeId);
          await nodesApi.overlay.release(nodeId);
          await events.reassign(nodeId, known.id);
          node = known;
        }
        current = node.id;
        await step('deploy_node', known && node.id === known.id ? `re-deploying node ${node.id}` : `node ${node.id} created for ${ip}`);
        await installAgent(session, machine, node, step);
        await waitForHeartbeat(node.id, requestedAt);
        return { nodeId: current, identifier: ip, kind: 'deploy_completed', message: `node ${node.id} is ready` };
      } catch (err) {
        // The node stays (pending) with its events, so the operator can read why and deploy again.
        return { nodeId: current, identifier: ip, kind: 'deploy_failed', message: describe(err) };
      } finally {
        session?.close();
      }
    }

    function describe(err: unknown): string {
      if (err instanceof SshError) return `${err.step}: ${err.message}`;
      return (err as Error).message;
    }

    /**
     * An SSH job on a known node: an event when it starts, the work, the first heartbeat after it;
     * answers the outcome (completed, or why it failed).
     */
    async function nodeJob(
      node: NodeRecord,
      job: { address: string; creds: SshCredentials; hostKey: string | undefined; requestedAt: string },
      kinds: { started: [string, string]; completed: [string, string]; failed: string },
      work: (session: SshSession, machine: MachineFacts, step: (kind: string, message: string) => Promise<void>) => Promise<void>,
    ): Promise<Outcome> {
      const step = (kind: string, message: string) => events.record({ nodeId: node.id, kind, message }).then(() => undefined);
      let session: SshSession | undefined;
      try {
        await step(...kinds.started);
        session = await connect(job.address, job.creds, { pinned: job.hostKey, requireKnown: true });
        await work(session, await detectMachine(session), step);
        await waitForHeartbeat(node.id, job.requestedAt);
        return { nodeId: node.id, kind: kinds.completed[0], message: kinds.completed[1] };
      } catch (err) {
        return { nodeId: node.id, kind: kinds.failed, message: describe(err) };
      } finally {
        session?.close();
      }
    }

    /** The job's work on the node it is for (a node deleted meanwhile: nothing). */
    async function runJob(kind: SshJobKind, job: SshJobRecord): Promise<Outcome | null> {
      const creds = JSON.parse(sealed.openString(job.credentials!)) as SshCredentials;
      const args = { address: job.address, creds, hostKey: job.host_key ?? undefined, requestedAt: job.requested_at };
      if (kind === 'deploy') return deploy(job.id, job.address, creds, args.hostKey, job.requested_at);
      const node = await nodes.get(job.id);
      if (!node || node.removing) return null;
      if (kind === 'update-ssh') {
        return nodeJob(
          node,
          args,
          {
            started: ['ssh_update_started', `updating the agent on ${job.address} over SSH as ${creds.username}`],
            completed: ['ssh_update_completed', `agent updated with a new certificate; node ${node.id} is ready`],
            failed: 'ssh_update_failed',
          },
          async (session, machine, step) => {
            await ca.revokeNode(node.id);
            await installAgent(session, machine, node, step);
          },
        );
      }
      return nodeJob(
        node,
        args,
        {
          started: ['agent_start_requested', `starting the agent on ${job.address} over SSH`],
          completed: ['agent_started', `node ${node.id} is sending heartbeats again`],
          failed: 'agent_start_failed',
        },
        async (session, machine) => void (await startAgent(session, machine)),
      );
    }

    const operation = (kind: SshJobKind): Operation<SshJobRecord> => ({
      from: '*',
      label: (job: SshJobRecord) => `${kind} of node ${job.id} over SSH`,
      async run(job) {
        // Its outcome is a node event, recorded once the row (and the sealed credentials) went:
        // a request that follows the event is never refused for this job.
        const outcome = await runJob(kind, job);
        await jobs.remove(job.id);
        if (outcome) await events.record(outcome).catch((err: Error) => log.warn({ node_id: outcome.nodeId, error: err.message }, 'recording the outcome of an SSH job failed'));
        return REMOVED;
      },
      failed: () => ({ credentials: null }),
    });
    const lifecycle = services.clusters.lifecycle(
      jobs,
      defineLifecycle<SshJobRecord>({ noun: 'SSH job on node', operations: { deploy: operation('deploy'), 'update-ssh': operation('update-ssh'), start: operation('start') } }),
    );

    /** Starts an SSH job on a node; a 409 while another one runs there. */
    async function startJob(kind: SshJobKind, node: { id: string; name: string }, address: string, creds: SshCredentials, hostKey: string | undefined, requestedAt: string): Promise<void> {
      await db.knex(SSH_JOBS).insert(jobs.codec.encode({ id: node.id, name: node.name, address, requested_at: requestedAt, created_at: requestedAt, updated_at: requestedAt })).onConflict('id').ignore();
      const patch = { name: node.name, address, credentials: sealed.seal(JSON.stringify(creds)), host_key: hostKey ?? null, requested_at: requestedAt };
      await lifecycle.start(node.id, kind, patch, (current) => {
        const running = (current?.op ?? kind) as SshJobKind;
        return conflict(`Node ${node.id} has an SSH job running already (${running}, asked for at ${current?.requested_at ?? 'an earlier request'}): wait for its outcome (node event ${OUTCOMES[running] ?? 'of its end'}), then ask again`);
      });
    }

    return {
      routes: [
        defineRoute({
          method: 'POST',
          path: '/v1/nodes/deploy',
          auth: { role: 'admin' },
          summary: 'Deploy an agent to a machine over SSH; runs in the background, each step a node event',
          status: 202,
          schemas: {
            body: Type.Object(
              {
                ...SshCredentialFields,
                ip_address: IpAddress,
                name: Type.Optional(NodeName),
                ssh_host_key: Type.Optional(HostKey),
              },
              { additionalProperties: false },
            ),
          },
          async handler(req) {
            const { ip_address, name, ssh_host_key, ...fields } = req.body;
            const creds = await profiles.resolve(fields);
            const now = clock.now().toISOString();
            // The node exists from the start, so the caller can follow it: a machine deployed before
            // (or a failed deploy) at this address keeps its node, and a second deploy at once finds
            // the first one's node, and its job (a 409).
            const { node: found, made } = await nodes.atAddress(ip_address, { id: newId('node'), name: name ?? ip_address, overlay_ip: null, connection: 'pending', availability: 'active', created_at: now, updated_at: now });
            const node = made ? await nodes.change(found.id, { overlay_ip: await nodesApi.overlay.reserve(found.id) }) : found;
            const { id } = node;
            await startJob('deploy', node, ip_address, creds, ssh_host_key, now);
            log.info({ node_id: id, ip_address, user: creds.username, profile: creds.profile }, 'deploy started');
            return { node_id: id, ip_address, status: 'deploying', started_at: now };
          },
        }),
        // An agent on a node hangar knows, over SSH: replaced (the executable of the architecture it reported) or started.
        ...(
          [
            ['update-ssh', 'updating', 'For an agent that is down: replace its executable and client certificate over SSH and restart it'],
            ['start', 'starting', 'Start the agent over SSH (after stop, or when it is down)'],
          ] as const
        ).map(([kind, status, summary]) =>
          defineRoute({
            method: 'POST',
            path: `/v1/nodes/{id}/${kind}`,
            auth: { role: 'admin' },
            summary,
            status: 202,
            schemas: { params: NodeParams, body: Credentials },
            async handler(req) {
              const node = await nodes.requireLive(req.params.id);
              if (kind === 'update-ssh' && !node.architecture) throw conflict(`Node ${node.id} has not reported its architecture yet`);
              if (!node.ip_address) throw conflict(`Node ${node.id} has no address to reach it over SSH`);
              const { ssh_host_key, ...fields } = req.body;
              const creds = await profiles.resolve(fields);
              await startJob(kind, node, node.ip_address, creds, ssh_host_key, clock.now().toISOString());
              return { node_id: node.id, status };
            },
          }),
        ),
      ],
    };
  },
});
