import { createHash } from 'node:crypto';
import { readFileSync, existsSync } from 'node:fs';
import path from 'node:path';
import YAML from 'yaml';
import { CoreConfigSchema, type HangarConfig } from '../config/schema.js';
import { ConfigError } from './errors.js';
import { fromRoot } from './paths.js';
import type { Ajv2020, CodeOptions } from 'ajv/dist/2020.js';
import { precompiledConfigValidators } from './precompiled-validators.js';
import { createAjv, describeErrors, type JsonSchema } from './validation.js';

export const CONFIG_DIR = fromRoot('config');
const ENV_PREFIX = 'HANGAR_';
/** Environment variables that are not configuration even though they carry the prefix. */
const NOT_CONFIG = new Set([
  'HANGAR_REQUIRE_ALL',
  'HANGAR_CONFIG',
  // The CLI's connection to a control plane (docs/runner.md), not the control plane's own settings.
  'HANGAR_API_URL',
  'HANGAR_ACCESS_KEY',
  'HANGAR_SECRET_KEY',
  'HANGAR_CA_FILE',
  'HANGAR_BIN',
  // bin/hangar.mjs: run the TypeScript sources even when the production build is current.
  'HANGAR_FROM_SOURCES',
  // core/workers.ts: which of `hangar serve`'s workers (api.workers) this process is, and its primary's run.
  'HANGAR_WORKER',
  'HANGAR_WORKERS_RUN',
]);
const NOT_CONFIG_PREFIXES = ['HANGAR_TEST_'];

export interface LoadConfigOptions {
  /** Operator's YAML file (`--config`). */
  file?: string;
  /** `--data-dir`, wins over everything. */
  dataDir?: string;
  /** Defaults to process.env. */
  env?: Record<string, string | undefined>;
  /** Programmatic overrides applied after files and before environment variables (tests). */
  overrides?: Record<string, unknown>;
}

type Tree = Record<string, unknown>;

function isPlainObject(v: unknown): v is Tree {
  return !!v && typeof v === 'object' && !Array.isArray(v);
}

export function deepMerge(base: Tree, over: Tree): Tree {
  const out: Tree = { ...base };
  for (const [k, v] of Object.entries(over)) {
    out[k] = isPlainObject(v) && isPlainObject(out[k]) ? deepMerge(out[k] as Tree, v) : v;
  }
  return out;
}

function readYaml(file: string): Tree {
  let parsed: unknown;
  try {
    parsed = YAML.parse(readFileSync(file, 'utf8'));
  } catch (err) {
    throw new ConfigError(`cannot read configuration file ${file}: ${(err as Error).message}`);
  }
  if (parsed == null) return {};
  if (!isPlainObject(parsed)) throw new ConfigError(`configuration file ${file} must hold a mapping at the top level`);
  return parsed;
}

/** HANGAR_API__PORT=9443 → {api: {port: 9443}}. Values that parse as JSON are taken as JSON. */
export function configFromEnv(env: Record<string, string | undefined>): Tree {
  const out: Tree = {};
  for (const [name, raw] of Object.entries(env)) {
    if (!name.startsWith(ENV_PREFIX) || NOT_CONFIG.has(name) || raw === undefined) continue;
    if (NOT_CONFIG_PREFIXES.some((p) => name.startsWith(p))) continue;
    const keys = name.slice(ENV_PREFIX.length).toLowerCase().split('__');
    let value: unknown = raw;
    if (/^(true|false|null|-?\d+(\.\d+)?|\[.*\]|\{.*\})$/s.test(raw.trim())) {
      try {
        value = JSON.parse(raw);
      } catch {
        value = raw;
      }
    }
    let node = out;
    keys.slice(0, -1).forEach((k) => {
      if (!isPlainObject(node[k])) node[k] = {};
      node = node[k] as Tree;
    });
    node[keys[keys.length - 1]!] = value;
  }
  return out;
}

/** Settings the product documents under their own names (the login API's JWT_SECRET, API_SERVER). */
const ENV_ALIASES: Record<string, string[]> = {
  JWT_SECRET: ['iam', 'jwt_secret'],
  API_SERVER: ['iam', 'api_server'],
};

function aliasesFromEnv(env: Record<string, string | undefined>): Tree {
  const out: Tree = {};
  for (const [name, [section, key]] of Object.entries(ENV_ALIASES)) {
    const value = env[name];
    if (value === undefined || value === '') continue;
    out[section!] = { ...((out[section!] as Tree) ?? {}), [key!]: value };
  }
  return out;
}

/** Lists (like `plugins`) also accept a comma-separated string from the environment. */
function splitLists(tree: Tree): void {
  for (const key of ['plugins', 'drivers']) {
    if (typeof tree[key] === 'string') tree[key] = (tree[key] as string).split(',').map((s) => s.trim()).filter(Boolean);
  }
}

/** The Ajv that checks configuration sections (the build's precompiler makes one with `code` options too). */
export function createConfigAjv(code?: CodeOptions): Ajv2020 {
  return createAjv({ coerceTypes: true, useDefaults: true, oneOff: true, code });
}

/** Which precompiled validator is a schema's: the SHA-1 of its JSON. */
export function configSchemaKey(schema: unknown): string {
  return createHash('sha1').update(JSON.stringify(schema)).digest('hex');
}

let ajv: Ajv2020 | undefined;

/**
 * Validates `section` in place against `schema` (filling defaults); throws a ConfigError naming the
 * key. The production build brings the validators of the core's and the built-in plugins' sections
 * compiled (core/precompiled-validators.ts); any other schema is compiled here.
 */
export function validateConfigSection(section: unknown, schema: JsonSchema, where: string): void {
  const validate = precompiledConfigValidators[configSchemaKey(schema)] ?? (ajv ??= createConfigAjv()).compile(schema);
  if (!validate(section)) {
    const details = describeErrors(validate.errors, where);
    throw new ConfigError(`invalid configuration: ${details.map((d) => `${d.path} ${d.message}`).join('; ')}`);
  }
}

export function loadConfig(options: LoadConfigOptions = {}): HangarConfig {
  const env = options.env ?? process.env;
  let tree = readYaml(path.join(CONFIG_DIR, 'default.yaml'));
  const fromEnv = configFromEnv(env);
  const envName = String(fromEnv.env ?? options.overrides?.env ?? env.NODE_ENV ?? 'development');
  const envFile = path.join(CONFIG_DIR, `${envName}.yaml`);
  if (existsSync(envFile)) tree = deepMerge(tree, readYaml(envFile));
  const file = options.file ?? env.HANGAR_CONFIG;
  if (file) {
    if (!existsSync(file)) throw new ConfigError(`configuration file ${file} does not exist`);
    tree = deepMerge(tree, readYaml(file));
  }
  if (options.overrides) tree = deepMerge(tree, options.overrides);
  splitLists(fromEnv);
  tree = deepMerge(tree, aliasesFromEnv(env));
  tree = deepMerge(tree, fromEnv);
  tree.env = envName;
  if (options.dataDir) tree.data_dir = options.dataDir;
  validateConfigSection(tree, CoreConfigSchema as unknown as JsonSchema, '');
  const config = tree as HangarConfig;
  config.data_dir = path.resolve(config.data_dir);
  return config;
}
