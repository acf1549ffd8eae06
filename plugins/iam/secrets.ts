import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { decodeJwtSecret, MIN_SECRET_BYTES } from '../../core/auth/jwt.js';
import { ConfigError } from '../../core/errors.js';

/**
 * The JWT signing secret: the configured one (iam.jwt_secret / JWT_SECRET) when set, which must be
 * base64 of at least 64 bytes; otherwise one generated into the data dir at first start.
 */
export function loadJwtSecret(configured: string | null, dataDir: string): Buffer {
  if (configured) {
    const secret = decodeJwtSecret(configured);
    if (!secret) throw new ConfigError(`iam.jwt_secret (JWT_SECRET) must be base64 that decodes to at least ${MIN_SECRET_BYTES} bytes`);
    return secret;
  }
  const file = path.join(dataDir, 'jwt-secret');
  if (existsSync(file)) {
    const secret = decodeJwtSecret(readFileSync(file, 'utf8'));
    if (!secret) throw new ConfigError(`${file} must hold base64 that decodes to at least ${MIN_SECRET_BYTES} bytes`);
    return secret;
  }
  const secret = randomBytes(MIN_SECRET_BYTES);
  writeFileSync(file, `${secret.toString('base64')}\n`, { mode: 0o600 });
  return secret;
}

/** The one-time secret that lets a non-loopback caller bootstrap a fresh install. */
export class BootstrapSecret {
  readonly file: string;

  constructor(dataDir: string) {
    this.file = path.join(dataDir, 'bootstrap-secret');
  }

  /** Creates the secret if there is none; returns it when it was just created (to print once). */
  ensure(): string | null {
    if (existsSync(this.file)) return null;
    const secret = randomBytes(24).toString('base64url');
    writeFileSync(this.file, `${secret}\n`, { mode: 0o600 });
    return secret;
  }

  current(): string | null {
    return existsSync(this.file) ? readFileSync(this.file, 'utf8').trim() : null;
  }

  discard(): void {
    rmSync(this.file, { force: true });
  }
}
