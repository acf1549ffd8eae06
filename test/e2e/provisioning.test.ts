import { expect } from 'chai';
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import net from 'node:net';
import path from 'node:path';
import { describeEachDialect } from '../support/dialects.js';
import { startHangar, type TestHangar } from '../support/hangar.js';
import { bearer, bootstrapAdmin, type Credentials } from '../support/identity.js';
import { FailNow, until as waitUntil } from '../support/agents.js';
import { requireService } from '../support/requirements.js';
import { Lab, type Machine } from './lab/lab.js';
import { Receiver } from '../integration/notifications/receiver.js';

const AGENT_BUILT = existsSync(path.resolve('dist/agent/manifest.json'));
/** A worker retries its path to the manager this long (attempts at ~0, 1, 2, 5, 11 s and at the end): the m2 case re-adds its peer within seconds. */
const JOIN_PATH_WAIT_SECONDS = 12;
/** Alerts judged every second; a node_offline fires after 2 s offline and resolves 3 s after its node is back (issue 31's lab proof). */
const ALERTS = { interval_seconds: 1, hold_down_seconds: 3, rules: { node_offline: { for_seconds: 2 } } };

/** test/support/agents.ts until(): FailNow or a failed assertion ends the wait at once; at the deadline the last error is named. */
const until = <T>(what: string, probe: () => Promise<T | null | undefined | false>, timeoutMs = 120_000): Promise<T> => waitUntil(what, probe, timeoutMs, 500);

/** SSH provisioning on real machines (the lab): deploy, overlay, update-ssh, start, host keys, secrets. */
describeEachDialect('provisioning over SSH in the machine lab', (dialect) => {
  let lab: Lab;
  let t: TestHangar;
  let admin: Credentials;
  let m1: Machine;
  let m2: Machine;
  let m3: Machine;
  const nodeOf = new Map<string, string>();
  /** What the control plane serves as the agent: the build's files, linked, so a test can serve a broken one. */
  let binaryDir: string;
  /** A webhook receiver on loopback subscribed to alert.firing and alert.resolved. */
  const receiver = new Receiver();

  before(async function () {
    this.timeout(600_000);
    const available = await Lab.availability();
    requireService(this, available.docker && available.image, available.why ?? 'the machine lab');
    requireService(this, AGENT_BUILT, 'the agent executables (npm run build)');
    lab = new Lab({ name: `prov-${dialect.name === 'sqlite' ? 'sq' : 'pg'}`, subnet: dialect.name === 'sqlite' ? '172.31.78.0/24' : '172.31.79.0/24', log: () => undefined });
    [m1, m2, m3] = await lab.start({ machines: 3 });
    binaryDir = mkdtempSync(path.join(os.tmpdir(), 'hangar-prov-binaries-'));
    for (const file of readdirSync(path.resolve('dist/agent'))) symlinkSync(path.resolve('dist/agent', file), path.join(binaryDir, file));
    t = await startHangar(dialect, {
      plugins: ['system', 'iam', 'nodes', 'agent-internal', 'ssh-profiles', 'provisioning', 'swarms', 'alerts', 'notifications'],
      overrides: {
        drivers: ['ssh', 'swarm', 'k8s'],
        api: { host: '0.0.0.0' },
        // The agent update that halts at a broken agent waits its grace_seconds (15) and this margin: the watchdog put the
        // previous executable back at the grace's end, and systemd (RestartSec=3) starts it, heard from within seconds.
        nodes: { heartbeat_interval_seconds: 2, offline_after_seconds: 6, agent_rollout_margin_seconds: 15 },
        tasks: { poll_wait_seconds: 10 },
        // Swarm members reach each other over the WireGuard overlay (the default); a join gives up on a missing path after this.
        clusters: { join_path_wait_seconds: JOIN_PATH_WAIT_SECONDS },
        system: { agent_binary_dir: binaryDir },
        alerts: ALERTS,
        notifications: { allow_http: true, allow_private_addresses: true, retry_base_seconds: 0.2, retry_max_seconds: 0.5, poll_interval_ms: 100 },
      },
    });
    admin = await bootstrapAdmin(t);
    await receiver.start();
    const channel = await api('POST', '/v1/notifications/channels', { name: 'alerts-hook', kind: 'webhook', url: receiver.url });
    expect(channel.status, channel.text).to.equal(201);
    receiver.secret = channel.json.data.secret;
    const subscribed = await api('POST', '/v1/notifications/subscriptions', { channel_id: 'alerts-hook', event_types: ['alert.firing', 'alert.resolved'] });
    expect(subscribed.status, subscribed.text).to.equal(201);
  });
  after(async function () {
    this.timeout(120_000);
    await t?.stop();
    await receiver.stop();
    await lab?.teardown();
    if (binaryDir) rmSync(binaryDir, { recursive: true, force: true });
  });

  const api = (method: string, p: string, body?: unknown) => t.request(method, p, { headers: bearer(admin.token), body });
  const events = async (nodeId: string) => (await api('GET', `/v1/nodes/events?node_id=${nodeId}`)).json.data as { kind: string; message: string }[];
  const node = async (id: string) => (await api('GET', `/v1/nodes/${id}`)).json.data;
  const waitStatus = (id: string, status: string, timeoutMs = 120_000) => until(`${id} to be ${status}`, async () => ((await node(id)).status === status ? node(id) : null), timeoutMs);

  it('deploys three machines in parallel: root with a key, a sudo user through a profile, a password user inline', async function () {
    this.timeout(300_000);
    const profile = await api('POST', '/v1/ssh-profiles', { name: 'lab-deployer', user: 'deployer', key: m2.ssh.deployer.privateKey });
    expect(profile.status).to.equal(201);
    const deploys = await Promise.all([
      api('POST', '/v1/nodes/deploy', { ip_address: m1.ip, name: 'first', ssh_user: 'root', ssh_key: m1.ssh.root.privateKey }),
      api('POST', '/v1/nodes/deploy', { ip_address: m2.ip, ssh_profile: 'lab-deployer' }),
      api('POST', '/v1/nodes/deploy', { ip_address: m3.ip, ssh_user: 'pwuser', ssh_password: m3.ssh.pwuser.password }),
    ]);
    for (const [i, res] of deploys.entries()) {
      expect(res.status, res.text).to.equal(202);
      nodeOf.set([m1, m2, m3][i]!.name, res.json.data.node_id);
    }
    for (const m of [m1, m2, m3]) {
      const id = nodeOf.get(m.name)!;
      const ready = await until(`${m.name} to be ready`, async () => {
        const n = await node(id);
        if (n.status === 'ready') return n;
        const failed = (await events(id)).find((e) => e.kind === 'deploy_failed');
        if (failed) throw new FailNow(`deploy of ${m.name} failed: ${failed.message}`);
        return null;
      }, 240_000);
      expect(ready.hostname).to.equal(m.name);
      expect(ready.architecture).to.equal('amd64');
      expect(ready.ip_address).to.equal(m.ip);
      // The deploy records its last step just after the heartbeat that made the node ready.
      await until(`${m.name}'s deploy_completed`, async () => (await events(id)).some((e) => e.kind === 'deploy_completed'), 10_000);
      const kinds = (await events(id)).map((e) => e.kind);
      expect(kinds).to.include.ordered.members(['deploy_connecting', 'deploy_connected', 'deploy_detected']);
    }
    expect((await node(nodeOf.get('m1')!)).name).to.equal('first');
  });

  it('brings the WireGuard overlay up: machines ping each other over their overlay addresses', async function () {
    this.timeout(120_000);
    const n1 = await node(nodeOf.get('m1')!);
    const n2 = await node(nodeOf.get('m2')!);
    const n3 = await node(nodeOf.get('m3')!);
    await until('the overlay to carry pings', async () => {
      try {
        await m1.sh(`ping -c 1 -W 2 ${n2.overlay_ip}`);
        await m3.sh(`ping -c 1 -W 2 ${n1.overlay_ip}`);
        return true;
      } catch {
        return false;
      }
    }, 90_000);
    const shown = await m2.sh('wg show hangar0 allowed-ips');
    expect(shown).to.contain(`${n1.overlay_ip}/32`);
    expect(shown).to.contain(`${n3.overlay_ip}/32`);
  });

  it('reports a wrong password and an unreachable address through events that say so', async function () {
    this.timeout(120_000);
    const wrong = await api('POST', '/v1/nodes/deploy', { ip_address: m3.ip, name: 'wrong-pw', ssh_user: 'pwuser', ssh_password: 'not-the-password' });
    // m3 is deployed already under another node; a pending retry is a new node for the wrong password.
    const unreachable = await api('POST', '/v1/nodes/deploy', { ip_address: lab.addressOf(200), ssh_key: m1.ssh.root.privateKey });
    const failure = async (id: string) => until(`${id} to fail`, async () => (await events(id)).find((e) => e.kind === 'deploy_failed'), 60_000);
    expect((await failure(wrong.json.data.node_id)).message).to.match(/^auth: authentication refused/);
    expect((await failure(unreachable.json.data.node_id)).message).to.match(/^(connect|timeout): /);
    const byAddress = (await api('GET', `/v1/nodes/events?identifier=${lab.addressOf(200)}`)).json.data;
    expect(byAddress.map((e: { kind: string }) => e.kind)).to.include('deploy_failed');
  });

  it('recovers a killed agent with update-ssh: offline, then ready again with a new certificate', async function () {
    this.timeout(180_000);
    const id = nodeOf.get('m2')!;
    const before = await t.hangar.store.knex('certificates').where({ node_id: id }).whereNull('revoked_at').select('serial');
    // Bracketed patterns so pkill does not match the shell running it.
    await m2.sh(`pkill -9 -f '[s]upervise.sh'; pkill -9 -f '[/]usr/local/bin/hangar-agent'; true`);
    await waitStatus(id, 'offline', 60_000);
    const res = await api('POST', `/v1/nodes/${id}/update-ssh`, { ssh_profile: 'lab-deployer' });
    expect(res.status).to.equal(202);
    await until('ssh_update_completed', async () => {
      const evs = await events(id);
      const failed = evs.find((e) => e.kind === 'ssh_update_failed');
      if (failed) throw new FailNow(failed.message);
      return evs.find((e) => e.kind === 'ssh_update_completed');
    }, 150_000);
    expect((await node(id)).status).to.equal('ready');
    const after = await t.hangar.store.knex('certificates').where({ node_id: id }).whereNull('revoked_at').select('serial');
    expect(after).to.have.length(1);
    expect(before.map((r: { serial: string }) => r.serial)).not.to.include(after[0].serial);
    const kinds = (await events(id)).map((e) => e.kind);
    expect(kinds.indexOf('ssh_update_started')).to.be.lessThan(kinds.indexOf('ssh_update_completed'));
  });

  it('refuses update-ssh up front for an unknown profile (400) and a node without an architecture (409)', async () => {
    expect((await api('POST', `/v1/nodes/${nodeOf.get('m2')}/update-ssh`, { ssh_profile: 'nope' })).status).to.equal(400);
    const bare = await api('POST', '/v1/nodes', { name: 'never-heard-from', ip_address: '192.0.2.44' });
    expect((await api('POST', `/v1/nodes/${bare.json.data.id}/update-ssh`, {})).status).to.equal(409);
  });

  it('fires node_offline while a machine is frozen (docker pause: its agent falls silent) and resolves it once the machine runs again, announced once each', async function () {
    this.timeout(180_000);
    const id = nodeOf.get('m1')!;
    const nodeOffline = async () => (await api('GET', `/v1/alerts?rule=node_offline&resource_id=${id}`)).json.data as Array<{ id: string; state: string; started_at: string; resolved_at: string | null }>;
    await waitStatus(id, 'ready', 60_000);
    const before = new Set((await nodeOffline()).map((a) => a.id));

    await m1.pause();
    try {
      await waitStatus(id, 'offline', 60_000);
      const firing = await until('node_offline to fire for m1', async () => (await nodeOffline()).find((a) => !before.has(a.id) && a.state === 'firing'), 30_000);
      const heard = (event: string) => receiver.requests.filter((r) => r.event === event && r.body?.data?.id === firing.id);
      await until('alert.firing at the receiver', async () => heard('alert.firing').length > 0, 15_000);
      await m1.unpause();
      await waitStatus(id, 'ready', 60_000);
      const resolved = await until('node_offline to resolve after the hold-down', async () => (await nodeOffline()).find((a) => a.id === firing.id && a.state === 'resolved'), 30_000);
      expect(resolved.started_at).to.equal(firing.started_at);
      expect(Date.parse(resolved.resolved_at!)).to.be.greaterThan(Date.parse(firing.started_at));
      await until('alert.resolved at the receiver', async () => heard('alert.resolved').length > 0, 15_000);
      for (const event of ['alert.firing', 'alert.resolved']) {
        const [delivery, ...more] = heard(event);
        expect(more, `${event} delivered once`).to.deep.equal([]);
        expect(delivery!.verified).to.equal(true);
        expect(delivery!.body.resource).to.deep.equal({ type: 'node', id });
      }
      expect(heard('alert.firing')[0]!.body.severity).to.equal('critical');
    } finally {
      await m1.unpause().catch(() => undefined);
    }
  });

  it('starts the agent over SSH after stop', async function () {
    this.timeout(180_000);
    const id = nodeOf.get('m1')!;
    expect((await api('POST', `/v1/nodes/${id}/stop`)).status).to.equal(202);
    await waitStatus(id, 'offline', 60_000);
    const res = await api('POST', `/v1/nodes/${id}/start`, { ssh_key: m1.ssh.root.privateKey });
    expect(res.status).to.equal(202);
    await waitStatus(id, 'ready', 120_000);
    await until('agent_started', async () => (await events(id)).some((e) => e.kind === 'agent_started'), 10_000);
  });

  it('refuses a changed host key', async function () {
    this.timeout(120_000);
    await m3.sh(`rm -f /etc/ssh/ssh_host_*; ssh-keygen -A >/dev/null; pkill -HUP -x sshd || true`);
    // sshd re-executes on HUP: wait until it accepts connections again.
    await until('sshd to listen again', () => new Promise<boolean>((resolve) => {
      const socket = net.connect(22, m3.ip, () => {
        socket.end();
        resolve(true);
      });
      socket.on('error', () => resolve(false));
    }), 30_000);
    const id = nodeOf.get('m3')!;
    const res = await api('POST', `/v1/nodes/${id}/start`, { ssh_user: 'pwuser', ssh_password: m3.ssh.pwuser.password });
    expect(res.status).to.equal(202);
    const failed = await until('agent_start_failed', async () => (await events(id)).find((e) => e.kind === 'agent_start_failed'), 60_000);
    expect(failed.message).to.match(/^host-key: the host key of .* changed/);
  });

  it('re-deploys a deployed machine with `hangar node deploy`, following the steps, and keeps its node', async function () {
    this.timeout(240_000);
    const dir = mkdtempSync(path.join(os.tmpdir(), 'hangar-cli-deploy-'));
    try {
      const keyFile = path.join(dir, 'id');
      writeFileSync(keyFile, m1.ssh.root.privateKey!, { mode: 0o600 });
      writeFileSync(path.join(dir, 'ca.pem'), t.caPem);
      const env = {
        ...process.env,
        XDG_CONFIG_HOME: dir,
        HANGAR_API_URL: t.url,
        HANGAR_ACCESS_KEY: admin.accessKeyId,
        HANGAR_SECRET_KEY: admin.secretAccessKey,
        HANGAR_CA_FILE: path.join(dir, 'ca.pem'),
      };
      const cli = spawn(process.execPath, [path.resolve('bin/hangar.mjs'), 'node', 'deploy', m1.ip, '--ssh-key-file', keyFile, '--timeout', '200'], { env });
      let out = '';
      cli.stdout.on('data', (c: Buffer) => (out += c.toString()));
      cli.stderr.on('data', (c: Buffer) => (out += c.toString()));
      const code = await new Promise<number | null>((resolve) => cli.once('exit', resolve));
      expect(code, out).to.equal(0);
      expect(out).to.contain(`deploying ${m1.ip} as node`);
      for (const step of ['connecting', 'connected', 'detected', 'uploading_agent', 'agent_started']) expect(out).to.match(new RegExp(`· ${step}`));
      expect(out.match(/· connecting/g), 'only this deploy’s steps').to.have.length(1);
      expect(out).to.match(/✓ completed\s+node node-/);
      expect(out, 're-deploying keeps the node').to.contain(`re-deploying node ${nodeOf.get('m1')}`);
      expect(out).not.to.contain('PRIVATE KEY');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  /**
   * A swarm over the overlay on the three deployed machines: the manager is advertised by its
   * overlay address because its agents report the overlay up with peers answering; a worker whose
   * WireGuard peer for the manager is still being added when its join starts waits for it and
   * joins; one whose path to the manager never comes up (UDP to it blocked) ends failed saying so.
   */
  describe('a swarm over the overlay: joins wait for the path to the manager', () => {
    let swarmId: string;
    const overlayOf = async (m: Machine) => (await node(nodeOf.get(m.name)!)).overlay_ip as string;
    const member = async (m: Machine) => ((await api('GET', `/v1/swarms/${swarmId}`)).json.data.members as any[]).find((x) => x.node_id === nodeOf.get(m.name));
    /** The WireGuard peer `on` has for the machine whose overlay address is `ip` (its key and endpoint). */
    async function peerFor(on: Machine, ip: string): Promise<{ key: string; endpoint: string }> {
      const dump = await on.sh('wg show hangar0 dump');
      const row = dump.split('\n').slice(1).map((l) => l.split('\t')).find((cols) => cols[3] === `${ip}/32`);
      if (!row) throw new Error(`${on.name} has no WireGuard peer for ${ip}:\n${dump}`);
      return { key: row[0]!, endpoint: row[2]! };
    }
    const removePeer = (on: Machine, peer: { key: string }) => on.sh(`wg set hangar0 peer ${peer.key} remove`);
    const addPeer = (on: Machine, peer: { key: string; endpoint: string }, ip: string) =>
      on.sh(`wg set hangar0 peer ${peer.key} allowed-ips ${ip}/32 endpoint ${peer.endpoint} persistent-keepalive 25`);
    const retriesLogged = async (m: Machine) => Number(await m.sh("grep -c 'path not confirmed yet; retrying' /var/log/hangar-agent.log || true"));

    it('advertises the manager by its overlay address once its agent reports the overlay up with its peers answering', async function () {
      this.timeout(180_000);
      for (const m of [m1, m2, m3]) {
        const id = nodeOf.get(m.name)!;
        const overlay = await until(`${m.name}'s agent to report its overlay up with both peers answering`, async () => {
          const n = await node(id);
          return n.overlay?.up && n.overlay.address === n.overlay_ip && n.overlay.handshakes === 2 ? n.overlay : null;
        }, 120_000);
        expect(overlay).to.deep.include({ interface: 'hangar0', peers: 2, without_handshake: [] });
      }
      const created = await api('POST', '/v1/swarms', { name: 'overlay' });
      expect(created.status, created.text).to.equal(201);
      swarmId = created.json.data.id;
      expect((await api('POST', `/v1/swarms/${swarmId}/join`, { node_id: nodeOf.get('m1') })).status).to.equal(202);
      const swarm = await until('the manager', async () => {
        const s = (await api('GET', `/v1/swarms/${swarmId}`)).json.data;
        if (s.status === 'failed') throw new FailNow(`the swarm failed: ${s.error}`);
        return s.manager?.status === 'active' ? s : null;
      }, 120_000);
      expect(swarm.manager.advertise_address).to.equal(await overlayOf(m1));
      expect(await m1.sh("docker info --format '{{.Swarm.NodeAddr}}'")).to.equal(await overlayOf(m1));
    });

    it('a worker whose WireGuard peer for the manager is still being added when its join starts retries until the peer answers, then joins', async function () {
      this.timeout(240_000);
      const managerIp = await overlayOf(m1);
      const peer = await peerFor(m2, managerIp);
      const before = await retriesLogged(m2);
      await removePeer(m2, peer);
      try {
        const joined = await api('POST', `/v1/swarms/${swarmId}/join`, { node_id: nodeOf.get('m2') });
        expect(joined.status, joined.text).to.equal(202);
        await until('m2’s agent to retry the path to the manager', async () => (await retriesLogged(m2)) > before, 60_000);
        expect((await member(m2)).status, 'still joining while the peer is missing').to.equal('joining');
      } finally {
        await addPeer(m2, peer, managerIp);
      }
      const joined = await until('m2 to settle', async () => {
        const x = await member(m2);
        return x && x.status !== 'joining' ? x : null;
      }, 120_000);
      expect(joined, joined.error).to.include({ status: 'active', advertise_address: await overlayOf(m2) });
      const path = (await events(nodeOf.get('m2')!)).find((e) => e.kind === 'swarm_join_path');
      expect(path?.message).to.match(new RegExp(`^reached manager ${nodeOf.get('m1')} at ${managerIp.replace(/\./g, '\\.')}:2377 over the overlay after ([0-9]+) attempts`));
      expect(Number(/after ([0-9]+) attempts/.exec(path!.message)![1]), 'it retried').to.be.greaterThan(1);
      expect(await m1.sh("docker node ls --format '{{.Hostname}} {{.Status}}' | sort")).to.equal('m1 Ready\nm2 Ready');
    });

    it('a worker whose path to the manager never comes up (UDP to it blocked) ends failed naming the missing handshake, its engine untouched', async function () {
      this.timeout(240_000);
      const managerIp = await overlayOf(m1);
      const block = `-p udp -m comment --comment hangar-e2e-overlay-block`;
      await m3.sh(`iptables -I INPUT -s ${m1.ip} ${block} -j DROP && iptables -I OUTPUT -d ${m1.ip} ${block} -j DROP`);
      try {
        // The handshake m3 had with the manager goes: its peer is configured anew, and cannot answer.
        const peer = await peerFor(m3, managerIp);
        await removePeer(m3, peer);
        await addPeer(m3, peer, managerIp);
        const joined = await api('POST', `/v1/swarms/${swarmId}/join`, { node_id: nodeOf.get('m3') });
        expect(joined.status, joined.text).to.equal(202);
        const failed = await until('m3 to settle', async () => {
          const x = await member(m3);
          return x && x.status !== 'joining' ? x : null;
        }, (JOIN_PATH_WAIT_SECONDS + 90) * 1000);
        expect(failed.status).to.equal('failed');
        expect(failed.error).to.equal(
          `joining failed: no WireGuard handshake with node ${nodeOf.get('m1')} (${managerIp}) after ${JOIN_PATH_WAIT_SECONDS} s; its overlay is down or unreachable on UDP 51820 (endpoint ${m1.ip}:51820)`,
        );
        expect(await m3.sh("docker info --format '{{.Swarm.LocalNodeState}}'")).to.equal('inactive');
        expect((await events(nodeOf.get('m3')!)).find((e) => e.kind === 'swarm_join_failed')?.message).to.contain('no WireGuard handshake with node');
      } finally {
        await m3.sh(`iptables -D INPUT -s ${m1.ip} ${block} -j DROP; iptables -D OUTPUT -d ${m1.ip} ${block} -j DROP; true`);
      }
    });
  });

  it('keeps every SSH secret out of responses, events and logs', async () => {
    const everything = [
      t.logs.join('\n'),
      JSON.stringify((await api('GET', '/v1/nodes/events?limit=1000')).json),
      JSON.stringify((await api('GET', '/v1/ssh-profiles')).json),
      JSON.stringify((await api('GET', '/v1/nodes')).json),
    ].join('\n');
    for (const secret of [m1.ssh.root.privateKey!, m2.ssh.deployer.privateKey!, m3.ssh.pwuser.password!]) {
      const probe = secret.includes('PRIVATE KEY') ? secret.split('\n')[2]! : secret;
      expect(everything).not.to.contain(probe);
    }
  });
  it('halts an agent update in waves at a machine whose new agent is broken: its watchdog returns it to the previous executable, the next wave never starts', async function () {
    this.timeout(240_000);
    const broken = nodeOf.get('m2')!;
    const spared = nodeOf.get('m1')!;
    for (const id of [broken, spared]) await waitStatus(id, 'ready');
    const before = await node(broken);
    const sha256Of = async (m: Machine) => (await m.sh(`sha256sum /usr/local/bin/hangar-agent`)).split(' ')[0];
    const good = await sha256Of(m2);
    // The control plane serves a bad build: an "agent" that exits at once.
    const manifestFile = path.join(binaryDir, 'manifest.json');
    rmSync(manifestFile);
    const script = '#!/bin/sh\necho "a broken agent build" >&2\nexit 3\n';
    writeFileSync(path.join(binaryDir, 'broken-agent'), script, { mode: 0o755 });
    const sha256 = createHash('sha256').update(script).digest('hex');
    writeFileSync(manifestFile, JSON.stringify({ version: '99.0.0', executables: { amd64: { file: 'broken-agent', sha256, size: Buffer.byteLength(script) } } }));
    try {
      const res = await api('POST', '/v1/nodes/update-agent', { node_ids: [broken, spared], wave_size: 1, grace_seconds: 15 });
      expect(res.status, res.text).to.equal(202);
      const done = await until('the rollout to end', async () => {
        const r = (await api('GET', `/v1/nodes/update-agent/${res.json.data.id}`)).json.data;
        return r.status === 'running' ? null : r;
      }, 180_000);
      expect(done.status, JSON.stringify(done)).to.equal('halted');
      expect(done.failed_node.id).to.equal(broken);
      expect(done.failed_node.error).to.contain(`did not come back with version 99.0.0: it runs ${before.agent_version} again`);
      expect(done.nodes.find((n: { node_id: string }) => n.node_id === spared).status).to.equal('not_started');
      // The machine runs its previous executable again, and says why in its log.
      const back = await waitStatus(broken, 'ready', 60_000);
      expect(back.agent_version).to.equal(before.agent_version);
      expect(await sha256Of(m2)).to.equal(good);
      expect(await m2.sh('grep -c "did not reach the control plane in time" /var/lib/hangar-agent/agent.log')).not.to.equal('0');
      // The next wave's machine was never asked.
      expect(await t.hangar.store.knex('tasks').where({ node_id: spared, kind: 'agent.update' })).to.have.length(0);
    } finally {
      rmSync(manifestFile);
      symlinkSync(path.resolve('dist/agent/manifest.json'), manifestFile);
    }
  });
});
