/**
 * The host's own Docker Engine as a one-node swarm, for integration suites that drive hangar's
 * swarm features through a real agent running on this machine. The engine is put in swarm mode
 * once per test run (when it is not already) and leaves at the end only if this run put it there.
 * Suites must not make the host leave through the API: other suites share the engine.
 */
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { docker, dockerAvailable, dockerOk } from '../../lab/docker.js';
import { sealAvailable, sealBridge, sealedBridges, unsealBridge } from '../../lab/seal.js';

export const TEST_IMAGE = 'hangar-test/busybox:latest';
const BUSYBOX_IMAGE_SCRIPT = path.resolve('lab/rootfs/usr/local/sbin/lab-busybox-image');
/** HAProxy as the lab machines run it, built on the host from Debian's haproxy (lab-haproxy-image). */
export const HAPROXY_IMAGE = 'hangar-test/haproxy:latest';
const HAPROXY_IMAGE_SCRIPT = path.resolve('lab/rootfs/usr/local/sbin/lab-haproxy-image');

let initialisedHere = false;
let ready: Promise<string | null> | undefined;

/** PATH for an agent that needs the docker CLI (and nothing that could change this machine otherwise). */
export function dockerOnlyPath(): string {
  const found = spawnSync('sh', ['-c', 'command -v docker'], { encoding: 'utf8' }).stdout.trim();
  return found ? path.dirname(found) : '/usr/bin';
}

/**
 * The host engine's bridges that swarm workloads send through: docker0 (plain containers) and
 * docker_gwbridge (the way out of every overlay network on this engine).
 */
const HOST_BRIDGES = ['docker0', 'docker_gwbridge'];
const sealedHere = new Set<string>();

/**
 * Seals the host engine's bridges for this run (lab/seal.ts: nothing a test's container sends is
 * forwarded off the machine) and lifts the seals this run added when the process exits, so a
 * developer's own containers get their network back.
 */
function sealHostBridges(): string | null {
  const seal = sealAvailable();
  if (!seal.ok) return seal.why!;
  const already = new Set(sealedBridges());
  for (const bridge of HOST_BRIDGES) {
    if (already.has(bridge)) continue;
    sealBridge(bridge);
    if (sealedHere.size === 0) process.once('exit', () => sealedHere.forEach((b) => unsealBridge(b)));
    sealedHere.add(bridge);
  }
  return null;
}

/**
 * Ensures the host engine is a swarm manager with its bridges sealed and the test image exists.
 * Resolves to null when it is ready, or to what is missing (for requireService).
 */
export function hostSwarm(): Promise<string | null> {
  ready ??= (async () => {
    if (!(await dockerAvailable())) return 'a running dockerd (bash scripts/services.sh)';
    const state = (await dockerOk(['info', '--format', '{{.Swarm.LocalNodeState}} {{.Swarm.ControlAvailable}}'])).trim();
    if (state !== 'active true') {
      if (state.startsWith('active')) return 'the host engine is a swarm worker; tests need a manager (docker swarm leave --force)';
      await dockerOk(['swarm', 'init', '--advertise-addr', '127.0.0.1']);
      initialisedHere = true;
    }
    return sealHostBridges() ?? testImage();
  })();
  return ready;
}

/**
 * Builds TEST_IMAGE from the host's busybox when the engine does not have it. Resolves to null
 * when the image is there, or to what is missing (for requireService); a failed build throws.
 */
export async function testImage(): Promise<string | null> {
  if ((await docker(['image', 'inspect', TEST_IMAGE])).code === 0) return null;
  if (!spawnSync('sh', ['-c', 'command -v busybox']).stdout.length) return 'busybox on the host (apt-get install busybox-static) to build the test image';
  if (!existsSync(BUSYBOX_IMAGE_SCRIPT)) return BUSYBOX_IMAGE_SCRIPT;
  const built = spawnSync('bash', [BUSYBOX_IMAGE_SCRIPT, TEST_IMAGE], { encoding: 'utf8' });
  if (built.status !== 0) throw new Error(`building ${TEST_IMAGE} failed: ${built.stderr}`);
  return null;
}

/** Builds HAPROXY_IMAGE when the engine lacks it; null when it is there, or what is missing (for requireService). */
export async function haproxyImage(): Promise<string | null> {
  if ((await docker(['image', 'inspect', HAPROXY_IMAGE])).code === 0) return null;
  if (!spawnSync('sh', ['-c', 'command -v haproxy']).stdout.length) return 'haproxy on the host (apt-get install haproxy) to build the balancer image';
  const built = spawnSync('bash', [HAPROXY_IMAGE_SCRIPT, HAPROXY_IMAGE], { encoding: 'utf8' });
  if (built.status !== 0) throw new Error(`building ${HAPROXY_IMAGE} failed: ${built.stderr}`);
  return null;
}

/** Leaves the swarm if this run created it (mocha root hook / after). */
export async function releaseHostSwarm(): Promise<void> {
  if (initialisedHere) await docker(['swarm', 'leave', '--force']);
  initialisedHere = false;
  ready = undefined;
}
