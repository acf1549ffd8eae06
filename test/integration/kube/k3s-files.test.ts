import { expect } from 'chai';
import { createHash, randomBytes } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { K3S_EXECUTORS, k3sSources } from '../../../drivers/kubernetes/k3s-executors.js';
import { K3sInstallServer } from '../../../drivers/kubernetes/membership-calls.js';
import { placeBinary, placeImages } from '../../../drivers/kubernetes/k3s.js';
import { answerTasks, FakeAgent, waitFor } from '../../support/agents.js';
import { describeEachDialect } from '../../support/dialects.js';
import { failureOf } from '../../support/failures.js';
import { startHangar, type TestHangar } from '../../support/hangar.js';
import { bearer, bootstrapAdmin, type Credentials } from '../../support/identity.js';
import { KUBE_CLUSTER_PLUGINS } from '../../support/kube-cluster.js';

// What a k3s install fetches: the binary and the airgap images tarball the operator placed in
// kubernetes.k3s_dir (served to agents by the control plane), or the binary from
// kubernetes.k3s_download_url (a connected install; here a local HTTP server) checked against the
// operator's SHA-256. The control plane's side through the HTTP API (the agent's side of the API
// spoken by a FakeAgent test double: its mutual-TLS certificate, its task loop), the agent's side by
// the agent's own code (drivers/kubernetes/k3s-executors.ts and k3s.ts) putting the files in a
// temporary root instead of /usr/local/bin and /var/lib/rancher/k3s.

const sha = (body: Buffer) => createHash('sha256').update(body).digest('hex');
const dirs: string[] = [];
const tempDir = (prefix: string) => {
  const dir = mkdtempSync(path.join(os.tmpdir(), prefix));
  dirs.push(dir);
  return dir;
};
after(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

describeEachDialect('k3s files for installs: the binary and images tarball placed on the control plane, or the download URL', (dialect) => {
  let t: TestHangar;
  let admin: Credentials;
  const api = (method: string, p: string, body?: unknown) => t.request(method, p, { body, headers: bearer(admin.token) });

  async function nodeWithAgent(name: string, architecture = 'amd64'): Promise<{ id: string; agent: FakeAgent }> {
    const node = await api('POST', '/v1/nodes', { name });
    expect(node.status, node.text).to.equal(201);
    const agent = await FakeAgent.forNode(t, node.json.data.id);
    expect((await agent.heartbeat({ architecture })).status).to.equal(200);
    return { id: node.json.data.id, agent };
  }
  /** The agent's download (ExecutorContext.download) as the FakeAgent's certificate makes it, counted. */
  const downloadsOf = (agent: FakeAgent) => {
    const asked: string[] = [];
    const download = async (p: string) => {
      asked.push(p);
      const res = await agent.request('GET', p);
      return { status: res.status, body: res.raw, headers: res.headers };
    };
    return { asked, download };
  };
  /** The payload of the k3s.install-server task a cluster created on `node` sends its agent. */
  async function installPayload(agent: FakeAgent, nodeId: string, name: string) {
    const tasks = answerTasks(agent, { answers: { 'k3s.install-server': () => ({ runtime_node_id: nodeId, version: 'v1.33.1+k3s1' }) } });
    try {
      const created = await api('POST', '/v1/kubernetes/clusters', { name, node_ids: [nodeId] });
      expect(created.status, created.text).to.equal(202);
      const call = await waitFor(() => tasks.calls.find((c) => c.method === 'k3s.install-server'), { timeoutMs: 15_000, what: 'the install task' });
      return call.input;
    } finally {
      await tasks.stop();
    }
  }

  describe('placed on the control plane', () => {
    const k3sDir = tempDir('hangar-k3s-');
    const binary = randomBytes(48 * 1024);
    const images = randomBytes(256 * 1024);

    before(async () => {
      t = await startHangar(dialect, { plugins: KUBE_CLUSTER_PLUGINS, overrides: { kubernetes: { k3s_dir: k3sDir } } });
      admin = await bootstrapAdmin(t);
    });
    after(() => t?.stop());

    it('serves the images tarball to agents only, with its SHA-256 and file name; without one, 404 naming where to place it', async () => {
      const { agent } = await nodeWithAgent('serving');
      const none = await agent.request('GET', '/v1/kubernetes/k3s/images?arch=amd64');
      expect(none.status).to.equal(404);
      // Named by the setting: no absolute path of the control plane's host in an answer.
      expect(none.json.message).to.contain('<kubernetes.k3s_dir>/k3s-airgap-images-amd64.tar.zst');
      expect(none.text).not.to.contain(k3sDir);

      writeFileSync(path.join(k3sDir, 'k3s-airgap-images-amd64.tar.gz'), images);
      const served = await agent.request('GET', '/v1/kubernetes/k3s/images?arch=amd64');
      expect(served.status).to.equal(200);
      expect(sha(served.raw)).to.equal(sha(images));
      expect(served.headers['x-checksum-sha256']).to.equal(sha(images));
      expect(served.headers['x-file-name']).to.equal('k3s-airgap-images-amd64.tar.gz');
      expect((await agent.request('GET', '/v1/kubernetes/k3s/images?arch=arm64')).status, 'none placed for arm64').to.equal(404);
      expect((await agent.request('GET', '/v1/kubernetes/k3s/images?arch=sparc')).status).to.equal(400);

      for (const headers of [{}, bearer(admin.token)]) {
        const refused = await t.request('GET', '/v1/kubernetes/k3s/images?arch=amd64', { headers });
        expect(refused.status, 'agents only').to.be.oneOf([401, 403]);
        expect(refused.raw.length).to.be.below(1000);
      }
    });

    it('an install carries the placed binary and images tarball; the agent puts the tarball in k3s’s images folder (once), and refuses one whose checksum changed on the way', async () => {
      writeFileSync(path.join(k3sDir, 'k3s-amd64'), binary);
      writeFileSync(path.join(k3sDir, 'k3s-airgap-images-amd64.tar.gz'), images);
      const { id, agent } = await nodeWithAgent('installing');
      const payload = await installPayload(agent, id, 'airgap');
      expect(payload.binary).to.deep.equal({ sha256: sha(binary), architecture: 'amd64' });
      expect(payload.images).to.deep.equal({ sha256: sha(images), file_name: 'k3s-airgap-images-amd64.tar.gz', architecture: 'amd64' });

      const root = tempDir('hangar-k3s-root-');
      const imagesDir = path.join(root, 'var/lib/rancher/k3s/agent/images');
      const { asked, download } = downloadsOf(agent);
      const sources = k3sSources({ payload, download });
      expect(await placeBinary(sources.binary, path.join(root, 'usr/local/bin/k3s'))).to.equal(true);
      expect(sha(readFileSync(path.join(root, 'usr/local/bin/k3s')))).to.equal(sha(binary));
      expect(statSync(path.join(root, 'usr/local/bin/k3s')).mode & 0o777).to.equal(0o755);
      expect(await placeImages(sources.images!, imagesDir)).to.equal(true);
      expect(sha(readFileSync(path.join(imagesDir, 'k3s-airgap-images-amd64.tar.gz')))).to.equal(sha(images));
      expect(asked).to.deep.equal(['/v1/kubernetes/k3s/binary?arch=amd64', '/v1/kubernetes/k3s/images?arch=amd64']);
      // The same tarball in place: not fetched again.
      expect(await placeImages(sources.images!, imagesDir)).to.equal(false);
      expect(asked).to.have.length(2);

      // The operator replaced the tarball after the task was sent: what arrives is not what was announced.
      writeFileSync(path.join(k3sDir, 'k3s-airgap-images-amd64.tar.gz'), randomBytes(1024));
      const fresh = path.join(root, 'fresh');
      const refused = await failureOf(placeImages(sources.images!, fresh));
      expect(refused.message).to.match(/the images tarball k3s-airgap-images-amd64\.tar\.gz's checksum is [0-9a-f]{64}, expected [0-9a-f]{64}; nothing installed/);
      expect(existsSync(path.join(fresh, 'k3s-airgap-images-amd64.tar.gz'))).to.equal(false);
    });
    it('a tarball that cannot be read is a 409 naming it (create and download), and one gone before the agent fetched it fails the install naming it, k3s not started', async function () {
      this.timeout(30_000);
      writeFileSync(path.join(k3sDir, 'k3s-amd64'), binary);
      writeFileSync(path.join(k3sDir, 'k3s-airgap-images-amd64.tar.gz'), images);
      const { id, agent } = await nodeWithAgent('gone');
      const payload = await installPayload(agent, id, 'gone');
      expect(payload.images.file_name).to.equal('k3s-airgap-images-amd64.tar.gz');

      // Removed after the task was sent: the agent's own executor fails the install, naming the file and the answer.
      rmSync(path.join(k3sDir, 'k3s-airgap-images-amd64.tar.gz'));
      const root = tempDir('hangar-k3s-root-');
      const previousRoot = process.env.HANGAR_K3S_ROOT;
      process.env.HANGAR_K3S_ROOT = root;
      try {
        const install = K3S_EXECUTORS.find(([kind]) => kind === K3sInstallServer)![1];
        const log = { info: () => undefined, warn: () => undefined, error: () => undefined, debug: () => undefined };
        const failed = await failureOf(install({ payload, ...downloadsOf(agent), log } as unknown as Parameters<typeof install>[0]));
        expect(failed.message).to.match(/^downloading the k3s images tarball k3s-airgap-images-amd64\.tar\.gz failed with HTTP 404: .*<kubernetes\.k3s_dir>\/k3s-airgap-images-amd64\.tar\.zst/);
        expect(existsSync(path.join(root, 'var/lib/rancher/k3s/agent/images/k3s-airgap-images-amd64.tar.gz'))).to.equal(false);
        expect(existsSync(path.join(root, 'run/k3s.pid')), 'k3s not started without its images').to.equal(false);
      } finally {
        if (previousRoot === undefined) delete process.env.HANGAR_K3S_ROOT;
        else process.env.HANGAR_K3S_ROOT = previousRoot;
      }

      // Placed but unreadable (here a folder where the tarball should be): a 409 naming it, before any node is touched.
      mkdirSync(path.join(k3sDir, 'k3s-airgap-images-amd64.tar.zst'));
      try {
        const refused = await api('POST', '/v1/kubernetes/clusters', { name: 'unreadable', node_ids: [(await nodeWithAgent('unreadable')).id] });
        expect(refused.status, refused.text).to.equal(409);
        expect(refused.json.message).to.equal('<kubernetes.k3s_dir>/k3s-airgap-images-amd64.tar.zst cannot be read by the control plane (not a file): replace it with a readable file, or remove it');
        const download = await agent.request('GET', '/v1/kubernetes/k3s/images?arch=amd64');
        expect(download.status, download.text).to.equal(409);
        expect(download.json.message).to.contain('k3s-airgap-images-amd64.tar.zst cannot be read');
        expect(refused.text + download.text, 'no absolute path of the host').not.to.contain(k3sDir);
      } finally {
        rmSync(path.join(k3sDir, 'k3s-airgap-images-amd64.tar.zst'), { recursive: true, force: true });
      }
    });
  });

  describe('downloaded from kubernetes.k3s_download_url (a connected install)', () => {
    let server: Server;
    let base: string;
    const release = randomBytes(64 * 1024);
    const requested: string[] = [];

    before(async () => {
      server = createServer((req, res) => {
        requested.push(req.url ?? '');
        if (req.url === '/releases/v1.33.1%2Bk3s1/k3s') res.writeHead(200, { 'content-type': 'application/octet-stream' }).end(release);
        else res.writeHead(404).end('not found');
      });
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
      t = await startHangar(dialect, {
        plugins: KUBE_CLUSTER_PLUGINS,
        overrides: {
          kubernetes: { k3s_dir: tempDir('hangar-k3s-empty-'), k3s_download_url: `${base}/releases/{version}/k3s{suffix}`, k3s_version: 'v1.33.1+k3s1', k3s_sha256: { amd64: sha(release) } },
        },
      });
      admin = await bootstrapAdmin(t);
    });
    after(async () => {
      await t?.stop();
      server?.close();
    });

    it('with no binary placed the install names the URL and the operator’s SHA-256; the agent downloads from it and checks it', async () => {
      const { id, agent } = await nodeWithAgent('connected');
      const payload = await installPayload(agent, id, 'connected');
      expect(payload.binary).to.deep.equal({ sha256: sha(release), architecture: 'amd64', url: `${base}/releases/v1.33.1%2Bk3s1/k3s` });
      expect(payload).not.to.have.property('images');

      const root = tempDir('hangar-k3s-root-');
      const { asked, download } = downloadsOf(agent);
      expect(await placeBinary(k3sSources({ payload, download }).binary, path.join(root, 'k3s'))).to.equal(true);
      expect(sha(readFileSync(path.join(root, 'k3s')))).to.equal(sha(release));
      expect(asked, 'nothing fetched from the control plane').to.deep.equal([]);
      expect(requested).to.include('/releases/v1.33.1%2Bk3s1/k3s');

      const wrong = { ...payload, binary: { ...payload.binary, sha256: sha(Buffer.from('something else')) } };
      const mismatch = await failureOf(placeBinary(k3sSources({ payload: wrong, download }).binary, path.join(root, 'other')));
      expect(mismatch.message).to.match(/the binary's checksum is [0-9a-f]{64}, expected [0-9a-f]{64}; nothing installed/);
      expect(existsSync(path.join(root, 'other'))).to.equal(false);
      const missing = { ...payload, binary: { ...payload.binary, url: `${base}/releases/v0/k3s` } };
      const notThere = await failureOf(placeBinary(k3sSources({ payload: missing, download }).binary, path.join(root, 'other')));
      expect(notThere.message).to.equal(`downloading k3s from ${base}/releases/v0/k3s failed with HTTP 404`);
    });

    it('refuses an install it could not verify: no SHA-256 set for the node’s architecture is a 409 naming the setting', async () => {
      const { id } = await nodeWithAgent('unverified', 'arm64');
      const refused = await api('POST', '/v1/kubernetes/clusters', { name: 'unverified', node_ids: [id] });
      expect(refused.status, refused.text).to.equal(409);
      expect(refused.json.message).to.contain('no kubernetes.k3s_sha256.arm64 for the download URL: hangar installs no k3s it cannot verify');
      expect(refused.json.message).to.contain('place it at <kubernetes.k3s_dir>/k3s-arm64');
      expect(refused.text, 'no absolute path of the host').not.to.contain(os.tmpdir());
      expect(requested.filter((u) => u.includes('arm64')), 'nothing downloaded').to.deep.equal([]);
    });
  });
});
