import type { Socket } from 'node:net';

/**
 * The ALPN protocol id a client offers to say "I am an agent: ask me for my certificate". Agents
 * that offer no ALPN at all (hangar's agents before HTTP/2, which used Node's https client) are
 * asked too. hangar's agents offer `h2` and this id: see {@link agentSpeaksHttp2}.
 */
export const AGENT_ALPN = 'hangar-agent';

/**
 * The protocols a TLS ClientHello offers in its ALPN extension: null when it has none (or the
 * bytes are not a ClientHello that fits in its first record), else the list.
 */
export function offeredAlpn(record: Buffer): string[] | null {
  // Record header: content type 22 (handshake), version, length; then handshake type 1 (ClientHello).
  if (record.length < 9 || record[0] !== 0x16 || record[5] !== 0x01) return null;
  const end = Math.min(record.length, 5 + record.readUInt16BE(3));
  let at = 9 + 2 + 32; // handshake length (3 bytes), client version, random
  const skip = (lengthBytes: 1 | 2) => {
    if (at + lengthBytes > end) return false;
    at += lengthBytes + (lengthBytes === 1 ? record[at]! : record.readUInt16BE(at));
    return at <= end;
  };
  if (!skip(1) || !skip(2) || !skip(1)) return null; // session id, cipher suites, compression methods
  if (at + 2 > end) return null;
  const extensionsEnd = Math.min(end, at + 2 + record.readUInt16BE(at));
  at += 2;
  while (at + 4 <= extensionsEnd) {
    const type = record.readUInt16BE(at);
    const length = record.readUInt16BE(at + 2);
    at += 4;
    if (type === 16 && at + 2 <= extensionsEnd) {
      const protocols: string[] = [];
      const listEnd = Math.min(extensionsEnd, at + 2 + record.readUInt16BE(at));
      for (let p = at + 2; p < listEnd; ) {
        const n = record[p]!;
        protocols.push(record.toString('latin1', p + 1, p + 1 + n));
        p += 1 + n;
      }
      return protocols;
    }
    at += length;
  }
  return null;
}

/**
 * Whether to ask this client for a certificate: agents present one (mutual TLS), browsers must
 * never be asked. Browsers and curl always offer ALPN (h2, http/1.1); hangar's agents offer none,
 * or {@link AGENT_ALPN}. So: ask when the ClientHello offers no ALPN or offers the agent's id.
 */
export function wantsClientCertificate(firstRecord: Buffer): boolean {
  const alpn = offeredAlpn(firstRecord);
  return alpn === null || alpn.includes(AGENT_ALPN);
}

/**
 * Whether this connection is an agent that speaks HTTP/2: it offers `h2` and {@link AGENT_ALPN}.
 * Browsers and curl offer `h2` too, without the agent's id: they stay on HTTP/1.1.
 */
export function agentSpeaksHttp2(firstRecord: Buffer): boolean {
  const alpn = offeredAlpn(firstRecord);
  return alpn !== null && alpn.includes('h2') && alpn.includes(AGENT_ALPN);
}

const MAX_RECORD = 5 + 16_384;

/**
 * Reads a connection's first TLS record without consuming it (the bytes are put back for the TLS
 * layer) and resolves with them; resolves with what arrived when the peer sends something else,
 * closes, or stays silent for `timeoutMs`.
 */
export function peekFirstRecord(socket: Socket, timeoutMs: number): Promise<Buffer> {
  return new Promise((resolve) => {
    let buffered = Buffer.alloc(0);
    const finish = () => {
      clearTimeout(timer);
      socket.removeListener('data', onData);
      socket.removeListener('end', finish);
      socket.removeListener('error', finish);
      socket.removeListener('close', finish);
      socket.pause();
      if (buffered.length && !socket.destroyed) socket.unshift(buffered);
      resolve(buffered);
    };
    const onData = (chunk: Buffer) => {
      buffered = Buffer.concat([buffered, chunk]);
      const need = buffered.length >= 5 && buffered[0] === 0x16 ? Math.min(MAX_RECORD, 5 + buffered.readUInt16BE(3)) : 5;
      if (buffered.length >= need || (buffered.length >= 1 && buffered[0] !== 0x16)) finish();
    };
    const timer = setTimeout(finish, timeoutMs);
    socket.on('data', onData);
    socket.once('end', finish);
    socket.once('error', finish);
    socket.once('close', finish);
  });
}
