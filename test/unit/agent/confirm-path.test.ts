import { expect } from 'chai';
import net from 'node:net';
import pino from 'pino';
import { confirmPath, machineProbes, type PathProbes } from '../../../agent/executors/network.js';
import type { PeerHandshake } from '../../../agent/executors/overlay.js';
import type { PathTarget } from '../../../core/tasks/host-kinds.js';

const log = pino({ level: 'silent' });
const MANAGER_KEY = 'k'.repeat(43) + '=';

/**
 * A machine on a manual clock: each pause moves the clock on; `peers` and `connect` answer what the
 * test says the machine would see at that moment.
 */
function simulated(options: { peers(at: number): PeerHandshake[] | null; connect(at: number): string | null }) {
  let clock = 1_800_000_000_000;
  const pauses: number[] = [];
  const probes: PathProbes = {
    peers: async () => options.peers(clock),
    connect: async () => {
      const refusal = options.connect(clock);
      if (refusal) throw new Error(refusal);
    },
    now: () => clock,
    sleep: async (ms) => {
      pauses.push(ms);
      clock += ms;
    },
  };
  return { probes, pauses, started: clock };
}

const overTheOverlay: PathTarget = { node_id: 'node-manager', address: '10.210.0.2', port: 2377, wireguard_public_key: MANAGER_KEY };

describe('the agent confirms a path before a join (network.confirm-path)', () => {
  it('waits for the manager’s WireGuard peer to be added and to answer, then for its port, and says how many attempts it took', async () => {
    const sim = simulated({
      // The peer appears after 5 s, its first handshake comes at 9 s; the port answers once there is one.
      peers: (at) => (at < sim.started + 5000 ? [] : [{ public_key: MANAGER_KEY, latest_handshake: at < sim.started + 9000 ? 0 : Math.floor((sim.started + 9000) / 1000), endpoint: '172.31.78.11:51820' }]),
      connect: (at) => (at < sim.started + 9000 ? 'no answer within 5 s' : null),
    });
    const reached = await confirmPath({ targets: [overTheOverlay], wait_seconds: 90 }, { log, probes: sim.probes });
    expect(reached).to.include({ node_id: 'node-manager', address: '10.210.0.2', port: 2377, via: 'overlay' });
    expect(reached.attempts).to.equal(sim.pauses.length + 1).and.be.greaterThan(1);
    // Pauses grow (1 s doubling, with jitter: between half and all of it) and never pass 10 s.
    sim.pauses.forEach((ms, i) => expect(ms).to.be.within(Math.min(10_000, 1000 * 2 ** i) / 2, Math.min(10_000, 1000 * 2 ** i)));
  });

  it('fails after the wait naming what is missing: no handshake (with the peer’s UDP endpoint), no peer, no interface, or a port that does not answer', async () => {
    const never = (peers: PeerHandshake[] | null, connect: string | null = 'no answer within 5 s') => simulated({ peers: () => peers, connect: () => connect });
    const failure = (sim: ReturnType<typeof never>, targets: PathTarget[] = [overTheOverlay]) =>
      confirmPath({ targets, wait_seconds: 20 }, { log, probes: sim.probes }).then(
        () => expect.fail('the path was confirmed'),
        (err: Error) => err.message,
      );

    const silent = never([{ public_key: MANAGER_KEY, latest_handshake: 0, endpoint: '172.31.78.11:51820' }]);
    expect(await failure(silent)).to.equal('no WireGuard handshake with node node-manager (10.210.0.2) after 20 s; its overlay is down or unreachable on UDP 51820 (endpoint 172.31.78.11:51820)');
    expect(silent.pauses.reduce((a, b) => a + b, 0), 'it tried for the whole wait').to.be.closeTo(20_000, 1);

    const stale = never([{ public_key: MANAGER_KEY, latest_handshake: Math.floor(1_800_000_000_000 / 1000) - 170, endpoint: '172.31.78.11:51820' }]);
    expect(await failure(stale)).to.match(/^no WireGuard handshake with node node-manager \(10\.210\.0\.2\) after 20 s; the last one was 1\d\d s ago; its overlay is down/);

    expect(await failure(never([]))).to.equal("no WireGuard handshake with node node-manager (10.210.0.2) after 20 s; its WireGuard peer is not configured on this machine's hangar0 yet");
    expect(await failure(never(null))).to.equal('no WireGuard handshake with node node-manager (10.210.0.2) after 20 s; this machine has no overlay interface hangar0 (is its overlay up?)');

    const live = never([{ public_key: MANAGER_KEY, latest_handshake: Math.floor(1_800_000_000_000 / 1000) - 10, endpoint: '172.31.78.11:51820' }], 'connection refused');
    expect(await failure(live)).to.equal('node node-manager (10.210.0.2) did not accept a TCP connection on port 2377 over the overlay after 20 s (connection refused)');

    const underlay = never(null, 'no route to host');
    expect(await failure(underlay, [{ node_id: null, address: '172.31.78.11', port: 2377, wireguard_public_key: null }, { ...overTheOverlay }])).to.equal(
      'the machine at 172.31.78.11 did not accept a TCP connection on port 2377 after 20 s (no route to host); ' +
        'no WireGuard handshake with node node-manager (10.210.0.2) after 20 s; this machine has no overlay interface hangar0 (is its overlay up?)',
    );
  });

  it('over the node network it needs only the port: a real TCP listener that starts late is reached after retrying', async () => {
    const server = net.createServer((socket) => socket.end());
    const port = await new Promise<number>((resolve) => {
      // A port that is free now: nothing listens on it until the second pause.
      server.listen(0, '127.0.0.1', () => {
        const p = (server.address() as net.AddressInfo).port;
        server.close(() => resolve(p));
      });
    });
    let pauses = 0;
    const probes: PathProbes = {
      ...machineProbes,
      sleep: async () => {
        if (++pauses === 2) await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', () => resolve()));
      },
    };
    try {
      const reached = await confirmPath({ targets: [{ node_id: 'node-manager', address: '127.0.0.1', port, wireguard_public_key: null }], wait_seconds: 60 }, { log, probes });
      expect(reached).to.include({ via: 'address', address: '127.0.0.1', port, attempts: 3 });
    } finally {
      server.close();
    }
  });
});
