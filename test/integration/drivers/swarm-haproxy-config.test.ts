import { expect } from 'chai';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Route } from '../../../core/orchestrator.js';
import { renderHaproxyConfig, type HaproxyConfigOptions } from '../../../drivers/swarm/haproxy.js';
import { requireService } from '../../support/requirements.js';

const HAPROXY_INSTALLED = spawnSync('haproxy', ['-v'], { stdio: 'ignore' }).status === 0;

const route = (domain: string, service: string, port: number): Route => ({ domain, service, port, source: 'service', source_id: `svc-${service}` });

/** HAProxy's own configuration check (`haproxy -c -f`), the real parser of the file we render. */
describe('gateway: rendered HAProxy configurations pass `haproxy -c`', function () {
  this.timeout(30_000);
  let dir: string;
  let n = 0;

  before(function () {
    requireService(this, HAPROXY_INSTALLED, 'haproxy on PATH (apt-get install -y haproxy)');
    dir = mkdtempSync(path.join(os.tmpdir(), 'hangar-haproxy-'));
  });
  after(() => {
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  function check(config: string): { code: number | null; output: string } {
    const file = path.join(dir, `haproxy-${++n}.cfg`);
    writeFileSync(file, config);
    const result = spawnSync('haproxy', ['-c', '-f', file], { encoding: 'utf8', timeout: 20_000 });
    return { code: result.status, output: `${result.stdout}${result.stderr}` };
  }

  const valid = (routes: Route[], options?: HaproxyConfigOptions) => {
    const result = check(renderHaproxyConfig(routes, options));
    expect(result.code, result.output).to.equal(0);
    expect(result.output).to.match(/Configuration file is valid/);
    expect(result.output, 'no warnings').to.not.match(/\[WARNING\]|\[ALERT\]/);
  };

  it('the check itself refuses a broken configuration (so a pass means something)', () => {
    const broken = renderHaproxyConfig([route('a.test', 'web', 80)]).replace('server-template s 10', 'server-template s');
    const result = check(broken);
    expect(result.code).to.not.equal(0);
    expect(result.output).to.match(/ALERT/);
  });

  it('no routes: only the no-route backend', () => valid([]));

  it('one route', () => valid([route('app.test.local', 'app', 8080)]));

  it('several routes, mixed case, one service behind two domains', () =>
    valid([route('b.example.test', 'web', 80), route('A.example.test', 'api_v2', 3000), route('www.b.example.test', 'web', 80), route('x', 'svc.with.dots', 9000)]));

  it('two hundred routes', () => valid(Array.from({ length: 200 }, (_, i) => route(`site-${i}.example.test`, `svc-${i % 17}`, 8000 + i))));

  it('other port, resolver and server count', () => valid([route('a.test', 'web', 80)], { httpPort: 8080, resolver: '10.0.0.2:5353', serversPerBackend: 1 }));

  it('a resolver at 127.0.0.11:53 (Docker\'s, absent here) does not fail the check', () => {
    const result = check(renderHaproxyConfig([route('a.test', 'web', 80)]));
    expect(result.code, result.output).to.equal(0);
  });
});
