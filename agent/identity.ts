import { generateKeyPairSync } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

/** What an agent keeps in its data dir to be itself after a restart. */
export interface AgentIdentity {
  nodeId: string;
  apiUrl: string;
  certPem: string;
  keyPem: string;
  caPem: string;
  overlayIp: string | null;
  overlayPrefix: number | null;
  wgPrivateKey: string | null;
}

export function defaultDataDir(): string {
  return process.getuid?.() === 0 ? '/var/lib/hangar-agent' : path.join(os.homedir(), '.hangar-agent');
}

const FILES = { config: 'agent.json', cert: 'client.crt', key: 'client.key', ca: 'ca.crt', wg: 'wireguard.key' } as const;

export function identityExists(dataDir: string): boolean {
  return existsSync(path.join(dataDir, FILES.config)) && existsSync(path.join(dataDir, FILES.key));
}

export function loadIdentity(dataDir: string): AgentIdentity {
  const read = (name: string) => readFileSync(path.join(dataDir, name), 'utf8');
  const config = JSON.parse(read(FILES.config)) as { node_id: string; api_url: string; overlay_ip?: string; overlay_prefix?: number };
  return {
    nodeId: config.node_id,
    apiUrl: config.api_url,
    certPem: read(FILES.cert),
    keyPem: read(FILES.key),
    caPem: read(FILES.ca),
    overlayIp: config.overlay_ip ?? null,
    overlayPrefix: config.overlay_prefix ?? null,
    wgPrivateKey: existsSync(path.join(dataDir, FILES.wg)) ? read(FILES.wg).trim() : null,
  };
}

export function saveIdentity(dataDir: string, identity: AgentIdentity): void {
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  // Each file is written whole or not at all (a crash or a reader never sees half of agent.json).
  const write = (name: string, content: string, mode = 0o600) => {
    const file = path.join(dataDir, name);
    writeFileSync(`${file}.tmp`, content, { mode });
    renameSync(`${file}.tmp`, file);
  };
  write(FILES.key, identity.keyPem);
  write(FILES.cert, identity.certPem, 0o644);
  write(FILES.ca, identity.caPem, 0o644);
  if (identity.wgPrivateKey) write(FILES.wg, `${identity.wgPrivateKey}\n`);
  write(
    FILES.config,
    `${JSON.stringify({ node_id: identity.nodeId, api_url: identity.apiUrl, overlay_ip: identity.overlayIp, overlay_prefix: identity.overlayPrefix }, null, 2)}\n`,
  );
}

/** A fresh P-256 key pair for the client certificate; the private key never leaves this machine. */
export function newKeyPair(): { publicKeyPem: string; privateKeyPem: string } {
  const pair = generateKeyPairSync('ec', { namedCurve: 'P-256' });
  return {
    publicKeyPem: pair.publicKey.export({ type: 'spki', format: 'pem' }).toString(),
    privateKeyPem: pair.privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(),
  };
}
