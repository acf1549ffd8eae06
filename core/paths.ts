import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

let root: string | undefined;

/**
 * The installation's root directory (the one holding hangar's package.json, config/ and bin/),
 * found by walking up from this module. The same answer whether hangar runs from its TypeScript
 * sources (core/paths.ts) or from the production build (dist/hangar/chunk-….js).
 */
export function installRoot(): string {
  if (root) return root;
  const here = path.dirname(fileURLToPath(import.meta.url));
  for (let dir = here; ; dir = path.dirname(dir)) {
    const pkg = path.join(dir, 'package.json');
    if (existsSync(pkg) && (JSON.parse(readFileSync(pkg, 'utf8')) as { name?: string }).name === 'hangar') return (root = dir);
    if (path.dirname(dir) === dir) return (root = path.resolve(here, '..'));
  }
}

/** A path inside the installation, e.g. `fromRoot('config')`. */
export function fromRoot(...segments: string[]): string {
  return path.join(installRoot(), ...segments);
}
