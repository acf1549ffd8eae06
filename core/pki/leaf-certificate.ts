import { createHash, sign, type KeyObject } from 'node:crypto';
import { isIP } from 'node:net';

/**
 * Leaf certificates (a node's client certificate, the control plane's server certificate) encoded
 * directly in DER and signed with node:crypto. Joining a fleet issues one per machine, and
 * @peculiar/x509's ASN.1 object model spent ~40 % of a join's CPU doing it; the CA's own
 * self-signed certificate, made once, is still @peculiar/x509's (core/pki/pki.ts).
 *
 * What is written (RFC 5280): version 3, the serial, ecdsa-with-SHA256, the CA's subject as issuer
 * (its DER copied from the CA certificate), the validity, `CN=<name>`, the key, and the extensions
 * basicConstraints (critical, not a CA), keyUsage (critical: digitalSignature, keyAgreement),
 * extKeyUsage, authorityKeyIdentifier (the CA's subjectKeyIdentifier) and, for a server,
 * subjectAltName (DNS names and IP addresses).
 */

const OID = {
  ecdsaWithSha256: '1.2.840.10045.4.3.2',
  commonName: '2.5.4.3',
  subjectKeyIdentifier: '2.5.29.14',
  keyUsage: '2.5.29.15',
  subjectAltName: '2.5.29.17',
  basicConstraints: '2.5.29.19',
  authorityKeyIdentifier: '2.5.29.35',
  extKeyUsage: '2.5.29.37',
  serverAuth: '1.3.6.1.5.5.7.3.1',
  clientAuth: '1.3.6.1.5.5.7.3.2',
} as const;

function length(n: number): Buffer {
  if (n < 0x80) return Buffer.from([n]);
  const bytes: number[] = [];
  for (let rest = n; rest > 0; rest = Math.floor(rest / 256)) bytes.unshift(rest & 0xff);
  return Buffer.from([0x80 | bytes.length, ...bytes]);
}

function tlv(tag: number, ...content: Buffer[]): Buffer {
  const body = Buffer.concat(content);
  return Buffer.concat([Buffer.from([tag]), length(body.length), body]);
}

const sequence = (...content: Buffer[]) => tlv(0x30, ...content);
const octets = (content: Buffer) => tlv(0x04, content);
const explicit = (n: number, ...content: Buffer[]) => tlv(0xa0 | n, ...content);

function oid(dotted: string): Buffer {
  const [a, b, ...rest] = dotted.split('.').map(Number);
  const bytes = [a! * 40 + b!];
  for (const arc of rest) {
    const base128 = [arc & 0x7f];
    for (let v = Math.floor(arc / 128); v > 0; v = Math.floor(v / 128)) base128.unshift((v & 0x7f) | 0x80);
    bytes.push(...base128);
  }
  return tlv(0x06, Buffer.from(bytes));
}

/** A non-negative INTEGER from hex digits (a leading 0x00 when the top bit is set). */
function unsignedInteger(hex: string): Buffer {
  let bytes = Buffer.from(hex.length % 2 ? `0${hex}` : hex, 'hex');
  while (bytes.length > 1 && bytes[0] === 0 && bytes[1]! < 0x80) bytes = bytes.subarray(1);
  return tlv(0x02, bytes[0]! & 0x80 ? Buffer.concat([Buffer.from([0]), bytes]) : bytes);
}

/** UTCTime through 2049, GeneralizedTime from 2050 (RFC 5280 4.1.2.5), to the second. */
function time(at: Date): Buffer {
  const iso = at.toISOString(); // 2026-11-23T22:27:47.123Z
  const digits = `${iso.slice(0, 4)}${iso.slice(5, 7)}${iso.slice(8, 10)}${iso.slice(11, 13)}${iso.slice(14, 16)}${iso.slice(17, 19)}Z`;
  return at.getUTCFullYear() < 2050 ? tlv(0x17, Buffer.from(digits.slice(2), 'latin1')) : tlv(0x18, Buffer.from(digits, 'latin1'));
}

function extension(id: string, critical: boolean, value: Buffer): Buffer {
  return sequence(oid(id), ...(critical ? [tlv(0x01, Buffer.from([0xff]))] : []), octets(value));
}

function ipBytes(address: string): Buffer {
  if (isIP(address) === 4) return Buffer.from(address.split('.').map(Number));
  // IPv6: a dotted IPv4 tail (`::ffff:1.2.3.4`) as two groups, then `::` expanded to the zero groups it stands for.
  const dotted = /(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(address);
  if (dotted) {
    const [a, b, c, d] = dotted.slice(1).map(Number) as [number, number, number, number];
    address = `${address.slice(0, dotted.index)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const [head, tail] = address.includes('::') ? address.split('::') : [address, undefined];
  const groups = (part: string | undefined) => (part ? part.split(':') : []);
  const filled = tail === undefined ? groups(head) : [...groups(head), ...Array(8 - groups(head).length - groups(tail).length).fill('0'), ...groups(tail)];
  return Buffer.concat(filled.map((g) => Buffer.from(g.padStart(4, '0'), 'hex')));
}

/** One DER element read: its tag, its whole encoding and its content. */
interface Element {
  tag: number;
  der: Buffer;
  content: Buffer;
}

function read(buf: Buffer, at = 0): Element {
  const tag = buf[at]!;
  let len = buf[at + 1]!;
  let start = at + 2;
  if (len & 0x80) {
    const count = len & 0x7f;
    len = 0;
    for (let i = 0; i < count; i++) len = len * 256 + buf[start + i]!;
    start += count;
  }
  return { tag, der: buf.subarray(at, start + len), content: buf.subarray(start, start + len) };
}

function children(content: Buffer): Element[] {
  const out: Element[] = [];
  for (let at = 0; at < content.length; ) {
    const element = read(content, at);
    out.push(element);
    at += element.der.length;
  }
  return out;
}

/** What a leaf needs of its CA: the subject (as DER, to be its issuer) and the key identifier. */
export interface IssuerInfo {
  subject: Buffer;
  keyIdentifier: Buffer;
}

/** Reads the CA certificate (DER): its subject, and its subjectKeyIdentifier (else SHA-1 of its key, RFC 5280 4.2.1.2). */
export function issuerInfo(caDer: Buffer): IssuerInfo {
  const tbs = children(read(caDer).content)[0]!;
  const fields = children(tbs.content);
  const offset = fields[0]!.tag === 0xa0 ? 1 : 0; // [0] version
  const subject = fields[offset + 4]!.der;
  const spki = fields[offset + 5]!;
  const extensions = fields.find((f) => f.tag === 0xa3);
  for (const ext of extensions ? children(children(extensions.content)[0]!.content) : []) {
    const [id, ...rest] = children(ext.content);
    if (id!.der.equals(oid(OID.subjectKeyIdentifier))) return { subject, keyIdentifier: read(rest.at(-1)!.content).content };
  }
  const keyBits = children(spki.content)[1]!.content.subarray(1);
  return { subject, keyIdentifier: createHash('sha1').update(keyBits).digest() };
}

export interface LeafRequest {
  /** Hex digits of a positive serial number. */
  serial: string;
  commonName: string;
  notBefore: Date;
  notAfter: Date;
  /** The subject's public key, as SubjectPublicKeyInfo DER. */
  publicKeySpki: Buffer;
  usage: Array<'serverAuth' | 'clientAuth'>;
  /** DNS names and IP addresses (subjectAltName). */
  names?: string[];
}

/** A leaf certificate signed by the CA's EC key with SHA-256, as PEM. */
export function issueLeafCertificate(request: LeafRequest, issuer: IssuerInfo, caKey: KeyObject): string {
  const algorithm = sequence(oid(OID.ecdsaWithSha256));
  const extensions = [
    extension(OID.basicConstraints, true, sequence()),
    // digitalSignature (bit 0) and keyAgreement (bit 4): 0b10001000, the 3 low bits unused.
    extension(OID.keyUsage, true, tlv(0x03, Buffer.from([0x03, 0x88]))),
    extension(OID.extKeyUsage, false, sequence(...request.usage.map((u) => oid(OID[u])))),
    extension(OID.authorityKeyIdentifier, false, sequence(tlv(0x80, issuer.keyIdentifier))),
  ];
  if (request.names?.length) {
    const generalNames = request.names.map((name) => (isIP(name) ? tlv(0x87, ipBytes(name)) : tlv(0x82, Buffer.from(name, 'latin1'))));
    extensions.push(extension(OID.subjectAltName, false, sequence(...generalNames)));
  }
  const tbs = sequence(
    explicit(0, tlv(0x02, Buffer.from([2]))),
    unsignedInteger(request.serial),
    algorithm,
    issuer.subject,
    sequence(time(request.notBefore), time(request.notAfter)),
    sequence(tlv(0x31, sequence(oid(OID.commonName), tlv(0x0c, Buffer.from(request.commonName, 'utf8'))))),
    request.publicKeySpki,
    explicit(3, sequence(...extensions)),
  );
  const signature = sign('sha256', tbs, caKey); // DER-encoded ECDSA signature
  const der = sequence(tbs, algorithm, tlv(0x03, Buffer.from([0]), signature));
  return `-----BEGIN CERTIFICATE-----\n${der.toString('base64').replace(/.{64}/g, '$&\n').replace(/\n$/, '')}\n-----END CERTIFICATE-----`;
}
