import { createPrivateKey, createPublicKey, generateKeyPairSync, webcrypto, X509Certificate as NodeX509, type KeyObject } from 'node:crypto';
import { EventEmitter } from 'node:events';
import { randomBytes } from 'node:crypto';
import { closeSync, fsyncSync, mkdirSync, openSync, readFileSync, renameSync, rmSync, writeSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { isIP } from 'node:net';
import type * as X509 from '@peculiar/x509';
import type { Knex } from 'knex';
import type { Store } from '../db/store.js';
import type { Clock } from '../clock.js';
import { deriveKey, SecretBox } from '../crypto.js';
import { ConfigError } from '../errors.js';
import { NoticedCache } from '../cache.js';
import { Keyring } from './keyring.js';
import { issueLeafCertificate, issuerInfo, type IssuerInfo } from './leaf-certificate.js';

type CryptoKey = webcrypto.CryptoKey;
type CryptoKeyPair = webcrypto.CryptoKeyPair;

let x509Module: Promise<typeof X509> | undefined;

/**
 * @peculiar/x509 and its ASN.1 modules (a fifth of start-up to load) are needed only to make a
 * certificate, so they are loaded the first time one is made; a restart with its CA and server
 * certificate in place reads them with node:crypto alone.
 */
function loadX509(): Promise<typeof X509> {
  return (x509Module ??= (async () => {
    await import('reflect-metadata'); // @peculiar/x509 (tsyringe) needs it loaded first
    const imported = (await import('@peculiar/x509')) as unknown as typeof X509 & { default?: typeof X509 };
    // A CommonJS module: the bundle's dynamic import holds its exports under `default`.
    const x = imported.cryptoProvider ? imported : imported.default!;
    x.cryptoProvider.set(webcrypto as unknown as Parameters<typeof x.cryptoProvider.set>[0]);
    return x;
  })());
}

/** A certificate as PEM in one spelling (base64 in lines of 64, no newline after the end line). */
function canonicalCertificatePem(pem: string): string {
  const b64 = new NodeX509(pem).raw.toString('base64').replace(/.{64}/g, '$&\n').replace(/\n$/, '');
  return `-----BEGIN CERTIFICATE-----\n${b64}\n-----END CERTIFICATE-----`;
}

const ALG = { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' } as const;
/** The names operators asked the server certificate to carry, in the pki folder. */
const REQUESTED_NAMES = 'server-names.json';

const DAY = 86_400_000;
const CA_LIFETIME = 3650 * DAY;
const SERVER_LIFETIME = 825 * DAY;
const CLIENT_LIFETIME = 365 * DAY;
export const CERTIFICATES_TABLE = 'certificates';
/** Notices on this topic: client certificates were revoked. */
const CERTIFICATE_CHANGES = 'pki.certificates';

export interface IssuedCertificate {
  serial: string;
  cert_pem: string;
  key_pem?: string;
  ca_pem: string;
  expires_at: string;
}

export interface ServerCredentials {
  cert: string;
  key: string;
}

export interface PkiOptions {
  dataDir: string;
  store: Store;
  clock: Clock;
  /** Operator-provided server certificate and key (PEM file paths). */
  tlsCertFile?: string | null;
  tlsKeyFile?: string | null;
  /** Extra SANs for the generated server certificate. */
  serverNames?: string[];
  /**
   * base64 master key (secrets.master_key): the CA, the sealing root and the JWT secret are then
   * kept in the store sealed with it, shared by every control plane (core/pki/keyring.ts).
   */
  masterKey?: string | null;
  log?: { info(obj: object, msg: string): void; warn(obj: object, msg: string): void };
}

/** Serial numbers as Node reports them: uppercase hex without leading zeros. */
export function normaliseSerial(serial: string): string {
  return serial.replace(/^0+/, '').toUpperCase() || '0';
}

function toPem(der: ArrayBuffer, label: string): string {
  const b64 = Buffer.from(der).toString('base64').replace(/.{64}/g, '$&\n');
  return `-----BEGIN ${label}-----\n${b64.replace(/\n$/, '')}\n-----END ${label}-----\n`;
}

function fromPem(pem: string): Buffer {
  return Buffer.from(pem.replace(/-----[^-]+-----/g, '').replace(/\s+/g, ''), 'base64');
}

async function exportKey(key: CryptoKey): Promise<string> {
  return toPem(await webcrypto.subtle.exportKey('pkcs8', key), 'PRIVATE KEY');
}

function readPem(file: string, key: string): string {
  try {
    return readFileSync(file, 'utf8');
  } catch (err) {
    throw new ConfigError(`${key}: cannot read ${file}: ${(err as Error).message}`);
  }
}

/** Writes a file and syncs it to disk before answering (a rename after it then never shows a partial file). */
function writeDurably(file: string, content: string, mode: number): void {
  const fd = openSync(file, 'w', mode);
  try {
    writeSync(fd, content);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

function randomSerial(): string {
  const bytes = webcrypto.getRandomValues(new Uint8Array(16));
  bytes[0] = (bytes[0]! & 0x7f) | 0x10; // positive and never shortened by leading zeros
  return Buffer.from(bytes).toString('hex').toUpperCase();
}

/**
 * Every name this machine answers to: hostname, localhost and each local address — but not
 * link-local ones (fe80::/10, 169.254/16): they mean nothing off their own link, and container
 * veths make them come and go, which would change the certificate's names with every container.
 */
export function localNames(): string[] {
  const names = new Set<string>([os.hostname(), 'localhost']);
  for (const list of Object.values(os.networkInterfaces())) {
    for (const addr of list ?? []) if (!isLinkLocal(addr.address)) names.add(addr.address.split('%')[0]!);
  }
  return [...names];
}

function isLinkLocal(address: string): boolean {
  return /^fe[89ab][0-9a-f]:/i.test(address) || address.startsWith('169.254.');
}

/** One spelling per address: `0:0:0:0:0:0:0:1` and `::1` are the same SAN. */
export function normaliseName(name: string): string {
  if (isIP(name) === 6) return new URL(`http://[${name}]`).hostname.slice(1, -1);
  return name.toLowerCase();
}

/** The SANs a PEM certificate carries, as plain normalised strings. */
export function certificateSans(pem: string): string[] {
  const alt = new NodeX509(pem).subjectAltName ?? '';
  return alt
    .split(', ')
    .filter(Boolean)
    .map((entry) => normaliseName(entry.replace(/^(DNS|IP Address):/, '')));
}

/**
 * hangar's certificate authority: the CA itself, the API server certificate (hot-swappable),
 * client certificates for agents (CN = node id) and their revocation.
 *
 * Emits `server-certificate` with {@link ServerCredentials} whenever the server certificate changes.
 */
export class Pki extends EventEmitter {
  /** The CA certificate as PEM; parsed by @peculiar/x509 only when it signs (sign). */
  private caCertPem!: string;
  /** The CA as a signer of leaf certificates, made from its PEM files the first time one is signed. */
  private issuer: { info: IssuerInfo; key: KeyObject } | undefined;
  private caKeyPem!: string;
  /** The root that keys for sealing derive from (shared keyring only; else the CA key). */
  private sealingRoot: Buffer | null = null;
  private server!: ServerCredentials;
  /** Where the CA, the sealing root and other control-plane secrets are kept. */
  readonly keyring: Keyring;
  readonly dir: string;
  /** True when the operator supplied the server certificate; then the CA is not served. */
  readonly operatorCertificates: boolean;

  /** Client certificates by serial as the store last answered (isUsable). */
  private readonly certificates: NoticedCache<{ node_id: string; revoked: boolean }>;

  private constructor(private readonly options: PkiOptions) {
    super();
    this.certificates = new NoticedCache(options.store.notices, CERTIFICATE_CHANGES, { ttlMs: 60_000, max: 200_000 });
    this.dir = path.join(options.dataDir, 'pki');
    this.operatorCertificates = Boolean(options.tlsCertFile);
    if (options.tlsKeyFile && !options.tlsCertFile) throw new ConfigError('api.tls_key is set but api.tls_cert is not: give both');
    this.keyring = new Keyring(options.store, options.dataDir, options.masterKey, options.log);
  }

  static async open(options: PkiOptions): Promise<Pki> {
    const pki = new Pki(options);
    await pki.load();
    return pki;
  }

  private file(name: string): string {
    return path.join(this.dir, name);
  }

  private async load(): Promise<void> {
    mkdirSync(this.dir, { recursive: true, mode: 0o700 });
    const [caKeyPem, caCertPem] = await this.keyring.obtain({ name: 'ca', files: ['pki/ca.key', 'pki/ca.crt'], generate: () => this.createCa() });
    this.caKeyPem = caKeyPem!;
    this.caCertPem = canonicalCertificatePem(caCertPem!);
    // The certificate is public: operators and tools find it in the data dir whichever keeps the key.
    if (this.keyring.shared) writeDurably(this.file('ca.crt'), caCertPem!, 0o644);
    const [root] = (await this.keyring.obtainShared('sealing-root', async () => [randomBytes(32).toString('base64')])) ?? [];
    this.sealingRoot = root ? Buffer.from(root, 'base64') : null;
    if (this.options.tlsCertFile) {
      if (!this.options.tlsKeyFile) throw new ConfigError('api.tls_cert is set but api.tls_key is not: give both');
      this.server = { cert: readPem(this.options.tlsCertFile, 'api.tls_cert'), key: readPem(this.options.tlsKeyFile, 'api.tls_key') };
      return;
    }
    const existing = this.readServerCredentials();
    const have = existing ? certificateSans(existing.cert) : [];
    // Before names were recorded (an older data dir), every name the certificate has that is not a
    // local address or a configured one was asked for: kept as such, once.
    if (existing && this.readRequestedNames() === null) {
      const derived = new Set(this.wantedServerNames([]));
      this.writeRequestedNames(have.filter((n) => !derived.has(n)));
    }
    const wanted = this.wantedServerNames([]);
    if (existing) {
      // The pair in use until a new one is written: a write that fails half-way puts it back.
      this.server = existing;
      const valid = new Date(new NodeX509(existing.cert).validTo).getTime() > this.options.clock.now().getTime() + 30 * DAY;
      if (valid && wanted.every((n) => have.includes(n))) return;
    }
    // The names of now: the local addresses the host has, the configured ones and those asked for
    // (kept in server-names.json): an address the host no longer has is not carried on for ever.
    try {
      await this.writeServerCertificate(wanted);
    } catch (err) {
      const reason = (err as Error).message;
      if (!existing) throw new ConfigError(`cannot write the server certificate and key in ${this.dir}: ${reason}; make the data dir writable and start again`);
      // Both files were put back as they were: the old pair still belongs together and is served.
      this.options.log?.warn(
        { dir: this.dir, reason, missing_names: wanted.filter((n) => !have.includes(n)), expires_at: new Date(new NodeX509(existing.cert).validTo).toISOString() },
        'server certificate not renewed: writing the new pair failed, the old pair is served (the start tries again; so does pki:local-addresses)',
      );
    }
  }

  /**
   * The generated server certificate and key from the data dir, when both are there, readable and
   * belong together; null otherwise (then a new pair is made: a crash between writing the two
   * files, or a copy of only one of them, does not stop the start).
   */
  private readServerCredentials(): ServerCredentials | null {
    try {
      const cert = readFileSync(this.file('server.crt'), 'utf8');
      const key = readFileSync(this.file('server.key'), 'utf8');
      return new NodeX509(cert).checkPrivateKey(createPrivateKey(key)) ? { cert, key } : null;
    } catch {
      return null;
    }
  }

  /** A new CA: its key and certificate as PEM. */
  private async createCa(): Promise<string[]> {
    const x509 = await loadX509();
    const keys = (await webcrypto.subtle.generateKey(ALG, true, ['sign', 'verify'])) as CryptoKeyPair;
    const now = this.options.clock.now();
    const cert = await x509.X509CertificateGenerator.createSelfSigned({
      serialNumber: randomSerial(),
      name: `CN=hangar CA ${os.hostname()}`,
      notBefore: new Date(now.getTime() - 60_000),
      notAfter: new Date(now.getTime() + CA_LIFETIME),
      signingAlgorithm: ALG,
      keys,
      extensions: [
        new x509.BasicConstraintsExtension(true, 0, true),
        new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign, true),
        await x509.SubjectKeyIdentifierExtension.create(keys.publicKey),
      ],
    });
    return [await exportKey(keys.privateKey), cert.toString('pem')];
  }

  /**
   * The names the server certificate should carry now: this host's names and addresses of now, the
   * configured ones (api.server_names, api.public_addresses), every name asked for through
   * reissueServerCertificate (server-names.json) and `extra`.
   */
  private wantedServerNames(extra: string[]): string[] {
    return [...new Set([...localNames(), ...(this.options.serverNames ?? []), ...(this.readRequestedNames() ?? []), ...extra].map(normaliseName))];
  }

  /** The names operators asked the certificate to carry (POST /v1/nodes/{id}/ip with regenerate_cert); null before any was recorded. */
  private readRequestedNames(): string[] | null {
    try {
      const { requested } = JSON.parse(readFileSync(this.file(REQUESTED_NAMES), 'utf8')) as { requested?: unknown };
      return Array.isArray(requested) ? requested.filter((n): n is string => typeof n === 'string') : [];
    } catch {
      return null;
    }
  }

  private writeRequestedNames(names: string[]): void {
    const temp = this.file(`${REQUESTED_NAMES}.${process.pid}.new`);
    writeDurably(temp, `${JSON.stringify({ requested: [...new Set(names.map(normaliseName))] }, null, 2)}\n`, 0o644);
    renameSync(temp, this.file(REQUESTED_NAMES));
  }

  /** Signs a leaf certificate with the CA (core/pki/leaf-certificate.ts). */
  private sign(params: { commonName: string; names?: string[]; usage: Array<'serverAuth' | 'clientAuth'>; lifetime: number; publicKeySpki: Buffer }): { serial: string; pem: string; notAfter: Date } {
    this.issuer ??= { info: issuerInfo(new NodeX509(this.caCertPem).raw), key: createPrivateKey(this.caKeyPem) };
    const now = this.options.clock.now();
    const serial = randomSerial();
    const notAfter = new Date(Math.floor((now.getTime() + params.lifetime) / 1000) * 1000);
    const pem = issueLeafCertificate(
      { serial, commonName: params.commonName, names: params.names, usage: params.usage, notBefore: new Date(now.getTime() - 60_000), notAfter, publicKeySpki: params.publicKeySpki },
      this.issuer.info,
      this.issuer.key,
    );
    return { serial: normaliseSerial(serial), pem, notAfter };
  }

  private async writeServerCertificate(names: string[]): Promise<void> {
    const keys = (await webcrypto.subtle.generateKey(ALG, true, ['sign', 'verify'])) as CryptoKeyPair;
    const { pem } = this.sign({
      commonName: os.hostname(),
      names,
      usage: ['serverAuth'],
      lifetime: SERVER_LIFETIME,
      publicKeySpki: Buffer.from(await webcrypto.subtle.exportKey('spki', keys.publicKey)),
    });
    const key = await exportKey(keys.privateKey);
    this.replaceServerFiles({ cert: pem, key });
    this.server = { cert: pem, key };
    this.emit('server-certificate', this.server);
  }

  /**
   * Writes a new certificate and key both or neither: each goes to a temporary file first (synced),
   * then the two are renamed into place; if the second rename fails the first file is put back.
   * (Start-up replaces a pair that does not belong together, should the process die in between.)
   */
  private replaceServerFiles(next: ServerCredentials): void {
    const files = [
      { name: 'server.key', content: next.key, mode: 0o600 },
      { name: 'server.crt', content: next.cert, mode: 0o644 },
    ];
    const staged = files.map((f) => ({ ...f, temp: this.file(`${f.name}.${process.pid}.new`) }));
    try {
      for (const f of staged) writeDurably(f.temp, f.content, f.mode);
    } catch (err) {
      for (const f of staged) rmSync(f.temp, { force: true });
      throw err;
    }
    // What the files held: the pair in use (none yet at the very first start).
    const previous = this.server ? [this.server.key, this.server.cert] : [null, null];
    const renamed: number[] = [];
    try {
      for (const [i, f] of staged.entries()) {
        renameSync(f.temp, this.file(f.name));
        renamed.push(i);
      }
    } catch (err) {
      for (const f of staged) rmSync(f.temp, { force: true });
      for (const i of renamed) {
        const old = previous[i];
        if (old === null || old === undefined) continue;
        // Put back the same way: a whole file renamed into place, never one half-written.
        const back = this.file(`${files[i]!.name}.${process.pid}.old`);
        writeDurably(back, old, files[i]!.mode);
        renameSync(back, this.file(files[i]!.name));
      }
      throw err;
    }
  }

  /**
   * Takes up the server certificate another worker of this control plane wrote to the data dir
   * (api.workers; it reissued it). Answers the new credentials, or null when nothing changed.
   */
  reloadServerCertificate(): ServerCredentials | null {
    if (this.operatorCertificates) return null;
    const written = this.readServerCredentials();
    if (!written || written.cert === this.server.cert) return null;
    this.server = written;
    return written;
  }

  /** The CA certificate as PEM. */
  get caPem(): string {
    return this.caCertPem;
  }

  /** The current server certificate and key (PEM). */
  get serverCredentials(): ServerCredentials {
    return this.server;
  }

  /**
   * Reissues the generated server certificate so it also covers `addresses`, then swaps it in
   * (listeners of `server-certificate` update running servers). Returns the SANs that were new.
   */
  async reissueServerCertificate(addresses: string[]): Promise<{ added_sans: string[] }> {
    if (this.operatorCertificates) {
      throw new Error('the server certificate was provided by the operator (api.tls_cert) and cannot be reissued by hangar');
    }
    const current = new Set(certificateSans(this.server.cert));
    if (addresses.length) this.writeRequestedNames([...(this.readRequestedNames() ?? []), ...addresses]);
    const names = this.wantedServerNames([]);
    await this.writeServerCertificate(names);
    // Every name the new certificate has that the old one lacked: the addresses asked for, and any
    // local address or configured name that appeared since.
    return { added_sans: names.filter((n) => !current.has(n)) };
  }

  /**
   * Reissues the generated server certificate when a name it should carry is missing (an address
   * this host gained since it was made); answers the names added, none when nothing was missing or
   * the operator provides the certificate.
   */
  async coverLocalAddresses(): Promise<string[]> {
    if (this.operatorCertificates) return [];
    const have = new Set(certificateSans(this.server.cert));
    if (this.wantedServerNames([]).every((name) => have.has(name))) return [];
    return (await this.reissueServerCertificate([])).added_sans;
  }

  /**
   * Issues a client certificate for an agent. With `publicKeyPem` (SPKI) the machine keeps its
   * private key; without it a key pair is generated and returned once. With `trx` the certificate
   * is recorded in that transaction (it is usable only once that commits: a node's join).
   */
  async issueClientCertificate(nodeId: string, publicKeyPem?: string, trx?: Knex.Transaction): Promise<IssuedCertificate> {
    let publicKey: KeyObject;
    let keyPem: string | undefined;
    if (publicKeyPem) {
      publicKey = createPublicKey(publicKeyPem);
      if (publicKey.asymmetricKeyType !== 'ec' || publicKey.asymmetricKeyDetails?.namedCurve !== 'prime256v1') throw new Error('the public key is not an EC P-256 key');
    } else {
      const keys = generateKeyPairSync('ec', { namedCurve: 'P-256' });
      publicKey = keys.publicKey;
      keyPem = keys.privateKey.export({ type: 'pkcs8', format: 'pem' }) as string;
    }
    const { serial, pem, notAfter } = this.sign({
      commonName: nodeId,
      usage: ['clientAuth'],
      lifetime: CLIENT_LIFETIME,
      publicKeySpki: publicKey.export({ type: 'spki', format: 'der' }),
    });
    const now = this.options.clock.now().toISOString();
    await (trx ?? this.options.store.knex)(CERTIFICATES_TABLE).insert({
      serial,
      node_id: nodeId,
      issued_at: now,
      expires_at: notAfter.toISOString(),
      revoked_at: null,
    });
    return { serial, cert_pem: pem, key_pem: keyPem, ca_pem: this.caPem, expires_at: notAfter.toISOString() };
  }

  /** Revokes every unrevoked client certificate of a node; returns how many. */
  async revokeNode(nodeId: string): Promise<number> {
    const revoked = await this.options.store
      .knex(CERTIFICATES_TABLE)
      .where({ node_id: nodeId })
      .whereNull('revoked_at')
      .update({ revoked_at: this.options.clock.now().toISOString() });
    // Every control plane drops what it remembers of certificates (revocations are rare).
    if (revoked) await this.options.store.notices.publish(CERTIFICATE_CHANGES, null);
    return revoked;
  }

  /**
   * Whether a presented client certificate (already verified against the CA by TLS) may be used:
   * the store's answer, remembered until a revocation (on any control plane) or for a minute.
   */
  async isUsable(serial: string, nodeId: string): Promise<boolean> {
    const row = await this.certificates.get(normaliseSerial(serial), async () => {
      const found = await this.options.store.knex(CERTIFICATES_TABLE).where({ serial: normaliseSerial(serial) }).first('node_id', 'revoked_at');
      return found ? { node_id: found.node_id as string, revoked: Boolean(found.revoked_at) } : null;
    });
    return Boolean(row && row.node_id === nodeId && !row.revoked);
  }

  /**
   * The roots keys derive from, the current one first: the keyring's sealing root (with a master
   * key), then what older installs sealed with — the master key itself, then the CA key.
   */
  private roots(): Buffer[] {
    return [this.sealingRoot, this.keyring.masterKey, fromPem(this.caKeyPem)].filter((r): r is Buffer => r !== null);
  }

  /** A 32-byte key for one purpose, the same on every control plane sharing the keyring. */
  deriveKey(purpose: string): Buffer {
    return deriveKey(this.roots()[0]!, purpose);
  }

  /**
   * Encryption at rest for one purpose (API secrets, SSH profiles…): seals with the current root,
   * opens what any earlier root sealed (an install that moved to a master key loses nothing).
   */
  secretBox(purpose: string): SecretBox {
    const [current, ...older] = this.roots().map((root) => deriveKey(root, purpose));
    return new SecretBox(current!, older);
  }
}
