import { shellQuote, SshError, type SshSession } from '../../drivers/ssh/api.js';

/** Where the agent lives on a managed machine. */
export const REMOTE = {
  executable: '/usr/local/bin/hangar-agent',
  dataDir: '/var/lib/hangar-agent',
  unit: '/etc/systemd/system/hangar-agent.service',
  supervisor: '/usr/local/lib/hangar-agent/supervise.sh',
  pidFile: '/run/hangar-agent.pid',
  logFile: '/var/log/hangar-agent.log',
};

const SYSTEMD_UNIT = `[Unit]
Description=hangar agent
After=network-online.target
Wants=network-online.target

[Service]
ExecStart=${REMOTE.executable} --data-dir ${REMOTE.dataDir}
# Exit 0 is a requested stop; anything else (75 after an update, a crash) is restarted.
Restart=on-failure
RestartSec=3
# The agent never stops workloads; stopping it must not either.
KillMode=process

[Install]
WantedBy=multi-user.target
`;

/** Without systemd (containers, minimal hosts): a loop that restarts the agent unless it exited 0 (a requested stop). */
const SUPERVISOR = `#!/bin/sh
# hangar agent supervisor for machines without systemd. Stop it with: kill "$(cat ${REMOTE.pidFile})"
echo $$ > ${REMOTE.pidFile}
trap 'kill "$child" 2>/dev/null; rm -f ${REMOTE.pidFile}; exit 0' TERM INT
while :; do
  ${REMOTE.executable} --data-dir ${REMOTE.dataDir} >> ${REMOTE.logFile} 2>&1 &
  child=$!
  wait "$child"
  code=$?
  [ "$code" -eq 0 ] && { rm -f ${REMOTE.pidFile}; exit 0; }
  sleep 2
done
`;

export interface MachineFacts {
  os: string;
  osVersion: string;
  architecture: 'amd64' | 'arm64';
  hostname: string;
  systemd: boolean;
}

/** OS, architecture and init system; a clear error for what hangar cannot manage. */
export async function detectMachine(ssh: SshSession): Promise<MachineFacts> {
  const out = await ssh.must('detecting the OS', `uname -m; hostname; . /etc/os-release 2>/dev/null; echo "$ID"; echo "$VERSION_ID"; [ -d /run/systemd/system ] && echo systemd || echo none`);
  const [machine, hostname, id, version, init] = out.trim().split('\n').map((s) => s.trim());
  const architecture = ({ x86_64: 'amd64', amd64: 'amd64', aarch64: 'arm64', arm64: 'arm64' } as const)[machine as 'x86_64'];
  if (!architecture) throw new SshError('command', `unsupported architecture ${machine} on ${ssh.target.host}: hangar runs on amd64 and arm64`);
  if (!['debian', 'ubuntu', 'raspbian'].includes(id ?? '')) {
    throw new SshError('command', `unsupported OS ${id || 'unknown'} on ${ssh.target.host}: hangar installs Docker, WireGuard and restic on Debian and Ubuntu`);
  }
  return { os: id!, osVersion: version ?? '', architecture, hostname: hostname ?? '', systemd: init === 'systemd' };
}

/** The commands a managed machine needs and the Debian package that provides each: the engine, the overlay, volume backups. */
const PREREQUISITES: ReadonlyArray<{ command: string; debianPackage: string }> = [
  { command: 'docker', debianPackage: 'docker.io' },
  { command: 'wg', debianPackage: 'wireguard-tools' },
  { command: 'restic', debianPackage: 'restic' },
];

/** The prerequisites missing on the machine, installed with apt; the packages installed. */
export async function installPrerequisites(ssh: SshSession): Promise<string[]> {
  const commands = PREREQUISITES.map((p) => p.command).join(' ');
  const missing = (await ssh.must('checking for Docker, WireGuard and restic', `for c in ${commands}; do command -v $c >/dev/null 2>&1 || echo $c; done`)).split('\n').filter(Boolean);
  const packages = PREREQUISITES.filter((p) => missing.includes(p.command)).map((p) => p.debianPackage);
  if (!packages.length) return [];
  await ssh.must(`installing ${packages.join(', ')}`, `DEBIAN_FRONTEND=noninteractive apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q ${packages.join(' ')}`, { sudo: true, timeoutMs: 900_000 });
  return packages;
}

/** Stops a running agent (either supervisor), leaving workloads alone. */
export async function stopAgent(ssh: SshSession, facts: MachineFacts): Promise<void> {
  const cmd = facts.systemd
    ? 'systemctl stop hangar-agent 2>/dev/null || true'
    : `[ -f ${REMOTE.pidFile} ] && kill "$(cat ${REMOTE.pidFile})" 2>/dev/null; pkill -f '^${REMOTE.executable}' 2>/dev/null; sleep 0.5; true`;
  await ssh.exec(cmd, { sudo: true });
}

/** Installs the service definition and starts the agent. */
export async function startAgent(ssh: SshSession, facts: MachineFacts): Promise<'systemd' | 'supervisor'> {
  if (facts.systemd) {
    await ssh.upload(SYSTEMD_UNIT, REMOTE.unit, { mode: 0o644 });
    await ssh.must('starting the hangar-agent service', 'systemctl daemon-reload && systemctl enable hangar-agent && systemctl restart hangar-agent', { sudo: true });
    return 'systemd';
  }
  await ssh.upload(SUPERVISOR, REMOTE.supervisor, { mode: 0o755 });
  // A running supervisor would take the agent's SIGTERM exit (0) for a requested stop: replace both.
  await stopAgent(ssh, facts);
  await ssh.must('starting the agent supervisor', `nohup setsid ${shellQuote(REMOTE.supervisor)} >/dev/null 2>&1 < /dev/null &`, { sudo: true });
  return 'supervisor';
}

/** The node id the machine already has, when it was deployed before. */
export async function existingNodeId(ssh: SshSession): Promise<string | null> {
  const res = await ssh.exec(`cat ${REMOTE.dataDir}/agent.json 2>/dev/null`, { sudo: true });
  try {
    return (JSON.parse(res.stdout) as { node_id?: string }).node_id ?? null;
  } catch {
    return null;
  }
}

/** A WireGuard key pair made on the machine; only the public half comes back. */
export async function machineWireguardKey(ssh: SshSession): Promise<string | null> {
  const res = await ssh.exec(
    `command -v wg >/dev/null || exit 3; mkdir -p ${REMOTE.dataDir} && chmod 700 ${REMOTE.dataDir}; f=${REMOTE.dataDir}/wireguard.key; [ -s $f ] || (umask 077; wg genkey > $f); wg pubkey < $f`,
    { sudo: true },
  );
  return res.code === 0 ? res.stdout.trim() : null;
}
