#!/usr/bin/env node
// Entry point of the `hangar` command. Runs the production build (dist/hangar, plain JavaScript) when
// it is current; otherwise (a checkout that was not built, or sources edited since) the TypeScript
// sources through tsx's loader. HANGAR_FROM_SOURCES=1 forces the sources.
import { compiledEntry } from './compiled.mjs';

const compiled = compiledEntry();
if (compiled) {
  // Stack traces name the TypeScript sources when asked for (NODE_OPTIONS=--enable-source-maps does it for all).
  if (process.argv.includes('--verbose')) process.setSourceMapsEnabled(true);
  globalThis[Symbol.for('hangar.running-from')] = 'build';
  await import(compiled);
} else {
  globalThis[Symbol.for('hangar.running-from')] = 'sources';
  const { register } = await import('tsx/esm/api');
  register();
  // core/typescript.ts: the ES-module hook is in place; operator TypeScript needs only the CommonJS one.
  globalThis[Symbol.for('hangar.tsx-registered')] = true;
  await import('../cli/main.ts');
}
