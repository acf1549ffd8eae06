// Benchmark: volume backups and restores through hangar against restic run by hand (issue 28,
// "Measured"). One lab machine (test/e2e/lab: a container with its own sshd and dockerd) gets its
// agent over SSH from a control plane started as an operator runs it (bin/hangar serve, bench/fleet.ts);
// a local volume of mixed files on it is backed up by hangar to the real S3 server (SeaweedFS on the
// lab's gateway address), backed up again unchanged, and restored into a new volume. The floor is
// the same machine's restic (Debian's package, the one the agent runs) by hand on the same folder,
// into a repository of its own in the same bucket: init and backup (hangar's first backup makes its
// repository too), the unchanged backup, restore. docs/performance.md has the figures of a run.
//
//   npm run bench:backup -- [--size 1GiB]      (256MiB, 512M…: at least 16 MiB)
//
// The volume: half in large random files (64 MiB each), a quarter in 16 KiB random files (1 024 to
// a folder), a quarter in compressible text (16 MiB files of numbers). It is written just before
// the runs, so both read it from the page cache. Printed: MB/s (10^6 bytes of the volume a second)
// of each step, hangar's ÷ restic's, the unchanged backup's seconds against the goal (< 5 s for
// 1 GiB), and the load average (on a busy machine the figures are the neighbours' as much as ours).
import { existsSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { httpRequest } from '../core/http/client.js';
import { Lab, type Machine } from '../test/e2e/lab/lab.js';
import { S3Server } from '../test/support/s3-server.js';
import { startControlPlane, type ControlPlane } from './fleet.js';

const MiB = 1024 * 1024;
/** Issue 28: an unchanged 1 GiB volume backed up again in less than this. */
const GOAL_UNCHANGED_S = 5;

const args = parseArgs({ options: { size: { type: 'string', default: '1GiB' } } });

/** `1GiB`, `512MiB`, `512M` (MiB), or bytes; whole MiB, at least 16. */
function parseSize(text: string): number {
  const m = /^(\d+(?:\.\d+)?)\s*(GiB|G|MiB|M)?$/i.exec(text.trim());
  if (!m) throw new Error(`--size ${text}: give e.g. 1GiB, 256MiB or 512M`);
  const unit = (m[2] ?? '').toLowerCase().startsWith('g') ? 1024 * MiB : m[2] ? MiB : 1;
  const mib = Math.floor((Number(m[1]) * unit) / MiB);
  if (mib < 16) throw new Error(`--size ${text}: at least 16 MiB`);
  return mib;
}

/** The shell line that writes the mixed volume (sizes in MiB) under `folder`. */
function volumeScript(folder: string, mib: number): string {
  const big = Math.floor(mib / 2);
  const smallDirs = Math.max(1, Math.floor(mib / 4 / 16));
  const textFiles = Math.max(1, Math.floor((mib - big - smallDirs * 16) / 16));
  const bigFiles = Math.max(1, Math.round(big / 64));
  const bigEach = Math.floor(big / bigFiles);
  return [
    `set -e; mkdir -p ${folder}/media ${folder}/small ${folder}/text`,
    `for i in $(seq 1 ${bigFiles}); do head -c ${bigEach}M /dev/urandom >${folder}/media/clip-$i.bin; done`,
    `for d in $(seq 1 ${smallDirs}); do mkdir -p ${folder}/small/$d; head -c 16M /dev/urandom | split -b 16384 -a 3 - ${folder}/small/$d/part-; done`,
    `for i in $(seq 1 ${textFiles}); do seq $((i * 10000000)) $((i * 10000000 + 3000000)) | head -c 16M >${folder}/text/log-$i.txt; done`,
    `sync ${folder}`,
  ].join('\n');
}

const seconds = (since: number) => (Date.now() - since) / 1000;
const mbps = (bytes: number, s: number) => bytes / 1e6 / s;
const f1 = (v: number) => v.toFixed(1);
const f2 = (v: number) => v.toFixed(2);

async function main(): Promise<void> {
  const mib = parseSize(args.values.size!);
  const available = await Lab.availability();
  if (!available.docker || !available.image) throw new Error(`the machine lab cannot run here: ${available.why}`);
  if (!existsSync(path.resolve('dist/agent/manifest.json'))) throw new Error('the agent executables are not built: npm run build');
  const load = () => os.loadavg().map((v) => v.toFixed(2)).join(' ');
  const loadBefore = load();

  const lab = new Lab({ name: 'bench-backup', subnet: '172.31.85.0/24', log: () => undefined });
  let s3: S3Server | undefined;
  let cp: ControlPlane | undefined;
  try {
    const [m] = (await lab.start({ machines: 1 })) as [Machine];
    // On the lab's gateway (once the lab's network is there): the machine's restic reaches it.
    s3 = await S3Server.start({ host: lab.gateway });
    const bucket = await s3.bucket('bench-backups');
    cp = await startControlPlane('sqlite', {
      pgUrl: '',
      workers: '1',
      intervalS: 2,
      plugins: 'system,iam,nodes,agent-internal,ssh-profiles,provisioning,volumes,backups',
      env: { HANGAR_API__HOST: '0.0.0.0', HANGAR_DRIVERS: 'ssh', HANGAR_TASKS__POLL_WAIT_SECONDS: '10' },
    });
    const plane = cp;
    const boot = await httpRequest(`${plane.url}/v1/bootstrap`, { method: 'POST', ca: plane.ca, body: {} });
    const login = await httpRequest(`${plane.url}/v1/iam/login`, { method: 'POST', ca: plane.ca, body: { username: 'admin', password: boot.json.data.password } });
    const headers = { authorization: `Bearer ${login.json.data.token as string}` };
    const api = async (method: string, p: string, body?: unknown) => {
      const res = await httpRequest(`${plane.url}${p}`, { method, ca: plane.ca, headers, body });
      if (res.status >= 300) throw new Error(`${method} ${p}: ${res.status} ${res.text}`);
      return res.json?.data;
    };
    const poll = async <T>(what: string, probe: () => Promise<T | null>, timeoutS = 1800): Promise<T> => {
      const deadline = Date.now() + timeoutS * 1000;
      for (;;) {
        const found = await probe();
        if (found) return found;
        if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
        await new Promise((r) => setTimeout(r, 200));
      }
    };

    const deployed = await api('POST', '/v1/nodes/deploy', { ip_address: m.ip, ssh_user: 'root', ssh_key: m.ssh.root.privateKey });
    const nodeId = deployed.node_id as string;
    await poll('the agent', async () => {
      const n = await api('GET', `/v1/nodes/${nodeId}`);
      return n.status === 'ready' && n.restic?.present ? n : null;
    }, 300);

    const folder = '/srv/bench/volume';
    let t0 = Date.now();
    await m.sh(volumeScript(folder, mib), { timeoutMs: 1_800_000 });
    const bytes = Number(await m.sh(`du -sb --apparent-size ${folder} | cut -f1`));
    const files = Number(await m.sh(`find ${folder} -type f | wc -l`));
    console.log(`volume: ${(bytes / MiB).toFixed(0)} MiB in ${files} files on ${m.name}, written in ${f1(seconds(t0))} s; load average ${loadBefore}`);

    // hangar: a target, a volume, two backups, a restore into a new volume.
    const target = await api('POST', '/v1/backups/targets', { name: 'bench', endpoint: s3.endpoint, bucket: bucket.name, prefix: 'hangar', access_key_id: s3.credentials.accessKeyId, secret_access_key: s3.credentials.secretAccessKey });
    const volume = await api('POST', '/v1/volumes', { name: 'bench', node_id: nodeId, folder, type: 'local' });
    await poll('the volume', async () => ((await api('GET', `/v1/volumes/${volume.id}`)).status === 'ready' ? true : null), 120);
    const backup = async () => {
      const start = Date.now();
      const queued = await api('POST', `/v1/volumes/${volume.id}/backups`, { target_id: target.id });
      const run = await poll('the backup', async () => {
        const r = ((await api('GET', `/v1/volumes/${volume.id}/backups`)) as Array<Record<string, any>>).find((b) => b.id === queued.backup.id);
        return r && r.status !== 'running' ? r : null;
      });
      if (run.status !== 'succeeded') throw new Error(`the backup ${run.status}: ${run.error}`);
      return { wall: seconds(start), restic: Number(run.duration_seconds), id: run.id as string };
    };
    const first = await backup();
    const second = await backup();
    t0 = Date.now();
    const copy = await api('POST', '/v1/volumes', { name: 'bench-restored', node_id: nodeId, folder: '/srv/bench/restored', type: 'local', restore_from: { snapshot_id: first.id } });
    await poll('the restored volume', async () => {
      const v = await api('GET', `/v1/volumes/${copy.id}`);
      if (v.status === 'failed') throw new Error(`the restore failed: ${v.error}`);
      return v.status === 'ready' ? v : null;
    });
    const restore = seconds(t0);
    const same = await m.sh(`cd ${folder} && find . -type f -exec md5sum {} + | sort | md5sum; cd /srv/bench/restored && find . -type f -exec md5sum {} + | sort | md5sum`);
    if (new Set(same.split('\n')).size !== 1) throw new Error('the restored volume differs from the original');

    // The floor: restic by hand on the same machine and folder, into a repository of its own in the same bucket.
    const env = `export AWS_ACCESS_KEY_ID='${s3.credentials.accessKeyId}' AWS_SECRET_ACCESS_KEY='${s3.credentials.secretAccessKey}' RESTIC_PASSWORD=bench-floor RESTIC_REPOSITORY='s3:${s3.endpoint}/${bucket.name}/floor'`;
    const timed = async (command: string) => {
      const start = Date.now();
      await m.sh(`${env}; ${command}`, { timeoutMs: 1_800_000 });
      return seconds(start);
    };
    // As hangar's first backup does (restic cat config, then init), the repository is made in the first step.
    const floorFirst = await timed(`restic init -q && restic backup -q ${folder}`);
    const floorSecond = await timed(`restic backup -q ${folder}`);
    const floorRestore = await timed('restic restore latest -q --target /srv/bench/floor-restore');

    const loadAfter = load();
    const rows: Array<[string, number, number]> = [
      ['first backup', first.wall, floorFirst],
      ['unchanged backup', second.wall, floorSecond],
      ['restore into a new volume', restore, floorRestore],
    ];
    console.log(`\n${'step'.padEnd(28)}${'hangar s'.padStart(10)}${'MB/s'.padStart(9)}${'restic s'.padStart(10)}${'MB/s'.padStart(9)}${'hangar ÷ restic (MB/s)'.padStart(25)}`);
    for (const [step, ours, floor] of rows) {
      console.log(`${step.padEnd(28)}${f2(ours).padStart(10)}${f1(mbps(bytes, ours)).padStart(9)}${f2(floor).padStart(10)}${f1(mbps(bytes, floor)).padStart(9)}${`${f2(floor / ours)}×`.padStart(25)}`);
    }
    console.log(`\nrestic's own durations in hangar's runs: first ${f2(first.restic)} s, unchanged ${f2(second.restic)} s (the rest is the task's way there and back)`);
    console.log(
      mib === 1024
        ? `unchanged backup: ${f2(second.wall)} s against the goal of < ${GOAL_UNCHANGED_S} s for 1 GiB: ${second.wall < GOAL_UNCHANGED_S ? 'met' : 'missed'}`
        : `unchanged backup: ${f2(second.wall)} s (the goal, < ${GOAL_UNCHANGED_S} s, is for 1 GiB: run without --size)`,
    );
    console.log(`load average before ${loadBefore}, after ${loadAfter} (${os.cpus().length} cores)`);
  } finally {
    await cp?.stop().catch(() => undefined);
    await lab.teardown();
    await s3?.stop();
  }
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    console.error(err instanceof Error ? err.message : err);
    process.exit(1);
  },
);
