import { expect } from 'chai';
import { parseCron } from '../../../core/cron.js';
import { archiveName, archiveTime, newestArchiveTime, nextArchiveDue, retryAfterFailures } from '../../../plugins/backups/control-plane.js';

describe('control-plane archives: names and the schedule (plugins/backups/control-plane.ts)', () => {
  it('names an archive by its UTC time to the millisecond, sortable, and reads the time back (older names without milliseconds too)', () => {
    const at = new Date('2026-11-28T03:00:00.250Z');
    expect(archiveName(at)).to.equal('hangar-control-plane-20261128T030000.250Z.hcpb');
    expect(archiveTime(`prod/hangar-control-plane/${archiveName(at)}`)?.toISOString()).to.equal(at.toISOString());
    expect(archiveTime('hangar-control-plane-20261127T235959Z.hcpb')?.toISOString()).to.equal('2026-11-27T23:59:59.000Z');
    expect(archiveTime('notes.txt')).to.equal(null);
    const names = ['2026-11-28T03:00:00.999Z', '2026-11-28T03:00:01.000Z', '2026-12-01T00:00:00.000Z'].map((t) => archiveName(new Date(t)));
    expect([...names].sort()).to.deep.equal(names);
  });

  it('is due at the first cron time after the newest archive, or after the control plane started when there is none', () => {
    const daily = parseCron('0 3 * * *');
    const started = new Date('2026-11-28T10:00:00Z');
    expect(nextArchiveDue(daily, null, started)?.toISOString()).to.equal('2026-11-29T03:00:00.000Z');
    // The newest archive was made before a day the control planes were all down: one run is due at once.
    expect(nextArchiveDue(daily, new Date('2026-11-26T03:00:00.400Z'), started)?.toISOString()).to.equal('2026-11-27T03:00:00.000Z');
    expect(nextArchiveDue(daily, new Date('2026-11-28T03:00:00.400Z'), started)?.toISOString()).to.equal('2026-11-29T03:00:00.000Z');
  });

  it('tries a failing schedule again after a back-off: the check interval after the first failure, doubling with each in a row, at most an hour', () => {
    const failures = (n: number) => ({ last_success_at: null, failures: Array.from({ length: n }, (_, i) => ({ failed_at: new Date(Date.UTC(2026, 10, 28, 3, i)), error: 'endpoint unreachable' })) });
    const wait = (n: number) => retryAfterFailures(failures(n), 30)!.getTime() - Date.UTC(2026, 10, 28, 3, n - 1);
    expect(retryAfterFailures(failures(0), 30), 'none failed since the last success').to.equal(null);
    expect([1, 2, 3, 4].map(wait)).to.deep.equal([30_000, 60_000, 120_000, 240_000]);
    expect(wait(8)).to.equal(3_600_000);
    expect(wait(40), 'a long outage').to.equal(3_600_000);
  });

  it('believes no archive named in the future (a clock ahead, or anyone with the bucket’s keys): the newest is the newest up to now', () => {
    const now = new Date('2026-11-28T10:00:00Z');
    const listed = (...times: string[]) => times.map((t) => ({ key: `p/hangar-control-plane/${archiveName(new Date(t))}`, size: 1, last_modified: t }));
    expect(newestArchiveTime(listed('2026-11-27T03:00:00Z', '2026-11-28T03:00:00Z', '9999-12-31T00:00:00Z'), now)?.toISOString()).to.equal('2026-11-28T03:00:00.000Z');
    expect(newestArchiveTime(listed('2026-11-28T10:05:00Z'), now)?.toISOString(), 'within a clock’s skew').to.equal('2026-11-28T10:05:00.000Z');
    expect(newestArchiveTime(listed('2026-11-28T11:00:00Z'), now)).to.equal(null);
    expect(newestArchiveTime([{ key: 'p/hangar-control-plane/notes.hcpb', size: 1, last_modified: '' }], now)).to.equal(null);
  });
});
