import { expect } from 'chai';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { ArchiveError, entryFromBytes, entryFromFile, extractArchive, isPlainEntryName, writeArchive } from '../../../core/backup/archive.js';

const PASSPHRASE = 'unit-test-passphrase';
const V1_FIXTURE = path.join(path.dirname(fileURLToPath(import.meta.url)), '../../support/fixtures/control-plane-backup-v1.hcpb');

async function refusal(promise: Promise<unknown>): Promise<ArchiveError> {
  try {
    await promise;
  } catch (err) {
    expect(err).to.be.instanceOf(ArchiveError);
    return err as ArchiveError;
  }
  throw new Error('expected an ArchiveError');
}

/** The control plane's backup archive (core/backup/archive.ts): names, header bounds, formats, writing. */
describe('control-plane backup archive', function () {
  this.timeout(60_000);
  let work: string;

  beforeEach(() => {
    work = mkdtempSync(path.join(os.tmpdir(), 'hangar-archive-unit-'));
  });
  afterEach(() => rmSync(work, { recursive: true, force: true }));

  it('accepts only plain relative POSIX entry names', () => {
    for (const good of ['manifest.json', 'data/pki/ca.key', 'data/a..b', 'data/.hidden']) expect(isPlainEntryName(good), good).to.equal(true);
    for (const bad of ['', '.', '..', 'data/../evil', 'data/./x', 'data//x', 'data/', '/etc/passwd', 'data\\..\\evil', 'data/x\0y', '../evil']) {
      expect(isPlainEntryName(bad), JSON.stringify(bad)).to.equal(false);
    }
  });

  it('refuses an archive whose entry names climb out, and writes nothing outside the extraction dir', async () => {
    const dir = path.join(work, 'stage', 'inner');
    for (const name of ['data/../evil', 'data/../../escaped', '/tmp/absolute']) {
      const file = path.join(work, 'crafted.hcpb');
      rmSync(file, { force: true });
      await writeArchive(file, PASSPHRASE, { kind: 'test' }, [entryFromBytes(name, Buffer.from('owned'))]);
      const err = await refusal(extractArchive(file, PASSPHRASE, dir));
      expect(err.message).to.include('is refused').and.to.include(JSON.stringify(name)).and.to.include('not a plain relative path');
    }
    expect(existsSync(path.join(work, 'stage', 'evil'))).to.equal(false);
    expect(existsSync(path.join(work, 'escaped'))).to.equal(false);
    expect(existsSync(dir) ? readdirSync(dir) : []).to.deep.equal([]);
  });

  it('writes format 2 with N=2^17 and reads it back', async () => {
    const file = path.join(work, 'a.hcpb');
    await writeArchive(file, PASSPHRASE, { kind: 'test' }, [entryFromBytes('data/x', Buffer.from('x-bytes'))]);
    const [magic, header] = readFileSync(file).toString('latin1').split('\n');
    expect(magic).to.equal('HANGAR-CONTROL-PLANE-BACKUP 2');
    expect(JSON.parse(header!)).to.include({ kdf: 'scrypt', n: 1 << 17, r: 8, p: 1 });
    const manifest = await extractArchive(file, PASSPHRASE, path.join(work, 'out'));
    expect(manifest.kind).to.equal('test');
    expect(readFileSync(path.join(work, 'out', 'data/x'), 'utf8')).to.equal('x-bytes');
  });

  it('still reads a format-1 archive (written by the first control-plane backups)', async () => {
    const manifest = await extractArchive(V1_FIXTURE, 'v1-fixture-passphrase', path.join(work, 'out'));
    expect(manifest.kind).to.equal('fixture');
    expect(readFileSync(path.join(work, 'out', 'data/hello.txt'), 'utf8')).to.equal('hello from a v1 archive\n');
    const err = await refusal(extractArchive(V1_FIXTURE, 'not-the-v1-passphrase', path.join(work, 'out2')));
    expect(err.message).to.include('the passphrase does not open');
  });

  it('refuses key-derivation parameters out of bounds in the (unauthenticated) header as a damaged archive', async () => {
    const file = path.join(work, 'a.hcpb');
    await writeArchive(file, PASSPHRASE, { kind: 'test' }, [entryFromBytes('data/x', Buffer.from('x'))]);
    const text = readFileSync(file);
    const firstNewline = text.indexOf(0x0a);
    const secondNewline = text.indexOf(0x0a, firstNewline + 1);
    const header = JSON.parse(text.subarray(firstNewline + 1, secondNewline).toString()) as Record<string, unknown>;
    const variants: Array<[string, unknown]> = [
      ['N too large', { ...header, n: 1 << 21 }],
      ['N too small', { ...header, n: 1 << 14 }],
      ['N not a power of two', { ...header, n: 3 << 15 }],
      ['r', { ...header, r: 16 }],
      ['p', { ...header, p: 2 }],
      ['short salt', { ...header, salt: Buffer.alloc(8).toString('base64') }],
      ['salt not base64', { ...header, salt: '!!!!' }],
      ['no check', { ...header, check: undefined }],
      ['not an object', null],
      ['a number', 7],
    ];
    for (const [what, h] of variants) {
      const bad = path.join(work, 'bad.hcpb');
      writeFileSync(bad, Buffer.concat([text.subarray(0, firstNewline + 1), Buffer.from(JSON.stringify(h)), text.subarray(secondNewline)]));
      const err = await refusal(extractArchive(bad, PASSPHRASE, path.join(work, 'out')));
      expect(err.message, what).to.include('is damaged: its header');
    }
  });

  it('fails, leaving no file under the final name, when a file changes between hashing and writing', async () => {
    const source = path.join(work, 'source');
    writeFileSync(source, 'before');
    const entry = await entryFromFile('data/source', source);
    writeFileSync(source, 'after!');
    const file = path.join(work, 'a.hcpb');
    const err = await refusal(writeArchive(file, PASSPHRASE, { kind: 'test' }, [entry]));
    expect(err.message).to.include('changed while the backup was being written');
    expect(existsSync(file)).to.equal(false);
    expect(existsSync(`${file}.partial`)).to.equal(false);
  });

  it('refuses to write over a .partial file another run left', async () => {
    const file = path.join(work, 'a.hcpb');
    writeFileSync(`${file}.partial`, 'left over');
    const err = await refusal(writeArchive(file, PASSPHRASE, { kind: 'test' }, []));
    expect(err.message).to.include(`${file}.partial exists`);
    expect(readFileSync(`${file}.partial`, 'utf8')).to.equal('left over');
    expect(existsSync(file)).to.equal(false);
  });
});
