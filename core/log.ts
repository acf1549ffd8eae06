import { pino, type Logger, type DestinationStream } from 'pino';

export type { Logger };

/** Keys whose values never reach a log line, wherever they appear (two levels deep). */
const SECRET_KEYS = [
  'password', 'new_password', 'ssh_password', 'ssh_key', 'key', 'private_key', 'secret', 'secret_key',
  'secret_access_key', 'token', 'access_token', 'refresh_token', 'authorization', 'cookie', 'jwt_secret',
  'code', 'data', 'master_key', 'signature', 'x-signature',
];

export const REDACT_PATHS = SECRET_KEYS.flatMap((k) => [k, `*.${k}`, `*.*.${k}`]);

export function createLogger(level: string, destination?: DestinationStream): Logger {
  return pino(
    {
      level,
      base: { service: 'hangar' },
      timestamp: pino.stdTimeFunctions.isoTime,
      redact: { paths: REDACT_PATHS, censor: '[redacted]' },
      formatters: { level: (label) => ({ level: label }) },
    },
    destination,
  );
}
