/**
 * The egress counter (scripts/egress-counter.sh, which .ci/run fails on) and the seal (lab/seal.ts)
 * on a small routed network of this machine's own: three network namespaces — a "container", a
 * "router" playing the host (a docker-like bridge interface and an uplink) and an "outside" host
 * on a private range beyond the uplink. Every packet stays on this machine; the router's
 * firewall is its own (a network namespace has its own iptables), so the host's is not touched.
 */
import { expect } from 'chai';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { refusedBy, sealBridge, sealedBridges, unsealBridge } from '../../lab/seal.js';
import { requireService } from '../support/requirements.js';

const COUNTER = fileURLToPath(new URL('../../scripts/egress-counter.sh', import.meta.url));
const NS = { box: 'hgseal-box', router: 'hgseal-router', outside: 'hgseal-outside' };
const BRIDGE = 'br-hgseal'; // the router's side towards the box: a name docker would give a bridge
const OUTSIDE = '10.254.99.2'; // a private address beyond the uplink

function sh(command: string[]): { code: number; stdout: string; stderr: string } {
  const result = spawnSync(command[0]!, command.slice(1), { encoding: 'utf8', timeout: 30_000 });
  return { code: result.status ?? 1, stdout: result.stdout ?? '', stderr: result.stderr ?? '' };
}

function must(command: string[]): string {
  const result = sh(command);
  if (result.code !== 0) throw new Error(`${command.join(' ')} failed (${result.code}): ${result.stderr}${result.stdout}`);
  return result.stdout;
}

const inNs = (ns: string, ...command: string[]): string[] => ['ip', 'netns', 'exec', ns, ...command];
const counter = (verb: 'start' | 'report' | 'stop') => sh(inNs(NS.router, 'bash', COUNTER, verb));

/** A TCP connection from the box (to the outside host by default); resolves to how it ended (bash's /dev/tcp). */
function connectFromBox(port: number, address = OUTSIDE): string {
  const result = sh(inNs(NS.box, 'timeout', '5', 'bash', '-c', `exec 3<>/dev/tcp/${address}/${port} && echo connected`));
  return result.code === 124 ? 'timed out' : `${result.stdout}${result.stderr}`.trim();
}

function removeNamespaces(): void {
  for (const ns of Object.values(NS)) sh(['ip', 'netns', 'del', ns]);
}

describe('the egress counter and the seal (network namespaces of this machine)', function () {
  this.timeout(60_000);

  before(function () {
    const root = typeof process.getuid === 'function' && process.getuid() === 0;
    requireService(this, root, 'root (network namespaces and iptables)');
    requireService(this, sh(['iptables', '-V']).code === 0 && sh(['ip', '-V']).code === 0, 'iptables and iproute2');
    removeNamespaces();
    for (const ns of Object.values(NS)) must(['ip', 'netns', 'add', ns]);
    // box (172.30.99.2) — router: br-hgseal 172.30.99.1 | uplink0 10.254.99.1 — outside (10.254.99.2)
    must(['ip', 'link', 'add', 'hgs-box', 'netns', NS.box, 'type', 'veth', 'peer', 'name', BRIDGE, 'netns', NS.router]);
    must(['ip', 'link', 'add', 'hgs-out', 'netns', NS.outside, 'type', 'veth', 'peer', 'name', 'uplink0', 'netns', NS.router]);
    for (const [ns, dev, address] of [
      [NS.box, 'hgs-box', '172.30.99.2/24'],
      [NS.router, BRIDGE, '172.30.99.1/24'],
      [NS.router, 'uplink0', '10.254.99.1/24'],
      [NS.outside, 'hgs-out', `${OUTSIDE}/24`],
    ] as const) {
      must(inNs(ns, 'ip', 'address', 'add', address, 'dev', dev));
      must(inNs(ns, 'ip', 'link', 'set', dev, 'up'));
      must(inNs(ns, 'ip', 'link', 'set', 'lo', 'up'));
    }
    must(inNs(NS.box, 'ip', 'route', 'add', 'default', 'via', '172.30.99.1'));
    must(inNs(NS.outside, 'ip', 'route', 'add', '172.30.99.0/24', 'via', '10.254.99.1'));
    must(inNs(NS.router, 'sysctl', '-qw', 'net.ipv4.ip_forward=1'));
    // The chain docker makes and jumps to first for every forwarded packet.
    must(inNs(NS.router, 'iptables', '-N', 'DOCKER-USER'));
    must(inNs(NS.router, 'iptables', '-A', 'FORWARD', '-j', 'DOCKER-USER'));
  });

  after(() => removeNamespaces());

  it('counts a packet forwarded from a docker bridge out of the uplink to a private range, and report fails naming it', () => {
    expect(counter('start').code).to.equal(0);
    const clean = counter('report');
    expect(clean.code, clean.stdout).to.equal(0);
    expect(clean.stdout).to.match(/0 packets forwarded off this machine/);
    // Nothing listens outside: its kernel answers with a reset, so the connection is refused — after leaving.
    expect(connectFromBox(2377)).to.match(/Connection refused/);
    const leaked = counter('report');
    expect(leaked.code, leaked.stdout).to.equal(1);
    expect(leaked.stdout).to.match(/[1-9]\d* packet\(s\) forwarded off this machine to private ranges \(10\.0\.0\.0\/8: [1-9]/);
    // start again zeroes it
    expect(counter('start').stdout).to.match(/zeroed/);
    expect(counter('report').code).to.equal(0);
  });

  it('the seal refuses the same connection at the bridge (a reset at once), so nothing is counted; unsealed, it leaves again', () => {
    expect(counter('start').code).to.equal(0);
    sealBridge(BRIDGE, { netns: NS.router, resolvers: [] });
    sealBridge(BRIDGE, { netns: NS.router, resolvers: [] }); // idempotent: one jump, one chain
    expect(sealedBridges({ netns: NS.router })).to.deep.equal([BRIDGE]);
    const before = refusedBy(BRIDGE, { netns: NS.router });
    expect(connectFromBox(2377)).to.match(/Connection refused/);
    expect(refusedBy(BRIDGE, { netns: NS.router })).to.be.greaterThan(before);
    const report = counter('report');
    expect(report.code, report.stdout).to.equal(0);
    // The box still reaches the router itself (not forwarded): the host stays reachable.
    const refused = refusedBy(BRIDGE, { netns: NS.router });
    expect(connectFromBox(2377, '172.30.99.1')).to.match(/Connection refused/);
    expect(refusedBy(BRIDGE, { netns: NS.router })).to.equal(refused);
    unsealBridge(BRIDGE, { netns: NS.router });
    unsealBridge(BRIDGE, { netns: NS.router }); // idempotent
    expect(sealedBridges({ netns: NS.router })).to.deep.equal([]);
    connectFromBox(2377);
    expect(counter('report').code).to.equal(1);
  });

  it('lets DNS to the resolvers it is given through, counted apart and not as a leak', () => {
    expect(counter('start').code).to.equal(0);
    sealBridge(BRIDGE, { netns: NS.router, resolvers: [OUTSIDE] });
    const before = refusedBy(BRIDGE, { netns: NS.router });
    expect(connectFromBox(53)).to.match(/Connection refused/); // reached the outside host, whose kernel refused it
    expect(refusedBy(BRIDGE, { netns: NS.router })).to.equal(before);
    expect(connectFromBox(80)).to.match(/Connection refused/); // refused by the seal
    expect(refusedBy(BRIDGE, { netns: NS.router })).to.be.greaterThan(before);
    unsealBridge(BRIDGE, { netns: NS.router });
  });
});
