import { createHmac, randomBytes } from 'node:crypto';
import { safeEqual } from '../crypto.js';
import { badRequest } from '../errors.js';

/**
 * Page cursors: the last row's key values, signed together with the name of the list they belong
 * to. A cursor that was altered, made up, or issued by another list is a 400, so nothing a client
 * writes into a cursor reaches SQL. The key is derived from the root secret (shared by control
 * planes on one database), so a cursor from one replica works on another.
 */
export class PageCursors {
  constructor(private key: Buffer = randomBytes(32)) {}

  /** Uses the key every control plane on this database derives (set once the root secret is known). */
  useKey(key: Buffer): void {
    this.key = key;
  }

  private sign(list: string, payload: string): string {
    return createHmac('sha256', this.key).update(`${list}\n${payload}`).digest('base64url').slice(0, 22);
  }

  encode(list: string, values: unknown[]): string {
    const payload = Buffer.from(JSON.stringify(values)).toString('base64url');
    return `${payload}.${this.sign(list, payload)}`;
  }

  decode(list: string, cursor: string, size: number): unknown[] {
    const [payload, signature, extra] = cursor.split('.');
    if (payload && signature && extra === undefined && safeEqual(signature, this.sign(list, payload))) {
      try {
        const values = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8'));
        if (Array.isArray(values) && values.length === size) return values;
      } catch {
        /* fall through to the 400 */
      }
    }
    throw badRequest('Validation failed: query.cursor is not a cursor this list issued', [
      { path: 'query.cursor', message: 'is not a cursor this list issued; pass back the next_cursor of the previous page unchanged', keyword: 'cursor' },
    ]);
  }
}
