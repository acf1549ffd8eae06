import { expect } from 'chai';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { httpRequest } from '../../core/http/client.js';
import { chromiumInstalled, CHROMIUM, openBrowser } from '../support/browser.js';
import { startedLine } from '../support/child-output.js';
import { requireService } from '../support/requirements.js';

const ROOT = path.resolve('.');
const ARCH = ({ x64: 'amd64', arm64: 'arm64' } as Record<string, string>)[process.arch] ?? process.arch;

/** A build step of the README's install path, run as `npm run build` / `npm start` run it. */
function build(script: string, ...args: string[]): void {
  const result = spawnSync(process.execPath, [path.join(ROOT, 'scripts', script), ...args], { cwd: ROOT, encoding: 'utf8', timeout: 15 * 60_000 });
  expect(result.status, `${script} ${args.join(' ')}: ${result.stdout}${result.stderr}`).to.equal(0);
}

/**
 * What a new user gets from the README's first command (`npm ci && npm run build && npm start`):
 * the compiled build (dist/), started through the installed launcher bin/hangar from another
 * directory, on the embedded default. Every other suite runs the TypeScript sources; this one
 * proves the build serves what they test: health, the dashboard and its assets, the agent download
 * and the claim screen in a real browser.
 */
describe('first run from the compiled build (README: npm run build, then hangar serve)', function () {
  this.timeout(120_000);
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'hangar-first-run-'));
  let child: ChildProcess | undefined;
  let url: string;
  let ca: string;
  const get = (p: string, method = 'GET') => httpRequest(`${url}${p}`, { ca, method });

  before(async function () {
    this.timeout(20 * 60_000);
    // npm run build (the dashboard and the server; the agent for this machine, as npm start makes sure of)
    build('build-ui.mjs');
    build('build.mjs', 'server', '--if-stale');
    build('build.mjs', 'agent', '--if-missing');
    child = spawn(path.join(ROOT, 'bin', 'hangar'), ['serve', '--data-dir', dataDir], {
      cwd: os.tmpdir(),
      env: { ...process.env, NODE: process.execPath, HANGAR_FROM_SOURCES: '', NODE_ENV: 'production', HANGAR_API__PORT: '0', HANGAR_LOGIN__PORT: '0', HANGAR_API__HOST: '127.0.0.1' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const started = await startedLine(child, 60_000);
    expect(started.running_from, 'hangar serve runs the compiled build, not the sources').to.equal('build');
    url = (started.urls as string[])[0]!;
    ca = readFileSync(path.join(dataDir, 'pki', 'ca.crt'), 'utf8');
  });

  after(async () => {
    if (child && child.exitCode === null) {
      const exited = new Promise((resolve) => child!.once('exit', resolve));
      child.kill('SIGTERM');
      await exited;
    }
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('answers /healthz on the embedded default', async () => {
    const health = await get('/healthz');
    expect(health.status).to.equal(200);
    expect(health.json.data).to.include({ status: 'ok', store: 'sqlite' });
  });

  it('serves the dashboard at /ui and /ui/, and the assets its page names', async () => {
    const page = await get('/ui');
    expect(page.status, page.text).to.equal(200);
    expect(page.headers['content-type']).to.match(/^text\/html/);
    const slash = await get('/ui/');
    expect(slash.status, slash.text).to.equal(200);
    expect(slash.text).to.equal(page.text);
    const assets = [...page.text.matchAll(/(?:src|href)="(\/ui\/app-[0-9a-f]+\.(?:js|css))"/g)].map((m) => m[1]!);
    expect(assets.map((a) => path.extname(a)).sort()).to.deep.equal(['.css', '.js']);
    for (const asset of assets) {
      const res = await get(asset);
      expect(res.status, asset).to.equal(200);
      expect(res.headers['content-type']).to.match(asset.endsWith('.js') ? /^text\/javascript/ : /^text\/css/);
      expect(res.text.length).to.be.greaterThan(1000);
    }
  });

  it(`offers the agent executable for this machine (${ARCH}) with its version and checksum`, async () => {
    const head = await get(`/v1/agent/binary?arch=${ARCH}`, 'HEAD');
    expect(head.status).to.equal(200);
    expect(head.headers['x-hangar-agent-version']).to.equal(JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')).version);
    expect(head.headers['x-checksum-sha256']).to.match(/^[0-9a-f]{64}$/);
    expect(Number(head.headers['content-length'])).to.be.greaterThan(10 * 2 ** 20);
  });

  it('gives curl --compressed (as the join command downloads it) the executable compressed, and the same bytes once decoded', async function () {
    requireService(this, spawnSync('curl', ['--version']).status === 0, 'curl (apt-get install curl)');
    const out = path.join(dataDir, 'downloaded-agent');
    const curl = spawnSync('curl', ['-fsSL', '--compressed', '--cacert', path.join(dataDir, 'pki', 'ca.crt'), '-o', out, '-w', '%{size_download}', `${url}/v1/agent/binary?arch=${ARCH}`], { encoding: 'utf8', timeout: 120_000 });
    expect(curl.status, curl.stderr).to.equal(0);
    const head = await get(`/v1/agent/binary?arch=${ARCH}`, 'HEAD');
    const bytes = readFileSync(out);
    expect(createHash('sha256').update(bytes).digest('hex')).to.equal(head.headers['x-checksum-sha256']);
    expect(Number(curl.stdout), 'bytes on the wire').to.be.below(bytes.length / 2);
  });

  it('shows the claim screen of a fresh install in chromium', async function () {
    requireService(this, chromiumInstalled(), `chromium at ${CHROMIUM} (apt-get install chromium)`);
    const browser = await openBrowser();
    try {
      const errors: string[] = [];
      browser.page.on('pageerror', (error) => errors.push(error.message));
      await browser.page.goto(`${url}/ui/`);
      await browser.page.getByRole('heading', { name: 'Claim this hangar' }).waitFor({ timeout: 30_000 });
      await browser.shot('first-run-build-claim');
      expect(errors).to.deep.equal([]);
    } finally {
      await browser.close();
    }
  });
});
