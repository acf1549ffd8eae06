/**
 * A compose file as `docker stack deploy` takes it from hangar: version 3.8 at least, each hangar
 * secret and config an external object of its current version (containers keep the compose key as
 * target, so paths survive rotations), `x-hangar` removed, and the routed services attached to the
 * edge network as well as `default`. The services plugin has checked the file before.
 */
import { parseDocument, stringify } from 'yaml';
import { SwarmDriverError } from './client.js';
import { HANGAR_EDGE_NETWORK } from './objects.js';
import { healthTimings, type HealthSpec } from '../../core/orchestrator.js';
import { healthTest } from './workloads.js';

/** The compose version hangar deploys with: external objects with `name:` need 3.5, configs 3.3. */
const DEPLOY_VERSION = '3.8';

export interface BundleObject {
  kind: 'secret' | 'config';
  /** The compose key of the object. */
  key: string;
  /** The runtime object holding its current version. */
  name: string;
}

const isMap = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** A declared health check as a compose service's `healthcheck:` (it replaces the file's own). */
export function composeHealthcheck(health: HealthSpec): Record<string, unknown> {
  const t = healthTimings(health);
  return { test: healthTest(health), interval: `${t.interval_s}s`, timeout: `${t.timeout_s}s`, retries: t.retries, start_period: `${t.start_period_s}s` };
}

export function renderCompose(text: string, objects: BundleObject[], routed: string[], health: Record<string, HealthSpec> = {}): string {
  const doc = parseDocument(text, { merge: true, prettyErrors: false, uniqueKeys: true });
  if (doc.errors.length) throw new SwarmDriverError(`the compose file is not valid YAML: ${doc.errors[0]!.message.split('\n')[0]}`);
  const parsed = doc.toJS({ maxAliasCount: 1000 }) as unknown;
  if (!isMap(parsed) || !isMap(parsed.services)) throw new SwarmDriverError('the compose file has no services: map');
  const { version, ...rest } = parsed;
  const minor = version === undefined || version === null ? -1 : Number(String(version).split('.')[1] ?? 0);
  const out: Record<string, unknown> = { version: minor >= 8 ? String(version) : DEPLOY_VERSION, ...rest };
  const routes = new Set(routed);
  const services = out.services as Record<string, Record<string, unknown>>;
  for (const [key, def] of Object.entries(services)) {
    if (!isMap(def)) continue;
    delete def['x-hangar'];
    if (health[key]) def.healthcheck = composeHealthcheck(health[key]);
    if (!routes.has(key)) continue;
    const networks = def.networks;
    if (Array.isArray(networks)) {
      if (!networks.includes(HANGAR_EDGE_NETWORK)) networks.push(HANGAR_EDGE_NETWORK);
    } else if (isMap(networks)) {
      if (!(HANGAR_EDGE_NETWORK in networks)) networks[HANGAR_EDGE_NETWORK] = null;
    } else {
      def.networks = ['default', HANGAR_EDGE_NETWORK];
    }
  }
  if (routes.size) out.networks = { ...(isMap(out.networks) ? out.networks : {}), [HANGAR_EDGE_NETWORK]: { external: true } };
  for (const kind of ['secret', 'config'] as const) {
    const entries = objects.filter((o) => o.kind === kind);
    if (!entries.length) continue;
    out[`${kind}s`] = Object.fromEntries(entries.map((e) => [e.key, { external: true, name: e.name }]));
  }
  return stringify(out);
}
