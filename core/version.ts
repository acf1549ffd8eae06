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

/**
 * Orders two versions `major.minor.patch[-pre]`: negative when `a` is older, 0 when equal, positive
 * when newer. A pre-release is older than its release (0.2.0-rc1 < 0.2.0); missing parts count as 0.
 */
export function compareVersions(a: string, b: string): number {
  const split = (v: string) => {
    const [core = '', pre = ''] = v.trim().replace(/^v/, '').split('-', 2);
    return { parts: core.split('.').map((p) => Number.parseInt(p, 10) || 0), pre };
  };
  const x = split(a);
  const y = split(b);
  for (let i = 0; i < Math.max(x.parts.length, y.parts.length, 3); i++) {
    const d = (x.parts[i] ?? 0) - (y.parts[i] ?? 0);
    if (d) return d;
  }
  if (x.pre === y.pre) return 0;
  if (!x.pre) return 1;
  if (!y.pre) return -1;
  return x.pre < y.pre ? -1 : 1;
}
