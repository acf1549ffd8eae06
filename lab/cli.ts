/**
 * `npm run lab` — the machine lab for humans (docs/lab.md).
 *
 *   npm run lab up [n]              start n machines (default 3) and keep them
 *   npm run lab status              the machines, their state and addresses; other labs on this docker
 *   npm run lab ssh <machine> [user]  print the ssh command for root (default), deployer or pwuser
 *   npm run lab down                remove this lab's machines (-- down --all: everything any lab left on this docker)
 *   npm run lab image               build the image if the recipe changed (-- image --rebuild: always)
 *
 * Options go after `--` (npm run lab -- up 2 --name demo): npm keeps the ones before it.
 *
 * Each person and checkout has a lab of its own on a shared docker: `cli-<user>-<hash of the
 * checkout>` on a /24 derived from that name (lab/names.ts); `--name` and `--subnet` choose
 * others. The lab stays up after the command ends; its keys and state are in .data/lab/<name>
 * (HANGAR_LAB_STATE instead of .data/lab).
 */
import { existsSync, readFileSync, rmSync } from 'node:fs';
import { userInfo } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { Lab, LABEL, listLab, removeAllLab, type LabState, type LabUserName } from '../test/e2e/lab/lab.js';
import { docker, dockerAvailable } from './docker.js';
import { ensureLabImage, imageExists, imageTag } from './image.js';
import { chooseLab, CLI_SUBNET_RANGE, type LabChoice } from './names.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const STATE_ROOT = resolve(process.env.HANGAR_LAB_STATE ?? join(ROOT, '.data', 'lab'));
const USERS: LabUserName[] = ['root', 'deployer', 'pwuser'];

const usage = `usage: npm run lab <command>, or with options: npm run lab -- <command> [--name NAME] [--subnet CIDR]

  up [n]                 start n machines (default 3) and leave them running
  status                 show the machines (state, address) and any other lab on this docker
  ssh <machine> [user]   print the ssh command for root (default), deployer or pwuser
  down [--all]           remove this lab's machines and network (--all: everything labelled ${LABEL}, any lab)
  image [--rebuild]      build the machine image if its recipe changed (--rebuild: always)

  --name NAME            the lab to act on (default cli-<user>-<hash of this checkout's path>)
  --subnet CIDR          up: its network (default HANGAR_LAB_SUBNET, else a /24 of ${CLI_SUBNET_RANGE.cidr} from the name)

State and keys: ${STATE_ROOT}/<name>. Docs: docs/lab.md.`;

class UsageError extends Error {}

/**
 * The `npm run lab` command line that acts on this lab again: its options after `--` (npm would
 * take them for its own), none for the default lab.
 */
function again(lab: Pick<LabChoice, 'name' | 'nameFrom'>, command: string, silent = false): string {
  const npm = `npm run${silent ? ' -s' : ''} lab`;
  return lab.nameFrom === 'default' ? `${npm} ${command}` : `${npm} -- ${command} --name ${lab.name}`;
}

/** The lab's own folder of state and keys. */
const stateDir = (lab: LabChoice) => join(STATE_ROOT, lab.name);

function readState(lab: LabChoice): LabState | undefined {
  const file = join(stateDir(lab), 'state.json');
  if (!existsSync(file)) return undefined;
  return JSON.parse(readFileSync(file, 'utf8')) as LabState;
}

/** Whoever runs the command: the user behind sudo when run with it (image builds need root). */
function currentUser(): string {
  if (process.env.SUDO_USER) return process.env.SUDO_USER;
  try {
    return userInfo().username;
  } catch {
    return process.env.USER ?? process.env.LOGNAME ?? 'user';
  }
}

async function requireDocker(): Promise<void> {
  if (!(await dockerAvailable())) throw new UsageError('docker does not answer (docker info failed): start dockerd (sudo bash scripts/services.sh)');
}

/** The command line (stdout) and, for pwuser, a note (stderr), so `eval "$(npm run -s lab ssh …)"` works. */
function sshCommand(state: LabState, machine: string, user: LabUserName): { command: string; note?: string } {
  const found = state.machines.find((m) => m.name === machine);
  if (!found) throw new UsageError(`no machine ${machine} (machines: ${state.machines.map((m) => m.name).join(', ')})`);
  const options = '-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR';
  if (user === 'pwuser') {
    const password = state.users.pwuser.password;
    return {
      command: `sshpass -p '${password}' ssh ${options} -o PubkeyAuthentication=no pwuser@${found.ip}`,
      note: `(without sshpass: plain ssh, and type the password ${password})`,
    };
  }
  return { command: `ssh -i ${state.users[user].privateKeyPath} ${options} -o IdentitiesOnly=yes ${user}@${found.ip}` };
}

async function up(choice: LabChoice, count: number): Promise<void> {
  await requireDocker();
  const existing = (await listLab()).filter((r) => r.labels[`${LABEL}.name`] === choice.name && r.kind === 'container');
  if (existing.length > 0) {
    throw new UsageError(`lab "${choice.name}" is up already (${existing.map((r) => r.name).join(', ')}): ${again(choice, 'status')}, or ${again(choice, 'down')} first`);
  }
  const lab = new Lab({ name: choice.name, subnet: choice.subnet, persistent: true, stateDir: stateDir(choice), log: (line) => console.log(line) });
  try {
    await lab.start({ machines: count });
  } catch (error) {
    await lab.teardown();
    rmSync(stateDir(choice), { recursive: true, force: true });
    // Another network on this docker has the subnet: say how to choose another.
    if (error instanceof Error && /overlaps docker network/.test(error.message)) {
      throw new UsageError(`${error.message}\n(the subnet came from ${choice.subnetFrom === 'name' ? `the lab's name` : choice.subnetFrom}): npm run lab -- up --subnet A.B.C.0/24${choice.nameFrom === 'default' ? '' : ` --name ${choice.name}`}, or another --name`);
    }
    throw error;
  }
  const state = readState(choice);
  if (!state) throw new Error(`the lab started but wrote no ${join(stateDir(choice), 'state.json')}`);
  console.log(`\nlab "${choice.name}" is up: ${count} machine(s) on docker network ${lab.network} (${lab.subnet}), image ${lab.image}`);
  printMachines(state, new Map(state.machines.map((m) => [m.name, 'running'])));
  console.log(`
users:   root      key ${lab.users.root.privateKeyPath}
         deployer  key ${lab.users.deployer.privateKeyPath} (passwordless sudo)
         pwuser    password ${lab.users.pwuser.password} (no key)
next:    ${again(choice, `ssh ${state.machines[0].name} deployer`, true)}     prints the ssh command
         docker exec -it ${state.machines[0].container} bash   a root shell without ssh
         ${again(choice, 'down')}     removes this lab`);
}

function printMachines(state: LabState, statuses: Map<string, string>): void {
  for (const m of state.machines) {
    console.log(`  ${m.name.padEnd(8)} ${m.ip.padEnd(15)} ${(statuses.get(m.name) ?? '?').padEnd(10)} ${m.container}`);
  }
}

async function status(choice: LabChoice): Promise<void> {
  await requireDocker();
  const tag = imageTag();
  console.log(`image:   ${tag} ${(await imageExists(tag)) ? '(built)' : '(not built yet: npm run lab image, or up builds it)'}`);
  const state = readState(choice);
  if (!state) {
    console.log(`lab "${choice.name}": down (up would use ${choice.subnet})`);
  } else {
    const statuses = new Map<string, string>();
    for (const m of state.machines) {
      const inspected = await docker(['inspect', '--format', `{{.State.Status}} {{with index .NetworkSettings.Networks "${state.network}"}}{{.IPAddress}}{{end}}`, m.container]);
      const [st, address] = inspected.stdout.trim().split(' ');
      statuses.set(m.name, inspected.code !== 0 ? 'missing' : st === 'running' && !address ? 'cut-off' : st);
    }
    console.log(`lab "${choice.name}": ${state.machines.length} machine(s) on ${state.network} (${state.subnet}), image ${state.image}`);
    printMachines(state, statuses);
    console.log(`keys:    ${stateDir(choice)}/keys; pwuser's password: ${state.users.pwuser.password}`);
  }
  const others = new Map<string, { containers: number; networks: number; pid: string }>();
  for (const r of await listLab()) {
    const name = r.labels[`${LABEL}.name`] ?? '?';
    if (name === choice.name) continue;
    const entry = others.get(name) ?? { containers: 0, networks: 0, pid: r.labels[`${LABEL}.pid`] ?? '?' };
    if (r.kind === 'container') entry.containers++;
    else entry.networks++;
    others.set(name, entry);
  }
  for (const [name, o] of others) {
    console.log(`other lab "${name}": ${o.containers} container(s), ${o.networks} network(s), made by process ${o.pid} (${again({ name, nameFrom: '--name' }, 'down')} removes it)`);
  }
}

/** Removes this lab (its containers, network and state), or with `all` everything any lab left. */
async function down(choice: LabChoice, all: boolean): Promise<void> {
  await requireDocker();
  const removed = await removeAllLab(all ? undefined : choice.name);
  rmSync(all ? STATE_ROOT : stateDir(choice), { recursive: true, force: true });
  const what = all ? ' of every lab' : ` of lab "${choice.name}"`;
  console.log(removed > 0 ? `removed ${removed} container(s)/network(s)${what}` : `nothing to remove${all ? '' : ` for lab "${choice.name}"`}`);
}

async function image(rebuild: boolean): Promise<void> {
  await requireDocker();
  const result = await ensureLabImage({ force: rebuild, log: (line) => console.log(line) });
  console.log(`${result.tag} ${result.built ? `built in ${result.seconds.toFixed(1)} s` : 'is up to date (cached)'}`);
}

/** The command line: a command, its positionals, and the options (each only where it means something). */
function parse(argv: string[]): { command?: string; args: string[]; choice: () => LabChoice; all: boolean; rebuild: boolean; help: boolean } {
  let parsed;
  try {
    parsed = parseArgs({
      args: argv,
      options: { name: { type: 'string' }, subnet: { type: 'string' }, all: { type: 'boolean', default: false }, rebuild: { type: 'boolean', default: false }, help: { type: 'boolean', short: 'h', default: false } },
      allowPositionals: true,
      strict: true,
    });
  } catch (error) {
    throw new UsageError(`${(error as Error).message}\n\n${usage}`);
  }
  const [command, ...args] = parsed.positionals;
  const { name, subnet, all, rebuild, help } = parsed.values;
  const only = (option: string, given: unknown, where: string) => {
    if (given !== undefined && given !== false && command !== where) throw new UsageError(`--${option} goes with ${where}, not ${command ?? 'no command'}`);
  };
  only('subnet', subnet, 'up');
  only('all', all, 'down');
  only('rebuild', rebuild, 'image');
  if (all && name !== undefined) throw new UsageError('down takes --all (every lab) or --name (one lab), not both');
  const choice = () => {
    try {
      return chooseLab({ name, subnet, user: currentUser(), checkout: ROOT, env: process.env });
    } catch (error) {
      throw new UsageError((error as Error).message);
    }
  };
  return { command, args, choice, all: Boolean(all), rebuild: Boolean(rebuild), help: Boolean(help) };
}

async function main(argv: string[]): Promise<void> {
  const { command, args, choice, all, rebuild, help } = parse(argv);
  switch (help ? 'help' : command) {
    case 'up': {
      const count = args[0] === undefined ? 3 : Number(args[0]);
      if (!Number.isInteger(count) || count < 1 || count > 50) throw new UsageError(`up takes a number of machines (1–50), not ${args[0]}`);
      return up(choice(), count);
    }
    case 'status':
      return status(choice());
    case 'ssh': {
      const [machine, user = 'root'] = args;
      if (!machine) throw new UsageError('ssh needs a machine name, e.g. npm run lab ssh m1 deployer');
      if (!USERS.includes(user as LabUserName)) throw new UsageError(`user must be one of ${USERS.join(', ')}`);
      const lab = choice();
      const state = readState(lab);
      if (!state) throw new UsageError(`lab "${lab.name}" is down: ${again(lab, 'up')}`);
      const { command: line, note } = sshCommand(state, machine, user as LabUserName);
      console.log(line);
      if (note) console.error(note);
      return;
    }
    case 'down':
      return down(choice(), all);
    case 'image':
      return image(rebuild);
    case undefined:
    case 'help':
      console.log(usage);
      return;
    default:
      throw new UsageError(`unknown command ${command}\n\n${usage}`);
  }
}

main(process.argv.slice(2)).catch((error: unknown) => {
  console.error(error instanceof UsageError ? error.message : error instanceof Error ? error.message : String(error));
  process.exitCode = 1;
});
