import { expect } from 'chai';
import { spawn, spawnSync } from 'node:child_process';
import { chmodSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { httpRequest } from '../../../core/http/client.js';
import { waitForLine } from '../../support/child-output.js';

const BIN = path.resolve('bin/hangar.mjs');
/** The `hangar` command as installed (package.json "bin"): a launcher that sets glibc's malloc up, then runs BIN. */
const LAUNCHER = path.resolve('bin/hangar');

describe('hangar CLI: serve', () => {
  it('lists its commands in --help', () => {
    const res = spawnSync(process.execPath, [BIN, '--help'], { encoding: 'utf8' });
    expect(res.status).to.equal(0);
    expect(res.stdout).to.contain('hangar serve');
  });

  it('exits 2 on every usage error, with the help and the problem on stderr', function () {
    this.timeout(120_000);
    const cases: Array<[string[], RegExp]> = [
      [['nosuch'], /Unknown argument: nosuch/],
      [[], /Name a command/],
      [['endpoint'], /Not enough non-option arguments/],
      [['install', 'svc', '--class', 'Runner::heartbeat', '--template=launchd'], /Invalid values:[\s\S]*template/],
      [['serve', '--no-such-flag'], /Unknown argument/],
    ];
    for (const [args, problem] of cases) {
      const res = spawnSync(process.execPath, [BIN, ...args], { encoding: 'utf8', env: { ...process.env, XDG_CONFIG_HOME: os.tmpdir() } });
      expect(res.status, `hangar ${args.join(' ')}: ${res.stderr}`).to.equal(2);
      expect(res.stderr).to.match(problem);
      expect(res.stderr).to.contain('Options:');
    }
  });

  it('the launcher runs bin/hangar.mjs with every argument, found through a symlink, under $NODE, with MALLOC_MMAP_THRESHOLD_ set unless the operator set it, and `serve` with V8 tuned for a fleet (larger young generation, no memory reducer) unless NODE_OPTIONS sets a young generation', () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'hangar-launcher-'));
    try {
      // A stand-in for node that says what it was started with.
      const fakeNode = path.join(dir, 'fake-node');
      // One line each, so an argument split on its space would show.
      writeFileSync(fakeNode, '#!/bin/sh\nprintf \'%s\\n\' "threshold=$MALLOC_MMAP_THRESHOLD_" "$@"\n');
      chmodSync(fakeNode, 0o755);
      const linked = path.join(dir, 'hangar');
      symlinkSync(LAUNCHER, linked);
      const base: NodeJS.ProcessEnv = { ...process.env, NODE: fakeNode };
      delete base.MALLOC_MMAP_THRESHOLD_;
      const run = (env: Record<string, string>, args = ['serve', '--data-dir', 'a b']) => {
        const res = spawnSync(linked, args, { encoding: 'utf8', env: { ...base, ...env } });
        expect(res.status, res.stderr).to.equal(0);
        return res.stdout.split('\n').slice(0, -1);
      };
      const FLEET_TUNING = ['--max-semi-space-size=64', '--no-memory-reducer'];
      const GIVEN_BACK = '--expose-gc';
      expect(run({})).to.deep.equal(['threshold=4194304', ...FLEET_TUNING, GIVEN_BACK, BIN, 'serve', '--data-dir', 'a b']);
      expect(run({ MALLOC_MMAP_THRESHOLD_: '262144' })).to.deep.equal(['threshold=262144', ...FLEET_TUNING, GIVEN_BACK, BIN, 'serve', '--data-dir', 'a b']);
      expect(run({ NODE_OPTIONS: '--max-semi-space-size=16' }), 'the operator’s size: node reads it from NODE_OPTIONS').to.deep.equal(['threshold=4194304', GIVEN_BACK, BIN, 'serve', '--data-dir', 'a b']);
      expect(run({}, ['node', 'list']), 'other commands: Node’s defaults').to.deep.equal(['threshold=4194304', BIN, 'node', 'list']);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('starts the control plane on the embedded default (through the launcher): TLS health check, CA that verifies it, clean stop', async () => {
    const dataDir = mkdtempSync(path.join(os.tmpdir(), 'hangar-serve-'));
    const child = spawn(LAUNCHER, ['serve', '--data-dir', dataDir], {
      env: { ...process.env, NODE: process.execPath, NODE_ENV: 'development', HANGAR_API__PORT: '0', HANGAR_LOGIN__PORT: '0', HANGAR_API__HOST: '127.0.0.1' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    try {
      const line = await waitForLine(child, /hangar started/);
      const url = JSON.parse(line).urls[0] as string;
      expect(url).to.match(/^https:\/\/127\.0\.0\.1:\d+$/);
      // Each step of the start, in the order done, as wall-clock and CPU ms since the process began.
      const STEPS = ['entry', 'config_read', 'modules_loaded', 'store_opened', 'plugins_loaded', 'config_checked', 'migrations', 'pki', 'drivers', 'plugins_set_up', 'notices', 'resumed', 'listening'];
      const { start_ms: wall, start_cpu_ms: cpu } = JSON.parse(line) as Record<string, Record<string, number>>;
      for (const steps of [wall!, cpu!]) {
        expect(Object.keys(steps)).to.deep.equal(STEPS);
        expect(STEPS.map((s) => steps[s]!), 'each step done after the one before').to.deep.equal(STEPS.map((s) => steps[s]!).sort((a, b) => a - b));
      }
      // The launcher replaced itself with node (exec): the process answering is the one it started.
      const environ = readFileSync(`/proc/${child.pid}/environ`, 'utf8').split('\0');
      expect(environ, 'glibc is told to return large blocks').to.include(`MALLOC_MMAP_THRESHOLD_=${process.env.MALLOC_MMAP_THRESHOLD_ ?? '4194304'}`);
      const argv = readFileSync(`/proc/${child.pid}/cmdline`, 'utf8').split('\0');
      expect(argv, 'node runs with the larger young generation').to.include('--max-semi-space-size=64');
      expect(argv, 'and without the memory reducer').to.include('--no-memory-reducer');
      const ca = readFileSync(path.join(dataDir, 'pki', 'ca.crt'), 'utf8');
      const health = await httpRequest(`${url}/healthz`, { ca });
      expect(health.status).to.equal(200);
      expect(health.json.data.store).to.equal('sqlite');
      const served = await httpRequest(`${url}/v1/ca`, { ca });
      expect(served.text).to.equal(ca);
      const exited = new Promise<number | null>((resolve) => child.once('exit', resolve));
      child.kill('SIGTERM');
      expect(await exited).to.equal(0);
    } finally {
      child.kill('SIGKILL');
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  it('gives the launcher’s larger young generation back once a burst of requests is over (as /metrics reports it)', async function () {
    this.timeout(150_000);
    const dataDir = mkdtempSync(path.join(os.tmpdir(), 'hangar-serve-'));
    const scrapeToken = 'young-generation-test-scrape-token-0123456789';
    const child = spawn(LAUNCHER, ['serve', '--data-dir', dataDir], {
      env: {
        ...process.env,
        NODE: process.execPath,
        NODE_ENV: 'development',
        HANGAR_API__PORT: '0',
        HANGAR_LOGIN__PORT: '0',
        HANGAR_API__HOST: '127.0.0.1',
        HANGAR_METRICS__SCRAPE_TOKEN: scrapeToken,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    try {
      const url = JSON.parse(await waitForLine(child, /hangar started/)).urls[0] as string;
      const ca = readFileSync(path.join(dataDir, 'pki', 'ca.crt'), 'utf8');
      /** The young generation's size (both semi-spaces), MB, as the control plane's metrics say. */
      const youngMb = async () => {
        const res = await httpRequest(`${url}/metrics`, { ca, headers: { authorization: `Bearer ${scrapeToken}` } });
        expect(res.status, res.text).to.equal(200);
        const line = res.text.split('\n').find((l) => l.startsWith('nodejs_heap_space_size_total_bytes{space="new"}'));
        expect(line, 'the young generation’s size is a metric').to.be.a('string');
        return Number(line!.split(' ').pop()) / 2 ** 20;
      };
      // Bursts of 640 health checks at once until V8 has grown the young generation past 16 MB.
      const burstUntil = Date.now() + 60_000;
      let grown = await youngMb();
      while (grown <= 16 && Date.now() < burstUntil) {
        await Promise.all(Array.from({ length: 640 }, () => httpRequest(`${url}/healthz`, { ca })));
        grown = await youngMb();
      }
      expect(grown, 'the burst grew the young generation').to.be.above(16);
      // Then quiet: within a few of the launcher's sampling periods it is back to what is live.
      // Looked at every 5 s (a scrape every second costs ~30 ms of CPU, by itself near the 3 % of
      // a core under which the launcher counts the process as quiet; Prometheus scrapes every 15 s).
      const quietUntil = Date.now() + 45_000;
      let now = grown;
      while (now > 4 && Date.now() < quietUntil) {
        await new Promise((resolve) => setTimeout(resolve, 5000));
        now = await youngMb();
      }
      expect(now, `given back after the burst (${grown} MB at its end)`).to.be.at.most(4);
    } finally {
      child.kill('SIGKILL');
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  it('refuses to start on bad configuration, naming the key', () => {
    const res = spawnSync(process.execPath, [BIN, 'serve', '--data-dir', os.tmpdir()], {
      env: { ...process.env, HANGAR_API__PORT: 'not-a-port' },
      encoding: 'utf8',
    });
    expect(res.status).to.equal(2);
    expect(res.stderr).to.contain('api.port must be integer');
  });
});
