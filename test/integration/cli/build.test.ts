import { expect } from 'chai';
import { spawn, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { httpRequest } from '../../../core/http/client.js';
import { startedLine } from '../../support/child-output.js';
import { randomToken } from '../../../core/ids.js';

const ROOT = path.resolve('.');
const BIN = path.join(ROOT, 'bin', 'hangar.mjs');

/** An operator's plugin in TypeScript, next to the installation, importing hangar's own sources. */
const SITE_PLUGIN = `
import { definePlugin } from '../../core/plugin.js';
import { notFound } from '../../core/errors.js';
import { Reply } from '../../core/http/reply.js';

export default definePlugin({
  name: 'site-probe',
  setup() {
    return {
      routes: [
        { method: 'GET', path: '/v1/site-probe/missing', auth: 'public', summary: 'always a 404', handler() { throw notFound('no such probe'); } },
        { method: 'GET', path: '/v1/site-probe/teapot', auth: 'public', summary: 'a Reply', handler: () => Reply.data({ short: 'and stout' }, 418, { 'x-probe': 'yes' }) },
      ],
    };
  },
});
`;

describe('hangar CLI: the production build (dist/hangar)', function () {
  this.timeout(120_000);
  const siteDir = path.join(ROOT, '.tmp', `site-${randomToken(8)}`);
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'hangar-build-'));

  before(() => {
    const built = spawnSync(process.execPath, [path.join(ROOT, 'scripts', 'build.mjs'), 'server', '--if-stale'], { encoding: 'utf8' });
    expect(built.status, built.stderr).to.equal(0);
    mkdirSync(siteDir, { recursive: true });
    writeFileSync(path.join(siteDir, 'probe.ts'), SITE_PLUGIN);
  });
  after(() => {
    rmSync(siteDir, { recursive: true, force: true });
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('serves from the compiled JavaScript, and still loads an operator plugin written in TypeScript whose errors and replies are answered as such', async () => {
    const child = spawn(process.execPath, [BIN, 'serve', '--data-dir', dataDir], {
      cwd: ROOT,
      env: {
        ...process.env,
        NODE_ENV: 'development',
        HANGAR_API__HOST: '127.0.0.1',
        HANGAR_API__PORT: '0',
        HANGAR_PLUGINS: `system,./${path.relative(ROOT, path.join(siteDir, 'probe.ts'))}`,
        HANGAR_IAM__ANNOUNCE_BOOTSTRAP_SECRET: 'false',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    try {
      const started = await startedLine(child);
      expect(started.running_from).to.equal('build');
      expect(started.plugins).to.deep.equal(['system', 'site-probe']);
      const url = started.urls[0] as string;
      const missing = await httpRequest(`${url}/v1/site-probe/missing`, { ca: false });
      expect(missing.status).to.equal(404);
      expect(missing.json).to.deep.include({ error: 'Not Found', message: 'no such probe' });
      const teapot = await httpRequest(`${url}/v1/site-probe/teapot`, { ca: false });
      expect(teapot.status).to.equal(418);
      expect(teapot.headers['x-probe']).to.equal('yes');
      expect(teapot.json).to.deep.equal({ data: { short: 'and stout' } });
    } finally {
      child.kill('SIGKILL');
    }
  });

  it('checks configuration as the sources do (its validators are compiled at build time): a bad value in a core or a plugin section is refused, naming the key', () => {
    const refusal = (env: Record<string, string>) => {
      const run = (fromSources: boolean) => {
        const result = spawnSync(process.execPath, [BIN, 'serve', '--data-dir', dataDir], {
          cwd: ROOT,
          encoding: 'utf8',
          timeout: 60_000,
          env: { ...process.env, NODE_ENV: 'development', HANGAR_API__HOST: '127.0.0.1', HANGAR_API__PORT: '0', HANGAR_PLUGINS: 'system,iam,nodes', ...(fromSources ? { HANGAR_FROM_SOURCES: '1' } : {}), ...env },
        });
        return { status: result.status, message: `${result.stdout}${result.stderr}`.trim().split('\n').pop() };
      };
      const [build, sources] = [run(false), run(true)];
      expect(build.status, build.message).to.not.equal(0);
      expect(build).to.deep.equal(sources);
      return build.message;
    };
    expect(refusal({ HANGAR_API__PORT: 'eighty' })).to.equal('hangar: invalid configuration: api.port must be integer');
    expect(refusal({ HANGAR_NODES__MAX_HEARTBEATS_PER_SECOND: 'abc' })).to.equal('hangar: invalid configuration: nodes.max_heartbeats_per_second must be number');
    expect(refusal({ HANGAR_NODES__JOIN_TOKEN_TTL_SECONDS: '5' })).to.equal('hangar: invalid configuration: nodes.join_token_ttl_seconds must be >= 10');
  });

  it('runs from the TypeScript sources when told to (HANGAR_FROM_SOURCES=1)', async () => {
    const child = spawn(process.execPath, [BIN, 'serve', '--data-dir', dataDir], {
      cwd: ROOT,
      env: { ...process.env, NODE_ENV: 'development', HANGAR_API__HOST: '127.0.0.1', HANGAR_API__PORT: '0', HANGAR_PLUGINS: 'system', HANGAR_FROM_SOURCES: '1' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    try {
      expect((await startedLine(child)).running_from).to.equal('sources');
    } finally {
      child.kill('SIGKILL');
    }
  });
});
