/**
 * Cron schedules as crontab(5) writes them: five fields (minute hour day-of-month month
 * day-of-week) or one of the @ macros. Checked field by field with a message naming what is wrong
 * (`hangar install --schedule` writes them for the system's cron; backup schedules run on them),
 * and, for hangar's own schedules, the next time one is due (in UTC).
 */

export const CRON_MACROS: Readonly<Record<string, string | null>> = {
  '@reboot': null,
  '@yearly': '0 0 1 1 *',
  '@annually': '0 0 1 1 *',
  '@monthly': '0 0 1 * *',
  '@weekly': '0 0 * * 0',
  '@daily': '0 0 * * *',
  '@midnight': '0 0 * * *',
  '@hourly': '0 * * * *',
};

interface CronField {
  name: string;
  min: number;
  max: number;
  names?: string[];
}

/** The five fields of a crontab line: their names, ranges and the names cron takes for their values. */
const CRON_FIELDS: readonly CronField[] = [
  { name: 'minute', min: 0, max: 59 },
  { name: 'hour', min: 0, max: 23 },
  { name: 'day of month', min: 1, max: 31 },
  { name: 'month', min: 1, max: 12, names: ['jan', 'feb', 'mar', 'apr', 'may', 'jun', 'jul', 'aug', 'sep', 'oct', 'nov', 'dec'] },
  // 0 and 7 are both Sunday.
  { name: 'day of week', min: 0, max: 7, names: ['sun', 'mon', 'tue', 'wed', 'thu', 'fri', 'sat'] },
];

const ITEM = /^(\*|(\d+)(?:-(\d+))?)(?:\/(\d+))?$/;

/** What is wrong with one field, or null: `*`, numbers, `a-b` ranges, lists and `/step`s, all within the field's range; or one name (jan, mon). */
function fieldProblem(text: string, field: CronField): string | null {
  const range = `${field.min}-${field.max}`;
  if (field.names?.includes(text.toLowerCase())) return null;
  for (const item of text.split(',')) {
    const m = ITEM.exec(item);
    if (!m) {
      const names = field.names ? ` or one name (${field.names[0]}…${field.names.at(-1)})` : '';
      return `${field.name} "${text}" is not a cron field: use *, numbers in ${range}, ranges (a-b), lists (a,b), steps (*/n)${names}`;
    }
    const [, , from, to, step] = m;
    for (const value of [from, to]) {
      if (value !== undefined && (Number(value) < field.min || Number(value) > field.max)) return `${field.name} ${value} is out of range (${range})`;
    }
    if (from !== undefined && to !== undefined && Number(from) > Number(to)) return `${field.name} range ${from}-${to} runs backwards`;
    if (step !== undefined && (Number(step) < 1 || Number(step) > field.max)) return `${field.name} step /${step} is out of range (1-${field.max})`;
  }
  return null;
}

/**
 * A schedule normalised (single spaces), or what is wrong with it: the fields out of range, or that
 * it is not five fields or a macro (`@reboot` included: cron knows it).
 */
export function cronProblems(schedule: string): { normalised: string; problems: string[]; wrongShape: boolean } {
  const normalised = schedule.trim().replace(/\s+/g, ' ');
  if (normalised in CRON_MACROS) return { normalised, problems: [], wrongShape: false };
  const fields = normalised.split(' ');
  if (fields.length !== 5) return { normalised, problems: [], wrongShape: true };
  return { normalised, problems: fields.map((f, i) => fieldProblem(f, CRON_FIELDS[i]!)).filter((p): p is string => p !== null), wrongShape: false };
}

/** How a five-field schedule's shape is described in messages. */
export const CRON_SHAPE = `five fields (minute hour day-of-month month day-of-week, e.g. "*/5 * * * *") or one of ${Object.keys(CRON_MACROS).join(', ')}`;

/** A schedule as sets of the values each field allows. */
export interface CronSchedule {
  readonly expression: string;
  readonly minutes: ReadonlySet<number>;
  readonly hours: ReadonlySet<number>;
  readonly days: ReadonlySet<number>;
  readonly months: ReadonlySet<number>;
  /** 0–6, Sunday 0. */
  readonly weekdays: ReadonlySet<number>;
  /** As cron does: when both day fields are restricted (neither starts with `*`), a day matching either runs. */
  readonly eitherDay: boolean;
}

function expand(text: string, field: CronField): Set<number> {
  const values = new Set<number>();
  const named = field.names?.indexOf(text.toLowerCase()) ?? -1;
  if (named >= 0) return new Set([named + (field.name === 'month' ? 1 : 0)]);
  for (const item of text.split(',')) {
    const [, star, from, to, step] = ITEM.exec(item)!;
    const lo = star === '*' ? field.min : Number(from);
    const hi = star === '*' ? field.max : to !== undefined ? Number(to) : step !== undefined ? field.max : lo;
    for (let v = lo; v <= hi; v += step ? Number(step) : 1) values.add(v);
  }
  return values;
}

/**
 * Parses a schedule for hangar's own use (not `@reboot`: there is no boot to run at). Throws an
 * Error whose message names what is wrong; `label` says where the schedule came from.
 */
export function parseCron(schedule: string, label = 'schedule'): CronSchedule {
  const { normalised, problems, wrongShape } = cronProblems(schedule);
  if (wrongShape) throw new Error(`${label} "${schedule}" is not a cron schedule: give ${CRON_SHAPE}`);
  if (problems.length) throw new Error(`${label} "${schedule}": ${problems.join('; ')}`);
  const expanded = normalised in CRON_MACROS ? CRON_MACROS[normalised] : normalised;
  if (!expanded) throw new Error(`${label} "${schedule}": @reboot has no time of its own here; give ${CRON_SHAPE}`);
  const fields = expanded.split(' ');
  const [minutes, hours, days, months, weekdays] = fields.map((f, i) => expand(f, CRON_FIELDS[i]!)) as [Set<number>, Set<number>, Set<number>, Set<number>, Set<number>];
  if (weekdays.delete(7)) weekdays.add(0);
  return { expression: normalised, minutes, hours, days, months, weekdays, eitherDay: !fields[2]!.startsWith('*') && !fields[4]!.startsWith('*') };
}

/** Whether the schedule runs on this UTC day. */
function runsOn(s: CronSchedule, t: Date): boolean {
  const day = s.days.has(t.getUTCDate());
  const weekday = s.weekdays.has(t.getUTCDay());
  return s.eitherDay ? day || weekday : day && weekday;
}

/** The first minute after `after` (UTC) the schedule runs at; null when it never does (e.g. 30 February) within five years. */
export function nextCronRun(s: CronSchedule, after: Date): Date | null {
  const t = new Date(after.getTime());
  t.setUTCSeconds(0, 0);
  t.setUTCMinutes(t.getUTCMinutes() + 1);
  const limit = after.getTime() + 5 * 366 * 86_400_000;
  while (t.getTime() <= limit) {
    if (!s.months.has(t.getUTCMonth() + 1)) {
      t.setUTCMonth(t.getUTCMonth() + 1, 1);
      t.setUTCHours(0, 0);
    } else if (!runsOn(s, t)) {
      t.setUTCDate(t.getUTCDate() + 1);
      t.setUTCHours(0, 0);
    } else if (!s.hours.has(t.getUTCHours())) {
      t.setUTCHours(t.getUTCHours() + 1, 0);
    } else if (!s.minutes.has(t.getUTCMinutes())) {
      t.setUTCMinutes(t.getUTCMinutes() + 1);
    } else {
      return t;
    }
  }
  return null;
}

/** The shortest gap between the schedule's next `count` runs after `from` (seconds): how often it runs at its busiest. */
export function shortestCronGap(s: CronSchedule, from: Date, count = 400): number | null {
  let previous = nextCronRun(s, from);
  let shortest: number | null = null;
  for (let i = 0; previous && i < count; i++) {
    const next = nextCronRun(s, previous);
    if (!next) break;
    const gap = (next.getTime() - previous.getTime()) / 1000;
    shortest = shortest === null ? gap : Math.min(shortest, gap);
    previous = next;
  }
  return shortest;
}
