import { expect } from 'chai';
import { spawn } from 'node:child_process';
import { appendFileSync, cpSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { docker, dockerOk } from '../../lab/docker.js';
import { LAB_DIR, imageTag, recipeHash } from '../../lab/image.js';
import { requireService } from '../support/requirements.js';
import { refusedBy, sealedBridges } from '../../lab/seal.js';
import { LABEL, Lab, listLab, type Machine } from './lab/lab.js';
import { sshClientName, sshExec } from './lab/ssh.js';

const CRASH_FIXTURE = fileURLToPath(new URL('./lab/crash-fixture.ts', import.meta.url));
const REPO = fileURLToPath(new URL('../../', import.meta.url));

const seconds = (since: number): string => `${((Date.now() - since) / 1000).toFixed(1)} s`;

async function until(what: string, check: () => Promise<boolean>, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 300));
  }
}

async function pings(from: Machine, to: string): Promise<boolean> {
  return (await from.exec(['ping', '-c', '1', '-W', '2', to])).code === 0;
}

/** A process that has exited: its pid names no live process (for "crashed run" labels). */
async function deadPid(): Promise<number> {
  const child = spawn('true');
  await new Promise((resolve) => child.on('exit', resolve));
  return child.pid ?? 999_999;
}

/** Runs the crash fixture until it has started its machine, then lets it die in its own way. */
async function crashRun(name: string, subnet: string, how: 'throw' | 'exit' | 'wait', signal?: NodeJS.Signals): Promise<{ code: number | null; container: string }> {
  const child = spawn(process.execPath, ['--import', 'tsx', CRASH_FIXTURE, name, subnet, how], { cwd: REPO, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  let container = '';
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  await new Promise<void>((resolve, reject) => {
    child.stdout.on('data', (chunk: Buffer) => {
      output += chunk.toString();
      const match = /started (\S+)/.exec(output);
      if (match) {
        container = match[1];
        resolve();
      }
    });
    child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    void exited.then(() => (container ? undefined : reject(new Error(`crash fixture ended before its machine started:\n${output}`))));
  });
  if (signal) child.kill(signal);
  return { code: await exited, container };
}

describe('machine lab (real containers: sshd, dockerd, sudo, wireguard on a private docker network)', function () {
  this.timeout(120_000);
  let lab: Lab;
  let m1: Machine;
  let m2: Machine;
  let m3: Machine;
  let firstEnsure: { tag: string; built: boolean; seconds: number };

  before(async function () {
    this.timeout(20 * 60_000);
    const available = await Lab.availability();
    requireService(this, available.docker, 'Docker (dockerd)');
    requireService(this, available.image, available.why ?? 'the lab image');
    lab = new Lab({ name: 'e2e-lab' });
    const t0 = Date.now();
    const tag = await lab.ensureImage();
    firstEnsure = { tag, built: lab.imageResult?.built ?? false, seconds: (Date.now() - t0) / 1000 };
    console.log(`      image ${tag}: ${firstEnsure.built ? 'built' : 'cached'} in ${firstEnsure.seconds.toFixed(1)} s`);
    const t1 = Date.now();
    [m1, m2, m3] = await lab.start({ machines: 3 });
    console.log(`      3 machines started and ready in ${seconds(t1)}; ssh client: ${sshClientName()}`);
  });

  after(async function () {
    this.timeout(120_000);
    await lab?.teardown();
  });

  describe('image', () => {
    it('is cached: a second ensureImage is fast and returns the same tag', async () => {
      const t0 = Date.now();
      const tag = await lab.ensureImage();
      expect(tag).to.equal(firstEnsure.tag);
      expect(tag).to.match(/^hangar-lab:[0-9a-f]{12}$/);
      expect(lab.imageResult?.built).to.equal(false);
      expect(Date.now() - t0).to.be.below(3_000);
    });

    it('is tagged with the hash of its recipe, which changes with any recipe file', () => {
      expect(imageTag()).to.equal(firstEnsure.tag);
      const copy = mkdtempSync(join(tmpdir(), 'hangar-lab-recipe-'));
      try {
        cpSync(join(LAB_DIR, 'image.sh'), join(copy, 'image.sh'));
        cpSync(join(LAB_DIR, 'rootfs'), join(copy, 'rootfs'), { recursive: true });
        const original = recipeHash(copy);
        expect(original).to.equal(recipeHash());
        appendFileSync(join(copy, 'rootfs', 'etc', 'ssh', 'sshd_config.d', 'hangar-lab.conf'), '# changed\n');
        const edited = recipeHash(copy);
        expect(edited).to.not.equal(original);
        writeFileSync(join(copy, 'rootfs', 'etc', 'motd'), 'a new file\n');
        expect(recipeHash(copy)).to.not.equal(edited);
      } finally {
        rmSync(copy, { recursive: true, force: true });
      }
    });
  });

  describe('machines', () => {
    it('start with their fixed addresses and names on the lab network', async () => {
      expect([m1.ip, m2.ip, m3.ip]).to.deep.equal(['172.31.77.11', '172.31.77.12', '172.31.77.13']);
      for (const machine of [m1, m2, m3]) {
        expect(await machine.status()).to.equal('running');
        expect(await machine.currentAddress()).to.equal(machine.ip);
        expect(await machine.sh('hostname')).to.equal(machine.name);
        expect(await machine.sh('ip -4 -o addr show eth0')).to.contain(`${machine.ip}/24`);
      }
      const network = JSON.parse(await dockerOk(['network', 'inspect', lab.network]))[0];
      expect(network.IPAM.Config[0].Subnet).to.equal('172.31.77.0/24');
      expect(network.Labels[LABEL]).to.equal(lab.runId);
    });

    it('have the tools: sudo, iproute2, iptables, wireguard-go and wireguard-tools, /dev/net/tun', async () => {
      const out = await m1.sh('command -v sudo ip iptables wg wireguard-go curl ping && test -c /dev/net/tun && echo ok');
      expect(out).to.match(/ok$/);
      // A userspace WireGuard interface (no kernel module needed).
      await m1.sh('WG_I_PREFER_BUGGY_USERSPACE_TO_POLISHED_KMOD=1 wireguard-go wg-lab >/dev/null 2>&1 && wg genkey >/tmp/wg.key && wg set wg-lab private-key /tmp/wg.key listen-port 51820');
      expect(await m1.sh('wg show wg-lab listen-port')).to.equal('51820');
      await m1.sh('ip link del wg-lab');
    });

    it('each make their own SSH host key', async () => {
      const keys = await Promise.all([m1, m2, m3].map((m) => m.sh('cat /etc/ssh/ssh_host_ed25519_key.pub')));
      expect(new Set(keys).size).to.equal(3);
    });
  });

  describe('ssh', () => {
    it('root logs in with its key', async () => {
      const result = await sshExec(m1.ssh.root, 'id -u; hostname');
      expect(result.code, result.stderr).to.equal(0);
      expect(result.stdout.trim().split('\n')).to.deep.equal(['0', 'm1']);
    });

    it('deployer logs in with its key and has passwordless sudo', async () => {
      const result = await sshExec(m2.ssh.deployer, 'id -un; sudo -n true && sudo -n id -u');
      expect(result.code, result.stderr).to.equal(0);
      expect(result.stdout.trim().split('\n')).to.deep.equal(['deployer', '0']);
    });

    it('pwuser logs in with its password, and not with a key', async () => {
      const withPassword = await sshExec(m3.ssh.pwuser, 'id -un; sudo -n true 2>/dev/null || echo no-sudo');
      expect(withPassword.code, withPassword.stderr).to.equal(0);
      expect(withPassword.stdout.trim().split('\n')).to.deep.equal(['pwuser', 'no-sudo']);
      const withKey = await sshExec({ ...m3.ssh.deployer, username: 'pwuser' }, 'true');
      expect(withKey.code).to.equal(255);
      expect(withKey.stderr).to.match(/denied|authentication/i);
    });

    it('refuses the wrong key, the wrong password, and passwords for root and deployer', async () => {
      const wrongKey = await sshExec({ ...m1.ssh.deployer, username: 'root' }, 'true');
      expect(wrongKey.code).to.equal(255);
      const wrongPassword = await sshExec({ ...m1.ssh.pwuser, password: 'not-the-password' }, 'true');
      expect(wrongPassword.code).to.equal(255);
      const rootPassword = await sshExec({ host: m1.ip, port: 22, username: 'root', password: lab.users.pwuser.password }, 'true');
      expect(rootPassword.code).to.equal(255);
    });
  });

  describe('docker inside a machine', () => {
    it('dockerd answers and runs a container', async () => {
      const info = JSON.parse(await m1.sh("docker info --format '{{json .}}'"));
      expect(info.ServerVersion).to.be.a('string').and.not.empty;
      expect(info.Driver).to.equal('overlay2');
      expect(await m1.sh('lab-busybox-image')).to.equal('lab/busybox:latest');
      expect(await m1.sh('docker run --rm lab/busybox:latest echo hello-from-inside')).to.equal('hello-from-inside');
    });

    it('deployer uses it through sudo, over ssh', async () => {
      const result = await sshExec(m1.ssh.deployer, "sudo -n docker info --format '{{.ServerVersion}}'");
      expect(result.code, result.stderr).to.equal(0);
      expect(result.stdout.trim()).to.match(/^\d+\.\d+/);
    });

    it('two machines form a swarm (init on m1, join from m2) that runs a replicated service on both', async function () {
      this.timeout(180_000);
      const t0 = Date.now();
      await m1.sh(`docker swarm init --advertise-addr ${m1.ip}`);
      const token = await m1.sh('docker swarm join-token -q worker');
      await m2.sh(`docker swarm join --advertise-addr ${m2.ip} --token ${token} ${m1.ip}:2377`);
      await until('both swarm nodes Ready', async () => {
        const nodes = (await m1.sh("docker node ls --format '{{.Hostname}} {{.Status}}'")).split('\n').sort();
        return nodes.join(',') === 'm1 Ready,m2 Ready';
      });
      // No registry: each node gets the service image locally.
      await m2.sh('lab-busybox-image');
      // The kernel here has no IPVS, so the ingress routing mesh and service VIPs do not work:
      // ports are published in host mode, and services on an overlay use DNS round robin.
      await m1.sh('docker network create --driver overlay --attachable lab-overlay');
      const httpd = `sh -c 'echo "served by $(hostname)" >/www/index.html && httpd -f -p 8080 -h /www'`;
      await m1.sh(
        'docker service create --detach --name web --replicas 2 --placement-pref spread=node.id ' +
          '--publish mode=host,target=8080,published=8080 --network lab-overlay --endpoint-mode dnsrr ' +
          `lab/busybox:latest ${httpd}`,
      );
      await until('2 replicas running, one on m1 and one on m2', async () => {
        const tasks = (await m1.sh("docker service ps web --filter desired-state=running --format '{{.Node}} {{.CurrentState}}'")).split('\n');
        return tasks.filter((t) => t.includes('Running')).map((t) => t.split(' ')[0]).sort().join(',') === 'm1,m2';
      }, 60_000);
      // Published on each node's own address (asked from m3, outside the swarm).
      for (const node of [m1, m2]) {
        await until(`${node.name}:8080 answers`, async () => {
          const curl = await m3.exec(['curl', '-fsS', '--max-time', '3', `http://${node.ip}:8080/`]);
          return curl.code === 0 && curl.stdout.startsWith('served by');
        }, 30_000);
      }
      // Across the overlay: a container on m1 reaches both tasks (one of them on m2) by name.
      const script = [
        "for ip in $(nslookup tasks.web 127.0.0.11 | awk '/^Address: / && !/127.0.0.11/ { print $2 }'); do",
        '  printf "GET / HTTP/1.0\\r\\n\\r\\n" | nc -w 3 "$ip" 8080 | tail -n 1; echo',
        'done',
      ].join('\n');
      const overlay = await m1.sh(['docker', 'run', '--rm', '--network', 'lab-overlay', 'lab/busybox:latest', 'sh', '-c', script]);
      expect(new Set(overlay.split('\n').filter((l) => l.startsWith('served by'))).size).to.equal(2);
      console.log(`      swarm of 2 with a replicated service (host-mode ports, overlay) in ${seconds(t0)}`);
    });
  });

  describe('network and faults', () => {
    it('machines reach each other by address and by name', async () => {
      expect(await pings(m1, m2.ip)).to.equal(true);
      expect(await pings(m1, m3.ip)).to.equal(true);
      expect(await pings(m3, 'm2')).to.equal(true);
      expect(await pings(m2, lab.gateway)).to.equal(true);
    });

    it('is sealed: a connection to an address beyond the lab (an overlay address with no peer yet) is refused at once by the host', async () => {
      const bridge = lab.bridge!;
      expect(bridge).to.match(/^br-[0-9a-f]{12}$/);
      expect(sealedBridges()).to.include(bridge);
      for (const [address, port] of [['10.210.0.2', 2377], ['192.168.200.7', 22], ['172.16.5.5', 443]] as const) {
        const before = refusedBy(bridge);
        const nc = await m2.exec(['nc', '-z', '-v', '-w', '10', address, String(port)]);
        expect(nc.code, nc.stderr).to.not.equal(0);
        expect(nc.stderr).to.match(/Connection refused/);
        expect(refusedBy(bridge), `${address}:${port} refused by the seal`).to.be.greaterThan(before);
      }
      // The host and the other machines stay reachable.
      const before = refusedBy(bridge);
      expect(await pings(m2, lab.gateway)).to.equal(true);
      expect((await m2.exec(['nc', '-z', '-w', '5', m1.ip, '22'])).code).to.equal(0);
      expect(refusedBy(bridge)).to.equal(before);
    });

    it('disconnect cuts a machine off the network and reconnect restores it at the same address', async () => {
      await m3.disconnect();
      expect(await pings(m1, m3.ip)).to.equal(false);
      expect(await pings(m3, m1.ip)).to.equal(false);
      expect((await sshExec(m3.ssh.root, 'true', { timeoutMs: 3_000 })).code).to.equal(255);
      await m3.reconnect();
      expect(await m3.currentAddress()).to.equal(m3.ip);
      await until('m3 answers ping again', () => pings(m1, m3.ip), 10_000);
      expect(await pings(m3, m1.ip)).to.equal(true);
      expect((await sshExec(m3.ssh.root, 'hostname')).stdout.trim()).to.equal('m3');
    });

    it('pause freezes a machine (ssh does not answer) and unpause thaws it', async () => {
      await m3.pause();
      expect(await m3.status()).to.equal('paused');
      const frozen = await sshExec(m3.ssh.root, 'true', { timeoutMs: 3_000 });
      expect(frozen.code).to.equal(255);
      expect((await m3.exec('true')).code).to.not.equal(0);
      await m3.unpause();
      expect(await m3.status()).to.equal('running');
      const thawed = await sshExec(m3.ssh.root, 'echo thawed');
      expect(thawed.stdout.trim()).to.equal('thawed');
    });

    it('kill cuts the power and start boots the machine again, same address and host key', async () => {
      const hostKey = await m3.sh('cat /etc/ssh/ssh_host_ed25519_key.pub');
      await m3.kill();
      expect(await m3.status()).to.equal('exited');
      expect(await pings(m1, m3.ip)).to.equal(false);
      const t0 = Date.now();
      await m3.start();
      console.log(`      m3 back after a kill in ${seconds(t0)}`);
      expect(await m3.currentAddress()).to.equal(m3.ip);
      expect(await m3.sh('cat /etc/ssh/ssh_host_ed25519_key.pub')).to.equal(hostKey);
      expect((await sshExec(m3.ssh.deployer, 'sudo -n docker info --format "{{.ServerVersion}}"')).code).to.equal(0);
      expect(await pings(m1, m3.ip)).to.equal(true);
    });

    it('stop shuts a machine down cleanly (lab-init stops dockerd) and start brings it back', async () => {
      const t0 = Date.now();
      await m3.stop();
      expect(Date.now() - t0).to.be.below(9_000, 'stopped by SIGTERM, not by the SIGKILL after the timeout');
      expect(await m3.status()).to.equal('exited');
      expect(await dockerOk(['inspect', '--format', '{{.State.ExitCode}}', m3.container])).to.equal('0');
      await m3.start();
      expect((await sshExec(m3.ssh.root, 'hostname')).stdout.trim()).to.equal('m3');
    });
  });

  describe('cleanup', () => {
    it('removes leftovers of crashed runs, and refuses a lab name a live process still uses', async () => {
      const pid = await deadPid();
      const labels = (run: string, name: string, owner: number): string[] =>
        ['--label', `${LABEL}=${run}`, '--label', `${LABEL}.name=${name}`, '--label', `${LABEL}.pid=${owner}`];
      await dockerOk(['network', 'create', ...labels('stale-run', 'e2e-stale', pid), 'hangar-lab-e2e-stale']);
      await dockerOk(['create', '--name', 'hangar-lab-e2e-stale-m1', ...labels('stale-run', 'e2e-stale', pid), firstEnsure.tag, 'true']);
      const sleeper = spawn('sleep', ['60']);
      try {
        await dockerOk(['create', '--name', 'hangar-lab-e2e-busy-m1', ...labels('busy-run', 'e2e-busy', sleeper.pid ?? 1), firstEnsure.tag, 'true']);
        const other = new Lab({ name: 'e2e-other', log: () => undefined });
        const removed = await other.removeLeftovers();
        await other.teardown();
        expect(removed).to.equal(2);
        expect((await docker(['inspect', 'hangar-lab-e2e-stale-m1'])).code).to.not.equal(0);
        expect((await docker(['network', 'inspect', 'hangar-lab-e2e-stale'])).code).to.not.equal(0);
        // Owned by a live process: kept, and a lab of that name is refused.
        expect((await docker(['inspect', 'hangar-lab-e2e-busy-m1'])).code).to.equal(0);
        const busy = new Lab({ name: 'e2e-busy', log: () => undefined });
        const refused = await busy.removeLeftovers().then(
          () => undefined,
          (error: Error) => error,
        );
        await busy.teardown();
        expect(refused?.message).to.match(new RegExp(`in use by process ${sleeper.pid}`));
      } finally {
        sleeper.kill();
        await docker(['rm', '-f', 'hangar-lab-e2e-busy-m1', 'hangar-lab-e2e-stale-m1']);
        await docker(['network', 'rm', 'hangar-lab-e2e-stale']);
      }
    });

    it('a process that dies of an uncaught error leaves no machine behind', async function () {
      this.timeout(180_000);
      const { code, container } = await crashRun('e2e-crash-throw', '172.31.76.0/24', 'throw');
      expect(code).to.equal(1);
      expect(container).to.equal('hangar-lab-e2e-crash-throw-m1');
      expect((await listLab()).filter((r) => r.labels[`${LABEL}.name`] === 'e2e-crash-throw')).to.deep.equal([]);
    });

    it('a process interrupted with SIGINT leaves no machine behind', async function () {
      this.timeout(180_000);
      const { code } = await crashRun('e2e-crash-sigint', '172.31.76.0/24', 'wait', 'SIGINT');
      expect(code).to.equal(130);
      expect((await listLab()).filter((r) => r.labels[`${LABEL}.name`] === 'e2e-crash-sigint')).to.deep.equal([]);
    });

    it('teardown leaves no container or network with the lab label', async () => {
      const t0 = Date.now();
      const containers = lab.machines.map((m) => m.container);
      await lab.teardown();
      console.log(`      teardown in ${seconds(t0)}`);
      expect((await dockerOk(['ps', '-aq', '--filter', `label=${LABEL}=${lab.runId}`]))).to.equal('');
      expect((await dockerOk(['network', 'ls', '-q', '--filter', `label=${LABEL}=${lab.runId}`]))).to.equal('');
      expect((await docker(['network', 'inspect', lab.network])).code).to.not.equal(0);
      for (const container of containers) expect((await docker(['inspect', container])).code).to.not.equal(0);
      expect((await listLab()).filter((r) => r.labels[`${LABEL}.name`]?.startsWith('e2e-'))).to.deep.equal([]);
      // Its seal went with it, and no seal outlives its network (the crashed runs' included).
      expect(sealedBridges()).to.not.include(lab.bridge);
      const networks = (await dockerOk(['network', 'ls', '-q', '--no-trunc'])).split('\n').filter(Boolean);
      const bridges = new Set(networks.map((id) => `br-${id.slice(0, 12)}`));
      expect(sealedBridges().filter((b) => b.startsWith('br-') && !bridges.has(b))).to.deep.equal([]);
    });
  });
});
