import { existsSync } from 'node:fs';
import { onPath } from '../facts.js';
import { runCommand } from '../../core/process.js';
import type { KindExecutor } from './types.js';
import type { OsCheckUpdates, OsReboot, OsUpdate } from '../../core/tasks/host-kinds.js';

const APT_ENV = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };

function requireApt(): void {
  if (!onPath('apt-get')) throw new Error('no supported package manager on this machine (hangar manages apt-based systems: Debian, Ubuntu)');
}

/** Packages an upgrade would install, counted from a simulated run. */
async function countPending(): Promise<number> {
  const sim = await runCommand('apt-get', ['-s', '-o', 'Debug::NoLocking=1', 'dist-upgrade'], { env: APT_ENV, timeoutMs: 120_000 });
  if (sim.code !== 0) throw new Error(`apt-get -s dist-upgrade failed: ${sim.stderr.trim().split('\n').pop()}`);
  return sim.stdout.split('\n').filter((l) => l.startsWith('Inst ')).length;
}

const rebootRequired = () => existsSync('/var/run/reboot-required');

export const checkUpdates: KindExecutor<typeof OsCheckUpdates> = async ({ setPendingUpdates }) => {
  requireApt();
  const refresh = await runCommand('apt-get', ['update', '-q'], { env: APT_ENV, timeoutMs: 300_000 });
  const pending = await countPending();
  setPendingUpdates(pending);
  return { pending_updates: pending, reboot_required: rebootRequired(), index_refreshed: refresh.code === 0 };
};

export const osUpdate: KindExecutor<typeof OsUpdate> = async ({ setPendingUpdates }) => {
  requireApt();
  const refresh = await runCommand('apt-get', ['update', '-q'], { env: APT_ENV, timeoutMs: 300_000 });
  if (refresh.code !== 0) throw new Error(`apt-get update failed: ${refresh.stderr.trim().split('\n').pop()}`);
  const upgrade = await runCommand('apt-get', ['-y', '-q', '-o', 'Dpkg::Options::=--force-confdef', '-o', 'Dpkg::Options::=--force-confold', 'dist-upgrade'], {
    env: APT_ENV,
    timeoutMs: 3_600_000,
  });
  if (upgrade.code !== 0) throw new Error(`apt-get dist-upgrade failed: ${upgrade.stderr.trim().split('\n').pop()}`);
  const pending = await countPending();
  setPendingUpdates(pending);
  return { upgraded: upgrade.stdout.split('\n').filter((l) => l.startsWith('Setting up ')).length, pending_updates: pending, reboot_required: rebootRequired() };
};

export const reboot: KindExecutor<typeof OsReboot> = async ({ after, log, quiesce }) => {
  await quiesce();
  const command = onPath('systemctl') ? ['systemctl', ['reboot']] : ['reboot', []];
  after(async () => {
    log.info('rebooting on request of the control plane');
    await runCommand(command[0] as string, command[1] as string[]);
  });
  return { rebooting: true };
};
