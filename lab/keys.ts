/**
 * SSH key pairs for the machine lab, made with node:crypto (no ssh-keygen needed): ed25519,
 * the private key in OpenSSH's own format ("-----BEGIN OPENSSH PRIVATE KEY-----", unencrypted),
 * which both OpenSSH and ssh2 read, and the public key as an authorized_keys line.
 */
import { generateKeyPairSync, randomBytes } from 'node:crypto';

export interface SshKeyPair {
  /** OpenSSH private key (PEM-like armour), unencrypted. */
  privateKey: string;
  /** `ssh-ed25519 AAAA… comment` */
  publicKey: string;
}

function sshString(value: Buffer | string): Buffer {
  const bytes = typeof value === 'string' ? Buffer.from(value, 'utf8') : value;
  const length = Buffer.alloc(4);
  length.writeUInt32BE(bytes.length);
  return Buffer.concat([length, bytes]);
}

function uint32(value: number): Buffer {
  const bytes = Buffer.alloc(4);
  bytes.writeUInt32BE(value);
  return bytes;
}

/** A fresh ed25519 key pair in OpenSSH formats (see PROTOCOL.key in OpenSSH). */
export function generateSshKeyPair(comment: string): SshKeyPair {
  const { privateKey } = generateKeyPairSync('ed25519');
  const jwk = privateKey.export({ format: 'jwk' });
  if (!jwk.d || !jwk.x) throw new Error('node:crypto did not export the ed25519 key as JWK');
  const seed = Buffer.from(jwk.d, 'base64url');
  const pub = Buffer.from(jwk.x, 'base64url');
  const publicBlob = Buffer.concat([sshString('ssh-ed25519'), sshString(pub)]);
  const check = randomBytes(4);
  let secret = Buffer.concat([
    check,
    check,
    sshString('ssh-ed25519'),
    sshString(pub),
    sshString(Buffer.concat([seed, pub])),
    sshString(comment),
  ]);
  // Padded to the cipher block size ("none": 8) with 1, 2, 3, …
  const padding: number[] = [];
  for (let i = 1; (secret.length + padding.length) % 8 !== 0; i++) padding.push(i);
  secret = Buffer.concat([secret, Buffer.from(padding)]);
  const body = Buffer.concat([
    Buffer.from('openssh-key-v1\0', 'latin1'),
    sshString('none'),
    sshString('none'),
    sshString(''),
    uint32(1),
    sshString(publicBlob),
    sshString(secret),
  ]);
  const armoured = (body.toString('base64').match(/.{1,70}/g) ?? []).join('\n');
  return {
    privateKey: `-----BEGIN OPENSSH PRIVATE KEY-----\n${armoured}\n-----END OPENSSH PRIVATE KEY-----\n`,
    publicKey: `ssh-ed25519 ${publicBlob.toString('base64')} ${comment}`,
  };
}
