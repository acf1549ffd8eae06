import type { BundleState, HealthSpec, LogOptions } from '../../core/orchestrator.js';
import { runCommand, type RunResult } from '../../core/process.js';
import { attempt, checkName, dockerReason, SwarmDriverError, waitUntil, type Raw, type SwarmContext } from './client.js';
import { logLineCount, mergeLines, serviceLogLines } from './logs.js';
import { stackFilter, stackServices, statesOf } from './state.js';
import { renderCompose, type BundleObject } from './compose.js';
import { ensureNetwork, HANGAR_EDGE_NETWORK } from './objects.js';

const DEPLOY_TIMEOUT_MS = 5 * 60_000;
const REMOVE_WAIT_MS = 60_000;

/** Runs the docker CLI (no shell) against the driver's socket, with `stdin` as its input. */
export async function runDocker(ctx: SwarmContext, args: string[], stdin?: string, timeoutMs = DEPLOY_TIMEOUT_MS): Promise<RunResult> {
  const env = { ...process.env, DOCKER_HOST: `unix://${ctx.socketPath}`, DOCKER_CLI_HINTS: 'false' };
  const result = await runCommand(ctx.dockerBinary, args, { env, input: stdin ?? '', timeoutMs }).catch((err: NodeJS.ErrnoException) => {
    throw new SwarmDriverError(err.code === 'ENOENT' ? `the docker CLI (${ctx.dockerBinary}) is not installed on this machine` : `running docker ${args[0]} ${args[1] ?? ''}: ${err.message}`);
  });
  return result.timedOut ? { ...result, stderr: `${result.stderr}\n(killed: no answer after ${Math.round(timeoutMs / 1000)} s)` } : result;
}

async function bundleState(ctx: SwarmContext, name: string): Promise<BundleState> {
  const services = await stackServices(ctx, name);
  services.sort((a, b) => String(a.Spec?.Name).localeCompare(String(b.Spec?.Name)));
  return { name, services: await statesOf(ctx, services) };
}

/**
 * `docker stack deploy` of a compose file (no image resolution: images are what the nodes have or
 * pull themselves), rewritten first for hangar's objects and routed services (./compose.ts).
 */
export async function deployBundle(ctx: SwarmContext, name: string, text: string, options: { prune: boolean; objects?: BundleObject[]; routed?: string[]; health?: Record<string, HealthSpec> }): Promise<BundleState> {
  checkName('stack', name);
  if (typeof text !== 'string' || !text.trim()) throw new SwarmDriverError(`deploying stack ${name}: the compose file is empty`);
  const routed = options.routed ?? [];
  let yamlText: string;
  try {
    yamlText = renderCompose(text, options.objects ?? [], routed, options.health);
  } catch (err) {
    throw new SwarmDriverError(`deploying stack ${name}: ${(err as Error).message}`);
  }
  if (routed.length) await ensureNetwork(ctx, HANGAR_EDGE_NETWORK);
  const args = ['stack', 'deploy', '--compose-file', '-', ...(options?.prune ? ['--prune'] : []), '--resolve-image', 'never', name];
  const result = await runDocker(ctx, args, yamlText);
  if (result.code !== 0) {
    const reason = result.stderr.trim() || result.stdout.trim() || `docker exited with ${result.code}`;
    throw new SwarmDriverError(`deploying stack ${name}: ${reason}`);
  }
  return bundleState(ctx, name);
}

/** What of a stack the engine still has: services, networks, secrets, configs, and containers on this engine. */
async function stackLeftovers(ctx: SwarmContext, name: string) {
  const filters = stackFilter(name);
  const [services, networks, secrets, configs, containers] = await Promise.all([
    attempt('listing services', () => ctx.docker.listServices({ filters })),
    attempt('listing networks', () => ctx.docker.listNetworks({ filters })),
    attempt('listing secrets', () => ctx.docker.listSecrets({ filters })),
    attempt('listing configs', () => ctx.docker.listConfigs({ filters })),
    attempt('listing containers', () => ctx.docker.listContainers({ all: true, filters })),
  ]);
  return { services: services as Raw[], networks: networks as Raw[], secrets: secrets as Raw[], configs: configs as Raw[], containers: containers as Raw[] };
}

/**
 * `docker stack rm`, then waits (up to a minute) until the stack's services, networks and this
 * engine's containers of it are gone, so that deploying the same stack again right away does not
 * collide with a network still being removed.
 */
export async function removeBundle(ctx: SwarmContext, name: string): Promise<{ removed: boolean }> {
  checkName('stack', name);
  const before = await stackLeftovers(ctx, name);
  if (!before.services.length && !before.networks.length && !before.secrets.length && !before.configs.length) return { removed: false };
  const result = await runDocker(ctx, ['stack', 'rm', name], undefined, REMOVE_WAIT_MS);
  let lastError = result.code === 0 ? '' : result.stderr.trim() || `docker exited with ${result.code}`;
  let left = before;
  const gone = await waitUntil(async () => {
    left = await stackLeftovers(ctx, name);
    if (left.services.length === 0) {
      // A network the CLI could not remove while tasks were still attached: try again.
      for (const network of left.networks) {
        try {
          await ctx.docker.getNetwork(network.Id).remove();
        } catch (err) {
          lastError = `network ${network.Name}: ${dockerReason(err)}`;
        }
      }
    }
    return left.services.length === 0 && left.networks.length === 0 && left.containers.length === 0;
  }, REMOVE_WAIT_MS);
  if (!gone) {
    const what = [
      ...left.services.map((s) => `service ${s.Spec?.Name}`),
      ...left.networks.map((n) => `network ${n.Name}`),
      ...(left.containers.length ? [`${left.containers.length} container(s)`] : []),
    ].join(', ');
    throw new SwarmDriverError(`removing stack ${name}: still present after ${REMOVE_WAIT_MS / 1000} s: ${what}${lastError ? ` (${lastError})` : ''}`);
  }
  return { removed: true };
}

/** The logs of every service of a stack, merged in time order, each line `<service> | <timestamp> <text>`. */
export async function bundleLogs(ctx: SwarmContext, name: string, options: LogOptions): Promise<{ lines: string[] }> {
  checkName('stack', name);
  const count = logLineCount(options);
  const services = await stackServices(ctx, name);
  if (!services.length) throw new SwarmDriverError(`reading the logs of stack ${name}: no such stack`, 404);
  const sources = await Promise.all(
    services.map(async (service) => ({
      prefix: `${service.Spec?.Name} | `,
      lines: await serviceLogLines(ctx, service.ID, `service ${service.Spec?.Name}`, options),
    })),
  );
  return { lines: mergeLines(sources, count) };
}
