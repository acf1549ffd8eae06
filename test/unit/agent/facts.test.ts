import { expect } from 'chai';
import { mkdirSync, mkdtempSync, rmSync, statfsSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { mountedDisks } from '../../../agent/facts.js';

describe('agent facts: disk use per mount (the node_disk alert rule)', () => {
  let dir: string;
  before(() => {
    dir = mkdtempSync(path.join(os.tmpdir(), 'hangar-mounts-'));
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  const mounts = (text: string) => {
    const file = path.join(dir, 'mounts');
    writeFileSync(file, text);
    return mountedDisks(file);
  };

  it('reports each real filesystem once, the root even when it is an overlay, without virtual ones, unescaping mount points', () => {
    const spaced = path.join(dir, 'a dir');
    mkdirSync(spaced);
    const disks = mounts(
      [
        'overlay / overlay rw,relatime 0 0',
        'proc /proc proc rw 0 0',
        'tmpfs /run tmpfs rw 0 0',
        `/dev/sdz1 ${spaced.replace(/ /g, '\\040')} ext4 rw 0 0`,
        `/dev/sdz1 ${dir} ext4 rw 0 0`,
        '/dev/sdy1 /does/not/exist xfs rw 0 0',
        '',
      ].join('\n'),
    );
    expect(disks.map((d) => [d.mount, d.fs_type])).to.deep.equal([
      ['/', 'overlay'],
      [spaced, 'ext4'],
    ]);
    const s = statfsSync(spaced);
    expect(disks[1]).to.include({ total_bytes: s.blocks * s.bsize });
    expect(disks[1]!.free_bytes).to.be.within(0, disks[1]!.total_bytes);
  });

  it('reports nothing when the mount table cannot be read (the control plane then judges the root totals)', () => {
    expect(mountedDisks(path.join(dir, 'no-such-file'))).to.deep.equal([]);
  });
});
