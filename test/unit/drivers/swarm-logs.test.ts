import { expect } from 'chai';
import { demux, mergeLines, parseLines, sinceSeconds } from '../../../drivers/swarm/logs.js';

const frame = (stream: number, text: string) => {
  const payload = Buffer.from(text, 'utf8');
  const header = Buffer.alloc(8);
  header[0] = stream;
  header.writeUInt32BE(payload.length, 4);
  return Buffer.concat([header, payload]);
};

describe('drivers/swarm: service log decoding', () => {
  it('demultiplexes 8-byte-header frames of stdout and stderr, and passes a TTY’s raw stream through', () => {
    const muxed = Buffer.concat([frame(1, '2024-01-01T00:00:00.1Z out\n'), frame(2, '2024-01-01T00:00:00.2Z err\n'), frame(1, '2024-01-01T00:00:00.3Z ünï\n')]);
    expect(demux(muxed)).to.equal('2024-01-01T00:00:00.1Z out\n2024-01-01T00:00:00.2Z err\n2024-01-01T00:00:00.3Z ünï\n');
    expect(demux(Buffer.from('2024-01-01T00:00:00Z raw\n'))).to.equal('2024-01-01T00:00:00Z raw\n');
    expect(demux(Buffer.alloc(0))).to.equal('');
  });

  it('merges sources in time order (nanosecond timestamps without trailing zeros) and keeps the last n', () => {
    const a = parseLines('2024-01-01T00:00:00.12Z a1\n2024-01-01T00:00:00.3Z a2\n');
    const b = parseLines('2024-01-01T00:00:00.1Z b1\n2024-01-01T00:00:00.25Z b2\n');
    expect(mergeLines([{ prefix: 'a | ', lines: a }, { prefix: 'b | ', lines: b }], 10)).to.deep.equal([
      'b | 2024-01-01T00:00:00.1Z b1',
      'a | 2024-01-01T00:00:00.12Z a1',
      'b | 2024-01-01T00:00:00.25Z b2',
      'a | 2024-01-01T00:00:00.3Z a2',
    ]);
    expect(mergeLines([{ prefix: '', lines: a }, { prefix: '', lines: b }], 2)).to.deep.equal(['2024-01-01T00:00:00.25Z b2', '2024-01-01T00:00:00.3Z a2']);
    expect(mergeLines([{ prefix: '', lines: a }], 0)).to.deep.equal([]);
  });

  it('since: RFC 3339 to unix seconds; anything else is refused', () => {
    expect(sinceSeconds('2024-05-01T12:00:00Z')).to.equal(1714564800);
    expect(sinceSeconds('2024-05-01T14:00:00.9+02:00')).to.equal(1714564800);
    expect(sinceSeconds(undefined)).to.equal(undefined);
    expect(() => sinceSeconds('yesterday')).to.throw(/RFC 3339/);
  });
});
