#!/usr/bin/env node
// The dashboard: web/src (Preact + TypeScript) bundled by esbuild into dist/ui, which the
// `dashboard` plugin serves at /ui. First the API's types are generated from the route table
// (scripts/api-types.ts → web/src/api.gen.ts). Everything comes from the checkout and
// node_modules; nothing is fetched. `--types` generates the types only (npm run typecheck).
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const out = path.join(root, 'dist', 'ui');
const step = (msg) => console.log(`build-ui: ${msg}`);

step('generating web/src/api.gen.ts from the route table');
execFileSync(process.execPath, ['--import', 'tsx', path.join(root, 'scripts', 'api-types.ts'), path.join(root, 'web', 'src', 'api.gen.ts')], { cwd: root, stdio: 'inherit' });
if (process.argv.includes('--types')) process.exit(0);

step('bundling web/src/main.tsx');
const result = await build({
  entryPoints: [path.join(root, 'web', 'src', 'main.tsx')],
  bundle: true,
  format: 'esm',
  target: ['chrome110', 'firefox110', 'safari16'],
  jsx: 'automatic',
  jsxImportSource: 'preact',
  minify: true,
  sourcemap: false,
  legalComments: 'none',
  write: false,
  outdir: out,
  logLevel: 'warning',
});
rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });
const names = {};
for (const file of result.outputFiles) {
  const ext = path.extname(file.path);
  const name = `app-${createHash('sha256').update(file.contents).digest('hex').slice(0, 12)}${ext}`;
  writeFileSync(path.join(out, name), file.contents);
  names[ext.slice(1)] = name;
  step(`${name} ${(file.contents.length / 1024).toFixed(1)} KiB`);
}
const html = readFileSync(path.join(root, 'web', 'index.html'), 'utf8').replace('{{js}}', names.js).replace('{{css}}', names.css);
writeFileSync(path.join(out, 'index.html'), html);
step(`done: ${path.relative(root, out)}`);
