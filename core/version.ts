import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

export interface VersionInfo {
  version: string;
  api_version: 'v1';
  commit?: string;
  build_date?: string;
}

function read(): VersionInfo {
  const pkg = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')) as { version: string };
  const info: VersionInfo = { version: pkg.version, api_version: 'v1' };
  // Written by `npm run build`; absent when running from a source checkout.
  const buildFile = path.join(root, 'dist', 'build-info.json');
  if (existsSync(buildFile)) {
    const build = JSON.parse(readFileSync(buildFile, 'utf8')) as { commit?: string; build_date?: string };
    if (build.commit) info.commit = build.commit;
    if (build.build_date) info.build_date = build.build_date;
  }
  return info;
}

export const versionInfo: VersionInfo = read();
