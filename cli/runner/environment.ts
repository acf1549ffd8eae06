import { statSync } from 'node:fs';
import path from 'node:path';
import { usageError } from './errors.js';

/** `--env` pairs: set before the configuration is read, so HANGAR_* variables given this way count. */
export function applyEnv(env: Record<string, string>): void {
  for (const [key, value] of Object.entries(env)) process.env[key] = value;
}

/** `--rootdir`: must be a directory; becomes the working directory (relative paths resolve against it). */
export function resolveRootdir(dir: string): string {
  const absolute = path.resolve(dir);
  let isDir: boolean;
  try {
    isDir = statSync(absolute).isDirectory();
  } catch {
    isDir = false;
  }
  if (!isDir) throw usageError(`--rootdir ${dir} is not a directory`);
  return absolute;
}

export function enterRootdir(dir: string): string {
  const absolute = resolveRootdir(dir);
  process.chdir(absolute);
  return absolute;
}
