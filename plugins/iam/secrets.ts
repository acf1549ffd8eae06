import { randomBytes } from 'node:crypto';
import { existsSync, linkSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { decodeJwtSecret, MIN_SECRET_BYTES } from '../../core/auth/jwt.js';
import { ConfigError } from '../../core/errors.js';
import type { Keyring } from '../../core/pki/keyring.js';

/**
 * The JWT signing secret: the configured one (iam.jwt_secret / JWT_SECRET) when set, which must be
 * base64 of at least 64 bytes; otherwise the keyring's (generated at first start: the data dir's
 * `jwt-secret` file, or with a master key the store, shared by every control plane).
 */
export async function loadJwtSecret(configured: string | null, keyring: Keyring): Promise<Buffer> {
  if (configured) {
    const secret = decodeJwtSecret(configured);
    if (!secret) throw new ConfigError(`iam.jwt_secret (JWT_SECRET) must be base64 that decodes to at least ${MIN_SECRET_BYTES} bytes`);
    return secret;
  }
  const [stored] = await keyring.obtain({ name: 'jwt-secret', files: ['jwt-secret'], generate: async () => [`${randomBytes(MIN_SECRET_BYTES).toString('base64')}\n`] });
  const secret = decodeJwtSecret(stored!);
  if (!secret) throw new ConfigError(`the stored JWT secret (jwt-secret) must be base64 that decodes to at least ${MIN_SECRET_BYTES} bytes`);
  return secret;
}

/** The one-time secret that lets a non-loopback caller bootstrap a fresh install. */
export class BootstrapSecret {
  readonly file: string;

  constructor(dataDir: string) {
    this.file = path.join(dataDir, 'bootstrap-secret');
  }

  /**
   * Creates the secret if there is none; returns it when it was just created (to print once). The
   * file is created exclusively: of workers (api.workers) starting together, one writes and prints it.
   */
  ensure(): string | null {
    const secret = randomBytes(24).toString('base64url');
    // Written whole under another name, then linked into place: the link fails if the file exists,
    // and a crash can leave no half-written secret behind.
    const partial = `${this.file}.${process.pid}.partial`;
    writeFileSync(partial, `${secret}\n`, { mode: 0o600 });
    try {
      linkSync(partial, this.file);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'EEXIST') return null;
      throw err;
    } finally {
      rmSync(partial, { force: true });
    }
    return secret;
  }

  current(): string | null {
    return existsSync(this.file) ? readFileSync(this.file, 'utf8').trim() : null;
  }

  discard(): void {
    rmSync(this.file, { force: true });
  }
}
