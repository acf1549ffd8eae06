import net from 'node:net';

/**
 * A TCP port nothing listens on now at `host` (taken, then released): for a control plane kept at
 * its address across a restart or a restore, or a balancer's published port.
 */
export function freePort(host = '127.0.0.1'): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, host, () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}
