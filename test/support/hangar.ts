import { Writable } from 'node:stream';
import { Hangar } from '../../core/app.js';
import { builtinCatalogue } from '../../cli/catalogue.js';
import type { Clock } from '../../core/clock.js';
import { httpRequest, type HttpRequestOptions, type HttpResponse } from '../../core/http/client.js';
import type { ListenerName } from '../../core/plugin.js';
import type { TestDialect } from './dialects.js';
import { OpenApiConformance } from './openapi-conformance.js';

export const FIXTURE_PLUGIN = 'test/support/fixtures/probe-plugin.ts';

export interface TestHangar {
  hangar: Hangar;
  /** Base URL of the control API. */
  url: string;
  caPem: string;
  /** Every log line written so far (JSON strings). */
  logs: string[];
  request<T = any>(method: string, path: string, options?: HttpRequestOptions & { listener?: ListenerName }): Promise<HttpResponse<T>>;
  stop(): Promise<void>;
}

export interface StartOptions {
  plugins?: string[];
  overrides?: Record<string, unknown>;
  clock?: Clock;
  storage?: { dataDir: string; schema: string | null };
  /**
   * Check every answer `request` gets against the OpenAPI document (default true); mismatches make
   * `stop()` throw. Off only where a test sends what no client could (a made-up route table).
   */
  openApiCheck?: boolean;
}

/** Starts a real control plane in this process on random ports, logging into memory. */
export async function startHangar(dialect: TestDialect, options: StartOptions = {}): Promise<TestHangar> {
  const config = dialect.config(options.storage, {
    log: { level: 'info' },
    ...(options.plugins ? { plugins: options.plugins } : {}),
    ...options.overrides,
  });
  const logs: string[] = [];
  const destination = new Writable({
    write(chunk, _enc, done) {
      logs.push(String(chunk));
      done();
    },
  });
  const hangar = await Hangar.start({ config, catalogue: builtinCatalogue, clock: options.clock, logDestination: destination as never });
  const caPem = hangar.services.ca.caPem;
  const conformance = options.openApiCheck === false ? null : new OpenApiConformance(() => hangar.services.routeTable());
  return {
    hangar,
    url: hangar.url('control'),
    caPem,
    logs,
    async request(method, path, opts = {}) {
      const listener = opts.listener ?? 'control';
      const res = await httpRequest(`${hangar.url(listener)}${path}`, { ca: caPem, ...opts, method });
      conformance?.check(listener, method, path, res);
      return res;
    },
    async stop() {
      await hangar.stop();
      conformance?.assertConforming();
    },
  };
}
