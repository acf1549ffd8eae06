import { expect } from 'chai';
import { mkdirSync, mkdtempSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
// @ts-expect-error bin/compiled.mjs is plain JavaScript without declarations
import { fingerprint, staleness } from '../../../bin/compiled.mjs';

describe('the production build is used only while current (bin/compiled.mjs)', () => {
  let root: string;
  const manifest = (inputs: Record<string, unknown>, node = process.versions.node.split('.')[0]) =>
    writeFileSync(path.join(root, 'dist', 'hangar', 'build.json'), JSON.stringify({ node, inputs }));

  beforeEach(() => {
    root = mkdtempSync(path.join(os.tmpdir(), 'hangar-compiled-'));
    mkdirSync(path.join(root, 'dist', 'hangar'), { recursive: true });
    mkdirSync(path.join(root, 'core'));
    writeFileSync(path.join(root, 'core', 'a.ts'), 'export const a = 1;\n');
  });
  afterEach(() => rmSync(root, { recursive: true, force: true }));

  it('is current when every source it was built from is unchanged', () => {
    manifest(fingerprint(['core/a.ts'], root));
    expect(staleness(root)).to.equal(null);
  });

  it('is stale when a source changed, is gone, when built for another Node, or when never built', () => {
    manifest(fingerprint(['core/a.ts'], root));
    const later = new Date(Date.now() + 5000);
    utimesSync(path.join(root, 'core', 'a.ts'), later, later);
    expect(staleness(root)).to.equal('core/a.ts changed');
    rmSync(path.join(root, 'core', 'a.ts'));
    expect(staleness(root)).to.equal('core/a.ts is gone');
    manifest({}, '18');
    expect(staleness(root)).to.equal('built for Node 18');
    rmSync(path.join(root, 'dist'), { recursive: true });
    expect(staleness(root)).to.equal('not built');
  });
});
