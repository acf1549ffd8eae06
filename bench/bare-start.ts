// The yardstick for hangar's start-up (issue 32): a bare `node:https` server answering /healthz, started
// by the same `node` on the same machine in the same run as hangar's restarts (interleaved), so that a
// busy machine slows both. hangar's cold start is judged as a multiple of this one (target ≤ 8×).
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';

const SERVER = `import https from 'node:https';
import { readFileSync } from 'node:fs';
const dir = process.argv[2];
https.createServer({ key: readFileSync(dir + '/server.key'), cert: readFileSync(dir + '/server.crt') }, (req, res) => {
  res.setHeader('content-type', 'application/json');
  res.end('{"status":"ok"}');
}).listen(Number(process.argv[3]), '127.0.0.1');
`;

const probe = (port: number) =>
  new Promise<boolean>((resolve) => {
    const req = https.get({ host: '127.0.0.1', port, path: '/healthz', rejectUnauthorized: false, agent: false, timeout: 2000 }, (res) => {
      res.resume();
      resolve(res.statusCode === 200);
    });
    req.on('error', () => resolve(false));
    req.on('timeout', () => req.destroy());
  });

/** A bare Node HTTPS server to start again and again: its certificate and script are made once. */
export class BareNodeServer {
  private readonly dir = mkdtempSync(path.join(os.tmpdir(), 'duel-bare-node-'));

  constructor(private readonly port: number) {
    const made = spawnSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-days', '2',
      '-keyout', path.join(this.dir, 'server.key'), '-out', path.join(this.dir, 'server.crt'), '-subj', '/CN=localhost'], { encoding: 'utf8' });
    if (made.status !== 0) throw new Error(`openssl: ${made.stderr}`);
    writeFileSync(path.join(this.dir, 'server.mjs'), SERVER);
  }

  /** Starts it, waits (polling as the duel polls hangar) for its first healthy answer, stops it: the wall time in ms. */
  async start(): Promise<number> {
    const started = performance.now();
    const child = spawn(process.execPath, [path.join(this.dir, 'server.mjs'), this.dir, String(this.port)], { stdio: 'ignore' });
    try {
      for (;;) {
        if (child.exitCode !== null) throw new Error(`the bare node server exited with ${child.exitCode}`);
        if (await probe(this.port)) return performance.now() - started;
        await new Promise((r) => setTimeout(r, 5));
      }
    } finally {
      if (child.exitCode === null) {
        const exited = new Promise((r) => child.once('exit', r));
        child.kill('SIGTERM');
        await exited;
      }
    }
  }

  remove(): void {
    rmSync(this.dir, { recursive: true, force: true });
  }
}
