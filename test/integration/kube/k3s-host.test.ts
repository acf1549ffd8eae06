import { expect } from 'chai';
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { K3S_EXECUTORS } from '../../../drivers/kubernetes/k3s-executors.js';
import { uninstall } from '../../../drivers/kubernetes/k3s.js';
import { K3sInstallServer } from '../../../drivers/kubernetes/membership-calls.js';
import { startAgent, stopAgent, REMOTE, type MachineFacts } from '../../../plugins/provisioning/remote.js';
import type { ExecOptions, SshSession } from '../../../drivers/ssh/api.js';
import { waitFor } from '../../support/agents.js';

// What an install and an uninstall do to a machine, where the lab cannot show it: the lab's machines
// have no systemd, and the lab's k3s is a stand-in (its containers are run by Debian's containerd,
// not by k3s's shims). The agent's own code (drivers/kubernetes/k3s.ts through its task executor,
// plugins/provisioning/remote.ts for the agent's unit) runs against a temporary root
// (HANGAR_K3S_ROOT) with recording test doubles of systemctl, ip, iptables-save/-restore and umount
// on PATH: the files written, the commands run. The processes killed are real ones.

const dirs: string[] = [];
const temp = (prefix: string) => {
  const dir = mkdtempSync(path.join(os.tmpdir(), prefix));
  dirs.push(dir);
  return dir;
};
const logOf = (file: string) => (existsSync(file) ? readFileSync(file, 'utf8').split('\n').filter(Boolean) : []);
const mode = (file: string) => statSync(file).mode & 0o777;
/** A process is gone (or a zombie waiting for its parent). */
const dead = (pid: number) => {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).startsWith('Z');
  } catch {
    return true;
  }
};

/** Test doubles on PATH: each logs its arguments to <log dir>/<name>.log; `ip` and `iptables-save` answer like a node that ran pods. */
function hostDoubles(logs: string): string {
  const bin = temp('hangar-k3s-host-bin-');
  const write = (name: string, body: string) => writeFileSync(path.join(bin, name), `#!/bin/sh\nPATH=/usr/sbin:/usr/bin:/sbin:/bin\necho "$*" >> ${logs}/${name}.log\n${body}\n`, { mode: 0o755 });
  write(
    'ip',
    `case "$*" in
  "netns show") printf 'cni-5d2c1a7e-0000-4000-8000-000000000001 (id: 0)\\nmy-own-ns\\n' ;;
  "-o link show") printf '%s\\n' '1: lo: <LOOPBACK,UP> mtu 65536 state UNKNOWN' '2: eth0@if9: <BROADCAST,UP> mtu 1500 state UP' '3: flannel.1: <BROADCAST,UP> mtu 1450 state UNKNOWN' '4: cni0: <BROADCAST,UP> mtu 1450 state UP' '5: veth3f2a1b@if2: <BROADCAST,UP> mtu 1450 master cni0 state UP' '6: docker0: <BROADCAST,UP> mtu 1500 state UP' ;;
esac
exit 0`,
  );
  write(
    'iptables-save',
    `printf '%s\\n' '*filter' ':INPUT ACCEPT [0:0]' ':KUBE-FIREWALL - [0:0]' ':CNI-FORWARD - [0:0]' ':DOCKER-USER - [0:0]' '-A INPUT -j KUBE-FIREWALL' '-A FORWARD -m comment --comment "flanneld forward" -s 10.42.0.0/16 -j ACCEPT' '-A FORWARD -j CNI-FORWARD' ':FLANNEL-FWD - [0:0]' '-A FORWARD -o cni-podman0 -j ACCEPT' '-A DOCKER-USER -j RETURN' '-A INPUT -p tcp --dport 22 -j ACCEPT' 'COMMIT'`,
  );
  write('iptables-restore', `cat > ${logs}/iptables-restore.in`);
  write('ip6tables-save', `printf '%s\\n' '*filter' ':INPUT ACCEPT [0:0]' 'COMMIT'`);
  write('ip6tables-restore', `cat > ${logs}/ip6tables-restore.in`);
  // umount takes the mount out of the table the test gives; a pod's NFS volume is busy and stays.
  write('umount', `case "$2" in *kubernetes.io~nfs*) echo "umount: $2: target is busy." >&2; exit 32 ;; esac\ngrep -v " $2 " ${logs}/mounts > ${logs}/mounts.new; mv ${logs}/mounts.new ${logs}/mounts`);
  return bin;
}

describe('k3s on a machine: the systemd install path and an uninstall that stops what k3s ran (as k3s-killall.sh)', () => {
  let root: string;
  let logs: string;
  const previous = { root: process.env.HANGAR_K3S_ROOT, path: process.env.PATH };
  const children: number[] = [];

  beforeEach(() => {
    root = temp('hangar-k3s-host-root-');
    logs = temp('hangar-k3s-host-logs-');
    process.env.HANGAR_K3S_ROOT = root;
    process.env.PATH = `${hostDoubles(logs)}:${previous.path}`;
  });
  afterEach(() => {
    process.env.PATH = previous.path;
    if (previous.root === undefined) delete process.env.HANGAR_K3S_ROOT;
    else process.env.HANGAR_K3S_ROOT = previous.root;
  });
  after(() => {
    for (const pid of children) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // gone
      }
    }
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  });

  /** A detached process running `script` from `file` (made executable), with its children. */
  function run(file: string, script: string): number {
    mkdirSync(path.dirname(file), { recursive: true });
    writeFileSync(file, script, { mode: 0o755 });
    const child = spawn(file, ['-namespace', 'k8s.io', '-id', 'abc'], { detached: true, stdio: 'ignore' });
    child.unref();
    children.push(child.pid!);
    return child.pid!;
  }
  const childrenOf = (pid: number) =>
    waitFor(
      () => {
        const found = readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number);
        return found.length === 2 ? found : null;
      },
      { what: `the children of ${pid}` },
    );

  it('uninstalling a k3s that ran pods kills its containerd shims and the pods’ processes, unmounts and removes their folders, deletes the CNI’s interfaces, namespaces and iptables rules', async function () {
    this.timeout(30_000);
    const at = (p: string) => path.join(root, p);
    // k3s (the pid file of a detached k3s) and a containerd shim of its data dir with two processes of a pod under it.
    const k3s = run(at('usr/local/bin/k3s'), '#!/bin/sh\nexec sleep 600\n');
    mkdirSync(at('run'), { recursive: true });
    writeFileSync(at('run/k3s.pid'), `${k3s}\n`);
    const shimScript = '#!/bin/sh\nsleep 600 &\nsleep 600 &\nwait\n';
    const shim = run(at('var/lib/rancher/k3s/data/4f5e6d/bin/containerd-shim-runc-v2'), shimScript);
    const pod = await childrenOf(shim);
    // A shim that is not this k3s's (another root: another runtime's containers) is left alone.
    const other = run(path.join(temp('hangar-other-runtime-'), 'k3s/data/4f5e6d/bin/containerd-shim-runc-v2'), shimScript);
    const otherPod = await childrenOf(other);
    for (const dir of ['run/k3s/containerd/io.containerd.runtime.v2.task/k8s.io/abc', 'var/lib/kubelet/pods/0a1b/volumes/kubernetes.io~secret/token', 'var/lib/cni/networks/cbr0', 'etc/rancher/k3s']) {
      mkdirSync(at(dir), { recursive: true });
    }
    const share = at('var/lib/kubelet/pods/0a1b/volumes/kubernetes.io~nfs/data');
    mkdirSync(share, { recursive: true });
    writeFileSync(path.join(share, 'keep.txt'), 'the volume’s data');
    const mounts = path.join(logs, 'mounts');
    writeFileSync(
      mounts,
      [
        `overlay ${at('run/k3s/containerd/io.containerd.runtime.v2.task/k8s.io/abc/rootfs')} overlay rw 0 0`,
        `shm ${at('run/k3s/containerd/io.containerd.grpc.v1.cri/sandboxes/abc/shm')} tmpfs rw 0 0`,
        `tmpfs ${at('var/lib/kubelet/pods/0a1b/volumes/kubernetes.io~secret/token')} tmpfs rw 0 0`,
        `192.0.2.9:/srv/hangar/data ${share} nfs4 rw 0 0`,
        `nsfs ${at('run/netns/cni-5d2c1a7e-0000-4000-8000-000000000001')} nsfs rw 0 0`,
        `tmpfs ${at('var/lib/kubelet-other')} tmpfs rw 0 0`,
        `overlay /var/lib/docker/overlay2/xyz/merged overlay rw 0 0`,
        '',
      ].join('\n'),
    );

    // k3s's own uninstall script, as its installer leaves it, runs first: the machine's (here under the root), never this host's.
    writeFileSync(at('usr/local/bin/k3s-agent-uninstall.sh'), `#!/bin/sh\necho "$0" > ${logs}/k3s-uninstall.ran\n`, { mode: 0o755 });

    const result = await uninstall(mounts);
    expect(result.uninstalled).to.equal(true);
    expect(readFileSync(path.join(logs, 'k3s-uninstall.ran'), 'utf8').trim()).to.equal(at('usr/local/bin/k3s-agent-uninstall.sh'));
    expect(result.killall!.killed).to.have.members([shim, ...pod]);
    await waitFor(() => [k3s, shim, ...pod].every(dead), { what: 'k3s, the shim and the pod’s processes gone' });
    expect([other, ...otherPod].some(dead), 'another runtime’s shim and processes keep running').to.equal(false);

    // Deepest first, only those under k3s's, the kubelet's and the CNI's folders.
    const unmounted = [
      at('run/k3s/containerd/io.containerd.runtime.v2.task/k8s.io/abc/rootfs'),
      at('run/k3s/containerd/io.containerd.grpc.v1.cri/sandboxes/abc/shm'),
      at('var/lib/kubelet/pods/0a1b/volumes/kubernetes.io~secret/token'),
      at('run/netns/cni-5d2c1a7e-0000-4000-8000-000000000001'),
      share,
    ].sort((a, b) => b.length - a.length || b.localeCompare(a));
    expect(logOf(path.join(logs, 'umount.log'))).to.deep.equal(unmounted.map((m) => `-f ${m}`));
    expect(result.killall!.unmounted).to.deep.equal(unmounted);
    // Still mounted (busy): neither it nor a folder above it is removed, its data stays.
    expect(result.killall!.still_mounted).to.deep.equal([share]);
    expect(readFileSync(path.join(share, 'keep.txt'), 'utf8')).to.equal('the volume’s data');
    expect(existsSync(at('var/lib/kubelet/pods/0a1b/volumes/kubernetes.io~secret')), 'beside it, what was unmounted is not removed either (same folder)').to.equal(true);

    expect(logOf(path.join(logs, 'ip.log'))).to.deep.equal([
      'netns show',
      'netns delete cni-5d2c1a7e-0000-4000-8000-000000000001',
      '-o link show',
      'link delete veth3f2a1b',
      'link delete cni0',
      'link delete flannel.1',
    ]);
    expect(result.killall!.interfaces).to.deep.equal(['veth3f2a1b', 'cni0', 'flannel.1']);
    // iptables-save | grep -v KUBE- | grep -v CNI- | grep -iv flannel | iptables-restore: KUBE- and CNI- as written (podman's
    // cni-podman0 stays), flannel in any case; IPv6 had none of them: not restored.
    expect(readFileSync(path.join(logs, 'iptables-restore.in'), 'utf8').split('\n')).to.deep.equal(['*filter', ':INPUT ACCEPT [0:0]', ':DOCKER-USER - [0:0]', '-A FORWARD -o cni-podman0 -j ACCEPT', '-A DOCKER-USER -j RETURN', '-A INPUT -p tcp --dport 22 -j ACCEPT', 'COMMIT', '']);
    expect(existsSync(path.join(logs, 'ip6tables-restore.in'))).to.equal(false);
    expect(result.killall!.rules_removed).to.equal(6);

    for (const gone of ['usr/local/bin/k3s', 'etc/rancher/k3s', 'var/lib/rancher/k3s', 'run/k3s', 'var/lib/cni', 'run/k3s.pid']) {
      expect(existsSync(at(gone)), `${gone} removed`).to.equal(false);
    }
  });

  it('a machine without k3s (another kubelet, podman): uninstalling answers uninstalled false and touches nothing — no process, mount, folder, interface or iptables rule', async function () {
    this.timeout(30_000);
    const at = (p: string) => path.join(root, p);
    // systemd, a kubeadm kubelet with a pod (its volume mounted, its network namespace), the CNI's state; no k3s.
    mkdirSync(at('run/systemd/system'), { recursive: true });
    const bin = temp('hangar-k3s-systemctl-');
    writeFileSync(path.join(bin, 'systemctl'), `#!/bin/sh\necho "$*" >> ${logs}/systemctl.log\nexit 3\n`, { mode: 0o755 });
    process.env.PATH = `${bin}:${process.env.PATH}`;
    const kept = ['var/lib/kubelet/pods/0a1b/volumes/kubernetes.io~secret/token', 'var/lib/kubelet/plugins/csi', 'var/lib/cni/networks/cbr0', 'run/netns'];
    for (const dir of kept) mkdirSync(at(dir), { recursive: true });
    writeFileSync(at('var/lib/cni/networks/cbr0/10.244.0.5'), 'abc');
    const mounts = path.join(logs, 'mounts');
    writeFileSync(
      mounts,
      [`tmpfs ${at('var/lib/kubelet/pods/0a1b/volumes/kubernetes.io~secret/token')} tmpfs rw 0 0`, `nsfs ${at('run/netns/cni-5d2c1a7e-0000-4000-8000-000000000001')} nsfs rw 0 0`, ''].join('\n'),
    );
    // A containerd shim of another runtime under a k3s-looking path elsewhere keeps running.
    const other = run(path.join(temp('hangar-other-runtime-'), 'k3s/data/4f5e6d/bin/containerd-shim-runc-v2'), '#!/bin/sh\nsleep 600 &\nwait\n');

    const result = await uninstall(mounts);
    expect(result).to.deep.equal({ uninstalled: false });
    for (const tool of ['umount', 'ip', 'iptables-save', 'ip6tables-save', 'iptables-restore', 'ip6tables-restore']) {
      expect(logOf(path.join(logs, `${tool}.log`)), `${tool} not run`).to.deep.equal([]);
    }
    expect(existsSync(path.join(logs, 'iptables-restore.in')), 'iptables not rewritten').to.equal(false);
    expect(logOf(path.join(logs, 'systemctl.log')).filter((l) => !l.startsWith('is-active')), 'no unit disabled, no daemon-reload').to.deep.equal([]);
    for (const dir of kept) expect(existsSync(at(dir)), `${dir} kept`).to.equal(true);
    expect(readFileSync(at('var/lib/cni/networks/cbr0/10.244.0.5'), 'utf8')).to.equal('abc');
    expect(dead(other), 'another runtime’s shim keeps running').to.equal(false);
  });

  it('with systemd: the install executor writes the server’s unit (0644) and environment file (0600), runs daemon-reload and enable --now; uninstalling disables both units and removes them', async function () {
    this.timeout(30_000);
    const at = (p: string) => path.join(root, p);
    mkdirSync(at('run/systemd/system'), { recursive: true });
    // systemctl: `enable --now` "starts" k3s, which writes its kubeconfig and join token; is-active answers from then on.
    const bin = temp('hangar-k3s-systemctl-');
    writeFileSync(
      path.join(bin, 'systemctl'),
      `#!/bin/sh\nPATH=/usr/sbin:/usr/bin:/sbin:/bin\necho "$*" >> ${logs}/systemctl.log\ncase "$1" in\n  enable) mkdir -p ${at('etc/rancher/k3s')} ${at('var/lib/rancher/k3s/server')}; echo 'apiVersion: v1' > ${at('etc/rancher/k3s/k3s.yaml')}; echo K10abc::server:x > ${at('var/lib/rancher/k3s/server/node-token')}; touch ${logs}/active ;;\n  is-active) [ "$3" = k3s ] && [ -e ${logs}/active ] ;;\n  disable) rm -f ${logs}/active ;;\nesac\n`,
      { mode: 0o755 },
    );
    process.env.PATH = `${bin}:${process.env.PATH}`;
    const binary = Buffer.from('#!/bin/sh\n[ "$1" = --version ] && echo "k3s version v1.33.1+k3s1 (test double)"\n');
    const sha256 = createHash('sha256').update(binary).digest('hex');
    const install = K3S_EXECUTORS.find(([kind]) => kind === K3sInstallServer)![1];
    const ctx = {
      payload: { node_name: 'node-a1', node_ip: '10.210.0.2', tls_sans: ['192.0.2.10', '10.210.0.2'], binary: { sha256, architecture: 'amd64' } },
      download: async (p: string) => (p.startsWith('/v1/kubernetes/k3s/binary') ? { status: 200, body: binary, headers: {} } : { status: 404, body: Buffer.from('none'), headers: {} }),
      log: { info: () => undefined, warn: () => undefined, error: () => undefined, debug: () => undefined },
    };
    expect(await install(ctx as unknown as Parameters<typeof install>[0])).to.deep.equal({ runtime_node_id: 'node-a1', version: 'v1.33.1+k3s1' });

    const unitFile = at('etc/systemd/system/k3s.service');
    const envFile = at('etc/systemd/system/k3s.service.env');
    expect(mode(unitFile)).to.equal(0o644);
    expect(mode(envFile)).to.equal(0o600);
    expect(readFileSync(unitFile, 'utf8')).to.equal(
      [
        '[Unit]',
        'Description=k3s server (installed by hangar)',
        'Wants=network-online.target',
        'After=network-online.target',
        '',
        '[Service]',
        'Type=exec',
        `EnvironmentFile=${envFile}`,
        `ExecStart=${at('usr/local/bin/k3s')} server --node-name node-a1 --node-ip 10.210.0.2 --tls-san 192.0.2.10 --tls-san 10.210.0.2 --write-kubeconfig-mode 0600 --disable traefik`,
        'KillMode=process',
        'Delegate=yes',
        'LimitNOFILE=1048576',
        'Restart=always',
        'RestartSec=5s',
        '',
        '[Install]',
        'WantedBy=multi-user.target',
        '',
      ].join('\n'),
    );
    expect(readFileSync(envFile, 'utf8').split('\n').filter((l) => l && !l.startsWith('#')), 'a server starts with no secret in its environment').to.deep.equal([]);
    expect(mode(at('usr/local/bin/k3s'))).to.equal(0o755);
    const installed = logOf(path.join(logs, 'systemctl.log'));
    expect(installed.filter((l) => !l.startsWith('is-active'))).to.deep.equal(['daemon-reload', 'enable --now k3s']);
    expect(installed[0], 'asked whether k3s runs before anything').to.equal('is-active --quiet k3s');

    const result = await uninstall(path.join(logs, 'no-mounts'));
    expect(result.uninstalled).to.equal(true);
    expect(logOf(path.join(logs, 'systemctl.log')).slice(installed.length)).to.deep.equal(['disable --now k3s', 'disable --now k3s-agent', 'daemon-reload']);
    for (const gone of [unitFile, envFile, at('etc/systemd/system/k3s-agent.service'), at('usr/local/bin/k3s'), at('var/lib/rancher/k3s')]) expect(existsSync(gone), gone).to.equal(false);
  });

  it('the agent’s own unit with systemd: written to /etc/systemd/system/hangar-agent.service (0644), then daemon-reload, enable and restart; a stop goes through systemctl', async () => {
    const uploads: Array<{ path: string; content: string; mode?: number }> = [];
    const commands: Array<{ command: string; sudo?: boolean }> = [];
    const session = {
      target: { host: '192.0.2.10', port: 22, username: 'deployer' },
      localAddress: '192.0.2.1',
      hostKeyFingerprint: 'SHA256:test',
      isRoot: false,
      async exec(command: string, options?: ExecOptions) {
        commands.push({ command, sudo: options?.sudo });
        return { code: 0, stdout: '', stderr: '' };
      },
      async must(_what: string, command: string, options?: ExecOptions) {
        commands.push({ command, sudo: options?.sudo });
        return '';
      },
      async upload(content: string | Buffer, remotePath: string, options?: { mode?: number }) {
        uploads.push({ path: remotePath, content: content.toString(), mode: options?.mode });
      },
      close() {},
    } as unknown as SshSession;
    const facts: MachineFacts = { os: 'debian', osVersion: '12', architecture: 'amd64', hostname: 'm1', systemd: true };
    expect(await startAgent(session, facts)).to.equal('systemd');
    expect(uploads.map((u) => [u.path, u.mode])).to.deep.equal([['/etc/systemd/system/hangar-agent.service', 0o644]]);
    const unit = uploads[0]!.content.split('\n');
    expect(unit).to.include.members([`ExecStart=${REMOTE.executable} --data-dir ${REMOTE.dataDir}`, 'Restart=on-failure', 'KillMode=process', 'WantedBy=multi-user.target', 'After=network-online.target']);
    expect(commands).to.deep.equal([{ command: 'systemctl daemon-reload && systemctl enable hangar-agent && systemctl restart hangar-agent', sudo: true }]);
    await stopAgent(session, facts);
    expect(commands[1]).to.deep.equal({ command: 'systemctl stop hangar-agent 2>/dev/null || true', sudo: true });
  });
});
