import { STATUS_CODES } from 'node:http';
import { brandClass } from './brand.js';

export interface ErrorDetail {
  path: string;
  message: string;
  [key: string]: unknown;
}

/** An error that becomes an HTTP response: `{error, message, details?, request_id}`. */
export class HttpError extends Error {
  readonly status: number;
  readonly details?: unknown[];
  readonly headers?: Record<string, string>;

  constructor(status: number, message: string, details?: unknown[], headers?: Record<string, string>) {
    super(message);
    this.name = 'HttpError';
    this.status = status;
    this.details = details;
    this.headers = headers;
  }

  get reason(): string {
    return reasonPhrase(this.status);
  }
}

brandClass(HttpError, 'HttpError');

export function reasonPhrase(status: number): string {
  return STATUS_CODES[status] ?? 'Error';
}

export const badRequest = (message: string, details?: unknown[]) => new HttpError(400, message, details);
export const unauthorized = (message = 'Authentication required') => new HttpError(401, message);
export const forbidden = (message = 'Insufficient permissions') => new HttpError(403, message);
export const notFound = (message: string) => new HttpError(404, message);
export const conflict = (message: string, details?: unknown[]) => new HttpError(409, message, details);
export const unavailable = (message: string) => new HttpError(503, message);

/** A configuration problem found at start-up; the message names the key. */
/**
 * A backend's `attempt(what, call)`: runs the call and turns its failure into `failure(what, err)`,
 * the driver's own error with the backend's reason (`<what>: <reason>`).
 */
export function attemptWith(failure: (what: string, err: unknown) => Error) {
  return async <T>(what: string, call: () => Promise<T>): Promise<T> => {
    try {
      return await call();
    } catch (err) {
      throw failure(what, err);
    }
  };
}

export class ConfigError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ConfigError';
  }
}
brandClass(ConfigError, 'ConfigError');
