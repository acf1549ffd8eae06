import { Type } from '@sinclair/typebox';
import { bearerToken } from '../../core/auth/jwt.js';
import { safeEqual } from '../../core/crypto.js';
import { Reply } from '../../core/http/reply.js';
import { definePlugin, defineRoute } from '../../core/plugin.js';

export const METRICS_PATH = '/metrics';
/** The role of the scrape token's principal; no other route accepts it. */
export const SCRAPER_ROLE = 'metrics';

export const MetricsConfigSchema = Type.Object(
  {
    scrape_token: Type.Union([Type.String({ minLength: 32, maxLength: 512, pattern: '^[\\x21-\\x7e]+$' }), Type.Null()], {
      default: null,
      description: 'bearer token that reads GET /metrics and nothing else (32+ printable characters, e.g. openssl rand -hex 32); unset: /metrics answers 401 to everyone',
    }),
  },
  { additionalProperties: false, default: {} },
);

/**
 * `GET /metrics` in the Prometheus text format (core/metrics.ts), read with a dedicated scrape
 * token: a bearer token from the configuration that authenticates on this one path as a principal
 * of role `metrics`. Users (admins included) and API keys are refused (403): a scraper's credential
 * can read metrics and nothing else, and a user's credential does not sit in a Prometheus config.
 */
export default definePlugin({
  name: 'metrics',
  description: 'Prometheus metrics at /metrics, read with a scrape token',
  configSchema: MetricsConfigSchema,
  setup(services) {
    const { scrape_token: scrapeToken } = services.config.metrics as { scrape_token: string | null };
    services.auth.register(
      {
        name: 'metrics-scrape-token',
        async authenticate({ ctx, listener }) {
          if (!scrapeToken || listener !== 'control' || ctx.path !== METRICS_PATH) return null;
          const token = bearerToken(ctx.get('authorization'));
          if (!token || !safeEqual(token, scrapeToken)) return null;
          return { id: 'metrics-scraper', name: 'metrics scraper', role: SCRAPER_ROLE, method: 'scrape-token' };
        },
      },
      { first: true },
    );
    return {
      routes: [
        defineRoute({
          method: 'GET',
          path: METRICS_PATH,
          auth: { role: SCRAPER_ROLE },
          summary: 'Prometheus metrics (text format), for the scrape token in metrics.scrape_token',
          produces: 'text/plain',
          probe: true,
          description: 'See docs/metrics.md for the series. Authenticate with `Authorization: Bearer <metrics.scrape_token>`.',
          async handler() {
            return Reply.raw(await services.metrics.text(), services.metrics.contentType, { 'Cache-Control': 'no-store' });
          },
        }),
      ],
    };
  },
});
