/**
 * The name and subnet of a lab `npm run lab` starts (lab/cli.ts, docs/lab.md). Several people (or
 * checkouts) share one Docker host: each gets its own lab by default, `cli-<user>-<checkout>`, on
 * its own /24 of {@link CLI_SUBNET_RANGE} derived from that name, so two labs neither collide by
 * name nor (but for a 1-in-128 chance, which the lab's overlap check reports) by subnet.
 */
import { createHash } from 'node:crypto';
import { resolve } from 'node:path';

/** Lab names as the harness takes them (they name containers and the docker network). */
const LAB_NAME = /^[a-z0-9][a-z0-9-]*$/;
/** Long enough for `cli-` + a user + a hash; containers are `hangar-lab-<name>-<machine>`. */
export const MAX_LAB_NAME = 40;
/** The longest part of a user's name kept in a default lab name. */
const MAX_USER_PART = 20;

/**
 * Where the CLI's labs take their subnets: 172.31.128.0/17, one /24 each. Apart from the test
 * suites' labs (172.31.70–79.0/24) and the seal test's bridge (172.30.99.0/24); docker's own
 * address pools reach 172.31.0.0/16 only after 14 other networks.
 */
export const CLI_SUBNET_RANGE = { cidr: '172.31.128.0/17', first: 128, count: 128 } as const;

/** A short hash of a checkout's path: the same checkout always gives the same lab. */
export function checkoutHash(checkout: string): string {
  return createHash('sha256').update(resolve(checkout)).digest('hex').slice(0, 6);
}

/** A user's login name as a part of a lab name: lowercase letters, digits and dashes; `user` when nothing is left. */
export function userPart(user: string): string {
  const cleaned = user
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, '-')
    .replace(/^-+|-+$/g, '')
    .slice(0, MAX_USER_PART)
    .replace(/-+$/, '');
  return cleaned || 'user';
}

/** The lab `npm run lab` uses unless told another: `cli-<user>-<6 hex of the checkout's path>`. */
export function defaultLabName(user: string, checkout: string): string {
  return `cli-${userPart(user)}-${checkoutHash(checkout)}`;
}

/** Why `name` cannot name a lab, or null when it can. */
export function labNameProblem(name: string): string | null {
  if (!LAB_NAME.test(name)) return `a lab name is lowercase letters, digits and dashes, starting with a letter or digit: ${JSON.stringify(name)}`;
  if (name.length > MAX_LAB_NAME) return `a lab name has at most ${MAX_LAB_NAME} characters: ${name} has ${name.length}`;
  return null;
}

/** The /24 of {@link CLI_SUBNET_RANGE} a lab of this name gets: the same name always the same subnet. */
export function subnetForLab(name: string): string {
  const slot = createHash('sha256').update(name).digest().readUInt32BE(0) % CLI_SUBNET_RANGE.count;
  return `172.31.${CLI_SUBNET_RANGE.first + slot}.0/24`;
}

/** Why `subnet` cannot be a lab's subnet (an IPv4 CIDR of /24 or larger), or null when it can. */
export function subnetProblem(subnet: string): string | null {
  const m = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})\/(\d{1,2})$/.exec(subnet);
  if (!m || m.slice(1, 5).some((octet) => Number(octet) > 255) || Number(m[5]) > 32) return `a subnet is an IPv4 CIDR such as 172.31.200.0/24: ${JSON.stringify(subnet)}`;
  if (Number(m[5]) > 24) return `a lab subnet must be /24 or larger (the machines get .11, .12, …): ${subnet}`;
  return null;
}

export interface LabChoice {
  name: string;
  /** Whether the name was given (`--name`) or is this user's and checkout's default. */
  nameFrom: '--name' | 'default';
  subnet: string;
  /** Where the subnet came from, for the messages: `--subnet`, `HANGAR_LAB_SUBNET` or the name. */
  subnetFrom: '--subnet' | 'HANGAR_LAB_SUBNET' | 'name';
}

/**
 * The lab a command acts on: `--name`, else the default for this user and checkout; `--subnet`,
 * else HANGAR_LAB_SUBNET, else the name's own subnet. Throws (the message says what to fix) on a
 * name or subnet the lab cannot take.
 */
export function chooseLab(options: { name?: string; subnet?: string; user: string; checkout: string; env?: NodeJS.ProcessEnv }): LabChoice {
  const name = options.name ?? defaultLabName(options.user, options.checkout);
  const nameProblem = labNameProblem(name);
  if (nameProblem) throw new Error(`--name: ${nameProblem}`);
  const fromEnv = options.env?.HANGAR_LAB_SUBNET || undefined;
  const subnetFrom = options.subnet !== undefined ? '--subnet' : fromEnv !== undefined ? 'HANGAR_LAB_SUBNET' : 'name';
  const subnet = options.subnet ?? fromEnv ?? subnetForLab(name);
  const problem = subnetProblem(subnet);
  if (problem) throw new Error(`${subnetFrom}: ${problem}`);
  return { name, nameFrom: options.name === undefined ? 'default' : '--name', subnet, subnetFrom };
}
