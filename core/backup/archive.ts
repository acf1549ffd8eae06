import { createCipheriv, createDecipheriv, createHash, createHmac, hkdfSync, randomBytes, scrypt as scryptCallback, timingSafeEqual, type ScryptOptions } from 'node:crypto';
import { closeSync, createReadStream, createWriteStream, fsyncSync, openSync, mkdirSync, renameSync, rmSync, statSync, type WriteStream } from 'node:fs';
import path from 'node:path';
import { once } from 'node:events';

/**
 * The control plane's backup archive (docs/backups.md#the-control-plane): one file, encrypted
 * with a key derived from the operator's passphrase.
 *
 * ```
 * HANGAR-CONTROL-PLANE-BACKUP 2\n
 * {"kdf":"scrypt","n":…,"r":8,"p":1,"salt":…,"chunk_bytes":…,"check":…}\n     (plaintext header)
 * chunk*: [u32 BE length][AES-256-GCM ciphertext][16-byte tag]
 * ```
 *
 * Version 2 derives two subkeys from scrypt's output with HKDF-SHA256 (salt = the header's salt):
 * one for AES-GCM, one for the key check. Version 1 (the first archives of this release) used
 * scrypt's output for both; it is still read. The header is not authenticated before the key is
 * derived, so its KDF parameters are accepted only within fixed bounds (r=8, p=1, N a power of two
 * in [2^15, 2^20], a 16-byte salt).
 *
 * Chunk i is sealed with nonce = 4 zero bytes ‖ u64 BE i and additional data = the header line ‖
 * u64 BE i ‖ 1 if it is the last chunk else 0: a chunk changed, reordered, dropped or the end cut
 * off does not authenticate. `check` (an HMAC of a constant under the key) tells a wrong passphrase
 * apart from a damaged archive. The plaintext is a list of entries, `[u32 name length][name]
 * [u64 size][bytes]`, the first being `manifest.json`, which lists every other entry with its
 * SHA-256.
 */
const MAGIC_PREFIX = 'HANGAR-CONTROL-PLANE-BACKUP ';
/** The first line of an archive this hangar writes. */
export const ARCHIVE_MAGIC = `${MAGIC_PREFIX}2\n`;
/** The versions read: 1 (one key for the check and the cipher), 2 (HKDF subkeys). */
const VERSIONS = new Set([1, 2]);
const CHUNK_BYTES = 1 << 20;
const SCRYPT = { n: 1 << 17, r: 8, p: 1 };
const SCRYPT_MIN_N = 1 << 15;
const SCRYPT_MAX_N = 1 << 20;
const SALT_BYTES = 16;
/** The shortest passphrase accepted. */
export const MIN_PASSPHRASE_LENGTH = 12;
const MANIFEST = 'manifest.json';

/** A problem with an archive or a passphrase that the operator must fix: the CLI prints its message and exits 1. */
export class ArchiveError extends Error {}

interface Header {
  kdf: 'scrypt';
  n: number;
  r: number;
  p: number;
  salt: string;
  chunk_bytes: number;
  check: string;
}

/** One file of the archive: its bytes in memory or a file to read. */
export interface ArchiveEntry {
  name: string;
  data?: Buffer;
  file?: string;
  size: number;
  sha256: string;
  /** The file's permission bits, restored with it. */
  mode?: number;
}

function scrypt(passphrase: string, salt: Buffer, h: { n: number; r: number; p: number }): Promise<Buffer> {
  const options: ScryptOptions = { N: h.n, r: h.r, p: h.p, maxmem: 256 * h.n * h.r + (1 << 20) };
  return new Promise((resolve, reject) => scryptCallback(passphrase.normalize('NFC'), salt, 32, options, (err, key) => (err ? reject(err) : resolve(key))));
}

function keyCheck(key: Buffer): string {
  return createHmac('sha256', key).update('hangar-control-plane-backup key check').digest('base64');
}

/** The cipher key and the key-check key of a version from scrypt's output. */
function subkeys(master: Buffer, salt: Buffer, version: number): { cipher: Buffer; check: Buffer } {
  if (version === 1) return { cipher: master, check: master };
  const derive = (info: string) => Buffer.from(hkdfSync('sha256', master, salt, info, 32));
  return { cipher: derive('hangar-control-plane-backup v2 aes-256-gcm'), check: derive('hangar-control-plane-backup v2 key check') };
}

/** Whether an archive entry's name is a plain relative POSIX path: no empty, `.` or `..` segment, no leading `/`, backslash or NUL. */
export function isPlainEntryName(name: unknown): name is string {
  if (typeof name !== 'string' || !name || name.startsWith('/') || name.includes('\\') || name.includes('\0')) return false;
  return name.split('/').every((segment) => segment !== '' && segment !== '.' && segment !== '..');
}

/** The header's KDF parameters, within the bounds this hangar accepts (the header is read before anything authenticates it). */
function headerIsSane(header: unknown): header is Header {
  if (typeof header !== 'object' || header === null) return false;
  const h = header as Partial<Header>;
  const powerOfTwo = typeof h.n === 'number' && Number.isInteger(h.n) && (h.n & (h.n - 1)) === 0;
  const salt = typeof h.salt === 'string' && /^[A-Za-z0-9+/]+={0,2}$/.test(h.salt) ? Buffer.from(h.salt, 'base64') : null;
  return (
    h.kdf === 'scrypt' &&
    powerOfTwo &&
    h.n! >= SCRYPT_MIN_N &&
    h.n! <= SCRYPT_MAX_N &&
    h.r === 8 &&
    h.p === 1 &&
    salt?.length === SALT_BYTES &&
    typeof h.check === 'string' &&
    Number.isInteger(h.chunk_bytes) &&
    h.chunk_bytes! > 0 &&
    h.chunk_bytes! <= 1 << 26
  );
}

function nonce(index: number): Buffer {
  const n = Buffer.alloc(12);
  n.writeBigUInt64BE(BigInt(index), 4);
  return n;
}

function aad(headerLine: Buffer, index: number, last: boolean): Buffer {
  const tail = Buffer.alloc(9);
  tail.writeBigUInt64BE(BigInt(index), 0);
  tail[8] = last ? 1 : 0;
  return Buffer.concat([headerLine, tail]);
}

/** Checks a passphrase's length; answers it. */
export function checkPassphrase(passphrase: string): string {
  if (passphrase.length < MIN_PASSPHRASE_LENGTH) {
    throw new ArchiveError(`the passphrase is too short: give at least ${MIN_PASSPHRASE_LENGTH} characters (e.g. \`openssl rand -base64 24\`)`);
  }
  return passphrase;
}

/** An entry from bytes in memory. */
export function entryFromBytes(name: string, data: Buffer): ArchiveEntry {
  return { name, data, size: data.length, sha256: createHash('sha256').update(data).digest('hex') };
}

/** An entry from a file, hashed now. */
export async function entryFromFile(name: string, file: string): Promise<ArchiveEntry> {
  const hash = createHash('sha256');
  let size = 0;
  for await (const chunk of createReadStream(file)) {
    hash.update(chunk as Buffer);
    size += (chunk as Buffer).length;
  }
  return { name, file, size, sha256: hash.digest('hex') };
}

function entryHead(name: string, size: number): Buffer {
  const nameBytes = Buffer.from(name, 'utf8');
  const head = Buffer.alloc(4 + nameBytes.length + 8);
  head.writeUInt32BE(nameBytes.length, 0);
  nameBytes.copy(head, 4);
  head.writeBigUInt64BE(BigInt(size), 4 + nameBytes.length);
  return head;
}

async function* plaintext(manifest: object, entries: ArchiveEntry[]): AsyncGenerator<Buffer> {
  const manifestBytes = Buffer.from(JSON.stringify(manifest, null, 2));
  yield entryHead(MANIFEST, manifestBytes.length);
  yield manifestBytes;
  for (const entry of entries) {
    yield entryHead(entry.name, entry.size);
    if (entry.data) {
      yield entry.data;
      continue;
    }
    // A file is hashed again as it is read: one that changed since its entry was made fails the archive.
    const hash = createHash('sha256');
    let size = 0;
    for await (const chunk of createReadStream(entry.file!)) {
      const piece = (chunk as Buffer).subarray(0, Math.max(0, entry.size - size));
      hash.update(chunk as Buffer);
      size += (chunk as Buffer).length;
      if (piece.length) yield piece;
    }
    if (size !== entry.size || hash.digest('hex') !== entry.sha256) {
      throw new ArchiveError(`${entry.file} changed while the backup was being written (${entry.name}): run hangar backup create again`);
    }
  }
}

async function write(out: WriteStream, data: Buffer): Promise<void> {
  if (!out.write(data)) await once(out, 'drain');
}

/**
 * Writes the archive: `manifest` (to which the entries' names, sizes and checksums are added as
 * `files`) and the entries, encrypted under the passphrase. It is written to `<file>.partial`
 * (created exclusively, mode 0600), synced, then renamed to `file`; on an error nothing is left.
 */
export async function writeArchive(file: string, passphrase: string, manifest: Record<string, unknown>, entries: ArchiveEntry[]): Promise<void> {
  const salt = randomBytes(SALT_BYTES);
  const keys = subkeys(await scrypt(checkPassphrase(passphrase), salt, SCRYPT), salt, 2);
  const header: Header = { kdf: 'scrypt', ...SCRYPT, salt: salt.toString('base64'), chunk_bytes: CHUNK_BYTES, check: keyCheck(keys.check) };
  const headerLine = Buffer.from(`${JSON.stringify(header)}\n`);
  const partial = `${file}.partial`;
  let out: WriteStream;
  try {
    out = createWriteStream(partial, { flags: 'wx', mode: 0o600 });
    await once(out, 'open');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    throw new ArchiveError(code === 'EEXIST' ? `${partial} exists (left by a backup that did not finish?): remove it and run again` : `cannot write ${partial}: ${code ?? (err as Error).message}`);
  }
  const closed = once(out, 'close');
  let done = false;
  try {
    await write(out, Buffer.from(ARCHIVE_MAGIC));
    await write(out, headerLine);
    let index = 0;
    let pending: Buffer = Buffer.alloc(0);
    const seal = async (data: Buffer, last: boolean) => {
      const cipher = createCipheriv('aes-256-gcm', keys.cipher, nonce(index));
      cipher.setAAD(aad(headerLine, index, last));
      const body = Buffer.concat([cipher.update(data), cipher.final(), cipher.getAuthTag()]);
      const length = Buffer.alloc(4);
      length.writeUInt32BE(body.length);
      await write(out, length);
      await write(out, body);
      index++;
    };
    const files = entries.map((e) => ({ name: e.name, size: e.size, sha256: e.sha256, ...(e.mode === undefined ? {} : { mode: e.mode }) }));
    for await (const piece of plaintext({ ...manifest, files }, entries)) {
      pending = pending.length ? Buffer.concat([pending, piece]) : piece;
      while (pending.length > CHUNK_BYTES) {
        await seal(pending.subarray(0, CHUNK_BYTES), false);
        pending = pending.subarray(CHUNK_BYTES);
      }
    }
    await seal(pending, true);
    out.end();
    await closed;
    const fd = openSync(partial, 'r');
    try {
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    renameSync(partial, file);
    done = true;
  } finally {
    if (!done) {
      out.destroy();
      await closed.catch(() => undefined);
      rmSync(partial, { force: true });
    }
  }
}

/** Reads a file as a stream of byte counts asked for. */
class Reader {
  private buffered = Buffer.alloc(0);
  private readonly iterator: AsyncIterator<Buffer>;
  private done = false;

  constructor(source: AsyncIterable<Buffer>) {
    this.iterator = source[Symbol.asyncIterator]();
  }

  /** Exactly `n` bytes, or fewer at the end of the input. */
  async take(n: number): Promise<Buffer> {
    while (this.buffered.length < n && !this.done) {
      const next = await this.iterator.next();
      if (next.done) this.done = true;
      else this.buffered = Buffer.concat([this.buffered, next.value]);
    }
    const out = this.buffered.subarray(0, n);
    this.buffered = this.buffered.subarray(out.length);
    return out;
  }

  async line(max: number): Promise<Buffer> {
    const parts: Buffer[] = [];
    for (let i = 0; i < max; i++) {
      const b = await this.take(1);
      if (!b.length) break;
      parts.push(b);
      if (b[0] === 0x0a) break;
    }
    return Buffer.concat(parts);
  }

  async atEnd(): Promise<boolean> {
    return (await this.take(1)).length === 0;
  }
}

async function* decrypted(file: string, passphrase: string): AsyncGenerator<Buffer> {
  try {
    if (!statSync(file).isFile()) throw new ArchiveError(`${file} is not a file`);
  } catch (err) {
    if (err instanceof ArchiveError) throw err;
    throw new ArchiveError(`cannot read ${file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
  const reader = new Reader(createReadStream(file) as AsyncIterable<Buffer>);
  const magic = (await reader.line(MAGIC_PREFIX.length + 8)).toString('latin1');
  const version = magic.startsWith(MAGIC_PREFIX) && magic.endsWith('\n') ? Number(magic.slice(MAGIC_PREFIX.length, -1)) : NaN;
  if (!magic.startsWith(MAGIC_PREFIX)) throw new ArchiveError(`${file} is not a hangar control-plane backup (it does not start with "${MAGIC_PREFIX.trim()}")`);
  if (!VERSIONS.has(version)) throw new ArchiveError(`${file} is in an archive format this hangar does not read (${JSON.stringify(magic.trim())}): restore it with a newer hangar`);
  const headerLine = await reader.line(4096);
  let header: unknown;
  try {
    header = JSON.parse(headerLine.toString('utf8'));
  } catch {
    throw new ArchiveError(`${file} is damaged: its header is not readable`);
  }
  if (!headerIsSane(header)) {
    throw new ArchiveError(`${file} is damaged: its header names key-derivation parameters this hangar does not use`);
  }
  const salt = Buffer.from(header.salt, 'base64');
  const keys = subkeys(await scrypt(passphrase, salt, header), salt, version);
  const check = Buffer.from(header.check, 'base64');
  const expected = Buffer.from(keyCheck(keys.check), 'base64');
  if (check.length !== expected.length || !timingSafeEqual(check, expected)) {
    throw new ArchiveError(`the passphrase does not open ${file} (wrong passphrase, or the archive's header is damaged)`);
  }
  for (let index = 0; ; index++) {
    const length = await reader.take(4);
    if (length.length < 4) throw new ArchiveError(`${file} is truncated: it ends before its last part (after ${index} parts)`);
    const size = length.readUInt32BE(0);
    if (size < 16 || size > header.chunk_bytes + 16) throw new ArchiveError(`${file} is damaged: part ${index + 1} has an impossible length`);
    const body = await reader.take(size);
    if (body.length < size) throw new ArchiveError(`${file} is truncated: part ${index + 1} is cut short`);
    const last = await reader.atEnd();
    const decipher = createDecipheriv('aes-256-gcm', keys.cipher, nonce(index));
    decipher.setAAD(aad(headerLine, index, last));
    decipher.setAuthTag(body.subarray(size - 16));
    let plain: Buffer;
    try {
      plain = Buffer.concat([decipher.update(body.subarray(0, size - 16)), decipher.final()]);
    } catch {
      throw new ArchiveError(
        last
          ? `${file} is damaged or truncated: part ${index + 1}, its last, does not authenticate (the file was changed or cut short)`
          : `${file} is damaged: part ${index + 1} does not authenticate (the file was changed)`,
      );
    }
    yield plain;
    if (last) return;
  }
}

/**
 * Whether the passphrase opens an archive and every part of it authenticates (nothing is written):
 * throws the ArchiveError saying why not.
 */
export async function checkArchive(file: string, passphrase: string): Promise<void> {
  for await (const part of decrypted(file, passphrase)) void part;
}

/** What an archive's manifest says about itself (plus `files`, checked on extraction). */
export interface ArchiveFile {
  name: string;
  size: number;
  sha256: string;
  mode?: number;
}

/**
 * Decrypts an archive into `dir`: each entry becomes a file there (its name a relative path),
 * checked against the manifest's size and SHA-256. Answers the manifest. Throws ArchiveError for a
 * wrong passphrase, a damaged or truncated archive, or an entry that does not match the manifest.
 */
export async function extractArchive(file: string, passphrase: string, dir: string): Promise<Record<string, unknown> & { files: ArchiveFile[] }> {
  const reader = new Reader(decrypted(file, passphrase));
  let manifest: (Record<string, unknown> & { files: ArchiveFile[] }) | null = null;
  const seen = new Set<string>();
  for (;;) {
    const nameLength = await reader.take(4);
    if (!nameLength.length) break;
    if (nameLength.length < 4) throw new ArchiveError(`${file} is damaged: an entry is cut short`);
    const length = nameLength.readUInt32BE(0);
    if (length > 4096) throw new ArchiveError(`${file} is damaged: an entry's name is ${length} bytes long`);
    const name = (await reader.take(length)).toString('utf8');
    const sizeBytes = await reader.take(8);
    if (sizeBytes.length < 8) throw new ArchiveError(`${file} is damaged: an entry is cut short`);
    const size = Number(sizeBytes.readBigUInt64BE(0));
    if (!manifest) {
      if (name !== MANIFEST) throw new ArchiveError(`${file} is damaged: it does not begin with its manifest`);
      try {
        manifest = JSON.parse((await reader.take(size)).toString('utf8')) as Record<string, unknown> & { files: ArchiveFile[] };
      } catch {
        throw new ArchiveError(`${file} is damaged: its manifest is not readable`);
      }
      if (typeof manifest !== 'object' || manifest === null || !Array.isArray(manifest.files)) throw new ArchiveError(`${file} is damaged: its manifest lists no files`);
      const unsafe = manifest.files.find((f) => !isPlainEntryName(f?.name));
      if (unsafe) throw new ArchiveError(`${file} is refused: it names an entry ${JSON.stringify(unsafe?.name)}, which is not a plain relative path (no "..", ".", empty segment, leading "/", backslash or NUL); nothing was restored`);
      continue;
    }
    if (!isPlainEntryName(name)) throw new ArchiveError(`${file} is refused: it holds an entry ${JSON.stringify(name)}, which is not a plain relative path (no "..", ".", empty segment, leading "/", backslash or NUL); nothing was restored`);
    const listed = manifest.files.find((f) => f.name === name);
    const target = path.resolve(dir, name);
    if (!listed || seen.has(name) || !target.startsWith(path.resolve(dir) + path.sep)) throw new ArchiveError(`${file} is damaged: it holds "${name}", which its manifest does not list`);
    seen.add(name);
    mkdirSync(path.dirname(target), { recursive: true, mode: 0o700 });
    const out = createWriteStream(target, { flags: 'wx', mode: 0o600 });
    const closed = once(out, 'close');
    const hash = createHash('sha256');
    let left = size;
    try {
      while (left > 0) {
        const piece = await reader.take(Math.min(left, CHUNK_BYTES));
        if (!piece.length) throw new ArchiveError(`${file} is damaged: "${name}" is cut short`);
        hash.update(piece);
        await write(out, piece);
        left -= piece.length;
      }
    } finally {
      out.end();
      await closed;
    }
    if (size !== listed.size || hash.digest('hex') !== listed.sha256) throw new ArchiveError(`${file} is damaged: "${name}" does not match the checksum its manifest records`);
  }
  if (!manifest) throw new ArchiveError(`${file} is damaged: it holds no manifest`);
  const missing = manifest.files.filter((f) => !seen.has(f.name));
  if (missing.length) throw new ArchiveError(`${file} is damaged: ${missing.map((f) => `"${f.name}"`).join(', ')} listed in its manifest ${missing.length === 1 ? 'is' : 'are'} missing`);
  return manifest;
}
