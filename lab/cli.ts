/**
 * `npm run lab` — the machine lab for humans (docs/lab.md).
 *
 *   npm run lab up [n]              start n machines (default 3) on 172.31.70.0/24 and keep them
 *   npm run lab status              the machines, their state and addresses; other labs on this docker
 *   npm run lab ssh <machine> [user]  print the ssh command for root (default), deployer or pwuser
 *   npm run lab down [--all]        remove the machines (--all: everything any lab left on this docker)
 *   npm run lab image [--rebuild]   build the image if the recipe changed (or always)
 *
 * The lab stays up after the command ends; its keys and state are in .data/lab (or
 * HANGAR_LAB_STATE). It is a lab named "cli", apart from the test suites' labs.
 */
import { existsSync, readFileSync, rmSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Lab, LABEL, listLab, removeAllLab, type LabState, type LabUserName } from '../test/e2e/lab/lab.js';
import { docker, dockerAvailable } from './docker.js';
import { ensureLabImage, imageExists, imageTag } from './image.js';

const NAME = 'cli';
const SUBNET = process.env.HANGAR_LAB_SUBNET ?? '172.31.70.0/24';
const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const STATE_DIR = resolve(process.env.HANGAR_LAB_STATE ?? join(ROOT, '.data', 'lab'));
const STATE_FILE = join(STATE_DIR, 'state.json');
const USERS: LabUserName[] = ['root', 'deployer', 'pwuser'];

const usage = `usage: npm run lab <command>

  up [n]                 start n machines (default 3) and leave them running
  status                 show the machines (state, address) and any other lab on this docker
  ssh <machine> [user]   print the ssh command for root (default), deployer or pwuser
  down [--all]           remove the machines (--all: everything labelled ${LABEL}, any lab)
  image [--rebuild]      build the machine image if its recipe changed (--rebuild: always)

State and keys: ${STATE_DIR}. Docs: docs/lab.md.`;

class UsageError extends Error {}

function readState(): LabState | undefined {
  if (!existsSync(STATE_FILE)) return undefined;
  return JSON.parse(readFileSync(STATE_FILE, 'utf8')) as LabState;
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

async function up(count: number): Promise<void> {
  await requireDocker();
  const existing = (await listLab()).filter((r) => r.labels[`${LABEL}.name`] === NAME && r.kind === 'container');
  if (existing.length > 0) {
    throw new UsageError(`the lab is up already (${existing.map((r) => r.name).join(', ')}): npm run lab status, or npm run lab down first`);
  }
  const lab = new Lab({ name: NAME, subnet: SUBNET, persistent: true, stateDir: STATE_DIR, log: (line) => console.log(line) });
  try {
    await lab.start({ machines: count });
  } catch (error) {
    await lab.teardown();
    rmSync(STATE_FILE, { force: true });
    throw error;
  }
  const state = readState();
  if (!state) throw new Error(`the lab started but wrote no ${STATE_FILE}`);
  console.log(`\nlab "${NAME}" is up: ${count} machine(s) on docker network ${lab.network} (${lab.subnet}), image ${lab.image}`);
  printMachines(state, new Map(state.machines.map((m) => [m.name, 'running'])));
  console.log(`
users:   root      key ${lab.users.root.privateKeyPath}
         deployer  key ${lab.users.deployer.privateKeyPath} (passwordless sudo)
         pwuser    password ${lab.users.pwuser.password} (no key)
next:    npm run -s lab ssh ${state.machines[0].name} deployer     prints the ssh command
         docker exec -it ${state.machines[0].container} bash   a root shell without ssh
         npm run lab down                         removes the lab`);
}

function printMachines(state: LabState, statuses: Map<string, string>): void {
  for (const m of state.machines) {
    console.log(`  ${m.name.padEnd(8)} ${m.ip.padEnd(15)} ${(statuses.get(m.name) ?? '?').padEnd(10)} ${m.container}`);
  }
}

async function status(): Promise<void> {
  await requireDocker();
  const tag = imageTag();
  console.log(`image:   ${tag} ${(await imageExists(tag)) ? '(built)' : '(not built yet: npm run lab image, or up builds it)'}`);
  const state = readState();
  if (!state) {
    console.log(`lab "${NAME}": down`);
  } else {
    const statuses = new Map<string, string>();
    for (const m of state.machines) {
      const inspected = await docker(['inspect', '--format', `{{.State.Status}} {{with index .NetworkSettings.Networks "${state.network}"}}{{.IPAddress}}{{end}}`, m.container]);
      const [st, address] = inspected.stdout.trim().split(' ');
      statuses.set(m.name, inspected.code !== 0 ? 'missing' : st === 'running' && !address ? 'cut-off' : st);
    }
    console.log(`lab "${NAME}": ${state.machines.length} machine(s) on ${state.network} (${state.subnet}), image ${state.image}`);
    printMachines(state, statuses);
    console.log(`keys:    ${STATE_DIR}/keys; pwuser's password: ${state.users.pwuser.password}`);
  }
  const others = new Map<string, { containers: number; networks: number; pid: string }>();
  for (const r of await listLab()) {
    const name = r.labels[`${LABEL}.name`] ?? '?';
    if (name === NAME) continue;
    const entry = others.get(name) ?? { containers: 0, networks: 0, pid: r.labels[`${LABEL}.pid`] ?? '?' };
    if (r.kind === 'container') entry.containers++;
    else entry.networks++;
    others.set(name, entry);
  }
  for (const [name, o] of others) {
    console.log(`other lab "${name}": ${o.containers} container(s), ${o.networks} network(s), made by process ${o.pid} (npm run lab down --all removes it)`);
  }
}

async function down(all: boolean): Promise<void> {
  await requireDocker();
  const removed = await removeAllLab(all ? undefined : NAME);
  rmSync(STATE_DIR, { recursive: true, force: true });
  console.log(removed > 0 ? `removed ${removed} container(s)/network(s)${all ? ' of every lab' : ''}` : 'nothing to remove');
}

async function image(rebuild: boolean): Promise<void> {
  await requireDocker();
  const result = await ensureLabImage({ force: rebuild, log: (line) => console.log(line) });
  console.log(`${result.tag} ${result.built ? `built in ${result.seconds.toFixed(1)} s` : 'is up to date (cached)'}`);
}

async function main(argv: string[]): Promise<void> {
  const [command, ...args] = argv;
  switch (command) {
    case 'up': {
      const count = args[0] === undefined ? 3 : Number(args[0]);
      if (!Number.isInteger(count) || count < 1 || count > 50) throw new UsageError(`up takes a number of machines (1–50), not ${args[0]}`);
      return up(count);
    }
    case 'status':
      return status();
    case 'ssh': {
      const [machine, user = 'root'] = args;
      if (!machine) throw new UsageError('ssh needs a machine name, e.g. npm run lab ssh m1 deployer');
      if (!USERS.includes(user as LabUserName)) throw new UsageError(`user must be one of ${USERS.join(', ')}`);
      const state = readState();
      if (!state) throw new UsageError('the lab is down: npm run lab up');
      const { command: line, note } = sshCommand(state, machine, user as LabUserName);
      console.log(line);
      if (note) console.error(note);
      return;
    }
    case 'down':
      return down(args.includes('--all'));
    case 'image':
      return image(args.includes('--rebuild'));
    case undefined:
    case 'help':
    case '--help':
    case '-h':
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
