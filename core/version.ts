import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { installRoot } from './paths.js';

export interface VersionInfo {
  version: string;
  api_version: 'v1';
  commit?: string;
  build_date?: string;
}

function read(): VersionInfo {
  // The agent executable carries its version inline (scripts/build.mjs defines it); it has no files.
  const embedded = process.env.HANGAR_EMBEDDED_VERSION_INFO;
  if (embedded) return JSON.parse(embedded) as VersionInfo;
  const root = installRoot();
  const pkg = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')) as { version: string };
  const info: VersionInfo = { version: pkg.version, api_version: 'v1' };
  // Written by `npm run build`; absent when running from a source checkout that was not built.
  const buildFile = path.join(root, 'dist', 'build-info.json');
  if (existsSync(buildFile)) {
    const build = JSON.parse(readFileSync(buildFile, 'utf8')) as { commit?: string; build_date?: string };
    if (build.commit) info.commit = build.commit;
    if (build.build_date) info.build_date = build.build_date;
  }
  return info;
}

export const versionInfo: VersionInfo = read();
