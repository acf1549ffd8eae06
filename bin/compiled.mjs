// The production build of the hangar command (dist/hangar, made by `npm run build:server`) and
// whether it is current: it records the size and modification time of every source file it was
// compiled from, and is used only while all of them are unchanged. Shared by bin/hangar.mjs and
// scripts/build.mjs; plain JavaScript, so that it runs before any TypeScript loader.
import { readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
export const COMPILED_DIR = path.join(ROOT, 'dist', 'hangar');
export const MANIFEST = path.join(COMPILED_DIR, 'build.json');
export const ENTRY = path.join(COMPILED_DIR, 'cli.js');

/** `{ "core/app.ts": [mtimeMs, size], … }` for the given files (relative to the root). */
export function fingerprint(files, root = ROOT) {
  const out = {};
  for (const file of files) {
    const st = statSync(path.join(root, file));
    out[file] = [st.mtimeMs, st.size];
  }
  return out;
}

/** Why the build cannot be used (a short reason), or null when it is current. */
export function staleness(root = ROOT) {
  let manifest;
  try {
    manifest = JSON.parse(readFileSync(path.join(root, 'dist', 'hangar', 'build.json'), 'utf8'));
  } catch {
    return 'not built';
  }
  if (manifest.node !== process.versions.node.split('.')[0]) return `built for Node ${manifest.node}`;
  for (const [file, [mtimeMs, size]] of Object.entries(manifest.inputs ?? {})) {
    let st;
    try {
      st = statSync(path.join(root, file));
    } catch {
      return `${file} is gone`;
    }
    if (st.mtimeMs !== mtimeMs || st.size !== size) return `${file} changed`;
  }
  return null;
}

/** The compiled entry point's URL when the build is current and HANGAR_FROM_SOURCES is not set. */
export function compiledEntry() {
  if (process.env.HANGAR_FROM_SOURCES) return null;
  return staleness() === null ? pathToFileURL(ENTRY).href : null;
}
