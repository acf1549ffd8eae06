// Benchmark: rollouts and rollbacks of an instance on a lab swarm, through hangar's load balancer
// (issue 29, "Measured"). Two lab machines (test/e2e/lab: containers with their own sshd and
// dockerd) get their agents over SSH from a control plane started as an operator runs it
// (bin/hangar serve, bench/fleet.ts) and form a swarm; the balancer (HAProxy) runs on the manager.
// An instance of three replicas of busybox's httpd answering its version (HTTP health check every
// second, start-first, one at a time, `monitor_s: 2`, rolled back by the swarm on a failure; the
// image present on both machines) is then:
//
//   - updated N times (a new VERSION each): the time from the PATCH to the swarm's update
//     `completed` (every replica on the new revision), and to hangar showing it `running` on it;
//   - rolled back N times (POST …/rollback to the revision before): the same times;
//   - given a version whose health check never passes, F times: the time from the failure being
//     observable (a container of that version reported unhealthy by its engine) to the swarm's
//     rollback starting
//     (`rollback_started`), and to hangar's `rolled_back`;
//
// each under a request loop through the balancer (a GET every 50 ms on a new connection,
// test/support/request-loop.ts): the failed requests, and answers from a version that should not
// answer. Printed: p50/p99 of each, the failures, the goals (update p99 < 15 s with 0 failed
// requests; the rollback started within 2 s of the failure) and the load average.
//
//   npm run bench:rollout -- [--rounds 20] [--failures 5]
//
// The failure and the rollback's start are read from the engines' own journals afterwards (docker
// events: a container's first health_status unhealthy on either machine, the manager's service event
// whose updatestate is rollback_started), so they carry no polling delay.
import { existsSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { httpRequest } from '../core/http/client.js';
import { Lab, type Machine } from '../test/e2e/lab/lab.js';
import { describeLoop, RequestLoop, VERSIONED_HEALTH, VERSIONED_HTTPD, type LoopReport } from '../test/support/request-loop.js';
import { adminApi, percentile, startControlPlane, type ControlPlane } from './fleet.js';

const IMAGE = 'lab/busybox:latest';
const LB_IMAGE = 'lab/haproxy:latest';
const REPLICAS = 3;
const GOAL_UPDATE_P99_S = 15;
const GOAL_ROLLBACK_START_S = 2;

const args = parseArgs({ options: { rounds: { type: 'string', default: '20' }, failures: { type: 'string', default: '5' } } });
const rounds = Number(args.values.rounds);
const failures = Number(args.values.failures);

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const f1 = (v: number) => (Number.isNaN(v) ? 'n/a' : v.toFixed(1));
const f2 = (v: number) => (Number.isNaN(v) ? 'n/a' : v.toFixed(2));

/** One measured change: seconds to the swarm's completion and to hangar's running, and what the loop saw. */
interface Round {
  swarmS: number;
  hangarS: number;
  loop: LoopReport;
  /** Answers from versions other than the one before and the one after. */
  stray: number;
}

async function main(): Promise<void> {
  const available = await Lab.availability();
  if (!available.docker || !available.image) throw new Error(`the machine lab cannot run here: ${available.why}`);
  if (!existsSync(path.resolve('dist/agent/manifest.json'))) throw new Error('the agent executables are not built: npm run build');
  const load = () => os.loadavg().map((v) => v.toFixed(2)).join(' ');
  const loadBefore = load();
  const startedAt = new Date().toISOString();

  const lab = new Lab({ name: 'bench-rollout', subnet: '172.31.86.0/24', log: () => undefined });
  let cp: ControlPlane | undefined;
  try {
    const machines = await lab.start({ machines: 2 });
    const manager: Machine = machines[0]!;
    const images = Promise.all([...machines.map((m) => m.sh(`lab-busybox-image ${IMAGE}`)), manager.sh(`lab-haproxy-image ${LB_IMAGE}`, { timeoutMs: 300_000 })]);
    cp = await startControlPlane('sqlite', {
      pgUrl: '',
      workers: '1',
      intervalS: 2,
      plugins: 'system,iam,nodes,agent-internal,ssh-profiles,provisioning,swarms,compute,gateway',
      env: {
        HANGAR_API__HOST: '0.0.0.0',
        // The lab kernel has no IPVS: no routing mesh and no service VIPs (as the lab's tests).
        HANGAR_SWARMS__OBSERVE_INTERVAL_SECONDS: '1',
        HANGAR_SWARMS__ADVERTISE: 'address',
        HANGAR_SWARMS__PUBLISH_MODE: 'host',
        HANGAR_SWARMS__ENDPOINT_MODE: 'dnsrr',
        HANGAR_GATEWAY__IMAGE: LB_IMAGE,
      },
    });
    const api = await adminApi(cp);
    const poll = async <T>(what: string, probe: () => Promise<T | null>, timeoutS = 300, everyMs = 200): Promise<T> => {
      const deadline = Date.now() + timeoutS * 1000;
      for (;;) {
        const found = await probe();
        if (found) return found;
        if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
        await sleep(everyMs);
      }
    };

    // The swarm: both machines' agents over SSH, the first one managing.
    const nodes: string[] = [];
    for (const m of machines) nodes.push((await api('POST', '/v1/nodes/deploy', { ip_address: m.ip, ssh_user: 'root', ssh_key: m.ssh.root.privateKey })).node_id);
    await images;
    for (const id of nodes) await poll(`node ${id} ready`, async () => ((await api('GET', `/v1/nodes/${id}`)).status === 'ready' ? true : null), 300, 500);
    const swarm = await api('POST', '/v1/swarms', { name: 'bench' });
    for (const id of nodes) {
      await api('POST', `/v1/swarms/${swarm.id}/join`, { node_id: id });
      await poll(`node ${id} in the swarm`, async () => ((await api('GET', `/v1/swarms/${swarm.id}`)).members.find((m: { node_id: string }) => m.node_id === id)?.status === 'active' ? true : null), 180, 500);
    }
    await api('POST', `/v1/swarms/${swarm.id}/lb`);
    await poll('the balancer running', async () => ((await api('GET', `/v1/swarms/${swarm.id}`)).load_balancer?.status === 'running' ? true : null), 180, 500);

    const created = await api('POST', '/v1/compute/instances', {
      name: 'web',
      swarm_id: swarm.id,
      image: IMAGE,
      type: 'nano',
      replicas: REPLICAS,
      http_port: 8080,
      env: { VERSION: 'v0' },
      command: VERSIONED_HTTPD,
      health: VERSIONED_HEALTH,
      rollout: { order: 'start-first', on_failure: 'rollback', parallelism: 1, monitor_s: 2 },
    });
    const { id, domain, runtime_name: runtime } = created;
    const balancer = `http://${manager.ip}/`;
    const instance = () => api('GET', `/v1/compute/instances/${id}`);
    const runs = async (version: string) => {
      const i = await instance();
      return i.status === 'running' && i.running === REPLICAS && i.env.VERSION === version && i.env.READY === undefined;
    };
    await poll('v0 running', async () => ((await runs('v0')) ? true : null), 180);
    await poll('the balancer answering v0', async () => ((await httpRequest(balancer, { headers: { host: domain }, timeoutMs: 2000 }).catch(() => null))?.text.trim() === 'v0' ? true : null), 60, 500);
    /** The swarm's own account of the service's last update: its state and when it completed ('' before any). */
    const updateStatus = async () => manager.sh(`docker service inspect ${runtime} --format '{{if .UpdateStatus}}{{.UpdateStatus.State}} {{.UpdateStatus.CompletedAt}}{{end}}'`);
    console.log(`swarm of ${machines.length} lab machines, instance ${id} (${REPLICAS} replicas) behind the balancer on ${manager.ip}; load average ${loadBefore}`);

    /** Makes a change and measures it: until the swarm says `completed` and hangar shows `version` running, under a loop. */
    async function measure(change: () => Promise<unknown>, from: string, version: string): Promise<Round> {
      const previous = await updateStatus();
      const loop = new RequestLoop(balancer, domain, 50);
      const t0 = Date.now();
      await change();
      const [swarmS, hangarS] = await Promise.all([
        poll('the swarm to complete the update', async () => {
          const status = await updateStatus();
          return status !== previous && status.startsWith('completed ') ? (Date.now() - t0) / 1000 : null;
        }, 300, 100),
        poll(`hangar to show ${version} running`, async () => ((await runs(version)) ? (Date.now() - t0) / 1000 : null), 300, 100),
      ]);
      await sleep(1000);
      const report = await loop.stop();
      const stray = Object.entries(report.answers).filter(([answer]) => answer !== from && answer !== version).reduce((n, [, count]) => n + count, 0);
      return { swarmS, hangarS, loop: report, stray };
    }

    const updates: Round[] = [];
    for (let k = 1; k <= rounds; k++) {
      const round = await measure(() => api('PATCH', `/v1/compute/instances/${id}`, { env: { VERSION: `v${k}` } }), `v${k - 1}`, `v${k}`);
      updates.push(round);
      console.log(`update ${String(k).padStart(2)}: swarm ${f1(round.swarmS)} s, hangar ${f1(round.hangarS)} s; ${describeLoop(round.loop)}`);
    }
    const rollbacks: Round[] = [];
    let current = rounds;
    for (let k = 1; k <= rounds; k++) {
      // Back to the revision before the newest (newest first): the other of the last two versions.
      const before = ((await api('GET', `/v1/compute/instances/${id}/revisions`)) as Array<{ number: number }>)[1]!;
      const target = current === rounds ? rounds - 1 : rounds;
      const round = await measure(() => api('POST', `/v1/compute/instances/${id}/rollback`, { revision: before.number }), `v${current}`, `v${target}`);
      rollbacks.push(round);
      current = target;
      console.log(`rollback ${String(k).padStart(2)}: swarm ${f1(round.swarmS)} s, hangar ${f1(round.hangarS)} s; ${describeLoop(round.loop)}`);
    }

    // Versions that never become healthy: the failure, the swarm's rollback, hangar's rolled_back.
    const automatic: Array<{ startS: number; hangarS: number; loop: LoopReport; stray: number }> = [];
    for (let k = 1; k <= failures; k++) {
      const since = Math.floor(Date.now() / 1000) - 1;
      const loop = new RequestLoop(balancer, domain, 50);
      await api('PATCH', `/v1/compute/instances/${id}`, { env: { VERSION: `bad${k}`, READY: 'no' } });
      const rolledBackAt = await poll('hangar to show rolled_back', async () => ((await instance()).status === 'rolled_back' ? Date.now() : null), 300, 100);
      await poll('the swarm’s rollback completed', async () => ((await updateStatus()).startsWith('rollback_completed') ? true : null), 120);
      await sleep(1000);
      const report = await loop.stop();
      // The engines' own journal (docker events, each machine's clock the host's): when a container of
      // the failing version was first unhealthy (on whichever machine ran it), and when the manager
      // started the service's rollback.
      const until = Math.ceil(Date.now() / 1000) + 1;
      const journal = (m: Machine, filter: string, format: string) => m.sh(`docker events --since ${since} --until ${until} ${filter} --format '${format}'`).then((out) => out.split('\n').filter(Boolean));
      const unhealthy = (await Promise.all(machines.map((m) => journal(m, '--filter type=container --filter event=health_status', '{{.TimeNano}} {{.Action}}'))))
        .flat()
        .filter((line) => line.endsWith('unhealthy'))
        .map((line) => Number(line.split(' ')[0]) / 1e6);
      const serviceEvents = await journal(manager, '--filter type=service', '{{.TimeNano}} {{index .Actor.Attributes "updatestate.new"}}');
      const failedAt = unhealthy.length ? Math.min(...unhealthy) : NaN;
      const startedAtMs = Number(serviceEvents.find((line) => line.endsWith(' rollback_started'))?.split(' ')[0]) / 1e6;
      if (Number.isNaN(failedAt) || Number.isNaN(startedAtMs)) console.log(`  the engines' journal: ${unhealthy.length} unhealthy, service events ${serviceEvents.map((l) => l.split(' ')[1] || '-').join(' ')}`);
      const stray = Object.entries(report.answers).filter(([answer]) => answer !== `v${current}`).reduce((n, [, count]) => n + count, 0);
      automatic.push({ startS: (startedAtMs - failedAt) / 1000, hangarS: (rolledBackAt - failedAt) / 1000, loop: report, stray });
      console.log(`failing version ${k}: failure → swarm rollback started ${f2((startedAtMs - failedAt) / 1000)} s, → hangar rolled_back ${f2((rolledBackAt - failedAt) / 1000)} s; ${describeLoop(report)}`);
      // Back to the healthy spec before the next one (not measured).
      await api('PATCH', `/v1/compute/instances/${id}`, { env: { VERSION: `v${current}` } });
      await poll(`v${current} running again`, async () => ((await runs(`v${current}`)) ? true : null), 300);
    }

    const loadAfter = load();
    const row = (what: string, values: number[]) => values.length && console.log(`${what.padEnd(52)}${f1(percentile(values, 50)).padStart(8)}${f1(percentile(values, 99)).padStart(8)}${f1(Math.max(...values)).padStart(8)}`);
    const failed = (list: Array<{ loop: LoopReport }>) => list.reduce((n, r) => n + r.loop.failures.length, 0);
    const requests = (list: Array<{ loop: LoopReport }>) => list.reduce((n, r) => n + r.loop.requests, 0);
    const strays = (list: Array<{ stray: number }>) => list.reduce((n, r) => n + r.stray, 0);
    console.log(`\nbench:rollout, ${startedAt}: ${rounds} updates, ${rounds} rollbacks, ${failures} failing versions; ${REPLICAS} replicas on ${machines.length} lab machines`);
    console.log(`${'seconds'.padEnd(52)}${'p50'.padStart(8)}${'p99'.padStart(8)}${'max'.padStart(8)}`);
    row('update request → the swarm’s update completed', updates.map((r) => r.swarmS));
    row('update request → hangar shows it running', updates.map((r) => r.hangarS));
    row('rollback request → the swarm’s update completed', rollbacks.map((r) => r.swarmS));
    row('rollback request → hangar shows it running', rollbacks.map((r) => r.hangarS));
    row('failure observable → the swarm’s rollback started', automatic.map((r) => r.startS));
    row('failure observable → hangar shows rolled_back', automatic.map((r) => r.hangarS));
    console.log(`failed requests through the balancer: updates ${failed(updates)} of ${requests(updates)}, rollbacks ${failed(rollbacks)} of ${requests(rollbacks)}, failing versions ${failed(automatic)} of ${requests(automatic)}`);
    console.log(`answers from a version that should not answer: updates ${strays(updates)}, rollbacks ${strays(rollbacks)}, failing versions ${strays(automatic)}`);
    const updateP99 = percentile(updates.map((r) => r.swarmS), 99);
    const startP99 = percentile(automatic.map((r) => r.startS), 99);
    if (rounds) console.log(`goal: update p99 < ${GOAL_UPDATE_P99_S} s with 0 failed requests: ${updateP99 < GOAL_UPDATE_P99_S && failed(updates) === 0 ? 'met' : 'missed'} (${f1(updateP99)} s, ${failed(updates)} failed)`);
    if (failures) console.log(`goal: rollback started within ${GOAL_ROLLBACK_START_S} s of the failure: ${startP99 <= GOAL_ROLLBACK_START_S ? 'met' : 'missed'} (p99 ${f2(startP99)} s)`);
    console.log(`load average before ${loadBefore}, after ${loadAfter} (${os.cpus().length} cores)`);
  } finally {
    await cp?.stop().catch(() => undefined);
    await lab.teardown();
  }
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    console.error(err instanceof Error ? err.message : err);
    process.exit(1);
  },
);
