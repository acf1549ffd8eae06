/**
 * The machine lab's image: built by lab/image.sh (debootstrap → chroot configuration →
 * `docker import`), tagged `hangar-lab:<first 12 hex digits of the recipe's sha256>`. The recipe
 * is lab/image.sh plus every file under lab/rootfs/, so an unchanged recipe reuses the image in
 * the local docker and any change to it builds a new one (older hangar-lab tags are removed).
 */
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { dirname, join, relative, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { docker, dockerOk, run } from './docker.js';

/** This folder: the recipe. */
export const LAB_DIR = dirname(fileURLToPath(import.meta.url));
export const IMAGE_REPOSITORY = 'hangar-lab';

/** The files the image is made from, relative to the recipe folder, sorted. */
export function recipeFiles(dir: string = LAB_DIR): string[] {
  const files = ['image.sh'];
  const walk = (folder: string): void => {
    for (const entry of readdirSync(folder, { withFileTypes: true })) {
      const path = join(folder, entry.name);
      if (entry.isDirectory()) walk(path);
      else if (entry.isFile()) files.push(relative(dir, path).split(sep).join('/'));
    }
  };
  if (existsSync(join(dir, 'rootfs'))) walk(join(dir, 'rootfs'));
  return files.sort();
}

/**
 * sha256 over the recipe files' paths and contents; 12 hex digits. (Not their modes: image.sh
 * installs every file with an explicit mode.)
 */
export function recipeHash(dir: string = LAB_DIR): string {
  const hash = createHash('sha256');
  for (const file of recipeFiles(dir)) {
    hash.update(`${file}\0`);
    hash.update(readFileSync(join(dir, file)));
    hash.update('\0');
  }
  return hash.digest('hex').slice(0, 12);
}

/** The tag of the image the current recipe makes. */
export function imageTag(dir: string = LAB_DIR): string {
  return `${IMAGE_REPOSITORY}:${recipeHash(dir)}`;
}

export async function imageExists(tag: string): Promise<boolean> {
  return (await docker(['image', 'inspect', '--format', '{{.Id}}', tag])).code === 0;
}

export interface EnsureImageOptions {
  /** Progress lines (default: console.log). */
  log?: (line: string) => void;
  /** Build even when the tag exists. */
  force?: boolean;
}

export interface EnsureImageResult {
  tag: string;
  /** False when the cached image was used. */
  built: boolean;
  seconds: number;
}

export class LabImageError extends Error {
  constructor(
    message: string,
    readonly output: string,
  ) {
    super(message);
    this.name = 'LabImageError';
  }
}

/** Whether this machine can build the image (root and debootstrap), or the image is there already. */
export async function imageObtainable(): Promise<{ ok: boolean; why?: string }> {
  if (await imageExists(imageTag())) return { ok: true };
  if (process.getuid?.() !== 0) return { ok: false, why: 'root, to build the lab image with debootstrap (run as root once; the image is cached)' };
  const debootstrap = await run('sh', ['-c', 'command -v debootstrap || test -x /usr/sbin/debootstrap']);
  if (debootstrap.code !== 0) return { ok: false, why: 'debootstrap, to build the lab image (apt-get install -y debootstrap)' };
  return { ok: true };
}

const building = new Map<string, Promise<EnsureImageResult>>();

/**
 * Returns the tag of the lab image for the current recipe, building it first when docker does
 * not have it (one build per tag at a time, in this process and — through lab/image.sh's lock —
 * on this machine). A failed build throws a LabImageError naming the step that failed.
 */
export function ensureLabImage(options: EnsureImageOptions = {}): Promise<EnsureImageResult> {
  const tag = imageTag();
  const existing = building.get(tag);
  if (existing && !options.force) return existing;
  const promise = buildIfMissing(tag, options).finally(() => building.delete(tag));
  building.set(tag, promise);
  return promise;
}

async function buildIfMissing(tag: string, options: EnsureImageOptions): Promise<EnsureImageResult> {
  const log = options.log ?? ((line: string) => console.log(line));
  const started = Date.now();
  if (!options.force && (await imageExists(tag))) {
    return { tag, built: false, seconds: (Date.now() - started) / 1000 };
  }
  if (options.force && (await imageExists(tag))) {
    const removed = await docker(['image', 'rm', tag]);
    if (removed.code !== 0) throw new LabImageError(`cannot rebuild ${tag}: ${removed.stderr.trim()} (remove the lab machines first)`, removed.stderr);
  }
  log(`[lab image] ${tag} is not in the local docker: building it (about a minute or two; the recipe is ${LAB_DIR})`);
  const lines: string[] = [];
  const result = await run('bash', [join(LAB_DIR, 'image.sh'), tag], {
    onLine: (line) => {
      lines.push(line);
      log(line);
    },
    env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' },
  });
  if (result.code !== 0) {
    const failed = lines.find((l) => l.includes('FAILED at step')) ?? `lab/image.sh exited with code ${result.code}`;
    throw new LabImageError(`lab image build failed: ${failed.replace(/^\[lab image\] /, '')}${result.stderr ? `\n${result.stderr.trim()}` : ''}`, lines.join('\n'));
  }
  if (!(await imageExists(tag))) throw new LabImageError(`lab image build finished but docker has no ${tag}`, lines.join('\n'));
  await removeOtherLabImages(tag, log);
  const seconds = (Date.now() - started) / 1000;
  log(`[lab image] ${tag} ready in ${seconds.toFixed(1)} s`);
  return { tag, built: true, seconds };
}

/** Where lab/image.sh keeps the .deb cache and the build logs. */
export const BUILD_CACHE = process.env.HANGAR_LAB_CACHE ?? '/var/cache/hangar-lab';

/** Removes hangar-lab images of earlier recipes (those still used by a container stay) and their build logs. */
async function removeOtherLabImages(keep: string, log: (line: string) => void): Promise<void> {
  const keepLog = `build-${keep.replace(/[:/]/g, '-')}.log`;
  if (existsSync(BUILD_CACHE)) {
    for (const file of readdirSync(BUILD_CACHE)) {
      if (/^build-.*\.log$/.test(file) && file !== keepLog) rmSync(join(BUILD_CACHE, file), { force: true });
    }
  }
  const listed = await dockerOk(['image', 'ls', IMAGE_REPOSITORY, '--format', '{{.Repository}}:{{.Tag}}']);
  for (const tag of listed.split('\n').map((l) => l.trim())) {
    if (!tag || tag === keep || tag.endsWith(':<none>')) continue;
    const removed = await docker(['image', 'rm', tag]);
    if (removed.code === 0) log(`[lab image] removed the image of an earlier recipe: ${tag}`);
  }
}
