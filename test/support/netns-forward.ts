/**
 * Reaches a TCP port inside another network namespace — a container's on an overlay network the
 * host is not on — from this process: a Unix socket on this host whose every connection is piped
 * to `127.0.0.1:<port>` in the namespace of process `pid`, by a small Node process started in that
 * namespace with nsenter (needs root). Only the network namespace changes, so the socket file is
 * in this host's /tmp.
 *
 *   const forward = await forwardIntoNetns(containerPid, 9000);
 *   http.request({ socketPath: forward.socketPath, path: '/', … });
 *   await forward.close();
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const CHILD = `
const net = require('node:net');
const [socketPath, port] = process.argv.slice(1);
net.createServer((client) => {
  const upstream = net.connect(Number(port), '127.0.0.1');
  client.pipe(upstream).pipe(client);
  client.on('error', () => upstream.destroy());
  upstream.on('error', () => client.destroy());
}).listen(socketPath, () => console.log('listening'));
process.stdin.on('end', () => process.exit(0));
process.stdin.resume();
`;

export interface NetnsForward {
  socketPath: string;
  close(): Promise<void>;
}

export async function forwardIntoNetns(pid: number, port: number): Promise<NetnsForward> {
  const dir = mkdtempSync(join(tmpdir(), 'hangar-netns-forward-'));
  const socketPath = join(dir, 'socket');
  // stdin is a pipe from this process: the forwarder ends when it closes, however this process ends.
  const child = spawn('nsenter', [`--net=/proc/${pid}/ns/net`, process.execPath, '-e', CHILD, socketPath, String(port)], { stdio: ['pipe', 'pipe', 'pipe'] });
  let output = '';
  await new Promise<void>((resolve, reject) => {
    child.stdout.on('data', (chunk: Buffer) => {
      output += chunk.toString();
      if (output.includes('listening')) resolve();
    });
    child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.on('error', reject);
    child.on('exit', (code) => reject(new Error(`nsenter into the network namespace of process ${pid} ended (code ${code}): ${output.trim()}`)));
  });
  return {
    socketPath,
    close: async () => {
      if (child.exitCode === null) {
        const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
        child.stdin.end();
        await exited;
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
