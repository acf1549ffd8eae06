import { expect } from 'chai';
import { nextCronRun, parseCron, shortestCronGap } from '../../../core/cron.js';

const at = (iso: string) => new Date(iso);
const next = (expression: string, after: string) => nextCronRun(parseCron(expression), at(after))?.toISOString() ?? null;

describe('cron schedules (core/cron.ts): when a backup schedule is next due, in UTC', () => {
  it('finds the next minute each field allows, strictly after the given time', () => {
    expect(next('*/15 * * * *', '2026-11-28T10:07:30Z')).to.equal('2026-11-28T10:15:00.000Z');
    expect(next('*/15 * * * *', '2026-11-28T10:15:00Z'), 'not the same minute again').to.equal('2026-11-28T10:30:00.000Z');
    expect(next('30 2 * * *', '2026-11-28T03:00:00Z')).to.equal('2026-11-29T02:30:00.000Z');
    expect(next('0 0 1 * *', '2026-12-15T00:00:00Z'), 'into the next year').to.equal('2027-01-01T00:00:00.000Z');
    expect(next('0 9-17/4 * * mon', '2026-11-28T00:00:00Z'), 'a Saturday: the next Monday 09:00').to.equal('2026-11-30T09:00:00.000Z');
    expect(next('5 4 29 feb *', '2026-03-01T00:00:00Z'), 'the next leap day').to.equal('2028-02-29T04:05:00.000Z');
  });

  it('runs on a day matching either day field when both are restricted, as cron does; on both when one is *', () => {
    // 2026-12-01 is a Tuesday; the 13th of December is a Sunday.
    expect(next('0 12 13 * fri', '2026-12-01T00:00:00Z'), 'Friday the 4th comes before the 13th').to.equal('2026-12-04T12:00:00.000Z');
    expect(next('0 12 * * 7', '2026-12-01T00:00:00Z'), '7 is Sunday').to.equal('2026-12-06T12:00:00.000Z');
    expect(next('0 12 */10 * *', '2026-12-02T00:00:00Z'), 'a stepped * is unrestricted: days 1, 11, 21, 31').to.equal('2026-12-11T12:00:00.000Z');
  });

  it('takes the macros but @reboot, and says what is wrong with a schedule', () => {
    expect(next('@daily', '2026-11-28T10:00:00Z')).to.equal('2026-11-29T00:00:00.000Z');
    expect(next('@hourly', '2026-11-28T10:00:00Z')).to.equal('2026-11-28T11:00:00.000Z');
    expect(() => parseCron('@reboot', 'body.cron')).to.throw(/^body.cron "@reboot": @reboot has no time of its own here/);
    expect(() => parseCron('61 25 * * *', 'body.cron')).to.throw('body.cron "61 25 * * *": minute 61 is out of range (0-59); hour 25 is out of range (0-23)');
    expect(() => parseCron('* * *', 'body.cron')).to.throw(/^body.cron "\* \* \*" is not a cron schedule: give five fields/);
  });

  it('answers null for a day that never comes, and the shortest gap between runs', () => {
    expect(next('0 0 30 feb *', '2026-01-01T00:00:00Z')).to.equal(null);
    expect(shortestCronGap(parseCron('*/5 * * * *'), at('2026-11-28T10:00:00Z'))).to.equal(300);
    expect(shortestCronGap(parseCron('0 1,2 * * *'), at('2026-11-28T10:00:00Z')), '01:00 then 02:00').to.equal(3600);
  });
});
