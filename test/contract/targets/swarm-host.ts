import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createSwarmDriver, type SwarmDriver } from '../../../drivers/swarm/index.js';
import { docker, dockerAvailable, dockerOk } from '../../../lab/docker.js';
import { TEST_IMAGE, testImage } from '../../support/host-swarm.js';
import { stays } from '../../support/stays.js';
import type { DriverTarget, TargetSession } from '../target.js';
import { swarmSpecProbes } from './swarm-probes.js';

const SOCKET = '/var/run/docker.sock';
const ENGINE_AVAILABILITY: Record<string, 'schedulable' | 'cordoned' | 'drained'> = { active: 'schedulable', pause: 'cordoned', drain: 'drained' };

/**
 * The swarm driver against this machine's real Docker Engine (a one-node swarm, the same the
 * integration suites share). Everything is named with a per-run prefix and removed at the end;
 * the engine leaves swarm mode only if this target put it there and nothing else runs on it.
 */
export function swarmOnHostEngine(): DriverTarget {
  const prefix = `ct${randomBytes(3).toString('hex')}`;
  let driver: SwarmDriver | undefined;
  let initialisedHere = false;
  let runtimeId = '';

  async function leftovers(): Promise<void> {
    const names = async (args: string[]) => (await docker(args)).stdout.split('\n').map((x) => x.trim()).filter((x) => x.startsWith(prefix) || x.startsWith(`hangar-${prefix}`));
    for (const stack of await names(['stack', 'ls', '--format', '{{.Name}}'])) await driver!.removeBundle({ name: stack }).catch(() => undefined);
    for (const service of await names(['service', 'ls', '--format', '{{.Name}}'])) await docker(['service', 'rm', service]);
    for (let i = 0; i < 60 && (await names(['ps', '-a', '--format', '{{.Names}}'])).length; i++) await new Promise((r) => setTimeout(r, 500));
    for (const kind of ['secret', 'config'] as const) for (const o of await names([kind, 'ls', '--format', '{{.Name}}'])) await docker([kind, 'rm', o]);
    for (const network of await names(['network', 'ls', '--format', '{{.Name}}'])) await docker(['network', 'rm', network]);
    for (const volume of await names(['volume', 'ls', '--format', '{{.Name}}'])) await docker(['volume', 'rm', '-f', volume]);
  }

  return {
    title: 'swarm (this machine’s dockerd, a one-node swarm)',
    backend: 'swarm',
    noProcesses: null,
    async available() {
      if (!existsSync(SOCKET) || !(await dockerAvailable())) return `a running dockerd at ${SOCKET} (bash scripts/services.sh)`;
      const state = (await dockerOk(['info', '--format', '{{.Swarm.LocalNodeState}} {{.Swarm.ControlAvailable}}'])).trim();
      if (!(state.startsWith('inactive') || state === 'active true')) return `a Docker Engine that is a swarm manager or in no swarm (it is: ${state})`;
      return testImage();
    },
    async setUp(): Promise<TargetSession> {
      driver = createSwarmDriver({ socketPath: SOCKET });
      initialisedHere = (await dockerOk(['info', '--format', '{{.Swarm.LocalNodeState}}'])).trim() === 'inactive';
      runtimeId = (await driver.init({ advertise_address: '127.0.0.1' })).runtime_node_id;
      const d = driver;
      return {
        driver: d,
        context: { cluster_nodes: { 'node-host': runtimeId }, settings: { publish_mode: 'host', endpoint_mode: 'dnsrr' } },
        node: { id: 'node-host', runtimeId },
        image: TEST_IMAGE,
        prefix,
        command: stays,
        bundle: (parts, script) =>
          [
            "version: '3.8'",
            'services:',
            ...parts.flatMap((p) => [
              `  ${p.name}:`,
              `    image: ${TEST_IMAGE}`,
              `    command: ${JSON.stringify(stays(script.replaceAll('$PART', p.name)))}`,
              '    deploy:',
              `      replicas: ${p.replicas ?? 1}`,
              '      restart_policy: { condition: on-failure }',
            ]),
            '',
          ].join('\n'),
        brokenBundle: () => "version: '3.8'\nservices:\n  api:\n    imagee: x\n",
        probe: {
          workloadId: async (name) => (await docker(['service', 'inspect', '--format', '{{.ID}}', name])).stdout.trim() || null,
          objectExists: async (kind, name) => (await docker([kind, 'inspect', name])).code === 0,
          async foreign(name, bundle) {
            await dockerOk(['service', 'create', '--detach', '--name', name, '--replicas', '0', '--label', 'io.example.owner=ops', TEST_IMAGE, 'sleep', '3600']);
            await d.deployBundle({ name: bundle, spec: `version: '3.8'\nservices:\n  s:\n    image: ${TEST_IMAGE}\n    command: ["sleep", "3600"]\n    deploy: { replicas: 0 }\n`, prune: false });
            return async () => {
              await docker(['service', 'rm', name]);
              await d.removeBundle({ name: bundle });
            };
          },
          availability: async (id) => ENGINE_AVAILABILITY[(await dockerOk(['node', 'inspect', '--format', '{{.Spec.Availability}}', id])).trim()]!,
          async folderOnNode() {
            const folder = mkdtempSync(path.join(os.tmpdir(), 'hangar-contract-'));
            return { path: folder, remove: async () => rmSync(folder, { recursive: true, force: true }) };
          },
          volumeStaged: async (name) => (await docker(['volume', 'inspect', name])).code === 0,
          ...swarmSpecProbes((args) => docker(args)),
        },
      };
    },
    async tearDown() {
      if (!driver) return;
      await leftovers();
      if (runtimeId) await driver.setNodeAvailability({ runtime_node_id: runtimeId, availability: 'schedulable' }).catch(() => undefined);
      if (!initialisedHere) return;
      // Another suite may have started using the swarm this target made: leave only when nothing else runs on it.
      if ((await docker(['service', 'ls', '--format', '{{.Name}}'])).stdout.trim()) return;
      await driver.leave({ force: true });
    },
  };
}
