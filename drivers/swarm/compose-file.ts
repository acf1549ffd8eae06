/**
 * The swarm backend's bundle format: compose files as hangar takes them, parsed and checked in the
 * control plane before anything is deployed (the driver then deploys the file as the user wrote it,
 * with hangar's secrets and configs and the `x-hangar` routes: ./compose.ts).
 */
import { Type } from '@sinclair/typebox';
import { LineCounter, parseDocument } from 'yaml';
import { refusePrivileges, type BundleFormat, type BundleObjectEntry, type BundleRoute, type ParsedBundle } from '../../core/clusters/backend.js';
import { badRequest } from '../../core/errors.js';

type ObjectKind = BundleObjectEntry['kind'];

export interface ParsedCompose extends ParsedBundle {
  /** The whole file as plain data (anchors and merge keys resolved). */
  doc: Record<string, unknown>;
  services: string[];
}

const MAX_RUNTIME_NAME = 63;
const SERVICE_KEY = /^[a-zA-Z0-9][a-zA-Z0-9_.-]*$/;
const DNS_LABEL = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/;
const DOMAIN = /^(?=.{1,253}$)[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)+$/;
const CREATE_WITH: Record<ObjectKind, string> = { secret: 'POST /v1/secrets', config: 'POST /v1/configs' };

const invalid = (message: string) => badRequest(`Validation failed: ${message}`, [{ path: 'body.compose_file', message }]);
const isMap = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const plural = (kind: ObjectKind) => `${kind}s`;

/** The YAML as data; a syntax error is a 400 naming its line and column. */
function parseYaml(text: string): unknown {
  const lines = new LineCounter();
  const doc = parseDocument(text, { merge: true, prettyErrors: false, uniqueKeys: true, lineCounter: lines });
  const error = doc.errors[0];
  if (error) {
    const at = lines.linePos(error.pos[0]);
    const reason = error.code === 'MULTIPLE_DOCS' ? 'a compose file is one YAML document, this one has several' : error.message.split('\n')[0];
    throw invalid(`compose_file is not valid YAML: line ${at.line}, column ${at.col}: ${reason}`);
  }
  return doc.toJS({ maxAliasCount: 1000 });
}

function checkVersion(version: unknown): void {
  if (version === undefined || version === null) return;
  if (!/^3(\.\d+)?$/.test(String(version))) throw invalid(`compose version ${JSON.stringify(version)} is not supported: use version 3.x, or leave version out`);
}

function labelNames(labels: unknown): string[] {
  if (Array.isArray(labels)) return labels.map((l) => String(l).split('=')[0]!);
  return isMap(labels) ? Object.keys(labels) : [];
}

/** What a service's `secrets:` / `configs:` list references (short form or `source:`). */
function sources(list: unknown): string[] {
  if (!Array.isArray(list)) return [];
  return list.map((item) => (isMap(item) ? String(item.source ?? '') : String(item)));
}

function parseObjects(doc: Record<string, unknown>, kind: ObjectKind): BundleObjectEntry[] {
  const section = doc[plural(kind)];
  if (section === undefined || section === null) return [];
  if (!isMap(section)) throw invalid(`top-level ${plural(kind)} must be a map of names`);
  return Object.entries(section).map(([key, value]) => {
    if (value !== null && !isMap(value)) throw invalid(`${kind} ${key} must be a map (or empty)`);
    const def = value ?? {};
    const source = ['file', 'environment', 'content'].find((k) => k in def);
    if (source) {
      throw invalid(`${kind} ${key} has a ${source}: source; compose ${plural(kind)} must be hangar ${plural(kind)}: create it with ${CREATE_WITH[kind]} and name it here (by its key or name:)`);
    }
    const external = isMap(def.external) ? def.external.name : undefined;
    const name = def.name ?? external ?? key;
    if (typeof name !== 'string' || !name) throw invalid(`${kind} ${key}: name must be a string`);
    return { kind, key, name };
  });
}

function parseRoute(service: string, ext: unknown, defaultDomain: (service: string) => string): BundleRoute {
  if (!isMap(ext)) throw invalid(`service ${service}: x-hangar must be a map {domain, port}`);
  const unknown = Object.keys(ext).filter((k) => k !== 'domain' && k !== 'port');
  if (unknown.length) throw invalid(`service ${service}: x-hangar has unknown keys ${unknown.join(', ')} (it takes domain and port)`);
  const { port } = ext;
  if (typeof port !== 'number' || !Number.isInteger(port) || port < 1 || port > 65535) {
    throw invalid(`service ${service}: x-hangar.port must be the container port (1-65535) the load balancer sends the domain to`);
  }
  let domain: string;
  if (ext.domain === undefined || ext.domain === null) {
    if (!DNS_LABEL.test(service)) throw invalid(`service ${service}: its name is not a DNS label, so x-hangar.domain must be given`);
    domain = defaultDomain(service);
  } else {
    domain = String(ext.domain).toLowerCase();
    if (!DOMAIN.test(domain)) throw invalid(`service ${service}: x-hangar.domain ${JSON.stringify(ext.domain)} is not a DNS name`);
  }
  return { service, domain, port };
}

/** The name a named volume of the file has in the engine: its `name:` or external name, else the stack's own `<stack>_<key>`. */
function volumeRuntimeName(doc: Record<string, unknown>, key: string, stack: string): string {
  const def = isMap(doc.volumes) ? doc.volumes[key] : undefined;
  if (!isMap(def)) return `${stack}_${key}`;
  const external = def.external === true || isMap(def.external);
  const named = (isMap(def.external) ? def.external.name : undefined) ?? def.name;
  return typeof named === 'string' && named ? named : external ? key : `${stack}_${key}`;
}

/** The named volumes a service mounts (`name:/path` or `{type: volume, source: name}`), by their engine names. */
function namedMounts(doc: Record<string, unknown>, def: Record<string, unknown>, stack: string): string[] {
  const sources = (Array.isArray(def.volumes) ? def.volumes : []).flatMap((entry) => {
    if (typeof entry === 'string') {
      const parts = entry.split(':');
      return parts.length > 1 && !isHostPath(parts[0]!) ? [parts[0]!] : [];
    }
    if (!isMap(entry) || (entry.type !== undefined && entry.type !== 'volume')) return [];
    return typeof entry.source === 'string' && entry.source && !isHostPath(entry.source) ? [entry.source] : [];
  });
  return [...new Set(sources.map((key) => volumeRuntimeName(doc, key, stack)))];
}

/**
 * Parses and checks a compose file for the stack `stack`: valid YAML, a non-empty `services` map
 * whose services each have an image, hangar-only secrets and configs, a well-formed `x-hangar`.
 * Every failure is a 400 that says what to change.
 */
export function parseCompose(text: string, stack: string, defaultDomain: (service: string) => string): ParsedCompose {
  const doc = parseYaml(text);
  if (!isMap(doc)) throw invalid('compose_file must be a YAML map with a services: section');
  checkVersion(doc.version);
  if (!isMap(doc.services) || !Object.keys(doc.services).length) throw invalid('compose_file needs a non-empty services: map');
  const objects = [...parseObjects(doc, 'secret'), ...parseObjects(doc, 'config')];
  const routes: BundleRoute[] = [];
  const desired: Record<string, number | null> = {};
  const mounts: Record<string, string[]> = {};
  const domains = new Map<string, string>();
  for (const [key, def] of Object.entries(doc.services)) {
    if (!SERVICE_KEY.test(key)) throw invalid(`service name ${JSON.stringify(key)} may hold only letters, digits, '_', '.' and '-' (and must start with a letter or digit)`);
    if (`${stack}_${key}`.length > MAX_RUNTIME_NAME) {
      throw invalid(`service ${key} would run as ${stack}_${key}, longer than ${MAX_RUNTIME_NAME} characters: shorten the service or the stack name`);
    }
    if (!isMap(def)) throw invalid(`service ${key} must be a map`);
    if (typeof def.image !== 'string' || !def.image.trim()) throw invalid(`service ${key} has no image`);
    const deploy = isMap(def.deploy) ? def.deploy : {};
    const reserved = labelNames(deploy.labels).filter((l) => l.startsWith('io.hangar.'));
    if (reserved.length) throw invalid(`service ${key}: labels ${reserved.join(', ')} are hangar's own`);
    for (const kind of ['secret', 'config'] as const) {
      for (const source of sources(def[plural(kind)])) {
        if (!objects.some((o) => o.kind === kind && o.key === source)) {
          throw invalid(`service ${key} uses ${kind} ${JSON.stringify(source)}, which the top-level ${plural(kind)}: section does not declare`);
        }
      }
    }
    desired[key] = deploy.mode === 'global' ? null : typeof deploy.replicas === 'number' ? deploy.replicas : 1;
    mounts[key] = namedMounts(doc, def, stack);
    if (def['x-hangar'] !== undefined) {
      const route = parseRoute(key, def['x-hangar'], defaultDomain);
      const clash = domains.get(route.domain);
      if (clash) throw invalid(`services ${clash} and ${key} both claim the domain ${route.domain}`);
      domains.set(route.domain, key);
      routes.push(route);
    }
  }
  return { doc, services: Object.keys(doc.services), objects, routes, desired, mounts };
}

const FOR_ADMINS = 'is for installation admins';
/** The namespaces of the host (or of another container) a service may not join: `host`, `container:<name>`. */
const joinsHost = (v: unknown) => typeof v === 'string' && (v === 'host' || v.startsWith('container:'));
const isHostPath = (source: string) => /^([/.~]|[A-Za-z]:[\\/])/.test(source);
const nonEmpty = (v: unknown) => (Array.isArray(v) ? v.length > 0 : isMap(v) ? Object.keys(v).length > 0 : v !== undefined && v !== null && v !== '');
const listed = (v: unknown) => (Array.isArray(v) ? v.map(String).join(', ') : isMap(v) ? Object.keys(v).join(', ') : String(v));

/** Why a service's `volumes[i]` entry asks for the host, or null: a bind mount (short `/src:/dst`, `./src`, `~/src`; long `type: bind`, `npipe`). */
function hostMount(entry: unknown): string | null {
  if (typeof entry === 'string') {
    const parts = entry.split(':');
    const source = parts.length > 1 ? parts[0]! : '';
    return isHostPath(source) ? `a bind mount of a host path (${source})` : null;
  }
  if (!isMap(entry)) return null;
  const source = typeof entry.source === 'string' ? entry.source : '';
  if (entry.type === 'bind' || entry.type === 'npipe' || isHostPath(source)) return `a bind mount of a host path (${source || 'no source'})`;
  return null;
}

/**
 * The compose format's privilege check (docs/tenancy.md "What a bundle may ask of the machines"):
 * every part of the file that asks a node for more than a container of a project gets, each a
 * problem naming its place (`services.web.volumes[0]: …`). The services plugin refuses such a file
 * (400) from any caller but an installation admin with all its power.
 */
export function composePrivileges(doc: Record<string, unknown>): string[] {
  const problems: string[] = [];
  const refuse = (at: string, what: string, hint = '') => problems.push(`${at}: ${what} ${FOR_ADMINS}${hint}`);
  for (const [key, def] of Object.entries(isMap(doc.services) ? doc.services : {})) {
    if (!isMap(def)) continue;
    const at = `services.${key}`;
    if (def.privileged === true) refuse(`${at}.privileged`, 'a privileged container');
    if (nonEmpty(def.cap_add)) refuse(`${at}.cap_add`, `adding capabilities (${listed(def.cap_add)})`);
    if (nonEmpty(def.devices)) refuse(`${at}.devices`, `a device of the host (${listed(def.devices)})`);
    if (nonEmpty(def.device_cgroup_rules)) refuse(`${at}.device_cgroup_rules`, 'access to devices of the host');
    const opts = Array.isArray(def.security_opt) ? def.security_opt.map(String).filter((o) => !/^no-new-privileges(:true)?$/.test(o)) : nonEmpty(def.security_opt) ? [listed(def.security_opt)] : [];
    if (opts.length) refuse(`${at}.security_opt`, `a security option (${opts.join(', ')})`);
    for (const ns of ['network_mode', 'pid', 'ipc', 'uts', 'userns_mode', 'cgroup'] as const) {
      if (joinsHost(def[ns])) refuse(`${at}.${ns}`, `sharing the ${ns === 'network_mode' ? 'network' : ns} namespace of ${def[ns] === 'host' ? 'the host' : 'another container'} (${String(def[ns])})`);
    }
    if (nonEmpty(def.cgroup_parent)) refuse(`${at}.cgroup_parent`, 'a cgroup of the host');
    if (nonEmpty(def.volumes_from)) refuse(`${at}.volumes_from`, "another container's volumes");
    (Array.isArray(def.volumes) ? def.volumes : []).forEach((entry, i) => {
      const why = hostMount(entry);
      if (why) refuse(`${at}.volumes[${i}]`, why, '; use a hangar volume');
    });
  }
  for (const [key, def] of Object.entries(isMap(doc.volumes) ? doc.volumes : {})) {
    if (!isMap(def)) continue;
    if (nonEmpty(def.driver_opts)) refuse(`volumes.${key}.driver_opts`, 'a volume with driver options (a bind of a host path, a device)', '; use a hangar volume');
    else if (nonEmpty(def.driver) && def.driver !== 'local') refuse(`volumes.${key}.driver`, `a volume driver (${String(def.driver)})`, '; use a hangar volume');
  }
  for (const [key, def] of Object.entries(isMap(doc.networks) ? doc.networks : {})) {
    if (!isMap(def)) continue;
    const external = def.external === true || isMap(def.external);
    const name = isMap(def.external) && def.external.name ? def.external.name : (def.name ?? (external ? key : undefined));
    if (name === 'host' || def.driver === 'host') refuse(`networks.${key}`, "the host's network");
    else if (def.driver === 'macvlan' || def.driver === 'ipvlan') refuse(`networks.${key}.driver`, `a network on an interface of the host (${def.driver})`);
  }
  return problems;
}

/** Compose stacks: the swarm backend's services (`compose_file` in requests, base64). */
export const composeFormat: BundleFormat = {
  name: 'compose',
  field: 'compose_file',
  schema: Type.String({ minLength: 1, maxLength: 1_000_000, description: 'the compose YAML, base64-encoded' }),
  describes: 'compose stack on a swarm',
  parse: (text, { bundle, defaultDomain, installationAdmin }) => {
    const parsed = parseCompose(text, bundle, defaultDomain);
    if (!installationAdmin) refusePrivileges(composePrivileges(parsed.doc), 'compose_file');
    return parsed;
  },
};
