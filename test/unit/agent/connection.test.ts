import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import http2 from 'node:http2';
import https from 'node:https';
import net, { type AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { AgentConnection, type MutualTls } from '../../../agent/connection.js';
import { requireService } from '../../support/requirements.js';

/**
 * The agent's connection (agent/connection.ts) against real servers on loopback: Node's
 * HTTP/2 server, its HTTPS server (no HTTP/2), and a TCP relay that can go silent.
 */
describe('the agent’s connection to its control plane', () => {
  let dir: string;
  let tls: MutualTls;
  const servers: Array<{ close(): unknown }> = [];
  const connections: AgentConnection[] = [];

  const listen = async <S extends net.Server>(server: S): Promise<S & { url: string }> => {
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    servers.push(server);
    return Object.assign(server, { url: `https://127.0.0.1:${(server.address() as AddressInfo).port}` });
  };
  const connect = (url: string, onHttp1?: (why: string) => void) => {
    const connection = new AgentConnection(url, tls, onHttp1);
    connections.push(connection);
    return connection;
  };

  before(function () {
    this.timeout(20_000);
    dir = mkdtempSync(path.join(os.tmpdir(), 'hangar-agent-connection-'));
    execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-keyout', `${dir}/key.pem`, '-out', `${dir}/cert.pem`, '-subj', '/CN=127.0.0.1', '-addext', 'subjectAltName=IP:127.0.0.1,IP:::1', '-days', '1'], { stdio: 'ignore' });
    const cert = readFileSync(`${dir}/cert.pem`, 'utf8');
    // The server's certificate is its own CA here, and the agent presents it too.
    tls = { ca: cert, cert, key: readFileSync(`${dir}/key.pem`, 'utf8') };
  });
  afterEach(() => {
    for (const c of connections.splice(0)) c.close();
    for (const s of servers.splice(0)) s.close();
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('sends requests side by side over one HTTP/2 session, under the API URL’s path', async () => {
    const server = await listen(http2.createSecureServer({ cert: tls.cert, key: tls.key }));
    let sessions = 0;
    server.on('session', () => sessions++);
    server.on('stream', (stream, headers) => {
      const answer = () => {
        stream.respond({ ':status': 200, 'content-type': 'application/json' });
        stream.end(JSON.stringify({ path: headers[':path'], method: headers[':method'] }));
      };
      // The slow one stays open while the others are answered.
      if (String(headers[':path']).endsWith('/slow')) setTimeout(answer, 300);
      else stream.on('data', () => undefined).on('end', answer);
    });
    const connection = connect(`${server.url}/base`);
    const [slow, post, get] = await Promise.all([connection.request('/v1/slow'), connection.request('/v1/post', { method: 'POST', body: { a: 1 } }), connection.request('/v1/get')]);
    expect(slow.json).to.deep.equal({ path: '/base/v1/slow', method: 'GET' });
    expect(post.json).to.deep.equal({ path: '/base/v1/post', method: 'POST' });
    expect(get.status).to.equal(200);
    expect(sessions, 'sessions the server saw').to.equal(1);
    expect(connection.protocol).to.equal('h2');
  });

  it('reaches a control plane at an IPv6 literal ([::1]) over HTTP/2, and lets it send 4 MiB of an answer ahead', async function () {
    requireService(this, Object.values(os.networkInterfaces()).flat().some((a) => a?.address === '::1'), 'the IPv6 loopback address ::1');
    const server = http2.createSecureServer({ cert: tls.cert, key: tls.key });
    await new Promise<void>((resolve) => server.listen(0, '::1', resolve));
    servers.push(server);
    const windows: number[] = [];
    server.on('stream', (stream) => {
      windows.push(stream.session!.remoteSettings.initialWindowSize!);
      stream.respond({ ':status': 200 });
      stream.end(Buffer.alloc(6 << 20, 7));
    });
    const connection = connect(`https://[::1]:${(server.address() as AddressInfo).port}`);
    const res = await connection.request('/big');
    expect(res.raw.length).to.equal(6 << 20);
    expect(connection.protocol).to.equal('h2');
    expect(windows[0], 'what the agent lets the server send ahead on one answer').to.equal(4 << 20);
  });

  it('uses HTTP/1.1 connections for good when the server speaks no HTTP/2, and says so once', async () => {
    const server = await listen(https.createServer({ cert: tls.cert, key: tls.key }, (req, res) => res.setHeader('content-type', 'application/json').end(JSON.stringify({ url: req.url, version: req.httpVersion }))));
    const told: string[] = [];
    const connection = connect(server.url, (why) => told.push(why));
    expect((await connection.request('/v1/one')).json).to.deep.equal({ url: '/v1/one', version: '1.1' });
    expect((await connection.request('/v1/two')).json).to.deep.equal({ url: '/v1/two', version: '1.1' });
    expect(connection.protocol).to.equal('http/1.1');
    expect(told).to.have.length(1);
    expect(told[0]).to.match(/chose http\/1\.1/);
  });

  it('fails the requests in flight when the server ends the session, and opens a new one for the next', async () => {
    const server = await listen(http2.createSecureServer({ cert: tls.cert, key: tls.key }));
    let sessions = 0;
    server.on('session', () => sessions++);
    server.on('stream', (stream, headers) => {
      if (headers[':path'] === '/hang-up') return stream.session!.destroy();
      stream.respond({ ':status': 200 });
      stream.end('ok');
    });
    const connection = connect(server.url);
    const started = Date.now();
    const error = await connection.request('/hang-up', { timeoutMs: 20_000 }).then(() => null, (err: Error) => err);
    expect(error?.message).to.match(/closed before the answer was complete/);
    expect(Date.now() - started, 'failed at once, not at its timeout').to.be.lessThan(5_000);
    expect((await connection.request('/again')).text).to.equal('ok');
    expect(sessions).to.equal(2);
  });

  it('gives up a session whose connection went silent: a request times out, the next one gets through on a new connection', async function () {
    this.timeout(20_000);
    const server = await listen(http2.createSecureServer({ cert: tls.cert, key: tls.key }));
    server.on('stream', (stream) => {
      stream.respond({ ':status': 200 });
      stream.end('ok');
    });
    // A relay that can stop passing bytes on the connections it has, without closing them.
    const silenced = new Set<net.Socket>();
    const relayed: net.Socket[] = [];
    const relay = await listen(
      net.createServer((client) => {
        const upstream = net.connect((server.address() as AddressInfo).port, '127.0.0.1');
        const pass = (from: net.Socket, to: net.Socket) => from.on('data', (chunk) => (silenced.has(client) ? undefined : to.write(chunk)));
        pass(client, upstream);
        pass(upstream, client);
        client.on('error', () => upstream.destroy()).on('close', () => upstream.destroy());
        upstream.on('error', () => client.destroy());
        relayed.push(client);
      }),
    );
    const connection = connect(relay.url);
    expect((await connection.request('/before')).text).to.equal('ok');
    for (const socket of relayed) silenced.add(socket);
    const error = await connection.request('/lost', { timeoutMs: 500 }).then(() => null, (err: Error) => err);
    expect(error?.message).to.match(/timed out after 500 ms/);
    // The unanswered ping ends the session; the next request connects again (a new relay connection).
    await new Promise((resolve) => setTimeout(resolve, 5_500));
    expect((await connection.request('/after', { timeoutMs: 2_000 })).text).to.equal('ok');
    expect(relayed).to.have.length(2);
    for (const socket of relayed) socket.destroy();
  });
});
