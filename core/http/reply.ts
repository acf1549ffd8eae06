import { brandClass } from '../brand.js';
import type { Page } from '../db/repository.js';

/**
 * A handler's answer when it is more than `{data: value}` with the route's status:
 * another status, a list page, headers, or a raw (non-JSON) body.
 */
export class Reply {
  constructor(
    readonly status: number,
    readonly body: unknown,
    readonly headers: Record<string, string> = {},
    /** Content type of a raw body; JSON when unset. */
    readonly type?: string,
  ) {}

  static data(data: unknown, status = 200, headers?: Record<string, string>): Reply {
    return new Reply(status, { data }, headers);
  }

  static created(data: unknown): Reply {
    return Reply.data(data, 201);
  }

  static accepted(data: unknown): Reply {
    return Reply.data(data, 202);
  }

  static page<T>(page: Page<T>, map: (item: T) => unknown = (x) => x): Reply {
    return new Reply(200, { data: page.items.map(map), next_cursor: page.next_cursor });
  }

  /** A page whose items are viewed by an async function (one that looks something up). */
  static async pageOf<T>(page: Page<T>, map: (item: T) => Promise<unknown>): Promise<Reply> {
    return new Reply(200, { data: await Promise.all(page.items.map(map)), next_cursor: page.next_cursor });
  }

  static raw(body: string | Buffer | NodeJS.ReadableStream, type: string, headers?: Record<string, string>, status = 200): Reply {
    return new Reply(status, body, headers, type);
  }

  static noContent(): Reply {
    return new Reply(204, null);
  }
}
brandClass(Reply, 'Reply');
