import { existsSync } from 'node:fs';
import path from 'node:path';
import type { Static } from '@sinclair/typebox';
import { ORCHESTRATOR_CALLS, type OrchestratorDriver } from '../../../core/orchestrator.js';
import type { DriverCall } from '../../../core/tasks/kinds.js';
import { SwarmInit, SwarmLeave } from '../../../drivers/swarm/membership-calls.js';
import { Lab, type Machine } from '../../e2e/lab/lab.js';
import { waitFor } from '../../support/agents.js';
import { TestDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin } from '../../support/identity.js';
import { stays } from '../../support/stays.js';
import type { DriverTarget, TargetSession } from '../target.js';
import { swarmSpecProbes } from './swarm-probes.js';

const IMAGE = 'lab/busybox:latest';
const ENGINE_AVAILABILITY: Record<string, 'schedulable' | 'cordoned' | 'drained'> = { active: 'schedulable', pause: 'cordoned', drain: 'drained' };

/**
 * The swarm driver on a machine of the lab, reached the way the control plane reaches it: every
 * driver call is a typed task that the hangar agent on that machine (the built executable,
 * deployed over SSH) runs in its lane with its swarm driver against the machine's own dockerd.
 */
export function swarmInTheLab(): DriverTarget {
  const dialect = new TestDialect('sqlite');
  const prefix = `cl${Math.random().toString(36).slice(2, 8)}`;
  let lab: Lab | undefined;
  let t: TestHangar | undefined;
  let machine: Machine;
  let nodeId = '';

  return {
    title: 'swarm (a lab machine, through its hangar agent: typed tasks, agent lanes, the driver)',
    backend: 'swarm',
    noProcesses: null,
    async available() {
      const lab = await Lab.availability();
      if (!lab.docker || !lab.image) return lab.why ?? 'the machine lab';
      if (!existsSync(path.resolve('dist/agent/manifest.json'))) return 'the agent executables (npm run build)';
      return null;
    },
    async setUp(): Promise<TargetSession> {
      lab = new Lab({ name: 'contract', subnet: '172.31.73.0/24', log: () => undefined });
      [machine] = (await lab.start({ machines: 1 })) as [Machine];
      t = await startHangar(dialect, {
        plugins: ['system', 'iam', 'nodes', 'agent-internal', 'ssh-profiles', 'provisioning'],
        overrides: { drivers: ['ssh', 'swarm', 'k8s'], api: { host: '0.0.0.0' }, nodes: { heartbeat_interval_seconds: 2 }, tasks: { poll_wait_seconds: 10 } },
      });
      const admin = await bootstrapAdmin(t);
      const deployed = await t.request('POST', '/v1/nodes/deploy', { headers: bearer(admin.token), body: { ip_address: machine.ip, ssh_user: 'root', ssh_key: machine.ssh.root.privateKey } });
      if (deployed.status !== 202) throw new Error(`deploying the agent: ${deployed.status} ${deployed.text}`);
      nodeId = deployed.json.data.node_id;
      await machine.sh(`lab-busybox-image ${IMAGE}`, { timeoutMs: 300_000 });
      await waitFor(async () => (await t!.request('GET', `/v1/nodes/${nodeId}`, { headers: bearer(admin.token) })).json.data?.status === 'ready', { timeoutMs: 240_000, intervalMs: 1000, what: 'the lab machine’s agent' });
      const clusters = t.hangar.services.clusters;
      const call = <C extends DriverCall>(kind: C, input: Static<C['input']>) => clusters.call(nodeId, kind, input, { backend: 'swarm' });
      const runtimeId = (await call(SwarmInit, { advertise_address: machine.ip })).runtime_node_id;
      // The driver as the control plane has it: one typed task per call, run by the agent on the machine.
      const driver = Object.fromEntries(ORCHESTRATOR_CALLS.map((kind) => [kind.method, (input: never) => call(kind, input)])) as unknown as OrchestratorDriver;
      const sh = (command: string) => machine.exec(command);
      return {
        driver,
        context: { cluster_nodes: { [nodeId]: runtimeId }, settings: { publish_mode: 'host', endpoint_mode: 'dnsrr' } },
        node: { id: nodeId, runtimeId },
        image: IMAGE,
        prefix,
        command: stays,
        bundle: (parts, script) =>
          [
            "version: '3.8'",
            'services:',
            ...parts.flatMap((p) => [`  ${p.name}:`, `    image: ${IMAGE}`, `    command: ${JSON.stringify(stays(script.replaceAll('$PART', p.name)))}`, '    deploy:', `      replicas: ${p.replicas ?? 1}`]),
            '',
          ].join('\n'),
        brokenBundle: () => "version: '3.8'\nservices:\n  api:\n    imagee: x\n",
        probe: {
          workloadId: async (name) => (await sh(`docker service inspect --format '{{.ID}}' ${name}`)).stdout.trim() || null,
          objectExists: async (kind, name) => (await sh(`docker ${kind} inspect ${name}`)).code === 0,
          async foreign(name, bundle) {
            await machine.sh(`docker service create --detach --name ${name} --replicas 0 ${IMAGE} sleep 3600`);
            await machine.sh(`printf 'version: "3.8"\\nservices:\\n  s:\\n    image: ${IMAGE}\\n    command: ["sleep", "3600"]\\n    deploy: { replicas: 0 }\\n' | docker stack deploy -c - ${bundle}`);
            return async () => {
              await sh(`docker service rm ${name}; docker stack rm ${bundle}`);
            };
          },
          availability: async (id) => ENGINE_AVAILABILITY[(await machine.sh(`docker node inspect --format '{{.Spec.Availability}}' ${id}`)).trim()]!,
          async folderOnNode() {
            const folder = (await machine.sh('mktemp -d /tmp/hangar-contract-XXXXXX')).trim();
            return { path: folder, remove: async () => void (await sh(`rm -rf ${folder}`)) };
          },
          volumeStaged: async (name) => (await sh(`docker volume inspect ${name}`)).code === 0,
          ...swarmSpecProbes((args) => machine.exec(['docker', ...args])),
        },
      };
    },
    async tearDown() {
      if (t && nodeId) await t.hangar.services.clusters.call(nodeId, SwarmLeave, { force: true }, { backend: 'swarm' }).catch(() => undefined);
      await t?.stop();
      await lab?.teardown();
      await dialect.cleanup();
    },
  };
}
