import { expect } from 'chai';
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { overlayReport } from '../../../agent/executors/overlay.js';
import { FakeAgent, waitFor } from '../../support/agents.js';
import { describeEachDialect } from '../../support/dialects.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, type Credentials } from '../../support/identity.js';

const PEERS = 4096;
/**
 * The machine's clock the fake `wg` reports handshakes against (seconds), read when the suite
 * starts (not when mocha loads the file: a handshake is live for 180 s, and a full run loads every
 * file long before it runs this one).
 */
let NOW = 0;

/**
 * `wg` and `ip` test doubles (shell scripts on PATH) for a machine whose hangar0 is up with
 * 10.88.0.5 and has PEERS peers: the first three answered 30 s ago, the others never.
 */
function fakeMachine(dir: string): void {
  const key = (i: number) => `${String(i).padStart(42, 'k')}=`;
  const handshakes = Array.from({ length: PEERS }, (_, i) => `${key(i)}\t${i < 3 ? NOW - 30 : 0}`).join('\n');
  writeFileSync(path.join(dir, 'handshakes'), `${handshakes}\n`);
  writeFileSync(path.join(dir, 'peers.json'), JSON.stringify([{ public_key: key(3), node_id: 'node-silent-a' }, { public_key: key(4), node_id: 'node-silent-b' }]));
  const script = (body: string) => `#!/bin/sh\n${body}\n`;
  writeFileSync(
    path.join(dir, 'wg'),
    script(`case "$*" in
  "show hangar0 latest-handshakes") cat "${dir}/handshakes" ;;
  "show hangar0 endpoints") exit 0 ;;
  *) exit 1 ;;
esac`),
  );
  writeFileSync(
    path.join(dir, 'ip'),
    script(`case "$*" in
  "-o link show dev hangar0") echo "5: hangar0: <POINTOPOINT,NOARP,UP,LOWER_UP> mtu 1420 qdisc noqueue state UNKNOWN mode DEFAULT group default qlen 1000" ;;
  "-o -4 address show dev hangar0") echo "5: hangar0    inet 10.88.0.5/16 scope global hangar0" ;;
  *) exit 1 ;;
esac`),
  );
  chmodSync(path.join(dir, 'wg'), 0o755);
  chmodSync(path.join(dir, 'ip'), 0o755);
}

/**
 * Review of issue 26: every heartbeat carried each WireGuard peer (up to 4096, sent and
 * schema-validated each time) while the control plane kept only counts and 16 names. The agent now
 * sends that summary; an older agent's report of every peer is still taken.
 */
describeEachDialect('the overlay in a heartbeat: the summary the control plane keeps', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  let machine: string;
  before(async () => {
    t = await startHangar(dialect, { plugins: ['system', 'iam', 'nodes', 'agent-internal'] });
    admin = await bootstrapAdmin(t);
    machine = mkdtempSync(path.join(os.tmpdir(), 'hangar-overlay-'));
    NOW = Math.floor(Date.now() / 1000);
    fakeMachine(machine);
  });
  after(async () => {
    await t?.stop();
    rmSync(machine, { recursive: true, force: true });
  });

  const nodeOverlay = async (id: string, what: string, expected: unknown) =>
    waitFor(
      async () => {
        const node = (await t.request('GET', `/v1/nodes/${id}`, { headers: bearer(admin.token) })).json.data;
        return JSON.stringify(node.overlay) === JSON.stringify(expected) ? node.overlay : null;
      },
      { timeoutMs: 5000, what },
    );

  it('the agent reports counts and the first silent peers, not each peer, and the node keeps them', async () => {
    const path0 = process.env.PATH;
    process.env.PATH = `${machine}:${path0}`;
    let report: Awaited<ReturnType<typeof overlayReport>>;
    try {
      report = await overlayReport(machine);
    } finally {
      process.env.PATH = path0;
    }
    const expected = {
      interface: 'hangar0',
      up: true,
      address: '10.88.0.5',
      peers: PEERS,
      handshakes: 3,
      // The silent peers by node id where peers.json names one, else by key; the first 16 in order.
      without_handshake: ['node-silent-a', 'node-silent-b', ...Array.from({ length: PEERS - 5 }, (_, i) => `${String(i + 5).padStart(42, 'k')}=`)].sort().slice(0, 16),
    };
    expect(report).to.deep.equal(expected);
    expect(expected.without_handshake).to.have.length(16);
    const bytes = JSON.stringify(report).length;
    // What the older report of each peer weighed for the same machine.
    const each = JSON.stringify({ interface: 'hangar0', up: true, address: '10.88.0.5', checked_at: NOW, peers: Array.from({ length: PEERS }, (_, i) => ({ public_key: `${String(i).padStart(42, 'k')}=`, node_id: null, latest_handshake: NOW })) }).length;
    console.log(`      overlay: ${PEERS} peers reported in ${bytes} bytes (bound 2048), where each peer took ${each} bytes`);
    expect(bytes).to.be.lessThan(2048);
    const node = await t.request('POST', '/v1/nodes', { body: { name: 'overlay-summary' }, headers: bearer(admin.token) });
    const agent = await FakeAgent.forNode(t, node.json.data.id);
    const beat = await agent.heartbeat({ overlay: report });
    expect(beat.status, beat.text).to.equal(200);
    await nodeOverlay(node.json.data.id, 'the summary kept', expected);
  });

  it('names silent peers by node id from the last peer list applied', async () => {
    writeFileSync(path.join(machine, 'peers.json'), JSON.stringify([{ public_key: `${'p'.repeat(43)}=`, node_id: 'node-silent' }]));
    const path0 = process.env.PATH;
    process.env.PATH = `${machine}:${path0}`;
    try {
      writeFileSync(path.join(machine, 'handshakes'), `${'p'.repeat(43)}=\t0\n${'q'.repeat(43)}=\t${NOW - 5}\n`);
      expect(await overlayReport(machine)).to.deep.equal({ interface: 'hangar0', up: true, address: '10.88.0.5', peers: 2, handshakes: 1, without_handshake: ['node-silent'] });
    } finally {
      process.env.PATH = path0;
    }
  });

  it('takes an older agent’s report of each peer as before, and refuses a summary naming more than 16 silent peers', async () => {
    const node = await t.request('POST', '/v1/nodes', { body: { name: 'overlay-older-agent' }, headers: bearer(admin.token) });
    const agent = await FakeAgent.forNode(t, node.json.data.id);
    const older = {
      interface: 'hangar0',
      up: true,
      address: '10.88.0.6',
      checked_at: NOW,
      peers: [
        { public_key: 'a'.repeat(43) + '=', node_id: 'node-answering', latest_handshake: NOW - 10 },
        { public_key: 'b'.repeat(43) + '=', node_id: 'node-quiet', latest_handshake: 0 },
      ],
    };
    expect((await agent.heartbeat({ overlay: older })).status).to.equal(200);
    await nodeOverlay(node.json.data.id, 'the older report summarised', { interface: 'hangar0', up: true, address: '10.88.0.6', peers: 2, handshakes: 1, without_handshake: ['node-quiet'] });
    const tooMany = { interface: 'hangar0', up: true, address: null, peers: 20, handshakes: 0, without_handshake: Array.from({ length: 17 }, (_, i) => `node-${i}`) };
    const refused = await agent.heartbeat({ overlay: tooMany });
    expect(refused.status, refused.text).to.equal(400);
  });
});
